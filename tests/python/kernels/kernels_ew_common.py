"""Shared helpers of the elementwise, reduction, creation and copy kernel tests
(test_kernels_elementwise_*.py: kernels/portable/ops_elementwise.def against eager PyTorch).

Each test file holds one table (CASES, a kernel_cases.CaseList) that drives one parametrized
test. A case is a name plus a builder that, given a seeded generator, returns a ``Call``: the
kernel name, its boxed arguments in the runtime's convention (schema args, out= args, then the
return value(s)), and the expected contents of every out tensor. Where eager PyTorch itself
rejects the inputs (a dtype the op does not support, shapes that do not broadcast, ...), the
case expects the kernel to raise RuntimeError too, so every dtype of every op is either
compared or checked to fail cleanly.

Integer and bool results must match exactly; floating results within TOL for their dtype
(the kernels compute in double and round once, eager computes in float: a few ulps apart).
Inputs cover every dtype (u8, i8, i16, i32, i64, f16, bf16, f32, f64, bool), empty and
0-dim tensors, broadcasting, type promotion (incl. 0-dim tensors and Python scalars), and
non-contiguous layouts (channels-last, transposed, sliced) for inputs and outs; some outs are
DYNAMIC_BOUND with a larger capacity so that the kernel must resize them. ``run_case`` runs
one case.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from kernel_cases import seeded

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
# Unary input shapes and layouts (the scalar overloads of binary ops use them too).
UNARY_SHAPES = [((2, 3, 4), "c"), ((), "c"), ((0, 3), "c"), ((2, 3, 4, 5), "cl"), ((3, 5), "s")]
# Broadcasting pairs: shapes and layouts of a and b (binary and ternary ops).
BCAST = [
    ((2, 3, 4), (2, 3, 4), "c", "c"),
    ((2, 1, 4), (3, 1), "c", "c"),
    ((), (2, 3), "c", "c"),
    ((0, 3), (1, 3), "c", "c"),
    ((2, 3, 4, 5), (2, 3, 4, 5), "cl", "cl"),
    ((2, 3, 4, 5), (5,), "cl", "c"),
    ((3, 5), (3, 5), "s", "t"),
]


# -- checks -------------------------------------------------------------------------------------
def check(op: str, actual: torch.Tensor, expected: torch.Tensor, scale: float) -> None:
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


def run_case(name: str, build: Builder) -> None:
    """Builds case ``name`` with its seeded generator, runs it and checks the outs."""
    call = build(seeded(name))
    if call.error:
        with pytest.raises(RuntimeError):
            call_kernel(call.op, call.args, temp_bytes=1 << 20)
        return
    call_kernel(call.op, call.args, temp_bytes=1 << 20)
    if _check_special(call):
        return
    for o, expected in call.expect:
        actual = o.view() if isinstance(o, Out) else o
        check(call.op, actual, expected, call.scale)
