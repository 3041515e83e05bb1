"""Elementwise kernels (kernels/portable/ops_elementwise.def) against eager PyTorch:
binary ops (broadcasting, type promotion, scalars), where, masked_fill.

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_ew_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_elementwise_binary.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from kernel_cases import CaseList
from kernels_ew_common import (
    ALL,
    BCAST,
    BF16,
    BOOL,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    STYLES,
    U8,
    UNARY_SHAPES,
    A,
    Builder,
    Call,
    check,
    dname,
    out_for,
    ret,
    rnd,
    run_case,
    single,
    torch_or_none,
    with_specials,
)

from ember._lib import Out, call_kernel

CASES = CaseList()
case = CASES.add


# -- binary ops -----------------------------------------------------------------------------
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


def _cmp_ties(name: str, shape_b: tuple[int, ...], scalar: bool) -> Builder:
    """f32 comparisons at ties, signed zeros, infinities and NaN (the dense f32 loop: one
    operand the same shape, one element, or a Scalar), 67 elements (no multiple of a vector)."""

    def build(g: torch.Generator) -> Call:
        vals = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, float("nan"), float("inf"), -float("inf")])
        a = vals[torch.randint(0, 8, (67,), generator=g)]
        if scalar:
            return single(
                f"aten::{name}.Scalar_out", [a, 0.5], lambda: getattr(A, name).Scalar(a, 0.5)
            )
        b = vals[torch.randint(0, 8, shape_b, generator=g)]
        return single(f"aten::{name}.Tensor_out", [a, b], lambda: getattr(A, name).Tensor(a, b))

    return build


for _c in ("eq", "ne", "lt", "le", "gt", "ge"):
    case(f"{_c}-f32-ties-same", _cmp_ties(_c, (67,), False))
    case(f"{_c}-f32-ties-one", _cmp_ties(_c, (1,), False))
    case(f"{_c}-f32-ties-scalar", _cmp_ties(_c, (), True))


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("op", ["eq", "ge", "lt", "fmod", "remainder"])
def test_scalar_is_cast_to_reduced_common_dtype(op: str, dtype: torch.dtype) -> None:
    """Comparisons, fmod and remainder see a Scalar cast to the f16/bf16 common dtype."""
    x = torch.tensor([0.1, 1.0, 0.2, -0.3], dtype=dtype)
    fn = getattr(A, op).Scalar
    ref = fn(x, 0.1)
    o = torch.zeros_like(ref)
    call_kernel(f"aten::{op}.Scalar_out", [x, 0.1, o, o])
    check(op, o, ref, 1.0)


@pytest.mark.parametrize("name,build", CASES, ids=CASES.ids())
def test_kernel(name: str, build: Builder) -> None:
    run_case(name, build)
