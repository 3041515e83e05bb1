"""Elementwise kernels (kernels/portable/ops_elementwise.def) against eager PyTorch:
unary ops and activations (and large loops on a thread pool).

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_ew_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_elementwise_unary.py
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from kernel_cases import CaseList
from kernels_ew_common import (
    ALL,
    BCAST,
    F16,
    F32,
    F64,
    I32,
    STYLES,
    UNARY_SHAPES,
    A,
    Builder,
    Call,
    check,
    dname,
    rnd,
    run_case,
    single,
    with_specials,
)

CASES = CaseList()
case = CASES.add


# -- unary ops --------------------------------------------------------------------------------


# name, eager op, value range
FLOAT_UNARY = [
    ("acos", A.acos.default, -0.95, 0.95),
    ("acosh", A.acosh.default, 1.1, 5.0),
    ("asin", A.asin.default, -0.95, 0.95),
    ("asinh", A.asinh.default, -3.0, 3.0),
    ("atan", A.atan.default, -3.0, 3.0),
    ("atanh", A.atanh.default, -0.9, 0.9),
    ("cos", A.cos.default, -3.0, 3.0),
    ("cosh", A.cosh.default, -3.0, 3.0),
    ("sin", A.sin.default, -3.0, 3.0),
    ("sinh", A.sinh.default, -3.0, 3.0),
    ("tan", A.tan.default, -1.2, 1.2),
    ("erf", A.erf.default, -2.5, 2.5),
    ("exp", A.exp.default, -4.0, 4.0),
    ("expm1", A.expm1.default, -3.0, 3.0),
    ("log", A.log.default, 0.05, 10.0),
    ("log10", A.log10.default, 0.05, 10.0),
    ("log1p", A.log1p.default, -0.9, 10.0),
    ("log2", A.log2.default, 0.05, 10.0),
    ("sqrt", A.sqrt.default, 0.0, 10.0),
    ("rsqrt", A.rsqrt.default, 0.05, 10.0),
    ("reciprocal", A.reciprocal.default, 0.25, 4.0),
    ("sigmoid", A.sigmoid.default, -6.0, 6.0),
    ("tanh", A.tanh.default, -3.0, 3.0),
    ("silu", A.silu.default, -5.0, 5.0),
    ("hardswish", A.hardswish.default, -5.0, 5.0),
    ("hardsigmoid", A.hardsigmoid.default, -5.0, 5.0),
    ("relu", A.relu.default, -3.0, 3.0),
    ("abs", A.abs.default, -5.0, 5.0),
    ("neg", A.neg.default, -5.0, 5.0),
    ("sign", A.sign.default, -3.0, 3.0),
    ("ceil", A.ceil.default, -5.0, 5.0),
    ("floor", A.floor.default, -5.0, 5.0),
    ("round", A.round.default, -5.0, 5.0),
    ("trunc", A.trunc.default, -5.0, 5.0),
    ("isinf", A.isinf.default, -5.0, 5.0),
    ("isnan", A.isnan.default, -5.0, 5.0),
    ("bitwise_not", A.bitwise_not.default, -50.0, 50.0),
    ("logical_not", A.logical_not.default, -2.0, 2.0),
    ("_conj_physical", A._conj_physical.default, -5.0, 5.0),
    ("exp2", A.exp2.default, -4.0, 4.0),
    ("erfc", A.erfc.default, -2.0, 2.0),
    ("lgamma", A.lgamma.default, 0.1, 5.0),
    ("sinc", A.sinc.default, -3.0, 3.0),
    ("frac", A.frac.default, -5.0, 5.0),
    ("sgn", A.sgn.default, -3.0, 3.0),
    ("isposinf", A.isposinf.default, -5.0, 5.0),
    ("isneginf", A.isneginf.default, -5.0, 5.0),
    ("signbit", A.signbit.default, -5.0, 5.0),
    ("mish", A.mish.default, -5.0, 5.0),
]


def _unary_case(name: str, fn: Any, lo: float, hi: float, dt: torch.dtype, si: int) -> None:
    shape, layout = UNARY_SHAPES[si % len(UNARY_SHAPES)]

    def build(g: torch.Generator) -> Call:
        x = rnd(g, shape, dt, lo, hi, layout)
        if name in (
            "isinf",
            "isnan",
            "relu",
            "abs",
            "neg",
            "sign",
            "sigmoid",
            "exp",
            "round",
            "isposinf",
            "isneginf",
            "signbit",
            "sgn",
            "frac",
        ):
            x = with_specials(x)
        if name == "round" and dt.is_floating_point:
            x = (x * 2).round() / 2 if x.numel() < 8 else x
        return single(f"aten::{name}.out", [x], lambda: fn(x), style=STYLES[si % 4], err_dtype=dt)

    case(f"{name}-{dname(dt)}-{si}", build)


for _name, _fn, _lo, _hi in FLOAT_UNARY:
    for _i, _dt in enumerate(ALL):
        _unary_case(_name, _fn, _lo, _hi, _dt, _i)
    for _si in range(1, len(UNARY_SHAPES)):
        _unary_case(_name, _fn, _lo, _hi, F32, _si + 10)


def _round_halves(g: torch.Generator) -> Call:
    x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, 3.7], dtype=F32)
    return single("aten::round.out", [x], lambda: torch.round(x))


case("round-halves", _round_halves)


# -- activations with parameters ------------------------------------------------------------
def _act_cases() -> None:
    for i, dt in enumerate(ALL):
        shape, layout = UNARY_SHAPES[i % len(UNARY_SHAPES)]
        st = STYLES[i % 4]

        mk = _maker(shape, dt, layout)

        d = dname(dt)
        case(
            f"leaky_relu-{d}",
            lambda g, st=st, mk=mk: (
                lambda x: single(
                    "aten::leaky_relu.out", [x, 0.2], lambda: A.leaky_relu.default(x, 0.2), style=st
                )
            )(mk(g)),
        )
        case(
            f"elu-{d}",
            lambda g, st=st, mk=mk: (
                lambda x: single(
                    "aten::elu.out",
                    [x, 1.5, 0.7, 1.3],
                    lambda: A.elu.default(x, 1.5, 0.7, 1.3),
                    style=st,
                )
            )(mk(g)),
        )
        for ap in ("none", "tanh"):
            case(f"gelu-{ap}-{d}", lambda g, st=st, mk=mk, ap=ap: _gelu(mk(g), ap, st))
        case(
            f"hardtanh-{d}",
            lambda g, st=st, mk=mk: (
                lambda x: single(
                    "aten::hardtanh.out",
                    [x, -1.5, 2.5],
                    lambda: A.hardtanh.default(x, -1.5, 2.5),
                    style=st,
                )
            )(mk(g)),
        )
        case(
            f"logit-eps-{d}",
            lambda g, st=st, mk=mk: (
                lambda x: single(
                    "aten::logit.out", [x, 0.1], lambda: A.logit.default(x, 0.1), style=st
                )
            )(mk(g, 0.0, 1.0)),
        )
        case(
            f"logit-none-{d}",
            lambda g, st=st, mk=mk: (
                lambda x: single("aten::logit.out", [x, None], lambda: A.logit.default(x), style=st)
            )(mk(g, 0.05, 0.95)),
        )
        for lo, hi in ((-1, 2), (None, 1.5), (0.5, None), (2, -1), (-300, 300)):
            case(
                f"clamp-{lo}-{hi}-{d}",
                lambda g, st=st, mk=mk, lo=lo, hi=hi, dt=dt: (
                    lambda x: single(
                        "aten::clamp.out",
                        [x, lo, hi],
                        lambda: A.clamp.default(x, lo, hi),
                        style=st,
                        err_dtype=dt,
                    )
                )(with_specials(mk(g))),
            )
        case(f"clamp-tensor-{d}", lambda g, mk=mk: _clamp_t(g, mk(g)))
        case(f"glu-{d}", lambda g, dt=dt: _glu(g, dt))


def _maker(shape: tuple[int, ...], dt: torch.dtype, layout: str) -> Callable[..., torch.Tensor]:
    def mk(g: torch.Generator, lo: float = -4.0, hi: float = 4.0) -> torch.Tensor:
        return rnd(g, shape, dt, lo, hi, layout)

    return mk


def _gelu(x: torch.Tensor, ap: str, st: str) -> Call:
    return single("aten::gelu.out", [x, ap], lambda: A.gelu.default(x, approximate=ap), style=st)


def _clamp_t(g: torch.Generator, x: torch.Tensor) -> Call:
    lo = rnd(g, x.shape[-1:] if x.dim() else (), F32, -2, 0)
    hi = rnd(g, (1,) + tuple(x.shape[-1:]) if x.dim() else (), I32, 0, 2)
    return single(
        "aten::clamp.Tensor_out", [x, lo, hi], lambda: A.clamp.Tensor(x, lo, hi), err_dtype=x.dtype
    )


def _glu(g: torch.Generator, dt: torch.dtype) -> Call:
    x = rnd(g, (2, 6, 4, 3), dt, layout="cl")
    return single("aten::glu.out", [x, 1], lambda: A.glu.default(x, 1), style="cl", err_dtype=dt)


_act_cases()
case(
    "clamp-none-none",
    lambda g: single("aten::clamp.out", [rnd(g, (3,), F32), None, None], lambda: None),
)
case("glu-odd", lambda g: single("aten::glu.out", [rnd(g, (2, 5), F32), -1], lambda: None))
case(
    "glu-negdim",
    lambda g: (lambda x: single("aten::glu.out", [x, -2], lambda: A.glu.default(x, -2)))(
        rnd(g, (4, 3), F64)
    ),
)
case(
    "gelu-bad-mode",
    lambda g: (lambda x: Call("aten::gelu.out", [x, "fast", x.clone(), x.clone()], error=True))(
        rnd(g, (3,), F32)
    ),
)


def _extra_cases() -> None:
    for i, dt in enumerate(ALL):
        d = dname(dt)
        shape, layout = UNARY_SHAPES[i % len(UNARY_SHAPES)]
        mk = _maker(shape, dt, layout)
        case(
            f"softplus-{d}",
            lambda g, mk=mk: (
                lambda x: single(
                    "aten::softplus.out", [x, 2, 3.0], lambda: A.softplus.default(x, 2, 3.0)
                )
            )(mk(g)),
        )
        for nan, pos, neg in ((None, None, None), (1.5, 100.0, -7.0)):
            case(
                f"nan_to_num-{nan}-{d}",
                lambda g, mk=mk, a=(nan, pos, neg): (
                    lambda x: single(
                        "aten::nan_to_num.out", [x, *a], lambda: A.nan_to_num.default(x, *a)
                    )
                )(with_specials(mk(g))),
            )
        for dec in (0, 2, -1):
            case(
                f"round-decimals-{dec}-{d}",
                lambda g, mk=mk, dec=dec, dt=dt: (
                    lambda x: single(
                        "aten::round.decimals_out",
                        [x, dec],
                        lambda: A.round.decimals(x, decimals=dec),
                        err_dtype=dt,
                    )
                )(mk(g, -300, 300)),
            )
        for which in ("min", "max"):
            op = getattr(A, f"clamp_{which}")
            case(
                f"clamp_{which}-{d}",
                lambda g, mk=mk, op=op, which=which, dt=dt: (
                    lambda x: single(
                        f"aten::clamp_{which}.out", [x, 1], lambda: op.default(x, 1), err_dtype=dt
                    )
                )(with_specials(mk(g))),
            )
            case(
                f"clamp_{which}-tensor-{d}",
                lambda g, mk=mk, op=op, which=which, dt=dt: (
                    lambda x, b: single(
                        f"aten::clamp_{which}.Tensor_out",
                        [x, b],
                        lambda: op.Tensor(x, b),
                        err_dtype=dt,
                    )
                )(mk(g), rnd(g, (1,), F32, -1, 1)),
            )
        for tname, fn in (("addcmul", A.addcmul.default), ("addcdiv", A.addcdiv.default)):
            case(
                f"{tname}-{d}", lambda g, dt=dt, i=i, tname=tname, fn=fn: _addc(g, dt, i, tname, fn)
            )
        case(
            f"lerp-scalar-{d}",
            lambda g, mk=mk, dt=dt: (
                lambda a, b: single(
                    "aten::lerp.Scalar_out",
                    [a, b, 0.3],
                    lambda: A.lerp.Scalar(a, b, 0.3),
                    err_dtype=dt,
                )
            )(mk(g), mk(g)),
        )
        case(f"lerp-tensor-{d}", lambda g, dt=dt: _lerp_t(g, dt))


def _addc(g: torch.Generator, dt: torch.dtype, i: int, tname: str, fn: Any) -> Call:
    sa, sb, la, lb = BCAST[i % len(BCAST)]
    a = rnd(g, sa, dt, -3, 3, la)
    b = rnd(g, sb, dt, -3, 3, lb)
    c = rnd(g, sb, dt, 1, 3, lb)
    v = 0.5 if dt.is_floating_point else 2
    return single(
        f"aten::{tname}.out",
        [a, b, c, v],
        lambda: fn(a, b, c, value=v),
        style=STYLES[i % 4],
        err_dtype=dt,
    )


def _lerp_t(g: torch.Generator, dt: torch.dtype) -> Call:
    a = rnd(g, (2, 3, 4), dt)
    b = rnd(g, (3, 4), dt)
    w = rnd(g, (4,), dt, -0.5, 1.5)
    return single("aten::lerp.Tensor_out", [a, b, w], lambda: A.lerp.Tensor(a, b, w), err_dtype=dt)


_extra_cases()


def _call_with_pool(name: str, args: list[Any], n_threads: int) -> None:
    """call_kernel with a real thread pool in the kernel context (ew_map splits large loops)."""
    import ctypes

    from ember import _lib

    L = _lib.lib()
    L.em_threadpool_create.restype = ctypes.c_void_p
    L.em_threadpool_create.argtypes = [ctypes.c_int]
    L.em_threadpool_destroy.argtypes = [ctypes.c_void_p]
    pool = L.em_threadpool_create(n_threads)
    try:
        vb = _lib.ValueBuilder()
        evs = [vb.value(a) for a in args]
        argv = (ctypes.POINTER(_lib.EmEValue) * len(evs))(*[ctypes.pointer(v) for v in evs])
        buf = ctypes.create_string_buffer(1 << 16)
        temp = _lib.EmAllocator()
        L.em_allocator_init(ctypes.byref(temp), buf, 1 << 16)
        ctx = _lib.EmKernelCtx()
        ctx.temp = ctypes.pointer(temp)
        ctx.pool = pool
        ctx.op_name = name.encode()
        fn = _lib.KERNEL_FN(L.em_find_kernel(name.encode()).contents.fn)
        st = fn(ctypes.byref(ctx), argv)
        assert st == 0, _lib.status_message(st)
    finally:
        L.em_threadpool_destroy(pool)


@pytest.mark.parametrize("layout", ["c", "t", "cl"])
@pytest.mark.parametrize("dtype", [F32, F16, F64])
def test_parallel_loops_match_eager(layout: str, dtype: torch.dtype) -> None:
    """Large float loops run in chunks on a pool; each chunk must start at the right element."""
    g = torch.Generator().manual_seed(7)
    shape = (4, 33, 37, 29) if layout == "cl" else (131, 517)
    x = rnd(g, shape, dtype, -3, 3, layout)
    y = rnd(g, shape[-1:], dtype, -3, 3)
    o = torch.zeros(shape, dtype=dtype)
    _call_with_pool("aten::gelu.out", [x, "tanh", o, o], 2)
    check("gelu", o, A.gelu.default(x, approximate="tanh"), 1.0)
    o2 = torch.zeros(shape, dtype=dtype)
    _call_with_pool("aten::add.out", [x, y, 0.5, o2, o2], 2)
    check("add", o2, A.add.Tensor(x, y, alpha=0.5), 1.0)


@pytest.mark.parametrize("name,build", CASES, ids=CASES.ids())
def test_kernel(name: str, build: Builder) -> None:
    run_case(name, build)
