"""Elementwise kernels (kernels/portable/ops_elementwise.def) against eager PyTorch:
creation ops, copies and dropout (and the coverage of the group).

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_ew_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_elementwise_create.py
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from kernel_cases import CaseList, gather, seeded
from kernels_ew_common import (
    ALL,
    BOOL,
    F16,
    F32,
    F64,
    FLOATS,
    I32,
    I64,
    STYLES,
    U8,
    A,
    Builder,
    Call,
    dname,
    ret,
    rnd,
    run_case,
    single,
    torch_or_none,
    with_specials,
)

from ember._lib import Out

CASES = CaseList()
case = CASES.add


# -- creation -------------------------------------------------------------------------------
def _creation_cases() -> None:
    sizes_list = [[2, 3], [], [0, 4], [2, 3, 4, 5]]
    for i, dt in enumerate(ALL):
        d = dname(dt)
        sz = sizes_list[i % len(sizes_list)]
        st = STYLES[i % 4]
        for v in (3, -1.5, True):
            case(
                f"full-{d}-{v}",
                lambda g, dt=dt, sz=sz, v=v, st=st: single(
                    "aten::full.out",
                    [sz, v],
                    lambda: torch.full(sz, v, dtype=dt),
                    style=st,
                    err_dtype=dt,
                    err_shape=tuple(sz),
                ),
            )
            case(
                f"full_like-{d}-{v}",
                lambda g, dt=dt, sz=sz, v=v: (
                    lambda x: single(
                        "aten::full_like.out",
                        [x, v, None],
                        lambda: torch.full_like(x, v),
                        err_dtype=dt,
                        err_shape=tuple(sz),
                    )
                )(rnd(g, tuple(sz), dt)),
            )
            case(
                f"fill-{d}-{v}",
                lambda g, dt=dt, sz=sz, v=v: (
                    lambda x: single(
                        "aten::fill.Scalar_out",
                        [x, v],
                        lambda: A.fill.Scalar(x, v),
                        err_dtype=dt,
                        err_shape=tuple(sz),
                    )
                )(rnd(g, tuple(sz), dt)),
            )
            case(
                f"scalar_tensor-{d}-{v}",
                lambda g, dt=dt, v=v: single(
                    "aten::scalar_tensor.out",
                    [v],
                    lambda: torch.scalar_tensor(v, dtype=dt),
                    err_dtype=dt,
                    err_shape=(),
                ),
            )
        case(
            f"fill_tensor-{d}",
            lambda g, dt=dt, sz=sz: (
                lambda x, val: single(
                    "aten::fill.Tensor_out", [x, val], lambda: A.fill.Tensor(x, val), err_dtype=dt
                )
            )(rnd(g, tuple(sz), dt), rnd(g, (), F64, -4, 4)),
        )
        case(
            f"zeros-{d}",
            lambda g, dt=dt, sz=sz, st=st: single(
                "aten::zeros.out", [sz], lambda: torch.zeros(sz, dtype=dt), style=st
            ),
        )
        case(
            f"ones-{d}",
            lambda g, dt=dt, sz=sz, st=st: single(
                "aten::ones.out", [sz], lambda: torch.ones(sz, dtype=dt), style=st
            ),
        )
        case(f"empty-{d}", lambda g, dt=dt, sz=sz: _empty(dt, sz))
        for a in ([7], [2, 11, 3], [5, -4, -2], [0.5, 3.1, 0.35], [3, 3, 1], [-2.5, 2]):
            case(f"arange-{d}-{a}", lambda g, dt=dt, a=a: _arange(dt, a))
    case(
        "full-overflow",
        lambda g: Call(
            "aten::full.out",
            [[3], 300, torch.zeros(3, dtype=U8), torch.zeros(3, dtype=U8)],
            error=True,
        ),
    )
    case(
        "full-f16-overflow",
        lambda g: Call(
            "aten::full.out",
            [[3], 1e6, torch.zeros(3, dtype=F16), torch.zeros(3, dtype=F16)],
            error=True,
        ),
    )
    case(
        "full-neg-size",
        lambda g: Call("aten::full.out", [[-1], 1, torch.zeros(3), torch.zeros(3)], error=True),
    )
    case(
        "fill-tensor-not-0dim",
        lambda g: Call(
            "aten::fill.Tensor_out",
            [torch.ones(3), torch.ones(1), torch.zeros(3), torch.zeros(3)],
            error=True,
        ),
    )
    case(
        "arange-bad-step",
        lambda g: Call(
            "aten::arange.start_out", [0, 5, -1, Out(torch.zeros(8)), torch.zeros(8)], error=True
        ),
    )
    case(
        "arange-zero-step",
        lambda g: Call(
            "aten::arange.start_out", [0, 5, 0, Out(torch.zeros(8)), torch.zeros(8)], error=True
        ),
    )


def _empty(dt: torch.dtype, sz: list[int]) -> Call:
    o = (
        Out(torch.zeros([s + 2 for s in sz] if sz else [], dtype=dt))
        if sz
        else torch.zeros((), dtype=dt)
    )
    call = Call("aten::empty.out", [sz, None, o, ret(o)])
    call.expect = [(o, torch.zeros(sz, dtype=dt))]  # only the shape is checked (see run)
    return call


def _arange(dt: torch.dtype, a: list[Any]) -> Call:
    if len(a) == 1:
        ref = torch_or_none(lambda: torch.arange(a[0], dtype=dt))
        op, pre = "aten::arange.out", [a[0]]
    else:
        a3 = a + [1] if len(a) == 2 else a
        ref = torch_or_none(lambda: torch.arange(*a3, dtype=dt))
        op, pre = "aten::arange.start_out", a3
    o = Out(torch.zeros(64, dtype=dt))
    if ref is None:
        return Call(op, pre + [o, o.t], error=True)
    return Call(op, pre + [o, o.t], [(o, ref)])


_creation_cases()


def _random(g: torch.Generator, dt: torch.dtype, normal: bool) -> Call:
    o = torch.zeros(64, 64, dtype=dt)
    return Call(
        "aten::randn.out" if normal else "aten::rand.out", [[64, 64], o, o], [(o, torch.empty(0))]
    )


for _dt in FLOATS:
    case(f"rand-{dname(_dt)}", lambda g, dt=_dt: _random(g, dt, False))
    case(f"randn-{dname(_dt)}", lambda g, dt=_dt: _random(g, dt, True))
case(
    "rand-int",
    lambda g: Call(
        "aten::rand.out", [[3], torch.zeros(3, dtype=I32), torch.zeros(3, dtype=I32)], error=True
    ),
)


# -- copies -----------------------------------------------------------------------------------
COPY_SHAPES = [
    ((2, 3, 4, 5), "c", "cl"),
    ((2, 3, 4, 5), "cl", "c"),
    ((3, 5), "t", "c"),
    ((), "c", "c"),
    ((0, 3), "c", "d"),
    ((4, 6), "s", "d"),
]


def _copy_cases() -> None:
    for i, dt in enumerate(ALL):
        d = dname(dt)
        shape, lin, lout = COPY_SHAPES[i % len(COPY_SHAPES)]
        for op in ("clone", "detach_copy", "lift_fresh_copy", "alias_copy", "_conj_physical"):
            extra = [None] if op == "clone" else []
            case(
                f"{op}-{d}",
                lambda g, op=op, dt=dt, extra=extra, shape=shape, lin=lin, lout=lout: (
                    lambda x: single(f"aten::{op}.out", [x] + extra, lambda: x.clone(), style=lout)
                )(with_specials(rnd(g, shape, dt, -5, 5, lin))),
            )
        for j, dt2 in enumerate(ALL):
            sh, li, lo = COPY_SHAPES[(i + j) % len(COPY_SHAPES)]
            case(
                f"_to_copy-{d}-{dname(dt2)}",
                lambda g, dt=dt, dt2=dt2, sh=sh, li=li, lo=lo: (
                    lambda x: single(
                        "aten::_to_copy.out", [x, False, None], lambda: x.to(dt2), style=lo
                    )
                )(rnd(g, sh, dt, -100 if dt2 != U8 else 0, 100, li)),
            )
        case(f"copy-{d}", lambda g, dt=dt: _copy_out(g, dt))
        case(f"copy_-{d}", lambda g, dt=dt: _copy_inplace(g, dt))
        case(f"to_dim_order-{d}", lambda g, dt=dt: _to_dim_order(g, dt, F32, "_to_dim_order_copy"))
        case(f"clone_dim_order-{d}", lambda g, dt=dt: _to_dim_order(g, dt, dt, "_clone_dim_order"))
    case(
        "clone-dtype-mismatch",
        lambda g: Call(
            "aten::clone.out",
            [torch.ones(3), None, torch.zeros(3, dtype=F64), torch.zeros(3, dtype=F64)],
            error=True,
        ),
    )
    case(
        "to_dim_order-wrong-order",
        lambda g: Call(
            "dim_order_ops::_to_dim_order_copy.out",
            [
                torch.ones(2, 3, 4, 5),
                False,
                [0, 2, 3, 1],
                torch.zeros(2, 3, 4, 5),
                torch.zeros(2, 3, 4, 5),
            ],
            error=True,
        ),
    )
    case("empty_dim_order", lambda g: _empty_dim_order())


def _copy_out(g: torch.Generator, dt: torch.dtype) -> Call:
    x = rnd(g, (2, 3, 4), dt)
    src = rnd(g, (3, 1), F64 if dt.is_floating_point else I64, -5, 5)
    return single("aten::copy.out", [x, src, False], lambda: A.copy.default(x, src), style="d")


def _copy_inplace(g: torch.Generator, dt: torch.dtype) -> Call:
    x = rnd(g, (2, 3, 4, 5), dt, layout="cl")
    src = rnd(g, (4, 1), I32 if dt != BOOL else BOOL, 0, 9)
    ref = x.clone().copy_(src)
    return Call("aten::copy_", [x, src, False, x], [(x, ref)])


def _to_dim_order(g: torch.Generator, dt: torch.dtype, dt2: torch.dtype, op: str) -> Call:
    x = rnd(g, (2, 3, 4, 5), dt, 0, 9)
    o = torch.zeros(2, 3, 4, 5, dtype=dt2).contiguous(memory_format=torch.channels_last)
    return Call(f"dim_order_ops::{op}.out", [x, False, [0, 2, 3, 1], o, o], [(o, x.to(dt2))])


def _empty_dim_order() -> Call:
    o = torch.zeros(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    return Call(
        "dim_order_ops::_empty_dim_order.out",
        [[2, 3, 4, 5], [0, 2, 3, 1], o, o],
        [(o, torch.zeros(2, 3, 4, 5))],
    )


_copy_cases()


def _dropout(g: torch.Generator, dt: torch.dtype, p: float, train: Any) -> Call:
    x = rnd(g, (8, 16), dt, 0.5, 2)
    o, m = torch.zeros(8, 16, dtype=dt), torch.zeros(8, 16, dtype=BOOL)
    c = Call("aten::native_dropout.out", [x, p, train, o, m, [o, m]])
    c.expect = [(o, x), (m, torch.tensor([p, float(train is not False)]))]
    return c


for _dt in FLOATS:
    for _p, _train in ((0.5, False), (0.5, True), (0.0, None), (1.0, True), (0.25, None)):
        case(
            f"native_dropout-{dname(_dt)}-{_p}-{_train}",
            lambda g, dt=_dt, p=_p, t=_train: _dropout(g, dt, p, t),
        )


@pytest.mark.parametrize("name,build", CASES, ids=CASES.ids())
def test_kernel(name: str, build: Builder) -> None:
    run_case(name, build)


# The files of the group: every kernel of ops_elementwise.def must be covered by one of them.
GROUP = [
    "test_kernels_elementwise_unary",
    "test_kernels_elementwise_binary",
    "test_kernels_elementwise_reduce",
    "test_kernels_elementwise_create",
]


def test_every_registered_kernel_is_covered() -> None:
    """Each kernel of ops_elementwise.def appears in at least one non-error case."""
    import re
    from pathlib import Path

    text = (
        Path(__file__).resolve().parents[3] / "kernels/portable/ops_elementwise.def"
    ).read_text()
    names = set(re.findall(r'^EM_OP\("([^"]+)"', text, re.M))
    covered = set()
    for name, build in gather(GROUP):
        call = build(seeded(name))
        if not call.error:
            covered.add(call.op)
    assert names - covered == set()


@pytest.mark.parametrize(
    "src,dst", [(F32, F16), (F16, F32), (F32, torch.bfloat16), (torch.bfloat16, F32)]
)
def test_to_copy_dense_float_casts_are_exact(src: torch.dtype, dst: torch.dtype) -> None:
    # The dense same-layout casts between f32 and the 16-bit floats (an f16 KV cache's updates)
    # give torch's bits exactly: ties to even, subnormals, overflow to inf, inf and NaN.
    from ember._lib import call_kernel

    g = torch.Generator().manual_seed(5)
    x = torch.randn(7, 333, generator=g) * torch.logspace(-9, 5, 333)
    f16 = [65504.0, 65520.0, 65519.99, 2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-14 * 1.0009765625]
    specials = [math.inf, -math.inf, math.nan, -0.0, 0.0, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11]
    x.view(-1)[: len(f16 + specials)] = torch.tensor(f16 + specials)
    x = x.to(src)
    out = torch.empty(x.shape, dtype=dst)
    call_kernel("aten::_to_copy.out", [x, False, None, out, out])
    want = x.to(dst)
    nan = want.isnan()
    assert torch.equal(out.isnan(), nan)  # (torch's NaN bits differ by path: not compared)
    assert torch.equal(out[~nan], want[~nan]) and torch.equal(
        out.signbit()[~nan], want.signbit()[~nan]
    )
