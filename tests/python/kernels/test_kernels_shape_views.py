"""Shape, copy and indexing kernels (kernels/portable/ops_shape.def) against eager PyTorch:
view copies (view, permute, transpose, expand, squeeze, select, slice, as_strided, ...).

One table (CASES) drives one parametrized test; the case convention, layouts and the runner are
in kernels_shape_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_shape_views.py
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from kernels_shape_common import (
    ALL,
    AS_STRIDED,
    F32,
    F64,
    I16,
    LAYOUTS,
    NONEMPTY,
    A,
    Builder,
    Call,
    ShapeCases,
    err_call,
    out_call,
    pick,
    rint,
    rnd,
    run_case,
    slice_args,
)

CASES = ShapeCases()
case = CASES.add
each_dtype_shape = CASES.each_dtype_shape


# -- view copies ----------------------------------------------------------------------------------


def mk_view(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS))
    n = x.numel()
    sizes = pick(g, [[n], [-1], [1, n], [n, 1, 1]])
    if n and n % 2 == 0 and pick(g, [0, 1]):
        sizes = [2, -1] if pick(g, [0, 1]) else [n // 2, 2]
    return out_call("aten::view_copy.out", [x, sizes], A.view_copy.default(x, sizes), g)


each_dtype_shape("view_copy", mk_view)
case(
    "view_copy-cl",
    lambda g: (lambda x: out_call("aten::view_copy.out", [x, [2, -1]], x.reshape(2, -1), g))(
        rnd((2, 3, 4, 5), F32, g, "cl")
    ),
)
case(
    "_unsafe_view",
    lambda g: (lambda x: out_call("aten::_unsafe_view.out", [x, [4, 6]], x.reshape(4, 6), g))(
        rnd((2, 3, 4), I16, g, "t")
    ),
)


def mk_alias(op: str, extra: list[Any], view: Callable[[torch.Tensor], torch.Tensor]) -> Builder:
    """out shares self's memory (a view the exporter elided into the same planned buffer)."""

    def build(g: torch.Generator) -> Call:
        x = rnd((2, 3, 4), F32, g)
        o = view(x)
        return Call(op, [x, *extra, o, o], [(o, view(x.clone()))])

    return build


case("view_copy-alias", mk_alias("aten::view_copy.out", [[6, 4]], lambda x: x.view(6, 4)))
case("unsqueeze_copy-alias", mk_alias("aten::unsqueeze_copy.out", [1], lambda x: x.unsqueeze(1)))
case("squeeze_copy-alias", mk_alias("aten::squeeze_copy.out", [], lambda x: x.view(2, 3, 4)))
case(
    "view_copy-err-numel",
    lambda g: err_call("aten::view_copy.out", [rnd((2, 3), F32, g), [7]], torch.empty(7)),
)
case(
    "view_copy-err-two-infer",
    lambda g: err_call("aten::view_copy.out", [rnd((2, 3), F32, g), [-1, -1]], torch.empty(2, 3)),
)
case(
    "view_copy-err-dtype",
    lambda g: err_call(
        "aten::view_copy.out", [rnd((2, 3), F32, g), [6]], torch.empty(6, dtype=F64)
    ),
)
case(
    "view_copy-err-zero-infer",
    lambda g: err_call("aten::view_copy.out", [rnd((2, 0), F32, g), [0, -1]], torch.empty(0, 0)),
)
case(
    "view_copy-err-overflow",
    lambda g: err_call(
        "aten::view_copy.out", [rnd((2, 3), F32, g), [2**40, 2**40, -1]], torch.empty(1, 1, 6)
    ),
)


def mk_permute(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    perm = torch.randperm(len(shp), generator=g).tolist()
    perm = [p - len(shp) if pick(g, [0, 1]) else p for p in perm]
    return out_call("aten::permute_copy.out", [x, perm], A.permute_copy.default(x, perm), g)


each_dtype_shape("permute_copy", mk_permute)
# Transposes big enough for em_shape_copy's 32x32 tiled path (sizes below, at, above a tile).
for dt in ALL + [torch.complex128]:
    for shp in [(40, 70), (2, 9, 35, 3), (33, 8, 64), (32, 32)]:
        case(
            f"permute_copy-tiled-{str(dt)[6:]}-{'x'.join(map(str, shp))}",
            lambda g, dt=dt, shp=shp: (
                lambda x, p: out_call(
                    "aten::permute_copy.out", [x, p], A.permute_copy.default(x, p), g
                )
            )(
                torch.randn(shp, generator=g, dtype=dt) if dt.is_complex else rnd(shp, dt, g),
                list(reversed(range(len(shp)))),
            ),
        )
case(
    "permute_copy-err-repeat",
    lambda g: err_call("aten::permute_copy.out", [rnd((2, 3), F32, g), [0, 0]], torch.empty(2, 3)),
)
case(
    "permute_copy-err-len",
    lambda g: err_call("aten::permute_copy.out", [rnd((2, 3), F32, g), [0]], torch.empty(2, 3)),
)


def mk_transpose(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS))
    r = max(len(shp), 1)
    a, b = rint(g, -r, r - 1), rint(g, -r, r - 1)
    return out_call("aten::transpose_copy.int_out", [x, a, b], A.transpose_copy.int(x, a, b), g)


each_dtype_shape("transpose_copy", mk_transpose)
case(
    "transpose_copy-err-dim",
    lambda g: err_call(
        "aten::transpose_copy.int_out", [rnd((2, 3), F32, g), 0, 2], torch.empty(2, 3)
    ),
)


def mk_t(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS))
    return out_call("aten::t_copy.out", [x], A.t_copy.default(x), g)


each_dtype_shape("t_copy", mk_t, [(), (0,), (5,), (3, 4), (0, 3)])
case(
    "t_copy-err-3d",
    lambda g: err_call("aten::t_copy.out", [rnd((2, 3, 4), F32, g)], torch.empty(4, 3, 2)),
)

EXPANDS = [
    ((), [2, 3]),
    ((3, 1), [3, 4]),
    ((3, 1), [2, -1, 5]),
    ((1,), [0]),
    ((2, 1, 4), [3, 2, 6, -1]),
    ((4,), [2, 4]),
    ((1, 1), [1, 1]),
]
for dt in ALL:
    for i, (shp, size) in enumerate(EXPANDS):
        case(
            f"expand_copy-{str(dt)[6:]}-{i}",
            lambda g, dt=dt, shp=shp, size=size: (
                lambda x: out_call(
                    "aten::expand_copy.out",
                    [x, size, False],
                    A.expand_copy.default(x, size),
                    g,
                    pos=3,
                )
            )(rnd(shp, dt, g, pick(g, LAYOUTS))),
        )
case(
    "expand_copy-err-size",
    lambda g: err_call(
        "aten::expand_copy.out", [rnd((3, 2), F32, g), [3, 4], False], torch.empty(3, 4)
    ),
)
case(
    "expand_copy-err-lead",
    lambda g: err_call(
        "aten::expand_copy.out", [rnd((3,), F32, g), [-1, 3], False], torch.empty(1, 3)
    ),
)
case(
    "expand_copy-err-rank",
    lambda g: err_call("aten::expand_copy.out", [rnd((3, 2), F32, g), [2], False], torch.empty(2)),
)

SQUEEZE_SHAPES = [(), (1,), (3,), (1, 3, 1, 2), (2, 1, 0), (1, 1)]


def mk_squeeze(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS))
    r = max(len(shp), 1)
    kind = pick(g, ["dim", "dims", "all"])
    if kind == "dim":
        d = rint(g, -r, r - 1)
        return out_call("aten::squeeze_copy.dim_out", [x, d], A.squeeze_copy.dim(x, d), g)
    if kind == "dims":
        ds = sorted(set(rint(g, 0, r - 1) for _ in range(2)))
        ds = [d - r if pick(g, [0, 1]) else d for d in ds]
        return out_call("aten::squeeze_copy.dims_out", [x, ds], A.squeeze_copy.dims(x, ds), g)
    return out_call("aten::squeeze_copy.out", [x], A.squeeze_copy.default(x), g)


for rep in range(3):
    each_dtype_shape(f"squeeze_copy{rep}", mk_squeeze, SQUEEZE_SHAPES)
case(
    "squeeze_copy-err-dim",
    lambda g: err_call("aten::squeeze_copy.dim_out", [rnd((1, 3), F32, g), 2], torch.empty(3)),
)
case(
    "squeeze_copy-err-dims-dup",
    lambda g: err_call(
        "aten::squeeze_copy.dims_out", [rnd((1, 3), F32, g), [0, -2]], torch.empty(3)
    ),
)


def mk_unsqueeze(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS))
    r = len(shp) + 1
    d = rint(g, -r, r - 1)
    return out_call("aten::unsqueeze_copy.out", [x, d], A.unsqueeze_copy.default(x, d), g)


each_dtype_shape("unsqueeze_copy", mk_unsqueeze)
case(
    "unsqueeze_copy-err",
    lambda g: err_call("aten::unsqueeze_copy.out", [rnd((2, 3), F32, g), 3], torch.empty(2, 3, 1)),
)


def mk_select(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    dims = [d for d in range(len(shp)) if shp[d] > 0]
    d = pick(g, dims)
    i = rint(g, -shp[d], shp[d] - 1)
    d = d - len(shp) if pick(g, [0, 1]) else d
    return out_call("aten::select_copy.int_out", [x, d, i], A.select_copy.int(x, d, i), g)


each_dtype_shape("select_copy", mk_select, NONEMPTY)
case(
    "select_copy-err-index",
    lambda g: err_call("aten::select_copy.int_out", [rnd((2, 3), F32, g), 1, 3], torch.empty(2)),
)
case(
    "select_copy-err-neg-index",
    lambda g: err_call("aten::select_copy.int_out", [rnd((2, 3), F32, g), 1, -4], torch.empty(2)),
)
case(
    "select_copy-err-0d",
    lambda g: err_call("aten::select_copy.int_out", [rnd((), F32, g), 0, 0], torch.empty(())),
)


def mk_slice(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    d = rint(g, -len(shp), len(shp) - 1)
    s, e, st = slice_args(g, shp[d])
    want = A.slice_copy.Tensor(x, d, s, e, st)
    return out_call("aten::slice_copy.Tensor_out", [x, d, s, e, st], want, g)


for rep in range(2):
    each_dtype_shape(f"slice_copy{rep}", mk_slice, NONEMPTY)
# A step near INT64_MAX (a hostile file's value): eager's int64 length wraps to 0; so must ours,
# without signed overflow (UBSan found it in the fuzz target).
case(
    "slice_copy-huge-step",
    lambda g: (
        lambda x: out_call(
            "aten::slice_copy.Tensor_out",
            [x, 0, 1, 5, 2**63 - 1],
            A.slice_copy.Tensor(x, 0, 1, 5, 2**63 - 1),
            g,
        )
    )(rnd((5, 3), F32, g)),
)
case(
    "slice_copy-err-step",
    lambda g: err_call(
        "aten::slice_copy.Tensor_out", [rnd((4,), F32, g), 0, 0, 4, 0], torch.empty(4)
    ),
)
case(
    "slice_copy-err-0d",
    lambda g: err_call(
        "aten::slice_copy.Tensor_out", [rnd((), F32, g), 0, 0, 4, 1], torch.empty(())
    ),
)


def mk_narrow(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS))
    d = rint(g, -len(shp), len(shp) - 1)
    n = shp[d]
    start = rint(g, -n, n)
    length = rint(g, 0, n - (start % n if n and start < 0 else start))
    want = A.narrow_copy.default(x, d, start, length)
    return out_call("aten::narrow_copy.out", [x, d, start, length], want, g)


each_dtype_shape("narrow_copy", mk_narrow, NONEMPTY)
case(
    "narrow_copy-err-len",
    lambda g: err_call("aten::narrow_copy.out", [rnd((4,), F32, g), 0, 2, 3], torch.empty(3)),
)
case(
    "narrow_copy-err-start",
    lambda g: err_call("aten::narrow_copy.out", [rnd((4,), F32, g), 0, -5, 1], torch.empty(1)),
)


def mk_diagonal(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = len(shp)
    d1, d2 = (torch.randperm(r, generator=g)[:2] - rint(g, 0, 1) * r).tolist()
    off = rint(g, -3, 3)
    want = A.diagonal_copy.default(x, off, d1, d2)
    return out_call("aten::diagonal_copy.out", [x, off, d1, d2], want, g)


for rep in range(2):
    each_dtype_shape(
        f"diagonal_copy{rep}", mk_diagonal, [(3, 4), (2, 3, 4), (2, 0, 3), (2, 3, 4, 5), (4, 4)]
    )
case(
    "diagonal_copy-err-same",
    lambda g: err_call("aten::diagonal_copy.out", [rnd((3, 3), F32, g), 0, 1, -1], torch.empty(3)),
)
case(
    "diagonal_copy-err-1d",
    lambda g: err_call("aten::diagonal_copy.out", [rnd((3,), F32, g), 0, 0, 1], torch.empty(3)),
)


for dt in ALL:
    for i, (shp, size, stride, so) in enumerate(AS_STRIDED):
        case(
            f"as_strided_copy-{str(dt)[6:]}-{i}",
            lambda g, dt=dt, shp=shp, size=size, stride=stride, so=so: (
                lambda x: out_call(
                    "aten::as_strided_copy.out",
                    [x, size, stride, so],
                    A.as_strided_copy.default(x, size, stride, so),
                    g,
                )
            )(rnd(shp, dt, g)),
        )
case(
    "as_strided_copy-err-oob",
    lambda g: err_call(
        "aten::as_strided_copy.out", [rnd((3, 4), F32, g), [2, 2], [4, 1], 7], torch.empty(2, 2)
    ),
)
case(
    "as_strided_copy-err-len",
    lambda g: err_call(
        "aten::as_strided_copy.out", [rnd((3, 4), F32, g), [2, 2], [4], 0], torch.empty(2, 2)
    ),
)
case(
    "as_strided_copy-err-overflow",
    lambda g: err_call(
        "aten::as_strided_copy.out",
        [rnd((3, 4), F32, g), [2, 2], [2**62, 2**62], 0],
        torch.empty(2, 2),
    ),
)


def mk_unfold(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS))
    r = max(len(shp), 1)
    d = rint(g, -r, r - 1)
    n = shp[d] if shp else 1
    size, step = rint(g, 0, n), rint(g, 1, 3)
    want = A.unfold_copy.default(x, d, size, step)
    return out_call("aten::unfold_copy.out", [x, d, size, step], want, g)


for rep in range(2):
    each_dtype_shape(f"unfold_copy{rep}", mk_unfold, [(), (5,), (3, 4), (2, 3, 4), (2, 0, 3)])
case(
    "unfold_copy-err-size",
    lambda g: err_call(
        "aten::unfold_copy.out", [rnd((3, 4), F32, g), 1, 5, 1], torch.empty(3, 0, 5)
    ),
)
case(
    "unfold_copy-err-step",
    lambda g: err_call(
        "aten::unfold_copy.out", [rnd((3, 4), F32, g), 1, 2, 0], torch.empty(3, 3, 2)
    ),
)


def mk_flip(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = len(shp)
    dims = [d for d in range(r) if pick(g, [0, 1])] if r else pick(g, [[], [0], [-1]])
    dims = [d - r if r and pick(g, [0, 1]) else d for d in dims]
    return out_call("aten::flip.out", [x, dims], A.flip.default(x, dims), g)


for rep in range(2):
    each_dtype_shape(f"flip{rep}", mk_flip)
case(
    "flip-err-dup",
    lambda g: err_call("aten::flip.out", [rnd((3, 4), F32, g), [0, -2]], torch.empty(3, 4)),
)

for cdt in [torch.complex64, torch.complex128]:
    for shp in [(), (3,), (2, 3), (0, 2)]:
        case(
            f"view_as_real_copy-{str(cdt)[6:]}-{shp}",
            lambda g, cdt=cdt, shp=shp: (
                lambda x: out_call(
                    "aten::view_as_real_copy.out", [x], A.view_as_real_copy.default(x), g
                )
            )(
                torch.randn(shp, generator=g, dtype=cdt).mT
                if len(shp) == 2
                else torch.randn(shp, generator=g, dtype=cdt)
            ),
        )
    rdt = F32 if cdt == torch.complex64 else F64
    for shp in [(2,), (3, 2), (2, 4, 2)]:
        case(
            f"view_as_complex_copy-{str(rdt)[6:]}-{shp}",
            lambda g, rdt=rdt, shp=shp: (
                lambda x: out_call(
                    "aten::view_as_complex_copy.out", [x], A.view_as_complex_copy.default(x), g
                )
            )(rnd(shp, rdt, g)),
        )
case(
    "view_as_real_copy-err-real",
    lambda g: err_call("aten::view_as_real_copy.out", [rnd((3,), F32, g)], torch.empty(3, 2)),
)
case(
    "view_as_complex_copy-err-last",
    lambda g: err_call(
        "aten::view_as_complex_copy.out", [rnd((3,), F32, g)], torch.empty(1, dtype=torch.complex64)
    ),
)


@pytest.mark.parametrize("name,build", CASES, ids=CASES.ids())
def test_kernel(name: str, build: Builder) -> None:
    run_case(name, build)
