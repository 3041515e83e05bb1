"""The integer arithmetic of Ember's fused int8 operators, as PyTorch references.

Each ``ember::quantized_*`` C kernel (``kernels/quantized/``) is bit-exact with the function here
that also serves as its PyTorch implementation (:func:`register_ops` defines the operators and
their ``.out`` variants). The formulas are in :mod:`ember.quant.fused`'s docstring.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

from ember.quant import (
    QMAX,
    QMIN,
    QuantizationError,
)
from ember.quant._ops import register_out_variants

log = logging.getLogger(__name__)

#: Left shift applied to both (zero-point-free) inputs of ``quantized_add`` before rescaling.
ADD_LEFT_SHIFT = 20

_LIB: torch.library.Library | None = None


def quantize_multiplier(scale: float) -> tuple[int, int]:
    """(multiplier, shift) with multiplier * 2^(shift - 31) == scale, multiplier in [2^30, 2^31)."""
    if scale <= 0 or not math.isfinite(scale):
        raise QuantizationError(f"requantization scale must be positive and finite, got {scale}")
    m, e = math.frexp(scale)  # scale = m * 2^e, m in [0.5, 1)
    q = round(m * (1 << 31))
    if q == 1 << 31:
        q //= 2
        e += 1
    if not -30 <= e <= 30:
        raise QuantizationError(f"requantization scale {scale} is out of range")
    return q, e


def requantize_ref(acc: torch.Tensor, mult: Any, shift: Any) -> torch.Tensor:
    """``(acc * mult + 2^(t-1)) >> t`` with ``t = 31 - shift`` in int64 (floor shift), the
    fixed-point rescaling every kernel uses (`q8_requantize`, kernels/quantized/q8_util.h)."""
    acc = acc.to(torch.int64)
    mult = torch.as_tensor(mult, dtype=torch.int64)
    t = 31 - torch.as_tensor(shift, dtype=torch.int64)
    return (acc * mult + (torch.ones_like(t) << (t - 1))) >> t


def quantized_linear_ref(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, mult: torch.Tensor,
    shift: torch.Tensor, in_zp: int, out_zp: int, act_min: int, act_max: int,
) -> torch.Tensor:  # fmt: skip
    """Bit-exact reference of ``ember::quantized_linear`` (int8 [.., K] x int8 [N, K] -> int8)."""
    acc = (x.to(torch.int64) - in_zp) @ w.to(torch.int64).t() + bias.to(torch.int64)
    r = requantize_ref(acc, mult, shift)
    return torch.clamp(r + out_zp, act_min, act_max).to(torch.int8)


def quantized_conv2d_ref(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, mult: torch.Tensor,
    shift: torch.Tensor, stride: list[int], padding: list[int], dilation: list[int], groups: int,
    in_zp: int, out_zp: int, act_min: int, act_max: int,
) -> torch.Tensor:  # fmt: skip
    """Bit-exact reference of ``ember::quantized_conv2d`` (int8 NCHW x int8 OIHW -> int8 NCHW).

    The integer sums are computed in float64, which is exact: every partial sum is an integer far
    below 2^53. Padding holds the input zero point (a real 0)."""
    xd = x.to(torch.float64) - in_zp
    acc = F.conv2d(xd, w.to(torch.float64), None, stride, padding, dilation, groups)
    acc = acc.round().to(torch.int64) + bias.to(torch.int64).view(1, -1, 1, 1)
    r = requantize_ref(acc, mult.view(1, -1, 1, 1), shift.view(1, -1, 1, 1))
    return torch.clamp(r + out_zp, act_min, act_max).to(torch.int8)


def quantized_conv2d_max_pool2d_ref(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, mult: torch.Tensor,
    shift: torch.Tensor, stride: list[int], padding: list[int], dilation: list[int], groups: int,
    in_zp: int, out_zp: int, act_min: int, act_max: int, pool_kernel: list[int],
    pool_stride: list[int],
) -> torch.Tensor:  # fmt: skip
    """Bit-exact reference of ``ember::quantized_conv2d_max_pool2d``: the convolution, then a
    max pool without padding (the C kernel pools the int32 accumulators; requantization is
    monotonic, so the result is the same)."""
    y = quantized_conv2d_ref(x, w, bias, mult, shift, stride, padding, dilation, groups, in_zp,
                             out_zp, act_min, act_max)  # fmt: skip
    return quantized_max_pool2d_ref(y, pool_kernel, pool_stride, [0, 0])


def quantized_add_ref(
    a: torch.Tensor, b: torch.Tensor, a_zp: int, a_mult: int, a_shift: int, b_zp: int,
    b_mult: int, b_shift: int, out_zp: int, out_mult: int, out_shift: int, act_min: int,
    act_max: int,
) -> torch.Tensor:  # fmt: skip
    """Bit-exact reference of ``ember::quantized_add``: both inputs rescaled to a common
    fixed-point scale (after a left shift of :data:`ADD_LEFT_SHIFT`), summed, requantized."""
    xa = requantize_ref((a.to(torch.int64) - a_zp) << ADD_LEFT_SHIFT, a_mult, a_shift)
    xb = requantize_ref((b.to(torch.int64) - b_zp) << ADD_LEFT_SHIFT, b_mult, b_shift)
    r = requantize_ref(xa + xb, out_mult, out_shift)
    return torch.clamp(r + out_zp, act_min, act_max).to(torch.int8)


def quantized_clamp_ref(x: torch.Tensor, act_min: int, act_max: int) -> torch.Tensor:
    """Bit-exact reference of ``ember::quantized_clamp``: ReLU / ReLU6 / hardtanh on int8,
    which keep the input's scale and zero point (bounds from :func:`activation_clamp`)."""
    return torch.clamp(x, act_min, act_max).to(torch.int8)


def activation_clamp(lo: float, hi: float, scale: float, zero_point: int) -> tuple[int, int]:
    """The int8 bounds ``(act_min, act_max)`` of a float clamp to [`lo`, `hi`] (ReLU: ``(0,
    inf)``, ReLU6: ``(0, 6)``) on values with `scale` and `zero_point`: ``zp + round(v / s)``
    limited to [-128, 127]. Quantization is monotonic, so the clamp commutes with it."""

    def q(v: float) -> int:
        if math.isinf(v):
            return QMIN if v < 0 else QMAX
        return max(QMIN, min(QMAX, int(zero_point) + round(v / scale)))

    if not lo <= hi:
        raise QuantizationError(f"activation bounds [{lo}, {hi}] are empty")
    return q(lo), q(hi)


def _pool_stride(kernel_size: list[int], stride: list[int]) -> list[int]:
    return list(stride) if len(stride) else list(kernel_size)


def quantized_max_pool2d_ref(
    x: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int]
) -> torch.Tensor:
    """Bit-exact reference of ``ember::quantized_max_pool2d`` (int8 NCHW, same scale)."""
    y = F.max_pool2d(x.to(torch.float32), kernel_size, _pool_stride(kernel_size, stride), padding)
    return y.to(torch.int8)


def quantized_avg_pool2d_ref(
    x: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int],
    count_include_pad: bool, zero_point: int,
) -> torch.Tensor:  # fmt: skip
    """Bit-exact reference of ``ember::quantized_avg_pool2d``: ``zp + round(sum(x - zp) / d)``,
    rounding half away from zero (integer sums, computed exactly in float64)."""
    st = _pool_stride(kernel_size, stride)
    xd = x.to(torch.float64) - zero_point
    s = F.avg_pool2d(xd, kernel_size, st, padding, count_include_pad=True, divisor_override=1)
    s = s.round().to(torch.int64)
    if count_include_pad:
        d = torch.full_like(s, int(kernel_size[0]) * int(kernel_size[-1]))
    else:
        ones = torch.ones_like(xd)
        d = F.avg_pool2d(ones, kernel_size, st, padding, count_include_pad=True, divisor_override=1)
        d = d.round().to(torch.int64)
    mag = (s.abs() * 2 + d) // (2 * d)
    return torch.clamp(zero_point + torch.where(s < 0, -mag, mag), QMIN, QMAX).to(torch.int8)


def _conv_out(n: int, k: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _fake_conv(x, w, bias, mult, shift, stride, padding, dilation, *rest):
    sh, sw = stride[0], stride[-1]
    ph, pw = padding[0], padding[-1]
    dh, dw = dilation[0], dilation[-1]
    oh = _conv_out(x.shape[2], w.shape[2], sh, ph, dh)
    ow = _conv_out(x.shape[3], w.shape[3], sw, pw, dw)
    return x.new_empty((x.shape[0], w.shape[0], oh, ow), dtype=torch.int8)


def _fake_conv_pool(x, w, bias, mult, shift, stride, padding, dilation, groups, in_zp, out_zp,
                    act_min, act_max, pool_kernel, pool_stride):  # fmt: skip
    y = _fake_conv(x, w, bias, mult, shift, stride, padding, dilation)
    return _fake_pool(y, pool_kernel, pool_stride, [0, 0])


def _fake_pool(x, kernel_size, stride, padding, *rest):
    st = _pool_stride(kernel_size, stride)
    oh = _conv_out(x.shape[2], kernel_size[0], st[0], padding[0], 1)
    ow = _conv_out(x.shape[3], kernel_size[-1], st[-1], padding[-1], 1)
    return x.new_empty((x.shape[0], x.shape[1], oh, ow), dtype=torch.int8)


# name -> (argument list of the schema, reference implementation, fake (shape) implementation)
_OPS: dict[str, tuple[str, Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "quantized_linear": (
        "Tensor input, Tensor weight, Tensor bias, Tensor multiplier, Tensor shift, "
        "int input_zero_point, int output_zero_point, int activation_min, int activation_max",
        quantized_linear_ref,
        lambda x, w, *r: x.new_empty((*x.shape[:-1], w.shape[0]), dtype=torch.int8),
    ),
    "quantized_conv2d": (
        "Tensor input, Tensor weight, Tensor bias, Tensor multiplier, Tensor shift, "
        "int[2] stride, int[2] padding, int[2] dilation, int groups, int input_zero_point, "
        "int output_zero_point, int activation_min, int activation_max",
        quantized_conv2d_ref,
        _fake_conv,
    ),
    "quantized_conv2d_max_pool2d": (
        "Tensor input, Tensor weight, Tensor bias, Tensor multiplier, Tensor shift, "
        "int[2] stride, int[2] padding, int[2] dilation, int groups, int input_zero_point, "
        "int output_zero_point, int activation_min, int activation_max, int[2] pool_kernel, "
        "int[2] pool_stride",
        quantized_conv2d_max_pool2d_ref,
        _fake_conv_pool,
    ),
    "quantized_add": (
        "Tensor a, Tensor b, int a_zero_point, int a_multiplier, int a_shift, int b_zero_point, "
        "int b_multiplier, int b_shift, int output_zero_point, int output_multiplier, "
        "int output_shift, int activation_min, int activation_max",
        quantized_add_ref,
        lambda a, *r: torch.empty_like(a, dtype=torch.int8),
    ),
    "quantized_clamp": (
        "Tensor input, int activation_min, int activation_max",
        quantized_clamp_ref,
        lambda x, *r: torch.empty_like(x, dtype=torch.int8),
    ),
    "quantized_max_pool2d": (
        "Tensor input, int[2] kernel_size, int[2] stride, int[2] padding",
        quantized_max_pool2d_ref,
        _fake_pool,
    ),
    "quantized_avg_pool2d": (
        "Tensor input, int[2] kernel_size, int[2] stride, int[2] padding, "
        "bool count_include_pad, int zero_point",
        quantized_avg_pool2d_ref,
        _fake_pool,
    ),
}


def register_ops() -> None:
    """Defines the ``ember::quantized_*`` operators (+ ``.out``) in PyTorch, once per process."""
    global _LIB
    if _LIB is not None:
        return
    register_out_variants()
    lib = torch.library.Library("ember", "FRAGMENT")
    for name, (args, ref, fake) in _OPS.items():
        lib.define(f"{name}({args}) -> Tensor")
        lib.define(f"{name}.out({args}, *, Tensor(a!) out) -> Tensor(a!)")
        lib.impl(name, ref, "CompositeExplicitAutograd")

        def out_impl(*a, out, _ref=ref):
            out.copy_(_ref(*a))
            return out

        lib.impl(f"{name}.out", out_impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"ember::{name}", fake, lib=lib)
    _LIB = lib
