"""Integer-only layers and the ``nn.Sequential`` lowering (:func:`lower_to_integer`).

The modules call the ``ember::quantized_*`` operators of :mod:`ember.quant.fused_ref` with
weights, biases and requantization parameters computed from a quantized model's observers.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from torch import nn

from ember.quant import (
    QMAX,
    QMIN,
    QuantizationError,
    QuantizedConv2d,
    QuantizedLinear,
    qparams_affine,
)
from ember.quant.fused_ref import (
    ADD_LEFT_SHIFT,
    activation_clamp,
    quantize_multiplier,
    register_ops,
)

log = logging.getLogger(__name__)

_INF = math.inf


def _module_act_bounds(m: nn.Module | None) -> tuple[float, float] | None:
    """The float clamp [lo, hi] an activation module computes (ReLU, ReLU6, Hardtanh), else
    None."""
    if isinstance(m, nn.ReLU):
        return 0.0, _INF
    if isinstance(m, nn.Hardtanh):  # nn.ReLU6 is a Hardtanh(0, 6)
        return float(m.min_val), float(m.max_val)
    return None


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
