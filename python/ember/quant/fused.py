"""Integer-only lowering: Q/DQ layers fused into ``ember::`` int8 operators.

After :func:`ember.quant.quantize`, each :class:`~ember.quant.QuantizedLinear` /
:class:`~ember.quant.QuantizedConv2d` still computes in float between Q/DQ pairs.
:func:`lower_to_integer` replaces the chain with integer arithmetic, as integer-only inference
(Jacob et al., 2018; TFLite Micro / CMSIS-NN) does:

    acc[n]  = bias_q[n] + sum_k (x[k] - in_zp) * w[n, k]            (int32, w int8 symmetric)
    y[n]    = clamp(requant(acc[n], mult[n], shift[n]) + out_zp, act_min, act_max)   (int8)
    requant(a, m, s) = (a * m + 2^(t-1)) >> t,  t = 31 - s     (int64 product, arithmetic shift)

with ``bias_q = round(b / (s_x * s_w[n]))`` and ``mult * 2^(s-31) = s_x * s_w[n] / s_y``
(``mult`` in [2^30, 2^31)). A ReLU after the layer is folded into ``act_min = out_zp`` (ReLU6 /
hardtanh also set ``act_max``); one that no layer can absorb is a clamp of its own. Max and
average pooling run on int8 with the input's scale; an add of two int8 tensors rescales both to
a common fixed-point scale (``quantized_add_ref``). The model quantizes its float input once,
runs every layer in int8 and dequantizes the output.

Operators (``ember::``; C kernels in `kernels/quantized/`, each bit-exact with the Python
reference here that also serves as its PyTorch implementation):

* ``quantized_linear``  — :func:`quantized_linear_ref`
* ``quantized_conv2d``  — :func:`quantized_conv2d_ref` (NCHW, OIHW per-channel weights, groups)
* ``quantized_add``     — :func:`quantized_add_ref`
* ``quantized_max_pool2d`` / ``quantized_avg_pool2d`` — :func:`quantized_max_pool2d_ref`,
  :func:`quantized_avg_pool2d_ref`
* ``quantized_clamp``   — :func:`quantized_clamp_ref` (ReLU / ReLU6 / hardtanh not folded)

:func:`lower_to_integer` handles an ``nn.Sequential``; :func:`lower_graph_to_integer` any
torch.fx-traceable model, including residual sums (``a + b`` or :class:`ember.quant.Add`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ember.quant import (
    QMAX,
    QMIN,
    QuantizationError,
    QuantizedAdd,
    QuantizedConv2d,
    QuantizedLinear,
    qparams_affine,
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


def _requant_params(s_in: float, s_w: torch.Tensor, out_scale: float) -> tuple[torch.Tensor, ...]:
    pairs = [quantize_multiplier(s_in * float(s) / out_scale) for s in s_w]
    mult = torch.tensor([p[0] for p in pairs], dtype=torch.int32)
    return mult, torch.tensor([p[1] for p in pairs], dtype=torch.int32)


def _bias_int32(bias: torch.Tensor, s_in: float, s_w: torch.Tensor) -> torch.Tensor:
    bias_q = torch.round(bias.double() / (s_in * s_w.double()))
    if bias_q.abs().max().item() >= 2**31:
        raise QuantizationError("quantized bias does not fit int32")
    return bias_q.to(torch.int32)


class FusedQuantizedLinear(nn.Module):
    """One integer-only linear layer (+ optional ReLU): int8 in, int8 out."""

    def __init__(
        self, ql: QuantizedLinear, out_scale: float, out_zp: int, relu: bool,
        in_q: tuple[float, int] | None = None, act: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        s_in, zp_in = in_q if in_q is not None else (ql.in_scale, ql.in_zp)
        self.register_buffer("weight", ql.weight_int8_t.t().contiguous())  # [out, in]
        self.register_buffer("bias", _bias_int32(ql.bias, s_in, ql.weight_scales))
        mult, shift = _requant_params(s_in, ql.weight_scales.double(), out_scale)
        self.register_buffer("multiplier", mult)
        self.register_buffer("shift", shift)
        self.in_zp, self.out_zp = int(zp_in), int(out_zp)
        self.act_min, self.act_max = act or ((self.out_zp if relu else QMIN), QMAX)
        self.out_scale = float(out_scale)

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.quantized_linear(
            xq, self.weight, self.bias, self.multiplier, self.shift, self.in_zp, self.out_zp,
            self.act_min, self.act_max,
        )  # fmt: skip


class FusedQuantizedConv2d(nn.Module):
    """One integer-only 2-D convolution (+ optional ReLU): int8 NCHW in, int8 NCHW out."""

    def __init__(
        self, qc: QuantizedConv2d, out_scale: float, out_zp: int, relu: bool,
        in_q: tuple[float, int] | None = None, act: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        s_in, zp_in = in_q if in_q is not None else (qc.in_scale, qc.in_zp)
        self.register_buffer("weight", qc.weight_int8.contiguous())  # [out, in / groups, kh, kw]
        self.register_buffer("bias", _bias_int32(qc.bias, s_in, qc.weight_scales))
        mult, shift = _requant_params(s_in, qc.weight_scales.double(), out_scale)
        self.register_buffer("multiplier", mult)
        self.register_buffer("shift", shift)
        self.stride, self.padding = list(qc.stride), list(qc.padding)
        self.dilation, self.groups = list(qc.dilation), qc.groups
        self.in_zp, self.out_zp = int(zp_in), int(out_zp)
        self.act_min, self.act_max = act or ((self.out_zp if relu else QMIN), QMAX)
        self.out_scale = float(out_scale)

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.quantized_conv2d(
            xq, self.weight, self.bias, self.multiplier, self.shift, self.stride, self.padding,
            self.dilation, self.groups, self.in_zp, self.out_zp, self.act_min, self.act_max,
        )  # fmt: skip


class FusedQuantizedConv2dMaxPool2d(nn.Module):
    """A :class:`FusedQuantizedConv2d` followed by a :class:`QuantizedMaxPool2d` without padding,
    in one kernel (``ember::quantized_conv2d_max_pool2d``): only the pooled output is stored."""

    def __init__(self, conv: FusedQuantizedConv2d, pool: QuantizedMaxPool2d) -> None:
        super().__init__()
        if pool.padding != [0, 0]:
            raise QuantizationError("conv + max pool fusion needs a pool without padding")
        self.conv, self.pool_kernel, self.pool_stride = conv, pool.kernel_size, pool.stride
        self.out_scale, self.out_zp = conv.out_scale, conv.out_zp

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        c = self.conv
        return torch.ops.ember.quantized_conv2d_max_pool2d(
            xq, c.weight, c.bias, c.multiplier, c.shift, c.stride, c.padding, c.dilation,
            c.groups, c.in_zp, c.out_zp, c.act_min, c.act_max, self.pool_kernel, self.pool_stride,
        )  # fmt: skip


def _fuse_conv_pool(layers: list[nn.Module]) -> list[nn.Module]:
    """Merges each FusedQuantizedConv2d directly followed by an unpadded QuantizedMaxPool2d."""
    out: list[nn.Module] = []
    for m in layers:
        prev = out[-1] if out else None
        if (
            isinstance(m, QuantizedMaxPool2d)
            and isinstance(prev, FusedQuantizedConv2d)
            and m.padding == [0, 0]
        ):
            out[-1] = FusedQuantizedConv2dMaxPool2d(prev, m)
        else:
            out.append(m)
    return out


class QuantizedMaxPool2d(nn.Module):
    """``nn.MaxPool2d`` on int8 (the input's scale and zero point carry over)."""

    def __init__(self, pool: nn.MaxPool2d) -> None:
        super().__init__()
        k, s, p, d = (_pair(v) for v in (pool.kernel_size, pool.stride or pool.kernel_size,
                                        pool.padding, pool.dilation))  # fmt: skip
        if pool.ceil_mode or d != [1, 1] or pool.return_indices:
            raise QuantizationError(f"{pool!r}: ceil_mode, dilation and indices are not supported")
        self.kernel_size, self.stride, self.padding = k, s, p

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.quantized_max_pool2d(xq, self.kernel_size, self.stride, self.padding)


class QuantizedAvgPool2d(nn.Module):
    """``nn.AvgPool2d`` on int8 with the input's scale and zero point (integer rounding)."""

    def __init__(self, pool: nn.AvgPool2d, zero_point: int) -> None:
        super().__init__()
        k, s, p = (_pair(v) for v in (pool.kernel_size, pool.stride or pool.kernel_size,
                                     pool.padding))  # fmt: skip
        if pool.ceil_mode or pool.divisor_override:
            raise QuantizationError(f"{pool!r}: ceil_mode and divisor_override are not supported")
        self.kernel_size, self.stride, self.padding = k, s, p
        self.count_include_pad, self.zero_point = bool(pool.count_include_pad), int(zero_point)

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.quantized_avg_pool2d(
            xq, self.kernel_size, self.stride, self.padding, self.count_include_pad,
            self.zero_point,
        )  # fmt: skip


class QuantizedClamp(nn.Module):
    """A ReLU / ReLU6 / hardtanh on int8 that no producer's output clamp absorbed:
    ``ember::quantized_clamp`` (the input's scale and zero point carry over)."""

    def __init__(self, act_min: int, act_max: int) -> None:
        super().__init__()
        self.act_min, self.act_max = int(act_min), int(act_max)

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.quantized_clamp(xq, self.act_min, self.act_max)

    def extra_repr(self) -> str:
        return f"act_min={self.act_min}, act_max={self.act_max}"


class QuantizedReshape(nn.Module):
    """A reshape / view of int8 values (no arithmetic; the quantization carries over): to
    ``shape``, or with ``keep_batch`` to ``(x.shape[0], *shape)``."""

    def __init__(self, shape: list[int], keep_batch: bool) -> None:
        super().__init__()
        self.shape, self.keep_batch = [int(v) for v in shape], keep_batch

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        return xq.reshape(xq.shape[0], *self.shape) if self.keep_batch else xq.reshape(self.shape)


class FusedQuantizedAdd(nn.Module):
    """``a + b`` (+ optional ReLU) of two int8 tensors with their own scales and zero points,
    requantized to (`out_scale`, `out_zp`): ``ember::quantized_add``."""

    def __init__(
        self, a_scale: float, a_zp: int, b_scale: float, b_zp: int, out_scale: float,
        out_zp: int, relu: bool = False, act: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        twice_max = 2.0 * max(a_scale, b_scale)
        self.a_zp, self.b_zp, self.out_zp = int(a_zp), int(b_zp), int(out_zp)
        self.a_mult, self.a_shift = quantize_multiplier(a_scale / twice_max)
        self.b_mult, self.b_shift = quantize_multiplier(b_scale / twice_max)
        self.out_mult, self.out_shift = quantize_multiplier(
            twice_max / ((1 << ADD_LEFT_SHIFT) * out_scale)
        )
        self.act_min, self.act_max = act or ((self.out_zp if relu else QMIN), QMAX)
        self.out_scale = float(out_scale)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.quantized_add(
            a, b, self.a_zp, self.a_mult, self.a_shift, self.b_zp, self.b_mult, self.b_shift,
            self.out_zp, self.out_mult, self.out_shift, self.act_min, self.act_max,
        )  # fmt: skip


def _pair(v: Any) -> list[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(x) for x in v]


class IntegerSequential(nn.Module):
    """Quantize the float input once, run int8 layers, dequantize the output."""

    def __init__(
        self, layers: list[nn.Module], in_scale: float, in_zp: int, out_scale: float,
        out_zp: int, int8_input: bool,
    ) -> None:  # fmt: skip
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.in_scale, self.in_zp = float(in_scale), int(in_zp)
        self.out_scale, self.out_zp = float(out_scale), int(out_zp)
        self.int8_input = int8_input

    def quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        """The int8 input an ``int8_input`` model expects for float input `x`."""
        qd = torch.ops.quantized_decomposed
        return qd.quantize_per_tensor(x, self.in_scale, self.in_zp, QMIN, QMAX, torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed
        h = x if self.int8_input else self.quantize_input(x)
        for layer in self.layers:
            h = layer(h)
        return qd.dequantize_per_tensor(h, self.out_scale, self.out_zp, QMIN, QMAX, torch.int8)


#: The integer-only MLP of earlier releases is an :class:`IntegerSequential`.
IntegerMLP = IntegerSequential

_COMPUTE = (QuantizedLinear, QuantizedConv2d)
_PASS = (nn.MaxPool2d, nn.AvgPool2d, nn.Flatten, nn.Unflatten, nn.Identity, nn.Dropout)


def lower_to_integer(
    qmodel: nn.Module,
    calibration_data: list[torch.Tensor],
    percentile: float | None = None,
    int8_input: bool = False,
    fuse_pool: bool = True,
) -> IntegerSequential:
    """Fuses a quantized ``nn.Sequential`` into integer-only layers.

    Accepted modules: QuantizedLinear / QuantizedConv2d (a ReLU, ReLU6 or Hardtanh right after
    one is folded into its output clamp; anywhere else it becomes a :class:`QuantizedClamp`),
    nn.MaxPool2d / nn.AvgPool2d (int8, scale-preserving), nn.Flatten, nn.Unflatten,
    nn.Identity and nn.Dropout (eval). Each compute layer's output scale is the next compute
    layer's (calibrated) input scale; the last one's comes from the range of the model's (float)
    outputs on `calibration_data` (min/max, or the given `percentile`). With
    `int8_input` the model takes the already-quantized int8 input (``model.quantize_input(x)``;
    for images in [0, 1] with scale 1/255 and zero point -128 that is ``pixel - 128``), so no
    float input buffer exists. With `fuse_pool` a conv followed by an unpadded max pool becomes one
    ``ember::quantized_conv2d_max_pool2d`` (the full-resolution conv output is never stored)."""
    register_ops()
    mods = list(qmodel.children()) if isinstance(qmodel, nn.Sequential) else []
    if not mods:
        raise QuantizationError("integer lowering expects a quantized nn.Sequential")
    # items: [kind, module, activation bounds]; kind "compute", "act" or "pass"
    items: list[list[Any]] = []
    for m in mods:
        bounds = _module_act_bounds(m)
        if isinstance(m, _COMPUTE):
            items.append(["compute", m, None])
        elif bounds is not None:
            if not any(it[0] == "compute" for it in items):
                raise QuantizationError(f"{m!r} before the first quantized layer: not supported")
            if items[-1][0] == "compute" and items[-1][2] is None:
                items[-1][2] = bounds  # folded into the layer's output clamp
            else:
                items.append(["act", m, bounds])
        elif isinstance(m, _PASS):
            if not any(it[0] == "compute" for it in items):
                raise QuantizationError(f"{m!r} before the first quantized layer: not supported")
            items.append(["pass", m, False])
        else:
            raise QuantizationError(
                "integer lowering handles nn.Sequential of QuantizedLinear/QuantizedConv2d, ReLU, "
                f"ReLU6, Hardtanh, MaxPool2d, AvgPool2d, Flatten; found {m!r}"
            )
    computes = [it for it in items if it[0] == "compute"]
    if not computes:
        raise QuantizationError("nothing to lower: no QuantizedLinear or QuantizedConv2d layer")
    with torch.no_grad():
        y = torch.cat([qmodel(x).flatten() for x in calibration_data]).float()
    if percentile is None:
        lo, hi = y.min().item(), y.max().item()
    else:
        lo = torch.quantile(y, 1 - percentile / 100).item()
        hi = torch.quantile(y, percentile / 100).item()
    last_scale, last_zp = qparams_affine(lo, hi)
    layers: list[nn.Module] = []
    cur_scale, cur_zp = computes[0][1].in_scale, computes[0][1].in_zp
    ci = 0
    for kind, m, bounds in items:
        if kind == "act":
            layers.append(QuantizedClamp(*activation_clamp(*bounds, cur_scale, cur_zp)))
        elif kind == "compute":
            ci += 1
            if ci < len(computes):
                out_scale, out_zp = computes[ci][1].in_scale, computes[ci][1].in_zp
            else:
                out_scale, out_zp = last_scale, last_zp
            cls = FusedQuantizedLinear if isinstance(m, QuantizedLinear) else FusedQuantizedConv2d
            act = activation_clamp(*bounds, out_scale, out_zp) if bounds else None
            layers.append(cls(m, out_scale, out_zp, False, act=act))
            cur_scale, cur_zp = out_scale, out_zp
        elif isinstance(m, nn.MaxPool2d):
            layers.append(QuantizedMaxPool2d(m))
        elif isinstance(m, nn.AvgPool2d):
            layers.append(QuantizedAvgPool2d(m, cur_zp))
        elif isinstance(m, nn.Flatten | nn.Unflatten):
            layers.append(m)
    if fuse_pool:
        layers = _fuse_conv_pool(layers)
    first = computes[0][1]
    log.info("lowered %d quantized layer(s) to integer-only ember:: operators", len(computes))
    return IntegerSequential(
        layers, first.in_scale, first.in_zp, cur_scale, cur_zp, int8_input
    ).eval()


# -- graph lowering (any traceable model: residual adds, branches) ------------------------------
_LEAVES = (QuantizedLinear, QuantizedConv2d, QuantizedAdd, nn.ReLU, nn.Hardtanh, nn.MaxPool2d,
           nn.AvgPool2d, nn.Flatten, nn.Identity, nn.Dropout)  # fmt: skip

_INF = math.inf


def _module_act_bounds(m: nn.Module | None) -> tuple[float, float] | None:
    """The float clamp [lo, hi] an activation module computes (ReLU, ReLU6, Hardtanh), else
    None."""
    if isinstance(m, nn.ReLU):
        return 0.0, _INF
    if isinstance(m, nn.Hardtanh):  # nn.ReLU6 is a Hardtanh(0, 6)
        return float(m.min_val), float(m.max_val)
    return None


def _call_params(n: torch.fx.Node, names: tuple[str, ...], defaults: tuple[Any, ...]) -> list[Any]:
    """Values of the parameters after the first (tensor) argument of a call node, by position
    or keyword, else their defaults."""
    rest = list(n.args[1:])
    return [rest[i] if i < len(rest) else n.kwargs.get(k, d)
            for i, (k, d) in enumerate(zip(names, defaults, strict=True))]  # fmt: skip


def _act_bounds(n: torch.fx.Node, m: nn.Module | None) -> tuple[float, float] | None:
    """The float clamp [lo, hi] node `n` computes when it is an activation int8 can run as a
    clamp (ReLU, ReLU6, Hardtanh or torch.clamp with constant bounds, as a module, a function or
    a method; in place only when it is its input's one user), else None."""
    if m is not None:
        return _module_act_bounds(m)
    fn = n.target if n.op == "call_function" else None
    meth = n.target if n.op == "call_method" else None
    if fn in (torch.relu, F.relu) or meth == "relu":
        lo, hi, inplace = 0.0, _INF, _call_params(n, ("inplace",), (False,))[0]
    elif fn is F.relu6:
        lo, hi, inplace = 0.0, 6.0, _call_params(n, ("inplace",), (False,))[0]
    elif fn is F.hardtanh:
        lo, hi, inplace = _call_params(n, ("min_val", "max_val", "inplace"), (-1.0, 1.0, False))
    elif fn is torch.clamp or meth == "clamp":
        lo, hi = _call_params(n, ("min", "max"), (None, None))
        lo, hi, inplace = (-_INF if lo is None else lo), (_INF if hi is None else hi), False
    else:
        return None
    src = n.args[0] if n.args else None
    if not isinstance(src, torch.fx.Node) or not all(isinstance(v, int | float) for v in (lo, hi)):
        return None
    if inplace and len(src.users) != 1:
        return None
    return float(lo), float(hi)


def _flatten_dims(n: torch.fx.Node) -> tuple[int, int] | None:
    """(start, end) of a torch.flatten / Tensor.flatten call node, None for any other node."""
    if not (
        (n.op == "call_function" and n.target is torch.flatten)
        or (n.op == "call_method" and n.target == "flatten")
    ):
        return None
    rest = list(n.args[1:])
    start = int(rest[0]) if rest else int(n.kwargs.get("start_dim", 0))
    end = int(rest[1]) if len(rest) > 1 else int(n.kwargs.get("end_dim", -1))
    return start, end


def _is_reshape(n: torch.fx.Node) -> bool:
    return (n.op == "call_method" and n.target in ("reshape", "view")) or (
        n.op == "call_function" and n.target is torch.reshape
    )


def _reshape_layer(
    n: torch.fx.Node, shapes: dict[torch.fx.Node, tuple[int, ...] | None]
) -> QuantizedReshape:
    """The int8 reshape for a reshape / view node: its constant shape, or (when the shape reads
    sizes at run time, ``x.view(x.size(0), -1)``) the calibrated output shape with the batch
    dimension kept from the input."""
    spec = n.args[1:] if n.op == "call_method" else n.args[1:2]
    if len(spec) == 1 and isinstance(spec[0], list | tuple):
        spec = tuple(spec[0])
    if spec and all(isinstance(v, int) for v in spec):
        return QuantizedReshape(list(spec), keep_batch=False)
    src, out = shapes.get(n.args[0]), shapes.get(n)  # type: ignore[arg-type]
    if not src or not out or src[0] != out[0]:
        raise QuantizationError(
            f"{n.name}: reshape to a computed shape is supported only when it keeps the batch "
            f"dimension (got {list(src or ())} -> {list(out or ())})"
        )
    return QuantizedReshape(list(out[1:]), keep_batch=True)


class _Tracer(torch.fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, _LEAVES) or super().is_leaf_module(m, qualname)


class IntegerGraph(nn.Module):
    """An integer-only network as a list of steps over named int8 values: quantize the float
    input once, run each step (``layers[name](*inputs) -> output``), dequantize the output."""

    def __init__(
        self, steps: list[tuple[str, list[str], str]], layers: dict[str, nn.Module],
        in_q: tuple[float, int], out_value: str, out_q: tuple[float, int], int8_input: bool,
    ) -> None:  # fmt: skip
        super().__init__()
        self.steps = steps
        self.layers = nn.ModuleDict(layers)
        self.in_scale, self.in_zp = float(in_q[0]), int(in_q[1])
        self.out_value = out_value
        self.out_scale, self.out_zp = float(out_q[0]), int(out_q[1])
        self.int8_input = int8_input

    def quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        """The int8 input an ``int8_input`` model expects for float input `x`."""
        qd = torch.ops.quantized_decomposed
        return qd.quantize_per_tensor(x, self.in_scale, self.in_zp, QMIN, QMAX, torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed
        env = {"input": x if self.int8_input else self.quantize_input(x)}
        for name, ins, out in self.steps:
            env[out] = self.layers[name](*[env[i] for i in ins])
        y = env[self.out_value]
        return qd.dequantize_per_tensor(y, self.out_scale, self.out_zp, QMIN, QMAX, torch.int8)


def lower_graph_to_integer(
    qmodel: nn.Module,
    calibration_data: list[torch.Tensor],
    percentile: float | None = None,
    int8_input: bool = False,
    fuse_pool: bool = True,
) -> IntegerGraph:
    """Fuses a quantized model of any (torch.fx-traceable) structure into integer-only steps.

    The model (from :func:`ember.quant.quantize`) may branch and join through residual sums
    (:class:`ember.quant.Add`, which :func:`~ember.quant.quantize` also makes of a plain
    ``a + b``; both operands must have the same shape). Activations (ReLU, ReLU6, Hardtanh,
    ``torch.clamp`` with constant bounds) and flatten / reshape / view may be modules, functions
    or methods. Every int8 value takes the scale and zero point of the range its producer's
    output had on `calibration_data` (min/max or the given `percentile`); consumers requantize
    from it (their own bias and multipliers are recomputed for that input scale), so a value
    feeding several layers needs no extra operator. An activation that is the only user of a
    Linear/Conv2d/Add is folded into that layer's output clamp (the range is taken after it);
    any other becomes an ``ember::quantized_clamp`` step on its input's quantization. Pooling,
    flatten and reshape keep their input's quantization too. With `fuse_pool` a conv whose only
    user is an unpadded max pool becomes ``ember::quantized_conv2d_max_pool2d``."""
    register_ops()
    graph = _Tracer().trace(qmodel)
    mods = dict(qmodel.named_modules())
    nodes = list(graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise QuantizationError(f"graph lowering takes a model with one input, not {len(inputs)}")

    def mod_of(n: torch.fx.Node) -> nn.Module | None:
        return mods.get(str(n.target)) if n.op == "call_module" else None

    producers = _COMPUTE + (QuantizedAdd,)
    acts = {n: b for n in nodes if (b := _act_bounds(n, mod_of(n))) is not None}
    # Activations folded into the single producer they follow: act node -> producer.
    folded: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in acts:
        p = n.args[0]
        if isinstance(p, torch.fx.Node) and isinstance(mod_of(p), producers) and len(p.users) == 1:
            folded[n] = p
    act_of = {p: a for a, p in folded.items()}

    # Calibration: the range of every value a quantized producer (or the input) makes, and the
    # shape (or non-tensor-ness: x.size(0)...) of every value.
    watch = set(inputs) | {n for n in nodes if isinstance(mod_of(n), producers)} | set(folded)
    seen: dict[torch.fx.Node, list[torch.Tensor]] = {n: [] for n in watch}
    shapes: dict[torch.fx.Node, tuple[int, ...] | None] = {}

    class _Rec(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            is_t = isinstance(out, torch.Tensor)
            shapes.setdefault(n, tuple(out.shape) if is_t else None)
            if n in seen and is_t:
                seen[n].append(out.detach().flatten().float())
            return out

    gm = torch.fx.GraphModule(qmodel, graph)
    with torch.no_grad():
        for x in calibration_data:
            _Rec(gm).run(x)

    def qp(n: torch.fx.Node) -> tuple[float, int]:
        v = torch.cat(seen[n])
        if percentile is None:
            return qparams_affine(v.min().item(), v.max().item())
        lo = torch.quantile(v, 1 - percentile / 100).item()
        return qparams_affine(lo, torch.quantile(v, percentile / 100).item())

    qparams: dict[torch.fx.Node, tuple[float, int]] = {}
    names: dict[torch.fx.Node, str] = {}
    steps: list[tuple[str, list[str], str]] = []
    layers: dict[str, nn.Module] = {}
    out_node = None
    for n in nodes:
        if n.op == "placeholder":
            qparams[n], names[n] = qp(n), "input"
            continue
        if n.op == "output":
            out_node = n.args[0]
            continue
        if shapes.get(n) is None:
            continue  # integer arithmetic on sizes (x.size(0)): only reshapes read it
        m = mod_of(n)
        args = [a for a in n.args if isinstance(a, torch.fx.Node) and shapes.get(a) is not None]
        if n in folded:  # the producer already clamps
            qparams[n], names[n] = qparams[folded[n]], names[folded[n]]
            continue
        if isinstance(m, nn.Identity | nn.Dropout) or (
            n.op == "call_method" and n.target == "contiguous"
        ):
            qparams[n], names[n] = qparams[args[0]], names[args[0]]
            continue
        key = n.name
        if isinstance(m, producers):
            act = act_of.get(n)
            out_q = qp(act if act is not None else n)
            clamp = activation_clamp(*acts[act], *out_q) if act is not None else None
            if isinstance(m, QuantizedAdd):
                if shapes[args[0]] != shapes[args[1]]:
                    raise QuantizationError(
                        f"{n.name}: the integer add needs operands of one shape, got "
                        f"{list(shapes[args[0]] or ())} + {list(shapes[args[1]] or ())} "
                        "(broadcasting is not supported)"
                    )
                layer: nn.Module = FusedQuantizedAdd(*qparams[args[0]], *qparams[args[1]], *out_q,
                                                     act=clamp)  # fmt: skip
            else:
                cls = (
                    FusedQuantizedLinear if isinstance(m, QuantizedLinear) else FusedQuantizedConv2d
                )
                layer = cls(m, *out_q, False, in_q=qparams[args[0]], act=clamp)
            qparams[n] = out_q
            args = args[:2] if isinstance(m, QuantizedAdd) else args[:1]
        elif n in acts:
            layer = QuantizedClamp(*activation_clamp(*acts[n], *qparams[args[0]]))
            qparams[n], args = qparams[args[0]], args[:1]
        elif isinstance(m, nn.MaxPool2d):
            layer, qparams[n] = QuantizedMaxPool2d(m), qparams[args[0]]
        elif isinstance(m, nn.AvgPool2d):
            layer, qparams[n] = QuantizedAvgPool2d(m, qparams[args[0]][1]), qparams[args[0]]
        elif isinstance(m, nn.Flatten | nn.Unflatten):
            layer, qparams[n] = m, qparams[args[0]]
        elif _flatten_dims(n) is not None:  # torch.flatten(x, start, end) / x.flatten(...)
            layer, qparams[n] = nn.Flatten(*_flatten_dims(n)), qparams[args[0]]
        elif _is_reshape(n):
            layer, qparams[n], args = _reshape_layer(n, shapes), qparams[args[0]], args[:1]
        else:
            target = getattr(n.target, "__name__", n.target)
            what = f"module {type(m).__name__}" if m is not None else f"{n.op} {target}"
            raise QuantizationError(
                f"{n.name}: {what} has no integer lowering (supported: quantized Linear, Conv2d, "
                "Add or a + b, ReLU, ReLU6, Hardtanh, clamp, MaxPool2d, AvgPool2d, flatten, "
                "reshape, view)"
            )
        layers[key] = layer
        steps.append((key, [names[a] for a in args], key))
        names[n] = key
    if not isinstance(out_node, torch.fx.Node) or out_node not in names:
        raise QuantizationError("graph lowering needs a model returning one tensor")
    if not any(isinstance(v, producers) for v in map(mod_of, nodes)):
        raise QuantizationError("nothing to lower: no quantized layer")
    if fuse_pool:
        uses: dict[str, int] = {names[out_node]: 1}
        for _, ins, _ in steps:
            for i in ins:
                uses[i] = uses.get(i, 0) + 1
        fused_steps: list[tuple[str, list[str], str]] = []
        for name, ins, out in steps:
            prev = fused_steps[-1] if fused_steps else None
            pool = layers[name]
            if (
                prev is not None
                and isinstance(pool, QuantizedMaxPool2d)
                and pool.padding == [0, 0]
                and isinstance(layers[prev[0]], FusedQuantizedConv2d)
                and ins == [prev[2]]
                and uses.get(prev[2], 0) == 1
            ):
                layers[name] = FusedQuantizedConv2dMaxPool2d(layers.pop(prev[0]), pool)
                fused_steps[-1] = (name, prev[1], out)
            else:
                fused_steps.append((name, ins, out))
        steps = fused_steps
    log.info("lowered %d step(s) to integer-only ember:: operators", len(steps))
    return IntegerGraph(
        steps, layers, qparams[inputs[0]], names[out_node], qparams[out_node], int8_input
    ).eval()


def oplist_with_fused():
    """The runtime's operator list plus kernels/quantized/ops.def (for ember.export(oplist=))."""
    from pathlib import Path

    from ember.oplist import OpList, load_oplist, read_ops_def

    base = load_oplist()
    kernels = dict(base.kernels)
    for d in (Path(__file__).resolve().parents[3] / "kernels",):
        p = d / "quantized" / "ops.def"
        if p.is_file():
            kernels.update(read_ops_def(p, d))
    return OpList(kernels, list(base.sources))
