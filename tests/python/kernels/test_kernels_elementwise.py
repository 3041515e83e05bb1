"""Elementwise, reduction, creation and copy kernels (kernels/portable/ops_elementwise.def)
against eager PyTorch.

One table (CASES) drives one parametrized test. A case is a name plus a builder that,
given a seeded generator, returns a ``Call``: the kernel name, its boxed arguments in the
runtime's convention (schema args, out= args, then the return value(s)), and the expected
contents of every out tensor. Where eager PyTorch itself rejects the inputs (a dtype the op
does not support, shapes that do not broadcast, ...), the case expects the kernel to raise
RuntimeError too, so every dtype of every op is either compared or checked to fail cleanly.

Integer and bool results must match exactly; floating results within TOL for their dtype
(the kernels compute in double and round once, eager computes in float: a few ulps apart).
Inputs cover every dtype (u8, i8, i16, i32, i64, f16, bf16, f32, f64, bool), empty and
0-dim tensors, broadcasting, type promotion (incl. 0-dim tensors and Python scalars), and
non-contiguous layouts (channels-last, transposed, sliced) for inputs and outs; some outs are
DYNAMIC_BOUND with a larger capacity so that the kernel must resize them.

Run: PYTHONPATH=python .venv/bin/python -m pytest tests/python/kernels/test_kernels_elementwise.py
"""

from __future__ import annotations

import math
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
INTS = [U8, I8, I16, I32, I64]
FLOATS = [F16, BF16, F32, F64]

# (rtol, atol) per floating result dtype.
TOL = {F32: (2e-5, 2e-6), F64: (1e-10, 1e-12), F16: (2e-3, 2e-3), BF16: (1.6e-2, 1.6e-2)}


@dataclass
class Call:
    op: str
    args: list[Any]
    expect: list[tuple[Any, torch.Tensor]] = field(default_factory=list)
    error: bool = False
    scale: float = 1.0  # multiplies TOL (ops that amplify rounding, e.g. reductions)


Builder = Callable[[torch.Generator], Call]
CASES: list[tuple[str, Builder]] = []


def case(name: str, fn: Builder) -> None:
    CASES.append((name, fn))


# -- tensors ------------------------------------------------------------------------------------
def dname(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def rnd(
    g: torch.Generator,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    lo: float = -3.0,
    hi: float = 3.0,
    layout: str = "c",
) -> torch.Tensor:
    """Seeded values in [lo, hi] (integers: rounded, u8 clipped at 0) with layout
    c (contiguous), cl (channels-last, 4-D), t (transposed view) or s (sliced view)."""
    shape = tuple(shape)
    base = shape
    if layout == "s" and shape:
        base = shape[:-1] + (shape[-1] * 2,)
    elif layout == "t" and len(shape) >= 2:
        base = shape[::-1]
    v = torch.rand(base, generator=g, dtype=torch.float64) * (hi - lo) + lo
    if dtype == BOOL:
        t = torch.rand(base, generator=g) < 0.5
    elif dtype.is_floating_point:
        t = v.to(dtype)
    else:
        lo_i = 0 if dtype == U8 else math.ceil(lo)
        t = v.round().clamp(min=lo_i).to(dtype)
    if layout == "s" and shape:
        t = t[..., ::2]
    elif layout == "t" and len(shape) >= 2:
        t = t.permute(*reversed(range(len(shape))))
    elif layout == "cl" and len(shape) == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def with_specials(t: torch.Tensor) -> torch.Tensor:
    """Puts nan, inf, -inf and -0.0 at the first elements of a floating tensor."""
    if not t.dtype.is_floating_point or t.numel() < 4:
        return t
    flat = t.clone().reshape(-1)
    flat[:4] = torch.tensor([math.nan, math.inf, -math.inf, -0.0], dtype=t.dtype)
    return flat.reshape(t.shape)


def out_for(ref: torch.Tensor, style: str) -> Any:
    """An out tensor shaped like ref: static contiguous (c), channels-last (cl, 4-D only)
    or DYNAMIC_BOUND with spare capacity (d, rank >= 1)."""
    if style == "cl" and ref.dim() == 4:
        return torch.full_like(ref, 0).contiguous(memory_format=torch.channels_last)
    if style == "d" and ref.dim() >= 1:
        big = (ref.shape[0] + 3,) + tuple(ref.shape[1:])
        return Out(torch.zeros(big, dtype=ref.dtype))
    return torch.zeros(ref.shape, dtype=ref.dtype)


def ret(o: Any) -> Any:
    """The trailing return value for an out argument (the same tensor)."""
    return o.t if isinstance(o, Out) else o


def torch_or_none(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except (RuntimeError, TypeError, ValueError, ZeroDivisionError, IndexError, OverflowError):
        return None


def single(
    op: str,
    pre: list[Any],
    ref_fn: Callable[[], Any],
    style: str = "c",
    err_dtype: torch.dtype = F32,
    err_shape: tuple[int, ...] = (2, 3),
    scale: float = 1.0,
) -> Call:
    """A one-out call [*pre, out, out]; expects an error if eager PyTorch raises."""
    ref = torch_or_none(ref_fn)
    if ref is None:
        o = torch.zeros(err_shape, dtype=err_dtype)
        return Call(op, pre + [o, o], error=True)
    o = out_for(ref, style)
    return Call(op, pre + [o, ret(o)], [(o, ref)], scale=scale)


STYLES = ["c", "d", "cl", "c"]


# -- unary ops --------------------------------------------------------------------------------
UNARY_SHAPES = [((2, 3, 4), "c"), ((), "c"), ((0, 3), "c"), ((2, 3, 4, 5), "cl"), ((3, 5), "s")]

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


# -- binary ops -----------------------------------------------------------------------------
BCAST = [
    ((2, 3, 4), (2, 3, 4), "c", "c"),
    ((2, 1, 4), (3, 1), "c", "c"),
    ((), (2, 3), "c", "c"),
    ((0, 3), (1, 3), "c", "c"),
    ((2, 3, 4, 5), (2, 3, 4, 5), "cl", "cl"),
    ((2, 3, 4, 5), (5,), "cl", "c"),
    ((3, 5), (3, 5), "s", "t"),
]
MIXED = [
    (I32, F32),
    (U8, I8),
    (BOOL, I64),
    (I64, F16),
    (F16, BF16),
    (F32, F64),
    (U8, BOOL),
    (I16, I32),
]

# name, overloads (tensor-tensor, tensor-scalar), eager fn(a, b), value ranges (a, b), extras
BINARY = (
    [
        (
            "add",
            "out",
            "Scalar_out",
            lambda a, b: (
                A.add.Tensor(a, b, alpha=2)
                if not (
                    a.is_floating_point() or (isinstance(b, torch.Tensor) and b.is_floating_point())
                )
                else A.add.Tensor(a, b, alpha=0.5)
            ),
            (-5, 5),
            (-5, 5),
        ),
        ("sub", "out", "Scalar_out", lambda a, b: A.sub.Tensor(a, b), (-5, 5), (-5, 5)),
        ("mul", "out", "Scalar_out", lambda a, b: A.mul.Tensor(a, b), (-5, 5), (-5, 5)),
        ("div", "out", "Scalar_out", lambda a, b: A.div.Tensor(a, b), (-5, 5), (1, 4)),
        ("floor_divide", "out", None, lambda a, b: A.floor_divide.default(a, b), (-9, 9), (1, 4)),
        ("fmod", "Tensor_out", "Scalar_out", lambda a, b: A.fmod.Tensor(a, b), (-9, 9), (1, 4)),
        (
            "remainder",
            "Tensor_out",
            "Scalar_out",
            lambda a, b: A.remainder.Tensor(a, b),
            (-9, 9),
            (1, 4),
        ),
        (
            "pow",
            "Tensor_Tensor_out",
            "Tensor_Scalar_out",
            lambda a, b: A.pow.Tensor_Tensor(a, b),
            (0.2, 3),
            (0, 3),
        ),
        ("maximum", "out", None, lambda a, b: A.maximum.default(a, b), (-5, 5), (-5, 5)),
        ("minimum", "out", None, lambda a, b: A.minimum.default(a, b), (-5, 5), (-5, 5)),
        ("atan2", "out", None, lambda a, b: A.atan2.default(a, b), (-5, 5), (-5, 5)),
        (
            "bitwise_and",
            "Tensor_out",
            "Scalar_out",
            lambda a, b: A.bitwise_and.Tensor(a, b),
            (-60, 60),
            (-60, 60),
        ),
        (
            "bitwise_or",
            "Tensor_out",
            "Scalar_out",
            lambda a, b: A.bitwise_or.Tensor(a, b),
            (-60, 60),
            (-60, 60),
        ),
        (
            "bitwise_xor",
            "Tensor_out",
            "Scalar_out",
            lambda a, b: A.bitwise_xor.Tensor(a, b),
            (-60, 60),
            (-60, 60),
        ),
        (
            "bitwise_left_shift",
            "Tensor_out",
            "Tensor_Scalar_out",
            lambda a, b: A.bitwise_left_shift.Tensor(a, b),
            (-60, 60),
            (-2, 70),
        ),
        (
            "bitwise_right_shift",
            "Tensor_out",
            "Tensor_Scalar_out",
            lambda a, b: A.bitwise_right_shift.Tensor(a, b),
            (-60, 60),
            (-2, 70),
        ),
        ("logical_and", "out", None, lambda a, b: A.logical_and.default(a, b), (-1, 1), (-1, 1)),
        ("logical_or", "out", None, lambda a, b: A.logical_or.default(a, b), (-1, 1), (-1, 1)),
        ("logical_xor", "out", None, lambda a, b: A.logical_xor.default(a, b), (-1, 1), (-1, 1)),
    ]
    + [
        (
            cmp,
            "Tensor_out",
            "Scalar_out",
            (lambda c: lambda a, b: getattr(A, c).Tensor(a, b))(cmp),
            (-2, 2),
            (-2, 2),
        )
        for cmp in ("eq", "ne", "lt", "le", "gt", "ge")
    ]
    + [
        (
            fn,
            "out",
            None,
            (lambda f: lambda a, b: getattr(A, f).default(a, b))(fn),
            (-5, 5),
            (-5, 5),
        )
        for fn in ("fmax", "fmin", "hypot", "logaddexp")
    ]
    + [
        ("copysign", "out", None, lambda a, b: A.copysign.Tensor(a, b), (-5, 5), (-5, 5)),
    ]
    + [("xlogy", "OutTensor", None, lambda a, b: A.xlogy.Tensor(a, b), (-2, 3), (0, 4))]
)

SCALAR_FN = {
    "add": lambda a, s: A.add.Scalar(
        a, s, alpha=2 if not isinstance(s, float) and not a.is_floating_point() else 0.5
    ),
    "sub": lambda a, s: A.sub.Scalar(a, s),
    "mul": lambda a, s: A.mul.Scalar(a, s),
    "div": lambda a, s: A.div.Scalar(a, s),
    "fmod": lambda a, s: A.fmod.Scalar(a, s),
    "remainder": lambda a, s: A.remainder.Scalar(a, s),
    "pow": lambda a, s: A.pow.Tensor_Scalar(a, s),
    "bitwise_and": lambda a, s: A.bitwise_and.Scalar(a, s),
    "bitwise_or": lambda a, s: A.bitwise_or.Scalar(a, s),
    "bitwise_xor": lambda a, s: A.bitwise_xor.Scalar(a, s),
    "bitwise_left_shift": lambda a, s: A.bitwise_left_shift.Tensor_Scalar(a, s),
    "bitwise_right_shift": lambda a, s: A.bitwise_right_shift.Tensor_Scalar(a, s),
}
for _c in ("eq", "ne", "lt", "le", "gt", "ge"):
    SCALAR_FN[_c] = (lambda c: lambda a, s: getattr(A, c).Scalar(a, s))(_c)


def _alpha(name: str, a: torch.Tensor, b: Any) -> list[Any]:
    if name not in ("add", "sub"):
        return []
    if name == "sub":
        return [1]
    fl = (
        a.is_floating_point()
        or (isinstance(b, torch.Tensor) and b.is_floating_point())
        or (isinstance(b, float))
    )
    return [0.5 if fl else 2]


def _binary_case(spec: tuple, da: torch.dtype, db: torch.dtype, bi: int, tag: str) -> None:
    name, ov_t, _ov_s, fn, ra, rb = spec
    sa, sb, la, lb = BCAST[bi % len(BCAST)]

    def build(g: torch.Generator) -> Call:
        a = rnd(g, sa, da, ra[0], ra[1], la)
        b = rnd(g, sb, db, rb[0], rb[1], lb)
        if name in ("maximum", "minimum", "fmax", "fmin", "xlogy") and a.is_floating_point():
            a = with_specials(a)
        pre = [a, b]
        if name == "sub":
            return single(
                f"aten::sub.{ov_t}",
                pre + [1],
                lambda: A.sub.Tensor(a, b, alpha=1),
                style=STYLES[bi % 4],
            )
        if name == "add":
            al = _alpha(name, a, b)
            return single(
                f"aten::add.{ov_t}",
                pre + al,
                lambda: A.add.Tensor(a, b, alpha=al[0]),
                style=STYLES[bi % 4],
            )
        return single(f"aten::{name}.{ov_t}", pre, lambda: fn(a, b), style=STYLES[bi % 4])

    case(f"{name}-{tag}-{dname(da)}-{dname(db)}-{bi}", build)


def _scalar_case(spec: tuple, da: torch.dtype, s: Any, si: int) -> None:
    name, _ov_t, ov_s, _fn, ra, _rb = spec
    shape, layout = UNARY_SHAPES[si % len(UNARY_SHAPES)]

    def build(g: torch.Generator) -> Call:
        a = rnd(g, shape, da, ra[0], ra[1], layout)
        op = "rsub" if name == "rsub" else name
        if name in ("add", "sub"):
            al = _alpha(name, a, s)
            return single(
                f"aten::{op}.{ov_s}",
                [a, s] + al,
                lambda: getattr(A, op).Scalar(a, s, alpha=al[0]),
                style=STYLES[si % 4],
                err_dtype=da,
            )
        return single(
            f"aten::{op}.{ov_s}",
            [a, s],
            lambda: SCALAR_FN[name](a, s),
            style=STYLES[si % 4],
            err_dtype=da,
        )

    case(f"{name}-scalar-{dname(da)}-{s}-{si}", build)


for _spec in BINARY:
    for _i, _dt in enumerate(ALL):
        _binary_case(_spec, _dt, _dt, _i, "same")
    for _bi in range(len(BCAST)):
        _binary_case(_spec, F32, F32, _bi, "bcast")
    for _i, (_da, _db) in enumerate(MIXED):
        _binary_case(_spec, _da, _db, _i, "mixed")
    if _spec[2]:
        for _i, _dt in enumerate(ALL):
            _scalar_case(_spec, _dt, [2, 1.5, True, -3][_i % 4], _i)


def _zero_dim_promotion(name: str, da: torch.dtype, db: torch.dtype) -> Call:
    def build(g: torch.Generator) -> Call:
        a = rnd(g, (2, 3), da, 1, 4)
        b = rnd(g, (), db, 1, 4)
        return single(f"aten::{name}.out", [a, b], lambda: getattr(A, name).Tensor(a, b))

    return build


for _da, _db in [(F16, F32), (I32, F64), (U8, I64), (BF16, F64), (I8, BOOL)]:
    case(f"mul-0dim-{dname(_da)}-{dname(_db)}", _zero_dim_promotion("mul", _da, _db))
    case(f"div-0dim-{dname(_da)}-{dname(_db)}", _zero_dim_promotion("div", _da, _db))


# rsub, div rounding modes, pow.Scalar_out, where, masked_fill
def _rsub(g: torch.Generator, dt: torch.dtype, s: Any) -> Call:
    a = rnd(g, (2, 3), dt, -5, 5)
    al = 2 if not (dt.is_floating_point or isinstance(s, float)) else 0.5
    return single(
        "aten::rsub.Scalar_out", [a, s, al], lambda: A.rsub.Scalar(a, s, al), err_dtype=dt
    )


def _div_mode(
    g: torch.Generator, da: torch.dtype, db: torch.dtype, mode: str | None, scalar: bool, zero: bool
) -> Call:
    a = rnd(g, (3, 4), da, -9, 9)
    b: Any = 0 if (scalar and zero) else (-3 if scalar else rnd(g, (4,), db, 1, 4))
    if not scalar:
        b = torch.where(torch.arange(4) % 2 == 0, b, -b) if db != U8 and db != BOOL else b
        if zero:
            b = b.clone()
            b[1] = 0
    if scalar:
        return _div_mode_call(
            "aten::div.Scalar_mode_out",
            a,
            b,
            mode,
            lambda: A.div.Scalar_mode(a, b, rounding_mode=mode),
        )
    return _div_mode_call(
        "aten::div.out_mode", a, b, mode, lambda: A.div.Tensor_mode(a, b, rounding_mode=mode)
    )


def _div_mode_call(op: str, a: torch.Tensor, b: Any, mode: str | None, fn: Any) -> Call:
    ref = torch_or_none(fn)
    if ref is None:
        o = torch.zeros(a.shape, dtype=a.dtype)
        return Call(op, [a, b, mode, o, o], error=True)
    o = out_for(ref, "d")
    return Call(op, [a, b, mode, o, ret(o)], [(o, ref)])


for _dt in ALL:
    for _s in (2, 1.5):
        case(f"rsub-{dname(_dt)}-{_s}", lambda g, dt=_dt, s=_s: _rsub(g, dt, s))
    for _mode in (None, "trunc", "floor"):
        case(
            f"div-mode-{_mode}-{dname(_dt)}",
            lambda g, dt=_dt, m=_mode: _div_mode(g, dt, dt, m, False, False),
        )
        case(
            f"div-scalar-mode-{_mode}-{dname(_dt)}",
            lambda g, dt=_dt, m=_mode: _div_mode(g, dt, dt, m, True, False),
        )
for _dt in (I32, I64, U8, F32):
    for _mode in ("trunc", "floor"):
        case(
            f"div-mode-zero-{_mode}-{dname(_dt)}",
            lambda g, dt=_dt, m=_mode: _div_mode(g, dt, dt, m, False, True),
        )
        case(
            f"div-scalar-mode-zero-{_mode}-{dname(_dt)}",
            lambda g, dt=_dt, m=_mode: _div_mode(g, dt, dt, m, True, True),
        )
case(
    "div-mode-bad",
    lambda g: (
        lambda a: Call("aten::div.out_mode", [a, a, "round", a.clone(), a.clone()], error=True)
    )(rnd(g, (3,), F32)),
)
for _dt in (I32, I64):
    case(
        f"floor_divide-zero-{dname(_dt)}",
        lambda g, dt=_dt: single(
            "aten::floor_divide.out",
            [torch.ones(3, dtype=dt), torch.zeros(3, dtype=dt)],
            lambda: None,
        ),
    )
    case(
        f"remainder-zero-{dname(_dt)}",
        lambda g, dt=_dt: single(
            "aten::remainder.Tensor_out",
            [torch.ones(3, dtype=dt), torch.zeros(3, dtype=dt)],
            lambda: None,
        ),
    )
    case(
        f"fmod-zero-scalar-{dname(_dt)}",
        lambda g, dt=_dt: single(
            "aten::fmod.Scalar_out", [torch.ones(3, dtype=dt), 0], lambda: None
        ),
    )
case(
    "floor_divide-float-zero",
    lambda g: (
        lambda a, b: single("aten::floor_divide.out", [a, b], lambda: A.floor_divide.default(a, b))
    )(torch.tensor([1.0, -1.0, 0.0, 5.0]), torch.tensor([0.0, 0.0, 0.0, -0.0])),
)
case(
    "pow-int-negexp",
    lambda g: (
        lambda a: single("aten::pow.Tensor_Scalar_out", [a, -2], lambda: A.pow.Tensor_Scalar(a, -2))
    )(torch.tensor([1, 2, -1], dtype=I32)),
)
case(
    "pow-int-negexp-tensor",
    lambda g: (
        lambda a, b: single(
            "aten::pow.Tensor_Tensor_out", [a, b], lambda: A.pow.Tensor_Tensor(a, b)
        )
    )(torch.tensor([2, -1, 1, 0, -1, 3], dtype=I64), torch.tensor([-1, -3, -2, 0, -4, 5])),
)
for _dt in ALL:
    for _s in (2, 0.5, -1.5):
        case(
            f"pow-scalar-base-{dname(_dt)}-{_s}",
            lambda g, dt=_dt, s=_s: (
                lambda e: single(
                    "aten::pow.Scalar_out", [s, e], lambda: A.pow.Scalar(s, e), err_dtype=dt
                )
            )(rnd(g, (2, 3), dt, 0, 3)),
        )


def _where(g: torch.Generator, da: torch.dtype, db: torch.dtype, bi: int) -> Call:
    sa, sb, la, lb = BCAST[bi % len(BCAST)]
    c = rnd(g, sb, BOOL)
    a = rnd(g, sa, da, -5, 5, la)
    b = rnd(g, sb, db, -5, 5, lb)
    return single(
        "aten::where.self_out", [c, a, b], lambda: A.where.self(c, a, b), style=STYLES[bi % 4]
    )


for _i, _dt in enumerate(ALL):
    case(f"where-{dname(_dt)}", lambda g, dt=_dt, i=_i: _where(g, dt, dt, i))
for _i, (_da, _db) in enumerate(MIXED):
    case(f"where-mixed-{dname(_da)}-{dname(_db)}", lambda g, a=_da, b=_db, i=_i: _where(g, a, b, i))
case(
    "where-float-cond",
    lambda g: Call(
        "aten::where.self_out",
        [torch.ones(3), torch.ones(3), torch.ones(3), torch.ones(3), torch.ones(3)],
        error=True,
    ),
)


def _masked_fill(g: torch.Generator, dt: torch.dtype, v: Any, i: int) -> Call:
    shapes = [((2, 3), (2, 3)), ((2, 3), (3,)), ((3,), (2, 1)), ((), ()), ((0, 2), (2,))]
    sa, sm = shapes[i % len(shapes)]
    a = rnd(g, sa, dt, -5, 5)
    m = rnd(g, sm, BOOL)
    return single(
        "aten::masked_fill.Scalar_out",
        [a, m, v],
        lambda: A.masked_fill.Scalar(a, m, v),
        err_dtype=dt,
    )


for _i, _dt in enumerate(ALL):
    for _v in (2, -1.5, True):
        case(
            f"masked_fill-{dname(_dt)}-{_v}",
            lambda g, dt=_dt, v=_v, i=_i: _masked_fill(g, dt, v, i),
        )
case(
    "masked_fill-int-mask",
    lambda g: Call(
        "aten::masked_fill.Scalar_out",
        [torch.ones(3), torch.ones(3, dtype=I32), 1.0, torch.ones(3), torch.ones(3)],
        error=True,
    ),
)

# broadcast / out-shape / out-dtype errors
case(
    "add-nobcast",
    lambda g: single("aten::add.out", [rnd(g, (2, 3), F32), rnd(g, (4,), F32), 1], lambda: None),
)
case(
    "add-static-out-wrong-shape",
    lambda g: Call(
        "aten::add.out",
        [torch.ones(2, 3), torch.ones(2, 3), 1, torch.ones(3, 2), torch.ones(3, 2)],
        error=True,
    ),
)
case(
    "add-float-into-int-out",
    lambda g: Call(
        "aten::add.out",
        [
            torch.ones(2, 3),
            torch.ones(2, 3),
            1,
            torch.ones(2, 3, dtype=I32),
            torch.ones(2, 3, dtype=I32),
        ],
        error=True,
    ),
)
case(
    "add-int-float-alpha",
    lambda g: Call(
        "aten::add.out",
        [
            torch.ones(3, dtype=I32),
            torch.ones(3, dtype=I32),
            0.5,
            torch.ones(3, dtype=I32),
            torch.ones(3, dtype=I32),
        ],
        error=True,
    ),
)
case(
    "add-int-into-bool-out",
    lambda g: Call(
        "aten::add.out",
        [
            torch.ones(3, dtype=I32),
            torch.ones(3, dtype=I32),
            1,
            torch.ones(3, dtype=BOOL),
            torch.ones(3, dtype=BOOL),
        ],
        error=True,
    ),
)
case(
    "add-dyn-too-small",
    lambda g: (
        lambda o: Call("aten::add.out", [torch.ones(4, 3), torch.ones(4, 3), 1, o, o.t], error=True)
    )(Out(torch.zeros(2, 3))),
)
case(
    "mul-int-into-float-out",
    lambda g: (lambda a, o: Call("aten::mul.out", [a, a, o, o], [(o, (a * a).float())]))(
        torch.arange(6, dtype=I32).reshape(2, 3), torch.zeros(2, 3)
    ),
)
case(
    "eq-into-float-out",
    lambda g: (lambda a, b, o: Call("aten::eq.Tensor_out", [a, b, o, o], [(o, (a == b).float())]))(
        torch.tensor([1, 2, 3]), torch.tensor([1, 0, 3]), torch.zeros(3)
    ),
)
case(
    "add-wrong-kind",
    lambda g: Call(
        "aten::add.Scalar_out",
        [torch.ones(3), torch.ones(3), 1, torch.ones(3), torch.ones(3)],
        error=True,
    ),
)


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


# -- the test ---------------------------------------------------------------------------------
def _check(op: str, actual: torch.Tensor, expected: torch.Tensor, scale: float) -> None:
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.dtype.is_floating_point:
        rtol, atol = TOL[expected.dtype]
        torch.testing.assert_close(
            actual, expected, rtol=rtol * scale, atol=atol * scale, equal_nan=True
        )
    else:
        assert torch.equal(actual, expected), f"{op}: {actual} != {expected}"


def _check_special(call: Call) -> bool:
    """Checks ops whose result is not a deterministic function of the inputs."""
    if call.op in ("aten::rand.out", "aten::randn.out"):
        o = call.expect[0][0]
        x = o.double()
        if call.op == "aten::rand.out":
            assert x.min() >= 0 and x.max() < 1 and abs(x.mean() - 0.5) < 0.05
        else:
            assert abs(x.mean()) < 0.1 and abs(x.std() - 1) < 0.1
        assert len(torch.unique(x)) > 100
        return True
    if call.op in ("aten::empty.out", "dim_order_ops::_empty_dim_order.out"):
        o, ref = call.expect[0]
        got = o.sizes if isinstance(o, Out) else list(o.shape)
        assert list(got) == list(ref.shape)
        return True
    if call.op == "aten::native_dropout.out":
        (o, x), (m, pt) = call.expect
        p, train = float(pt[0]), bool(pt[1])
        if not train:
            assert torch.equal(o, x) and bool(m.all())
            return True
        scale = 0.0 if p >= 1 else 1 / (1 - p)
        torch.testing.assert_close(
            o,
            torch.where(m, x * scale, torch.zeros_like(x)),
            rtol=TOL[x.dtype][0],
            atol=TOL[x.dtype][1],
        )
        kept = m.float().mean().item()
        assert abs(kept - (1 - p)) < 0.12
        return True
    return False


@pytest.mark.parametrize("name,build", CASES, ids=[c[0] for c in CASES])
def test_kernel(name: str, build: Builder) -> None:
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    call = build(g)
    if call.error:
        with pytest.raises(RuntimeError):
            call_kernel(call.op, call.args, temp_bytes=1 << 20)
        return
    call_kernel(call.op, call.args, temp_bytes=1 << 20)
    if _check_special(call):
        return
    for o, expected in call.expect:
        actual = o.view() if isinstance(o, Out) else o
        _check(call.op, actual, expected, call.scale)


def test_every_registered_kernel_is_covered() -> None:
    """Each kernel of ops_elementwise.def appears in at least one non-error case."""
    import re
    from pathlib import Path

    text = (
        Path(__file__).resolve().parents[3] / "kernels/portable/ops_elementwise.def"
    ).read_text()
    names = set(re.findall(r'^EM_OP\("([^"]+)"', text, re.M))
    covered = set()
    for name, build in CASES:
        call = build(torch.Generator().manual_seed(zlib.crc32(name.encode())))
        if not call.error:
            covered.add(call.op)
    assert names - covered == set()


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("op", ["eq", "ge", "lt", "fmod", "remainder"])
def test_scalar_is_cast_to_reduced_common_dtype(op: str, dtype: torch.dtype) -> None:
    """Comparisons, fmod and remainder see a Scalar cast to the f16/bf16 common dtype."""
    x = torch.tensor([0.1, 1.0, 0.2, -0.3], dtype=dtype)
    fn = getattr(A, op).Scalar
    ref = fn(x, 0.1)
    o = torch.zeros_like(ref)
    call_kernel(f"aten::{op}.Scalar_out", [x, 0.1, o, o])
    _check(op, o, ref, 1.0)


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
    _check("gelu", o, A.gelu.default(x, approximate="tanh"), 1.0)
    o2 = torch.zeros(shape, dtype=dtype)
    _call_with_pool("aten::add.out", [x, y, 0.5, o2, o2], 2)
    _check("add", o2, A.add.Tensor(x, y, alpha=0.5), 1.0)
