"""Shape, copy and indexing kernels (kernels/portable/ops_shape.def) against eager PyTorch.

One table (CASES) drives one parametrized test. A case is a name plus a builder
that, given a seeded generator, returns a ``Call``: the kernel name, its boxed
arguments in the runtime's convention (schema args, out= args, then the return
value again for ops that return one), the expected contents of every out
tensor, and optionally a tolerance. These ops move bytes, so results must be
bit-exact (NaN-aware) unless the op accumulates (index_put accumulate,
scatter_add, scatter_reduce), which gets a per-dtype tolerance. Error cases
must raise RuntimeError, never crash.

Inputs cover every dtype (u8, i8, i16, i32, i64, f16, bf16, f32, f64, bool),
empty and 0-dim tensors, negative dims, and non-contiguous layouts (permuted,
sliced, channels-last, expanded stride-0) for inputs and outs; data-dependent
ops write DYNAMIC outs.

Run: PYTHONPATH=python .venv/bin/python -m pytest tests/python/kernels/test_kernels_shape.py
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from ember._lib import Out, call_kernel

A = torch.ops.aten
U8, I8, I16, I32, I64 = torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64
F16, BF16, F32, F64, BOOL = torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool
ALL = [U8, I8, I16, I32, I64, F16, BF16, F32, F64, BOOL]
REALS = [U8, I8, I16, I32, I64, F16, BF16, F32, F64]
LAYOUTS = ["c", "t", "s", "x"]

# (rtol, atol) for accumulating ops, per result dtype.
TOL = {F32: (1e-5, 1e-6), F64: (1e-12, 1e-12), F16: (1e-2, 1e-2), BF16: (2e-2, 2e-2)}


@dataclass
class Call:
    op: str
    args: list[Any]
    expect: list[tuple[Any, Any]] = field(default_factory=list)  # (out object, expected)
    tol: bool = False  # compare floats with TOL instead of exactly
    error: bool = False


Builder = Callable[[torch.Generator], Call]
CASES: list[tuple[str, Builder]] = []


def case(name: str, fn: Builder) -> None:
    CASES.append((name, fn))


# -- tensors ------------------------------------------------------------------------------------
def rnd(shape: Any, dtype: torch.dtype, g: torch.Generator, layout: str = "c") -> torch.Tensor:
    """Random tensor of `shape`; layout 'c' contiguous, 't' permuted (dims reversed), 's' sliced
    (every other element of a wider last dim), 'cl' channels-last (4-D), 'x' expanded (stride 0
    on the first dim when its size is > 1)."""
    shape = list(shape)
    if layout == "s" and shape:
        return rnd(shape[:-1] + [shape[-1] * 2], dtype, g)[..., ::2]
    if layout == "t" and len(shape) > 1:
        return rnd(shape[::-1], dtype, g).permute(*reversed(range(len(shape))))
    if layout == "x" and shape and shape[0] > 1:
        return rnd([1] + shape[1:], dtype, g).expand(shape)
    if dtype.is_floating_point:
        t = (torch.randn(shape, generator=g, dtype=F64) * 3).to(dtype)
    elif dtype == BOOL:
        t = torch.rand(shape, generator=g) > 0.5
    elif dtype == U8:
        t = torch.randint(0, 200, shape, generator=g).to(dtype)
    else:
        t = torch.randint(-100, 100, shape, generator=g).to(dtype)
    if layout == "cl" and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def out_like(want: torch.Tensor, kind: str = "c") -> Any:
    """An out tensor for `want`: 'c' contiguous, 't' permuted strides, 'd' DYNAMIC with spare
    capacity (an Out wrapper)."""
    if kind == "t" and want.dim() > 1:
        return torch.empty(list(want.shape)[::-1], dtype=want.dtype).permute(
            *reversed(range(want.dim()))
        )
    if kind == "d" and want.dim() > 0:
        return Out(torch.empty([s + 1 for s in want.shape], dtype=want.dtype))
    return torch.empty(want.shape, dtype=want.dtype)


def ret_of(o: Any) -> Any:
    """The return-value argument for out `o`. Kernels never read it; call_kernel builds a separate
    tensor for each occurrence of an Out, so a DYNAMIC out is not repeated (its resized sizes
    would be overwritten by the untouched copy)."""
    return None if isinstance(o, Out) else o


def pick(g: torch.Generator, xs: list[Any]) -> Any:
    return xs[int(torch.randint(0, len(xs), (1,), generator=g))]


def rint(g: torch.Generator, lo: int, hi: int) -> int:
    """Random int in [lo, hi]."""
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


def out_call(
    op: str,
    args: list[Any],
    want: torch.Tensor,
    g: torch.Generator | None = None,
    pos: int | None = None,
    tol: bool = False,
    kind: str | None = None,
) -> Call:
    """A Call for an out variant: inserts the out at `pos` (default: end) and as the return."""
    kind = kind or (pick(g, ["c", "c", "t", "d"]) if g is not None else "c")
    o = out_like(want, kind)
    args = list(args)
    args.insert(len(args) if pos is None else pos, o)
    return Call(op, args + [ret_of(o)], [(o, want)], tol=tol)


def err_call(op: str, args: list[Any], out: torch.Tensor | None = None) -> Call:
    """A call that must fail; `out` is appended as out and return when given."""
    args = list(args) + ([out, ret_of(out)] if out is not None else [])
    return Call(op, args, error=True)


def dims_of(shape: Any) -> int:
    return len(shape)


# -- view copies ----------------------------------------------------------------------------------
SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4), (2, 0, 3), (2, 3, 4, 5), (1, 3, 1, 2)]


def each_dtype_shape(
    name: str,
    make: Callable[[torch.dtype, tuple, torch.Generator], Call],
    shapes: list[tuple] = SHAPES,
    dtypes: list[torch.dtype] = ALL,
) -> None:
    """Registers one case per (dtype, shape)."""
    for dt in dtypes:
        for shp in shapes:
            case(
                f"{name}-{str(dt)[6:]}-{'x'.join(map(str, shp)) or 'scalar'}",
                lambda g, dt=dt, shp=shp: make(dt, shp, g),
            )


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

NONEMPTY = [(5,), (3, 4), (2, 3, 4), (2, 0, 3), (2, 3, 4, 5)]


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


def slice_args(g: torch.Generator, n: int) -> tuple[Any, Any, int]:
    start = pick(g, [None, 0, 1, -1, -n - 3, n + 2, rint(g, -n, n)])
    end = pick(g, [None, n, -1, n + 5, -n - 5, rint(g, -n, n)])
    return start, end, rint(g, 1, 3)


def mk_slice(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    d = rint(g, -len(shp), len(shp) - 1)
    s, e, st = slice_args(g, shp[d])
    want = A.slice_copy.Tensor(x, d, s, e, st)
    return out_call("aten::slice_copy.Tensor_out", [x, d, s, e, st], want, g)


for rep in range(2):
    each_dtype_shape(f"slice_copy{rep}", mk_slice, NONEMPTY)
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

AS_STRIDED = [
    ((12,), [3, 2], [1, 3], 0),
    ((3, 4), [2, 2], [4, 1], 5),
    ((3, 4), [4, 3], [1, 4], None),
    ((2, 3), [0, 2], [1, 1], 1),
    ((5,), [], [], 4),
    ((2, 3, 2), [3, 2], [0, 1], 2),
]
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


# -- cat, stack, split ----------------------------------------------------------------------------
def mk_cat(dt: torch.dtype, g: torch.Generator, stack: bool = False) -> Call:
    r = rint(g, 1, 4)
    base = [rint(g, 0 if pick(g, [0, 0, 1]) else 1, 4) for _ in range(r)]
    d = rint(g, -r, r - 1) if not stack else rint(g, -r - 1, r)
    xs = []
    for _ in range(rint(g, 1, 4)):
        shp = list(base)
        if not stack:
            shp[d] = rint(g, 0, 3)
        xs.append(rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"])))
    if not stack and pick(g, [0, 1, 1]):  # legacy empty 1-D tensors are skipped
        xs.insert(rint(g, 0, len(xs)), torch.empty(0, dtype=dt))
    op = "aten::stack.out" if stack else "aten::cat.out"
    want = A.stack.default(xs, d) if stack else A.cat.default(xs, d)
    return out_call(op, [xs, d], want, g)


for dt in ALL:
    for rep in range(4):
        case(f"cat-{str(dt)[6:]}-{rep}", lambda g, dt=dt: mk_cat(dt, g))
        case(f"stack-{str(dt)[6:]}-{rep}", lambda g, dt=dt: mk_cat(dt, g, stack=True))
PROMOS = [(I32, F32), (U8, I8), (BOOL, I16), (F16, BF16), (I64, F64), (BOOL, BOOL)]
for a, b in PROMOS:
    case(
        f"cat-promote-{str(a)[6:]}-{str(b)[6:]}",
        lambda g, a=a, b=b: (lambda xs: out_call("aten::cat.out", [xs, 1], torch.cat(xs, 1), g))(
            [rnd((2, 3), a, g), rnd((2, 2), b, g, "t")]
        ),
    )
    case(
        f"stack-promote-{str(a)[6:]}-{str(b)[6:]}",
        lambda g, a=a, b=b: (
            lambda xs: out_call("aten::stack.out", [xs, -1], torch.stack(xs, -1), g)
        )([rnd((2, 3), a, g), rnd((2, 3), b, g, "s")]),
    )
case(
    "cat-into-wider",
    lambda g: (lambda xs: out_call("aten::cat.out", [xs, 0], torch.cat(xs, 0).to(F64), kind="c"))(
        [rnd((2,), F32, g), rnd((3,), I32, g)]
    ),
)
case(
    "cat-all-empty",
    lambda g: out_call(
        "aten::cat.out", [[torch.empty(0), torch.empty(0)], 3], torch.empty(0), kind="c"
    ),
)
case(
    "cat-err-cast",
    lambda g: err_call(
        "aten::cat.out", [[rnd((2,), F32, g), rnd((2,), I32, g)], 0], torch.empty(4, dtype=I32)
    ),
)
case(
    "cat-err-shape",
    lambda g: err_call(
        "aten::cat.out", [[rnd((2, 3), F32, g), rnd((3, 2), F32, g)], 0], torch.empty(5, 3)
    ),
)
case(
    "cat-err-rank",
    lambda g: err_call(
        "aten::cat.out", [[rnd((2, 3), F32, g), rnd((3,), F32, g)], 0], torch.empty(5, 3)
    ),
)
case("cat-err-0d", lambda g: err_call("aten::cat.out", [[rnd((), F32, g)], 0], torch.empty(1)))
case("cat-err-empty-list", lambda g: err_call("aten::cat.out", [[], 0], torch.empty(1)))
case(
    "cat-err-dim",
    lambda g: err_call("aten::cat.out", [[rnd((2, 3), F32, g)], 2], torch.empty(2, 3)),
)
case(
    "cat-err-out-shape",
    lambda g: err_call("aten::cat.out", [[rnd((2, 3), F32, g)] * 2, 0], torch.empty(4, 4)),
)
case(
    "stack-err-shape",
    lambda g: err_call(
        "aten::stack.out", [[rnd((2, 3), F32, g), rnd((3, 2), F32, g)], 0], torch.empty(2, 2, 3)
    ),
)


def mk_split(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = len(shp)
    d = rint(g, -r, r - 1)
    n = shp[d]
    kind = pick(g, ["split", "sizes", "unbind"])
    if kind == "split":
        s = rint(g, 1, n + 1) if n else pick(g, [0, 2])
        wants = A.split_copy.Tensor(x, s, d)
        op, args = "aten::split_copy.Tensor_out", [x, s, d]
    elif kind == "sizes":
        cuts = sorted(rint(g, 0, n) for _ in range(rint(g, 0, 3)))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [n], strict=True)]
        wants = A.split_with_sizes_copy.default(x, sizes, d)
        op, args = "aten::split_with_sizes_copy.out", [x, sizes, d]
    else:
        wants = A.unbind_copy.int(x, d)
        op, args = "aten::unbind_copy.int_out", [x, d]
    outs = [out_like(w, pick(g, ["c", "t", "d"])) for w in wants]
    # `-> ()` ops get the out list again as their "return" (the exporter's convention)
    return Call(op, args + [outs, [ret_of(o) for o in outs]], list(zip(outs, wants, strict=True)))


for rep in range(3):
    each_dtype_shape(f"split{rep}", mk_split, NONEMPTY + [(1, 3, 1, 2)])
case(
    "split_copy-err-count",
    lambda g: Call(
        "aten::split_copy.Tensor_out",
        [rnd((5,), F32, g), 2, 0, [torch.empty(2), torch.empty(2)], []],
        error=True,
    ),
)
case(
    "split_copy-err-zero",
    lambda g: Call(
        "aten::split_copy.Tensor_out", [rnd((5,), F32, g), 0, 0, [torch.empty(5)], []], error=True
    ),
)
case(
    "split_copy-err-0d",
    lambda g: Call(
        "aten::split_copy.Tensor_out", [rnd((), F32, g), 1, 0, [torch.empty(())], []], error=True
    ),
)
case(
    "split_with_sizes_copy-err-sum",
    lambda g: Call(
        "aten::split_with_sizes_copy.out",
        [rnd((5,), F32, g), [2, 2], 0, [torch.empty(2), torch.empty(2)], []],
        error=True,
    ),
)
case(
    "split_with_sizes_copy-err-neg",
    lambda g: Call(
        "aten::split_with_sizes_copy.out",
        [rnd((5,), F32, g), [6, -1], 0, [torch.empty(6), torch.empty(0)], []],
        error=True,
    ),
)
case(
    "split_with_sizes_copy-err-dtype",
    lambda g: Call(
        "aten::split_with_sizes_copy.out",
        [rnd((5,), F32, g), [5], 0, [torch.empty(5, dtype=I32)], []],
        error=True,
    ),
)
case(
    "unbind_copy-err-count",
    lambda g: Call(
        "aten::unbind_copy.int_out", [rnd((3, 2), F32, g), 0, [torch.empty(2)] * 2, []], error=True
    ),
)


# -- repeat, roll, tril/triu, *_scatter -----------------------------------------------------------
def mk_repeat(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS))
    reps = [rint(g, 0 if pick(g, [0, 0, 0, 1]) else 1, 3) for _ in range(len(shp) + rint(g, 0, 2))]
    return out_call("aten::repeat.out", [x, reps], A.repeat.default(x, reps), g)


for rep in range(2):
    each_dtype_shape(f"repeat{rep}", mk_repeat, [(), (0,), (3,), (2, 3), (2, 1, 3)])
case(
    "repeat-err-short",
    lambda g: err_call("aten::repeat.out", [rnd((2, 3), F32, g), [2]], torch.empty(4, 3)),
)
case(
    "repeat-err-neg",
    lambda g: err_call("aten::repeat.out", [rnd((2, 3), F32, g), [1, -1]], torch.empty(2, 3)),
)
case(
    "repeat-err-overflow",
    lambda g: err_call("aten::repeat.out", [rnd((3,), F32, g), [2**62]], torch.empty(3)),
)


def mk_roll(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = len(shp)
    if r == 0 or pick(g, [0, 1, 1]) == 0:
        shifts, dims = [rint(g, -20, 20)], []
    else:
        k = rint(g, 1, r + 1)
        dims = [rint(g, -r, r - 1) for _ in range(k)]
        shifts = [rint(g, -9, 9) for _ in range(k)]
    return out_call("aten::roll.out", [x, shifts, dims], A.roll.default(x, shifts, dims), g)


for rep in range(3):
    each_dtype_shape(f"roll{rep}", mk_roll)
case(
    "roll-err-align",
    lambda g: err_call("aten::roll.out", [rnd((2, 3), F32, g), [1, 2], [0]], torch.empty(2, 3)),
)
case(
    "roll-err-none",
    lambda g: err_call("aten::roll.out", [rnd((2, 3), F32, g), [], []], torch.empty(2, 3)),
)
case(
    "roll-err-0d-dim",
    lambda g: err_call("aten::roll.out", [rnd((), F32, g), [1], [0]], torch.empty(())),
)


def mk_tri(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    k = rint(g, -4, 4)
    if pick(g, [0, 1]):
        return out_call("aten::tril.out", [x, k], A.tril.default(x, k), g)
    return out_call("aten::triu.out", [x, k], A.triu.default(x, k), g)


for rep in range(3):
    each_dtype_shape(f"tril_triu{rep}", mk_tri, [(3, 4), (4, 3), (2, 3, 3), (0, 3), (2, 2, 3, 5)])
case("tril-err-1d", lambda g: err_call("aten::tril.out", [rnd((3,), F32, g), 0], torch.empty(3)))


def mk_scatter_view(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = len(shp)
    kind = pick(g, ["select", "slice", "diagonal"] if r >= 2 else ["select", "slice"])
    sdt = pick(g, [dt, dt, dt, F64 if dt.is_floating_point else dt])
    if kind == "select":
        dims = [d for d in range(r) if shp[d] > 0]
        d = pick(g, dims)
        i = rint(g, -shp[d], shp[d] - 1)
        src = rnd(A.select_copy.int(x, d, i).shape, sdt, g, pick(g, LAYOUTS))
        return out_call(
            "aten::select_scatter.out",
            [x, src, d, i],
            A.select_scatter.default(x, src.to(dt), d, i),
            g,
        )
    if kind == "slice":
        d = rint(g, -r, r - 1)
        s, e, st = slice_args(g, shp[d])
        src = rnd(A.slice_copy.Tensor(x, d, s, e, st).shape, sdt, g, pick(g, LAYOUTS))
        return out_call(
            "aten::slice_scatter.out",
            [x, src, d, s, e, st],
            A.slice_scatter.default(x, src.to(dt), d, s, e, st),
            g,
        )
    d1, d2 = (torch.randperm(r, generator=g)[:2] - rint(g, 0, 1) * r).tolist()
    off = rint(g, -2, 2)
    src = rnd(A.diagonal_copy.default(x, off, d1, d2).shape, sdt, g, pick(g, LAYOUTS))
    return out_call(
        "aten::diagonal_scatter.out",
        [x, src, off, d1, d2],
        A.diagonal_scatter.default(x, src.to(dt), off, d1, d2),
        g,
    )


for rep in range(4):
    each_dtype_shape(f"view_scatter{rep}", mk_scatter_view, NONEMPTY)
for dt in ALL:
    for i, (shp, size, stride, so) in enumerate(AS_STRIDED):
        if (shp == (3, 4) and so == 5) or 0 in stride:  # out of range / overlapping
            continue
        case(
            f"as_strided_scatter-{str(dt)[6:]}-{i}",
            lambda g, dt=dt, shp=shp, size=size, stride=stride, so=so: (
                lambda x, src: out_call(
                    "aten::as_strided_scatter.out",
                    [x, src, size, stride, so],
                    A.as_strided_scatter.default(x, src, size, stride, so),
                    kind="c",
                )
            )(rnd(shp, dt, g), rnd(size, dt, g)),
        )
case(
    "select_scatter-err-shape",
    lambda g: err_call(
        "aten::select_scatter.out",
        [rnd((3, 4), F32, g), rnd((3,), F32, g), 0, 1],
        torch.empty(3, 4),
    ),
)
case(
    "select_scatter-err-index",
    lambda g: err_call(
        "aten::select_scatter.out",
        [rnd((3, 4), F32, g), rnd((4,), F32, g), 0, 3],
        torch.empty(3, 4),
    ),
)
case(
    "slice_scatter-err-shape",
    lambda g: err_call(
        "aten::slice_scatter.out",
        [rnd((3, 4), F32, g), rnd((2, 4), F32, g), 0, 0, 3, 1],
        torch.empty(3, 4),
    ),
)
case(
    "diagonal_scatter-err-shape",
    lambda g: err_call(
        "aten::diagonal_scatter.out",
        [rnd((3, 4), F32, g), rnd((4,), F32, g), 0, 0, 1],
        torch.empty(3, 4),
    ),
)
case(
    "as_strided_scatter-err-oob",
    lambda g: err_call(
        "aten::as_strided_scatter.out",
        [rnd((3, 4), F32, g), rnd((2, 2), F32, g), [2, 2], [4, 1], 7],
        torch.empty(3, 4),
    ),
)


# -- index_select, gather, scatter ----------------------------------------------------------------
def rand_index(
    shape: Any, n: int, g: torch.Generator, dt: torch.dtype = I64, unique_dim: int | None = None
) -> torch.Tensor:
    """Index values in [0, n); with unique_dim, distinct along that dim (needs size <= n)."""
    if unique_dim is None or not shape or n == 0 or 0 in list(shape):
        return torch.randint(0, max(n, 1), list(shape), generator=g).to(dt)
    shape = list(shape)
    k = shape[unique_dim]
    moved = shape[:unique_dim] + shape[unique_dim + 1 :] + [k]
    rows = [
        torch.randperm(n, generator=g)[:k]
        for _ in range(max(1, int(torch.tensor(moved[:-1]).prod())))
    ]
    t = torch.stack(rows).reshape(moved) if rows else torch.empty(moved, dtype=I64)
    return t.movedim(-1, unique_dim).to(dt)


def mk_index_select(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = max(len(shp), 1)
    d = rint(g, -r, r - 1)
    n = shp[d] if shp else 1
    ishape = pick(g, [(), (1,)]) if not shp else pick(g, [(), (0,), (rint(g, 1, 6),)])
    idx = rand_index(ishape, n, g, pick(g, [I32, I64])) if n or 0 in ishape else None
    if idx is None:
        idx = torch.empty(0, dtype=I64)
    if pick(g, [0, 1]) and idx.dim() == 1 and idx.numel() > 1:
        idx = torch.stack([idx, idx], 1)[:, 0]  # non-contiguous index
    return out_call("aten::index_select.out", [x, d, idx], A.index_select.default(x, d, idx), g)


for rep in range(2):
    each_dtype_shape(f"index_select{rep}", mk_index_select)
case(
    "index_select-err-oob",
    lambda g: err_call(
        "aten::index_select.out", [rnd((3, 4), F32, g), 1, torch.tensor([4])], torch.empty(3, 1)
    ),
)
case(
    "index_select-err-neg",
    lambda g: err_call(
        "aten::index_select.out", [rnd((3, 4), F32, g), 1, torch.tensor([-1])], torch.empty(3, 1)
    ),
)
case(
    "index_select-err-2d",
    lambda g: err_call(
        "aten::index_select.out", [rnd((3, 4), F32, g), 1, torch.tensor([[1]])], torch.empty(3, 1)
    ),
)
case(
    "index_select-err-dtype",
    lambda g: err_call(
        "aten::index_select.out",
        [rnd((3, 4), F32, g), 1, torch.tensor([1], dtype=I16)],
        torch.empty(3, 1),
    ),
)


def gather_shape(shp: tuple, d: int, g: torch.Generator) -> list[int]:
    """An index shape valid for gather/scatter along d (<= self elsewhere)."""
    return (
        [
            rint(g, 0 if pick(g, [0, 0, 1]) else 1, 4)
            if i == d % len(shp)
            else rint(g, 1 if s else 0, s)
            for i, s in enumerate(shp)
        ]
        if shp
        else []
    )


def mk_gather(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = max(len(shp), 1)
    d = rint(g, -r, r - 1)
    n = shp[d] if shp else 1
    ishape = gather_shape(shp, d, g) if n else [0] * len(shp)
    idx = rand_index(ishape, n, g, pick(g, [I32, I64]))
    want = A.gather.default(x, d, idx)
    return out_call("aten::gather.out", [x, d, idx, False], want, g, pos=4)


for rep in range(2):
    each_dtype_shape(f"gather{rep}", mk_gather)
case(
    "gather-err-oob",
    lambda g: err_call(
        "aten::gather.out", [rnd((3, 4), F32, g), 0, torch.tensor([[3]]), False], torch.empty(1, 1)
    ),
)
case(
    "gather-err-neg",
    lambda g: err_call(
        "aten::gather.out", [rnd((3, 4), F32, g), 0, torch.tensor([[-1]]), False], torch.empty(1, 1)
    ),
)
case(
    "gather-err-rank",
    lambda g: err_call(
        "aten::gather.out", [rnd((3, 4), F32, g), 0, torch.tensor([1]), False], torch.empty(1)
    ),
)
case(
    "gather-err-size",
    lambda g: err_call(
        "aten::gather.out",
        [rnd((3, 4), F32, g), 0, torch.zeros(2, 5, dtype=I64), False],
        torch.empty(2, 5),
    ),
)


def mk_scatter(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = max(len(shp), 1)
    d = rint(g, -r, r - 1)
    n = shp[d] if shp else 1
    kind = pick(g, ["src", "value", "add", "reduce", "value_reduce", "two"])
    ishape = gather_shape(shp, d, g) if n else [0] * len(shp)
    if kind in ("src", "value") and ishape:
        ishape[d] = min(ishape[d], n)
    idx = rand_index(
        ishape,
        n,
        g,
        pick(g, [I32, I64]),
        unique_dim=d % r if kind in ("src", "value") and shp else None,
    )
    src_shape = [s + rint(g, 0, 1) for s in ishape]
    src = rnd(src_shape, dt, g, pick(g, LAYOUTS))
    if kind == "src":
        return out_call("aten::scatter.src_out", [x, d, idx, src], A.scatter.src(x, d, idx, src), g)
    value = pick(g, [True, 3, -2.5]) if dt != BOOL else pick(g, [True, False])
    if kind == "value":
        if not dt.is_floating_point and isinstance(value, float):
            value = 7
        return out_call(
            "aten::scatter.value_out", [x, d, idx, value], A.scatter.value(x, d, idx, value), g
        )
    tol = dt.is_floating_point
    if kind == "add":
        return out_call(
            "aten::scatter_add.out",
            [x, d, idx, src],
            A.scatter_add.default(x, d, idx, src),
            g,
            tol=tol,
        )
    if dt == BOOL:
        return out_call("aten::scatter.src_out", [x, d, idx, src], A.scatter.src(x, d, idx, src), g)
    red = pick(g, ["add", "multiply"])
    if kind == "reduce":
        return out_call(
            "aten::scatter.reduce_out",
            [x, d, idx, src, red],
            A.scatter.reduce(x, d, idx, src, reduce=red),
            g,
            tol=tol,
        )
    if kind == "value_reduce":
        v = 2 if not dt.is_floating_point else -1.5
        return out_call(
            "aten::scatter.value_reduce_out",
            [x, d, idx, v, red],
            A.scatter.value_reduce(x, d, idx, v, reduce=red),
            g,
            tol=tol,
        )
    red = pick(g, ["sum", "prod", "mean", "amax", "amin"])
    inc = bool(pick(g, [0, 1]))
    want = A.scatter_reduce.two(x, d, idx, src, red, include_self=inc)
    return out_call(
        "aten::scatter_reduce.two_out", [x, d, idx, src, red, inc], want, g, pos=6, tol=tol
    )


for rep in range(6):
    each_dtype_shape(f"scatter{rep}", mk_scatter)
case(
    "scatter-err-oob",
    lambda g: err_call(
        "aten::scatter.src_out",
        [rnd((3, 4), F32, g), 0, torch.tensor([[3]]), rnd((1, 1), F32, g)],
        torch.empty(3, 4),
    ),
)
case(
    "scatter-err-dtype",
    lambda g: err_call(
        "aten::scatter.src_out",
        [rnd((3, 4), F32, g), 0, torch.tensor([[1]]), rnd((1, 1), F64, g)],
        torch.empty(3, 4),
    ),
)
case(
    "scatter-err-src-size",
    lambda g: err_call(
        "aten::scatter_add.out",
        [rnd((3, 4), F32, g), 0, torch.tensor([[1, 1]]), rnd((1, 1), F32, g)],
        torch.empty(3, 4),
    ),
)
case(
    "scatter-err-reduce",
    lambda g: Call(
        "aten::scatter.reduce_out",
        [
            rnd((3, 4), F32, g),
            0,
            torch.tensor([[1]]),
            rnd((1, 1), F32, g),
            "mean",
            torch.empty(3, 4),
            torch.empty(3, 4),
        ],
        error=True,
    ),
)
case(
    "scatter_reduce-err-reduce",
    lambda g: Call(
        "aten::scatter_reduce.two_out",
        [
            rnd((3, 4), F32, g),
            0,
            torch.tensor([[1]]),
            rnd((1, 1), F32, g),
            "add",
            True,
            torch.empty(3, 4),
            torch.empty(3, 4),
        ],
        error=True,
    ),
)


# -- advanced indexing ----------------------------------------------------------------------------
def mk_indices(x: torch.Tensor, g: torch.Generator, unique: bool = False) -> list[Any]:
    """A random Tensor?[] for x: Nones, int32/int64 tensors (broadcasting, negative values),
    bool masks spanning one or more dims. With `unique`, the indexed positions are distinct."""
    shp = list(x.shape)
    r = len(shp)
    out: list[Any] = []
    d = 0
    bshape = pick(g, [[2], [3], [2, 1], [1, 2], [], [0]])
    used = False
    while d < r and len(out) < rint(g, 1, r):
        kind = pick(g, ["none", "int", "int", "mask"])
        if kind == "mask" and not used and not unique:
            k = rint(g, 1, min(2, r - d))
            out.append(torch.rand(shp[d : d + k], generator=g) > 0.4)
            d += k
            used = True
            continue
        if kind == "int" and shp[d] > 0 and not (unique and used):
            n = shp[d]
            s = [b for b in bshape] if pick(g, [0, 1, 1]) else bshape[-1:]
            if unique:
                k = min(n, 3)
                t = torch.randperm(n, generator=g)[:k]
                t = t.to(pick(g, [I32, I64]))
            else:
                t = torch.randint(-n, n, s, generator=g).to(pick(g, [I32, I64]))
            out.append(t)
            d += 1
            used = True
            continue
        out.append(None)
        d += 1
    if all(i is None for i in out):
        n = shp[0]
        out = [torch.randperm(n, generator=g)[: min(n, 2)] if n else torch.empty(0, dtype=I64)]
    return out


INDEX_SHAPES = [(5,), (3, 4), (2, 3, 4), (2, 0, 3), (2, 3, 4, 5), (3, 1, 2)]


def mk_index(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    for _ in range(20):
        idx = mk_indices(x, g)
        try:
            want = A.index.Tensor(x, idx)
            break
        except (IndexError, RuntimeError):
            continue
    return out_call("aten::index.Tensor_out", [x, idx], want, g)


def mk_index_put(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    acc = bool(pick(g, [0, 1]))
    for _ in range(20):
        idx = mk_indices(x, g, unique=not acc)
        try:
            rshape = A.index.Tensor(x, idx).shape
            break
        except (IndexError, RuntimeError):
            continue
    vshape = list(rshape)[rint(g, 0, len(rshape)) :]
    if vshape and pick(g, [0, 1]):
        vshape[0] = 1
    v = rnd(vshape, dt, g, pick(g, LAYOUTS))
    want = A.index_put.default(x, idx, v, acc)
    tol = acc and dt.is_floating_point
    if pick(g, [0, 1]):
        return out_call("aten::index_put.out", [x, idx, v, acc], want, g, tol=tol)
    self = x.clone()  # in place; keep x's strides when they are dense
    return Call("aten::index_put_", [self, idx, v, acc, self], [(self, want)], tol=tol)


for rep in range(4):
    each_dtype_shape(f"index{rep}", mk_index, INDEX_SHAPES)
    each_dtype_shape(f"index_put{rep}", mk_index_put, INDEX_SHAPES)
case(
    "index-adjacent-split",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], A.index.Tensor(x, i), g))(
        rnd((2, 3, 4, 5), F32, g, "cl"),
        [None, torch.tensor([[0], [2]]), None, torch.tensor([1, -1, 3])],
    ),
)
case(
    "index-mask-2d",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], A.index.Tensor(x, i), g))(
        rnd((2, 3, 4), I64, g, "t"), [None, torch.rand(3, 4, generator=g) > 0.5]
    ),
)
case(
    "index-mask-u8",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], x[i[0].bool()], g))(
        rnd((4, 3), F16, g), [torch.tensor([1, 0, 1, 1], dtype=U8)]
    ),
)
case(
    "index-mask-and-int",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], A.index.Tensor(x, i), g))(
        rnd((4, 3, 5), BF16, g),
        [torch.tensor([True, False, True, True]), None, torch.tensor([0, 4, -1])],
    ),
)
case(
    "index-0d-int",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], A.index.Tensor(x, i), g))(
        rnd((4, 3), I8, g), [None, torch.tensor(-1)]
    ),
)
case(
    "index-err-oob",
    lambda g: err_call(
        "aten::index.Tensor_out", [rnd((3, 4), F32, g), [torch.tensor([3])]], torch.empty(1, 4)
    ),
)
case(
    "index-err-oob-neg",
    lambda g: err_call(
        "aten::index.Tensor_out",
        [rnd((3, 4), F32, g), [None, torch.tensor([-5])]],
        torch.empty(3, 1),
    ),
)
case(
    "index-err-too-many",
    lambda g: err_call(
        "aten::index.Tensor_out",
        [rnd((3,), F32, g), [torch.tensor([0]), torch.tensor([0])]],
        torch.empty(1),
    ),
)
case(
    "index-err-dtype",
    lambda g: err_call(
        "aten::index.Tensor_out", [rnd((3,), F32, g), [torch.tensor([0.0])]], torch.empty(1)
    ),
)
case(
    "index-err-broadcast",
    lambda g: err_call(
        "aten::index.Tensor_out",
        [rnd((3, 4), F32, g), [torch.tensor([0, 1]), torch.tensor([0, 1, 2])]],
        torch.empty(2),
    ),
)
case(
    "index-err-mask-shape",
    lambda g: err_call(
        "aten::index.Tensor_out",
        [rnd((3, 4), F32, g), [torch.ones(4, dtype=BOOL)]],
        torch.empty(3, 4),
    ),
)
case(
    "index-err-empty",
    lambda g: err_call("aten::index.Tensor_out", [rnd((3,), F32, g), []], torch.empty(3)),
)
case(
    "index_put-err-dtype",
    lambda g: err_call(
        "aten::index_put.out",
        [rnd((3, 4), F32, g), [torch.tensor([0])], rnd((4,), F64, g), False],
        torch.empty(3, 4),
    ),
)
case(
    "index_put-err-values",
    lambda g: err_call(
        "aten::index_put.out",
        [rnd((3, 4), F32, g), [torch.tensor([0])], rnd((3,), F32, g), False],
        torch.empty(3, 4),
    ),
)
case(
    "index_put-err-oob",
    lambda g: Call(
        "aten::index_put_",
        [rnd((3, 4), F32, g), [torch.tensor([0, 3])], rnd((4,), F32, g), True, None],
        error=True,
    ),
)
case(
    "index_put-acc-dups",
    lambda g: (
        lambda x, i, v: Call(
            "aten::index_put_",
            [x, i, v, True, x],
            [(x, A.index_put.default(x.clone(), i, v, True))],
            tol=True,
        )
    )(rnd((3, 4), F32, g), [torch.tensor([0, 0, 2, 0])], rnd((4, 4), F32, g)),
)


# -- masks, nonzero, repeat_interleave ------------------------------------------------------------
def dyn_call(
    op: str,
    args: list[Any],
    want: torch.Tensor,
    cap: list[int] | None = None,
    pos: int | None = None,
) -> Call:
    """A Call whose out is DYNAMIC: capacity `cap` (default: want's shape + 3 on dim 0)."""
    cap = cap if cap is not None else [want.shape[0] + 3] + list(want.shape[1:])
    o = Out(torch.empty(cap, dtype=want.dtype))
    args = list(args)
    args.insert(len(args) if pos is None else pos, o)
    return Call(op, args + [ret_of(o)], [(o, want)])


def mk_masked(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    mshape = list(shp)[rint(g, 0, len(shp)) :]
    mshape = [1 if pick(g, [0, 0, 1]) else s for s in mshape]
    if pick(g, [0, 0, 1]):
        mshape = [2] + list(shp)
    mask = rnd(mshape, BOOL, g, pick(g, LAYOUTS))
    kind = pick(g, ["select", "scatter", "nonzero", "nonzero_static"])
    if kind == "select":
        return dyn_call("aten::masked_select.out", [x, mask], A.masked_select.default(x, mask))
    if kind == "scatter":
        want_shape = torch.broadcast_shapes(x.shape, mask.shape)
        n = int(mask.expand(want_shape).sum())
        src = rnd([n + rint(g, 0, 3)], dt, g)
        if pick(g, [0, 1]) and src.numel() >= 2:
            src = rnd([2, (n + 2) // 2 + 1], dt, g, "t")
        return out_call(
            "aten::masked_scatter.out", [x, mask, src], A.masked_scatter.default(x, mask, src), g
        )
    if kind == "nonzero":
        return dyn_call("aten::nonzero.out", [x], A.nonzero.default(x))
    size, fill = rint(g, 0, 8), rint(g, -3, 3)
    want = A.nonzero_static.default(x, size=size, fill_value=fill)
    return out_call("aten::nonzero_static.out", [x, size, fill], want, kind="c")


for rep in range(4):
    each_dtype_shape(f"masked{rep}", mk_masked)
case(
    "masked_select-err-static",
    lambda g: err_call(
        "aten::masked_select.out",
        [rnd((3, 4), F32, g), torch.ones(3, 4, dtype=BOOL)],
        torch.empty(11),
    ),
)
case(
    "masked_select-err-capacity",
    lambda g: err_call(
        "aten::masked_select.out",
        [rnd((3, 4), F32, g), torch.ones(3, 4, dtype=BOOL)],
        Out(torch.empty(11)),
    ),
)
case(
    "masked_select-err-mask-dtype",
    lambda g: err_call(
        "aten::masked_select.out",
        [rnd((3, 4), F32, g), torch.ones(3, 4, dtype=U8)],
        Out(torch.empty(12)),
    ),
)
case(
    "masked_select-err-broadcast",
    lambda g: err_call(
        "aten::masked_select.out",
        [rnd((3, 4), F32, g), torch.ones(3, dtype=BOOL)],
        Out(torch.empty(12)),
    ),
)
case(
    "masked_scatter-err-source",
    lambda g: err_call(
        "aten::masked_scatter.out",
        [rnd((3, 4), F32, g), torch.ones(3, 4, dtype=BOOL), rnd((11,), F32, g)],
        torch.empty(3, 4),
    ),
)
case(
    "nonzero-err-dtype",
    lambda g: err_call(
        "aten::nonzero.out", [rnd((3, 4), F32, g)], Out(torch.empty(12, 2, dtype=I32))
    ),
)
case(
    "nonzero-err-capacity",
    lambda g: err_call("aten::nonzero.out", [torch.ones(3, 4)], Out(torch.empty(11, 2, dtype=I64))),
)


def mk_repeat_interleave(dt: torch.dtype, n: int, g: torch.Generator) -> Call:
    reps = torch.randint(0, 4, (n,), generator=g).to(dt)
    if n > 2 and pick(g, [0, 1]):
        reps = torch.randint(0, 4, (2 * n,), generator=g).to(dt)[::2]
    want = A.repeat_interleave.Tensor(reps)
    size = pick(g, [None, want.numel()])
    return dyn_call(
        "aten::repeat_interleave.Tensor_out", [reps, size], want, cap=[want.numel() + 2]
    )


for dt in [I32, I64]:
    for n in [0, 1, 5, 9]:
        case(
            f"repeat_interleave-{str(dt)[6:]}-{n}",
            lambda g, dt=dt, n=n: mk_repeat_interleave(dt, n, g),
        )
case(
    "repeat_interleave-err-neg",
    lambda g: err_call(
        "aten::repeat_interleave.Tensor_out",
        [torch.tensor([1, -1]), None],
        Out(torch.empty(5, dtype=I64)),
    ),
)
case(
    "repeat_interleave-err-size",
    lambda g: err_call(
        "aten::repeat_interleave.Tensor_out",
        [torch.tensor([1, 2]), 4],
        Out(torch.empty(5, dtype=I64)),
    ),
)
case(
    "repeat_interleave-err-2d",
    lambda g: err_call(
        "aten::repeat_interleave.Tensor_out",
        [torch.tensor([[1]]), None],
        Out(torch.empty(5, dtype=I64)),
    ),
)
case(
    "repeat_interleave-err-overflow",
    lambda g: err_call(
        "aten::repeat_interleave.Tensor_out",
        [torch.full((4,), 2**62), None],
        Out(torch.empty(5, dtype=I64)),
    ),
)


# -- searchsorted, bucketize ----------------------------------------------------------------------
def sorted_seq(shape: list[int], dt: torch.dtype, g: torch.Generator) -> torch.Tensor:
    v = torch.randint(-10, 10, shape, generator=g)
    if dt == U8:
        v = v + 10
    return v.sort(-1).values.to(dt)


def mk_search(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    vdt = pick(g, [dt, dt, F32, I64])
    vals = (torch.randint(-12, 12, shp, generator=g) + (12 if U8 in (dt, vdt) else 0)).to(vdt)
    if vdt.is_floating_point and pick(g, [0, 1]):
        vals = vals + 0.5
        if shp and shp[-1] > 0:
            vals.view(-1)[0] = float("nan")
    i32, right = bool(pick(g, [0, 1])), bool(pick(g, [0, 1]))
    kind = pick(g, ["ss", "ss_nd", "ss_sorter", "bucket", "ss_scalar", "bucket_scalar"])
    if kind in ("ss_scalar", "bucket_scalar"):
        seq = sorted_seq([rint(g, 0, 7)], dt, g)
        v = pick(g, [3, -2, 0.5, 2.0]) if dt != U8 else pick(g, [3, 5.5])
        if kind == "bucket_scalar":
            want = torch.bucketize(v, seq, out_int32=i32, right=right)
            return out_call("aten::bucketize.Scalar_out", [v, seq, i32, right], want, kind="c")
        side = pick(g, [None, "left", "right"])
        if side == "left":
            right = False
        want = A.searchsorted.Scalar(seq, v, out_int32=i32, right=right, side=side)
        return out_call(
            "aten::searchsorted.Scalar_out", [seq, v, i32, right, side, None], want, kind="c"
        )
    if kind == "bucket":
        seq = sorted_seq([rint(g, 0, 7)], dt, g)
        want = torch.bucketize(vals, seq, out_int32=i32, right=right)
        return out_call("aten::bucketize.Tensor_out", [vals, seq, i32, right], want, g)
    side = pick(g, [None, "left", "right"])
    if side == "left":
        right = False
    sorter = None
    if kind == "ss_nd" and len(shp) >= 1:
        seq = sorted_seq(list(shp[:-1]) + [rint(g, 0, 6)], dt, g)
    else:
        seq = sorted_seq([rint(g, 1, 7)], dt, g)
    if kind == "ss_sorter":
        perm = torch.randperm(seq.shape[-1], generator=g)
        sorter = torch.argsort(perm)
        seq = seq[perm]
    if pick(g, [0, 1]) and seq.dim() == 1:
        seq = torch.stack([seq, seq], 1)[:, 1]  # strided boundaries
    want = A.searchsorted.Tensor(seq, vals, out_int32=i32, right=right, side=side, sorter=sorter)
    return out_call("aten::searchsorted.Tensor_out", [seq, vals, i32, right, side, sorter], want, g)


for rep in range(3):
    each_dtype_shape(f"search{rep}", mk_search, [(), (0,), (5,), (3, 4), (2, 3, 4)], REALS)
case(
    "searchsorted-err-side",
    lambda g: err_call(
        "aten::searchsorted.Tensor_out",
        [sorted_seq([4], F32, g), rnd((3,), F32, g), False, True, "left", None],
        torch.empty(3, dtype=I64),
    ),
)
case(
    "searchsorted-err-out-dtype",
    lambda g: err_call(
        "aten::searchsorted.Tensor_out",
        [sorted_seq([4], F32, g), rnd((3,), F32, g), False, False, None, None],
        torch.empty(3, dtype=I32),
    ),
)
case(
    "searchsorted-err-nd",
    lambda g: err_call(
        "aten::searchsorted.Tensor_out",
        [sorted_seq([2, 4], F32, g), rnd((3, 3), F32, g), False, False, None, None],
        torch.empty(3, 3, dtype=I64),
    ),
)
case(
    "searchsorted-err-sorter",
    lambda g: err_call(
        "aten::searchsorted.Tensor_out",
        [
            sorted_seq([4], F32, g),
            rnd((3,), F32, g),
            False,
            False,
            None,
            torch.tensor([0, 1, 2, 4]),
        ],
        torch.empty(3, dtype=I64),
    ),
)
case(
    "searchsorted-err-scalar-nd",
    lambda g: err_call(
        "aten::searchsorted.Scalar_out",
        [sorted_seq([2, 4], F32, g), 1.0, False, False, None, None],
        torch.empty((), dtype=I64),
    ),
)
case(
    "bucketize-err-2d",
    lambda g: err_call(
        "aten::bucketize.Tensor_out",
        [rnd((3,), F32, g), sorted_seq([2, 4], F32, g), False, False],
        torch.empty(3, dtype=I64),
    ),
)


# -- sort ---------------------------------------------------------------------------------------
def mk_sort(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    if dt.is_floating_point and x.numel() > 2 and pick(g, [0, 1]):
        x = x.clone()  # NaN sorts last; -0.0 == 0.0 ties keep their order
        x[tuple(0 for _ in shp)] = float("nan")
        x[tuple(s - 1 for s in shp)] = -0.0
    r = max(len(shp), 1)
    d = rint(g, -r, r - 1)
    desc = bool(pick(g, [0, 1]))
    want_v, want_i = torch.sort(x, dim=d, descending=desc, stable=True)
    v, i = out_like(want_v, pick(g, ["c", "t", "d"])), out_like(want_i, pick(g, ["c", "t", "d"]))
    ret = [ret_of(v), ret_of(i)]
    if pick(g, [0, 1]):
        args = [x, d, desc, v, i, ret]
        return Call("aten::sort.values", args, [(v, want_v), (i, want_i)])
    args = [x, pick(g, [None, True, False]), d, desc, v, i, ret]
    return Call("aten::sort.values_stable", args, [(v, want_v), (i, want_i)])


for rep in range(3):
    each_dtype_shape(f"sort{rep}", mk_sort, SHAPES + [(40,), (3, 17)])
case(
    "sort-err-dim",
    lambda g: Call(
        "aten::sort.values",
        [rnd((3, 4), F32, g), 2, False, torch.empty(3, 4), torch.empty(3, 4, dtype=I64), []],
        error=True,
    ),
)
case(
    "sort-err-indices-dtype",
    lambda g: Call(
        "aten::sort.values",
        [rnd((3, 4), F32, g), 1, False, torch.empty(3, 4), torch.empty(3, 4, dtype=I32), []],
        error=True,
    ),
)


# -- the test -------------------------------------------------------------------------------------
def _value(o: Any) -> torch.Tensor:
    return o.view() if isinstance(o, Out) else o


def _check(got: torch.Tensor, want: torch.Tensor, tol: bool) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if tol and want.dtype in TOL:
        rtol, atol = TOL[want.dtype]
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    elif want.is_complex() or want.dtype.is_floating_point:
        # bit-exact, NaN-aware
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("name,build", CASES, ids=[n for n, _ in CASES])
def test_kernel(name: str, build: Builder) -> None:
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    call = build(g)
    if call.error:
        with pytest.raises(RuntimeError, match=" failed: "):  # the kernel's own error
            call_kernel(call.op, call.args, temp_bytes=1 << 16)
        return
    call_kernel(call.op, call.args, temp_bytes=1 << 16)
    for o, want in call.expect:
        _check(_value(o), want, call.tol)


def test_registered() -> None:
    """Every op exercised by the table is registered, and the table covers every op of the group."""
    import pathlib

    from ember._lib import registered_kernels
    from ember.oplist import parse_ops_def

    regs = registered_kernels()
    root = pathlib.Path(__file__).resolve().parents[3]
    ours = parse_ops_def((root / "kernels/portable/ops_shape.def").read_text())
    assert ours, "ops_shape.def has no entries"
    g = torch.Generator().manual_seed(0)
    used = set()
    for name, build in CASES:
        if "-err" in name:
            continue
        used.add(build(torch.Generator().manual_seed(zlib.crc32(name.encode()))).op)
    for op in ours:
        assert op in regs, op
    missing = sorted(set(ours) - used)
    assert not missing, f"ops without a passing-path case: {missing}"
    del g
