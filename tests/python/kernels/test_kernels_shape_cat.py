"""Shape, copy and indexing kernels (kernels/portable/ops_shape.def) against eager PyTorch:
cat, stack, split, repeat, roll, tril/triu and the *_scatter ops.

One table (CASES) drives one parametrized test; the case convention, layouts and the runner are
in kernels_shape_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_shape_cat.py
"""

from __future__ import annotations

import pytest
import torch
from kernels_shape_common import (
    ALL,
    AS_STRIDED,
    BF16,
    BOOL,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    LAYOUTS,
    NONEMPTY,
    U8,
    A,
    Builder,
    Call,
    ShapeCases,
    err_call,
    out_call,
    out_like,
    pick,
    ret_of,
    rint,
    rnd,
    run_case,
    slice_args,
)

CASES = ShapeCases()
case = CASES.add
each_dtype_shape = CASES.each_dtype_shape


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
case(  # split sizes whose sum passes INT64_MAX: refused (was signed overflow, UBSan)
    "split_with_sizes_copy-err-overflow",
    lambda g: Call(
        "aten::split_with_sizes_copy.out",
        [rnd((5,), F32, g), [2, 2**63 - 1], 0, [torch.empty(2), torch.empty(3)], []],
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


@pytest.mark.parametrize("name,build", CASES, ids=CASES.ids())
def test_kernel(name: str, build: Builder) -> None:
    run_case(name, build)
