"""Shape, copy and indexing kernels (kernels/portable/ops_shape.def) against eager PyTorch:
masks, nonzero, repeat_interleave, searchsorted, bucketize and sort (and the coverage of the group).

One table (CASES) drives one parametrized test; the case convention, layouts and the runner are
in kernels_shape_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_shape_sort.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from kernel_cases import gather, seeded
from kernels_shape_common import (
    BOOL,
    F32,
    I32,
    I64,
    LAYOUTS,
    REALS,
    SHAPES,
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
)

from ember._lib import Out

CASES = ShapeCases()
case = CASES.add
each_dtype_shape = CASES.each_dtype_shape


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


@pytest.mark.parametrize("name,build", CASES, ids=CASES.ids())
def test_kernel(name: str, build: Builder) -> None:
    run_case(name, build)


# The files of the group: every op of ops_shape.def must be covered by one of them.
GROUP = [
    "test_kernels_shape_views",
    "test_kernels_shape_cat",
    "test_kernels_shape_index",
    "test_kernels_shape_sort",
]


def test_registered() -> None:
    """Every op exercised by the tables is registered, and the tables cover every op of the
    group."""
    import pathlib

    from ember._lib import registered_kernels
    from ember.oplist import parse_ops_def

    regs = registered_kernels()
    root = pathlib.Path(__file__).resolve().parents[3]
    ours = parse_ops_def((root / "kernels/portable/ops_shape.def").read_text())
    assert ours, "ops_shape.def has no entries"
    used = set()
    for name, build in gather(GROUP):
        if "-err" in name:
            continue
        used.add(build(seeded(name)).op)
    for op in ours:
        assert op in regs, op
    missing = sorted(set(ours) - used)
    assert not missing, f"ops without a passing-path case: {missing}"
