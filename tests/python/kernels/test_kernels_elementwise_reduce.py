"""Elementwise kernels (kernels/portable/ops_elementwise.def) against eager PyTorch:
reductions (sum, mean, var, min/max, arg*, topk, ...).

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_ew_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_elementwise_reduce.py
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from kernel_cases import CaseList
from kernels_ew_common import (
    ALL,
    BOOL,
    F32,
    F64,
    I8,
    I32,
    I64,
    REALS,
    STYLES,
    U8,
    A,
    Builder,
    Call,
    dname,
    out_for,
    ret,
    rnd,
    run_case,
    single,
    torch_or_none,
    with_specials,
)

CASES = CaseList()
case = CASES.add


# -- reductions -----------------------------------------------------------------------------
RED_SHAPES = [
    ((2, 3, 4), "c"),
    ((2, 3, 4, 5), "cl"),
    ((3, 5), "t"),
    ((), "c"),
    ((0, 3), "c"),
    ((4, 6), "s"),
]


def _dims_for(shape: tuple[int, ...], k: int) -> Any:
    r = len(shape)
    opts: list[Any] = [None, [], [0], [-1], [0, -1], [1]] if r >= 2 else [None, [], [0], [-1]]
    if r == 0:
        opts = [None, [], [0], [-1]]
    return opts[k % len(opts)]


def _red_case(op: str, dt: torch.dtype, i: int) -> None:
    shape, layout = RED_SHAPES[i % len(RED_SHAPES)]
    dims = _dims_for(shape, i)
    keep = i % 2 == 1

    def build(g: torch.Generator) -> Call:
        x = rnd(g, shape, dt, -3, 3, layout)
        st = STYLES[i % 4]
        if op == "sum":
            return single(
                "aten::sum.IntList_out",
                [x, dims, keep, None],
                lambda: A.sum.dim_IntList(x, dims, keep),
                style=st,
                scale=4,
            )
        if op == "sum_dtype":
            return single(
                "aten::sum.IntList_out",
                [x, dims, keep, F64],
                lambda: A.sum.dim_IntList(x, dims, keep, dtype=F64),
                style=st,
            )
        if op == "mean":
            return single(
                "aten::mean.out",
                [x, dims, keep, None],
                lambda: A.mean.dim(x, dims, keep),
                style=st,
                scale=4,
            )
        if op == "mean_dtype":
            return single("aten::mean.dtype_out", [x, F64], lambda: A.mean.default(x, dtype=F64))
        if op == "prod":
            return single("aten::prod.out", [x, None], lambda: A.prod.default(x), scale=4)
        if op == "prod_int":
            d = dims[0] if isinstance(dims, list) and dims else -1
            return single(
                "aten::prod.int_out",
                [x, d, keep, None],
                lambda: A.prod.dim_int(x, d, keep),
                style=st,
                scale=4,
            )
        if op in ("amax", "amin"):
            dd = dims if dims is not None else []
            xs = with_specials(x) if i % 3 == 0 else x
            return single(
                f"aten::{op}.out",
                [xs, dd, keep],
                lambda: getattr(A, op).default(xs, dd, keep),
                style=st,
                err_dtype=dt,
            )
        if op in ("argmax", "argmin"):
            d = None if not dims else dims[0]
            xs = with_specials(x) if i % 3 == 0 else x
            return single(
                f"aten::{op}.out",
                [xs, d, keep],
                lambda: getattr(A, op).default(xs, d, keep),
                style=st,
                err_dtype=I64,
            )
        if op in ("var", "var_correction", "var_mean"):
            c = [None, 0, 2, 1.5][i % 4]
            if op == "var":
                ub = i % 2 == 0
                return single(
                    "aten::var.out",
                    [x, dims, ub, keep],
                    lambda: A.var.dim(x, dims, ub, keep),
                    style=st,
                    scale=8,
                )
            if op == "var_correction":
                return _var_c(x, dims, c, keep)
            return _var_mean(x, dims, c, keep)
        if op == "any":
            xs = rnd(g, shape, dt, -1, 1, layout) if dt != BOOL else x
            if i % 3 == 0:
                return single("aten::any.all_out", [xs], lambda: A.any.default(xs), err_dtype=BOOL)
            if i % 3 == 1 and shape:
                d = -1
                return single(
                    "aten::any.out",
                    [xs, d, keep],
                    lambda: A.any.dim(xs, d, keep),
                    err_dtype=BOOL,
                    style=st,
                )
            return single(
                "aten::any.dims_out",
                [xs, dims, keep],
                lambda: A.any.dims(xs, dims, keep),
                err_dtype=BOOL,
                style=st,
            )
        if op == "cumsum":
            d = -1 if i % 2 else 0
            return single(
                "aten::cumsum.out", [x, d, None], lambda: A.cumsum.default(x, d), style=st, scale=4
            )
        if op in ("max_unary", "min_unary"):
            f = A.max.default if op == "max_unary" else A.min.default
            return single(f"aten::{op[:3]}.unary_out", [x], lambda: f(x), err_dtype=dt)
        if op in ("max_dim", "min_dim"):
            return _dim_best(op[:3], x, -1 if i % 2 else 0, keep)
        if op in ("softmax", "log_softmax"):
            d = -1 if i % 2 else 0
            f = A._softmax.default if op == "softmax" else A._log_softmax.default
            if not dt.is_floating_point:  # eager accepts empty integer inputs; the kernel never
                f = None  # type: ignore[assignment]
            return single(
                f"aten::_{op}.out",
                [x, d, False],
                lambda: f(x, d, False) if f else None,
                style=st,
                err_dtype=dt,
                scale=4,
            )
        if op == "sum_full":
            return single("aten::sum.out", [x, None], lambda: A.sum.default(x), scale=4)
        if op in ("std", "std_correction"):
            c = [None, 0, 2, 1.5][i % 4]
            if op == "std":
                ub = i % 2 == 0
                return single(
                    "aten::std.out",
                    [x, dims, ub, keep],
                    lambda: A.std.dim(x, dims, ub, keep),
                    style=st,
                    scale=8,
                )
            return single(
                "aten::std.correction_out",
                [x, dims, c, keep],
                lambda: A.std.correction(x, dims, correction=c, keepdim=keep),
                style=st,
                scale=8,
            )
        if op == "cumprod":
            d = -1 if i % 2 else 0
            xs = rnd(g, shape, dt, 0.5, 1.5, layout) if dt.is_floating_point else x
            return single(
                "aten::cumprod.out",
                [xs, d, None],
                lambda: A.cumprod.default(xs, d),
                style=st,
                scale=4,
            )
        if op == "logsumexp":
            dd = dims if dims is not None else [0] if shape else []
            xs = with_specials(x) if i % 5 == 0 else x
            return single(
                "aten::logsumexp.out",
                [xs, dd, keep],
                lambda: A.logsumexp.default(xs, dd, keep),
                style=st,
                scale=4,
                err_dtype=F32,
            )
        if op == "vector_norm":
            o = [2, 1, 0, 3, math.inf, -math.inf, 0.5][i % 7]
            return single(
                "aten::linalg_vector_norm.out",
                [x, o, dims, keep, None],
                lambda: A.linalg_vector_norm.default(x, o, dims, keep),
                style=st,
                scale=8,
                err_dtype=F32,
            )
        raise AssertionError(op)

    case(f"{op}-{dname(dt)}-{i}", build)


def _var_c(x: torch.Tensor, dims: Any, c: Any, keep: bool) -> Call:
    ref = torch_or_none(lambda: A.var.correction(x, dims, correction=c, keepdim=keep))
    if ref is None:
        o = torch.zeros(2, dtype=x.dtype)
        return Call("aten::var.correction_out", [x, dims, c, keep, o, o], error=True)
    o = out_for(ref, "c")
    return Call("aten::var.correction_out", [x, dims, c, keep, o, o], [(o, ref)], scale=8)


def _var_mean(x: torch.Tensor, dims: Any, c: Any, keep: bool) -> Call:
    ref = torch_or_none(lambda: A.var_mean.correction(x, dims, correction=c, keepdim=keep))
    if ref is None:
        o = torch.zeros(2, dtype=x.dtype)
        return Call("aten::var_mean.correction_out", [x, dims, c, keep, o, o, [o, o]], error=True)
    o0, o1 = out_for(ref[0], "d"), out_for(ref[1], "c")
    return Call(
        "aten::var_mean.correction_out",
        [x, dims, c, keep, o0, o1, [ret(o0), o1]],
        [(o0, ref[0]), (o1, ref[1])],
        scale=8,
    )


def _dim_best(which: str, x: torch.Tensor, d: int, keep: bool) -> Call:
    f = A.max.dim if which == "max" else A.min.dim
    ref = torch_or_none(lambda: f(x, d, keep))
    if ref is None:
        v, ix = torch.zeros(2, dtype=x.dtype), torch.zeros(2, dtype=I64)
        return Call(f"aten::{which}.dim_{which}", [x, d, keep, v, ix, [v, ix]], error=True)
    v, ix = out_for(ref[0], "c"), out_for(ref[1], "d")
    return Call(
        f"aten::{which}.dim_{which}", [x, d, keep, v, ix, [v, ret(ix)]], [(v, ref[0]), (ix, ref[1])]
    )


RED_OPS = [
    "sum_full",
    "std",
    "std_correction",
    "cumprod",
    "logsumexp",
    "vector_norm",
    "sum",
    "sum_dtype",
    "mean",
    "mean_dtype",
    "prod",
    "prod_int",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "var",
    "var_correction",
    "var_mean",
    "any",
    "cumsum",
    "max_unary",
    "min_unary",
    "max_dim",
    "min_dim",
    "softmax",
    "log_softmax",
]
for _op in RED_OPS:
    for _i, _dt in enumerate(ALL):
        _red_case(_op, _dt, _i)
    for _i in range(len(RED_SHAPES) * 2):
        _red_case(_op, F32, _i + 20)

case(
    "sum-dtype-mismatch",
    lambda g: Call(
        "aten::sum.IntList_out",
        [torch.ones(2, 3), [0], False, F64, torch.zeros(3), torch.zeros(3)],
        error=True,
    ),
)
case(
    "sum-dup-dim",
    lambda g: Call(
        "aten::sum.IntList_out",
        [torch.ones(2, 3), [0, -2], False, None, torch.zeros(3), torch.zeros(3)],
        error=True,
    ),
)
case(
    "sum-bad-dim",
    lambda g: Call(
        "aten::sum.IntList_out",
        [torch.ones(2, 3), [2], False, None, torch.zeros(3), torch.zeros(3)],
        error=True,
    ),
)
case(
    "amax-empty-dim",
    lambda g: Call(
        "aten::amax.out", [torch.ones(0, 3), [0], False, torch.zeros(3), torch.zeros(3)], error=True
    ),
)
case(
    "max-empty",
    lambda g: Call(
        "aten::max.unary_out", [torch.ones(0), torch.zeros(()), torch.zeros(())], error=True
    ),
)
case(
    "argmax-out-dtype",
    lambda g: Call(
        "aten::argmax.out",
        [torch.ones(3), None, False, torch.zeros(()), torch.zeros(())],
        error=True,
    ),
)
case(
    "softmax-int",
    lambda g: Call(
        "aten::_softmax.out",
        [torch.ones(3, dtype=I32), 0, False, torch.zeros(3, dtype=I32), torch.zeros(3, dtype=I32)],
        error=True,
    ),
)
case(
    "mean-int",
    lambda g: Call(
        "aten::mean.out",
        [torch.ones(3, dtype=I32), None, False, None, torch.zeros(()), torch.zeros(())],
        error=True,
    ),
)
case(
    "cumsum-dtype",
    lambda g: (
        lambda x: single("aten::cumsum.out", [x, 1, F64], lambda: A.cumsum.default(x, 1, dtype=F64))
    )(rnd(g, (3, 4), I32)),
)
case(
    "softmax-large",
    lambda g: (
        lambda x: single(
            "aten::_log_softmax.out", [x, -1, False], lambda: A._log_softmax.default(x, -1, False)
        )
    )(rnd(g, (4, 100), F32, -80, 80)),
)


def _topk(g: torch.Generator, dt: torch.dtype, k: int, d: int, largest: bool, i: int) -> Call:
    shape = [(4, 7), (2, 3, 6), (5,), (3, 0)][i % 4]
    # distinct values so the order is unambiguous
    n = math.prod(shape)
    perm = torch.randperm(n, generator=g).reshape(shape)
    x = (perm - n // 2).to(dt) if dt not in (U8,) else perm.to(dt)
    if dt == I8 and n > 250:
        x = perm.to(dt)
    kk = min(k, shape[d])
    ref = torch_or_none(lambda: A.topk.default(x, kk, d, largest, True))
    if ref is None:
        v, ix = torch.zeros(2, dtype=dt), torch.zeros(2, dtype=I64)
        return Call("aten::topk.values", [x, kk, d, largest, True, v, ix, [v, ix]], error=True)
    v, ix = out_for(ref[0], "d"), out_for(ref[1], "c")
    return Call(
        "aten::topk.values",
        [x, kk, d, largest, True, v, ix, [ret(v), ix]],
        [(v, ref[0]), (ix, ref[1])],
    )


for _i, _dt in enumerate(REALS):
    case(f"topk-{dname(_dt)}", lambda g, dt=_dt, i=_i: _topk(g, dt, 3, -1, i % 2 == 0, i))
    case(f"topk-dim0-{dname(_dt)}", lambda g, dt=_dt, i=_i: _topk(g, dt, 2, 0, i % 2 == 1, i))
case(
    "topk-nan",
    lambda g: (
        lambda x: (
            lambda r: (
                lambda v, ix: Call(
                    "aten::topk.values",
                    [x, 3, -1, True, True, v, ix, [v, ix]],
                    [(v, r[0]), (ix, r[1])],
                )
            )(torch.zeros(2, 3), torch.zeros(2, 3, dtype=I64))
        )(A.topk.default(x, 3))
    )(torch.tensor([[1.0, math.nan, 3.0, 2.0], [0.0, -1.0, 5.0, math.inf]])),
)
case(
    "topk-k-too-big",
    lambda g: Call(
        "aten::topk.values",
        [
            torch.ones(3),
            4,
            -1,
            True,
            True,
            torch.zeros(4),
            torch.zeros(4, dtype=I64),
            [torch.zeros(4), torch.zeros(4, dtype=I64)],
        ],
        error=True,
    ),
)


@pytest.mark.parametrize("name,build", CASES, ids=CASES.ids())
def test_kernel(name: str, build: Builder) -> None:
    run_case(name, build)
