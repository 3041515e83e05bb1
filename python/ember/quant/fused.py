"""Integer-only lowering: Q/DQ linear layers fused into ``ember::quantized_linear``.

After :func:`ember.quant.quantize`, each :class:`~ember.quant.QuantizedLinear` still computes in
float between Q/DQ pairs. :func:`lower_to_integer` replaces the chain with integer arithmetic, as
integer-only inference (Jacob et al., 2018; TFLite Micro / CMSIS-NN) does:

    acc[n]  = bias_q[n] + sum_k (x[k] - in_zp) * w[n, k]            (int32, w int8 symmetric)
    y[n]    = clamp(requant(acc[n], mult[n], shift[n]) + out_zp, act_min, act_max)   (int8)
    requant(a, m, s) = (a * m + 2^(t-1)) >> t,  t = 31 - s     (int64 product, arithmetic shift)

with ``bias_q = round(b / (s_x * s_w[n]))`` and ``mult * 2^(s-31) = s_x * s_w[n] / s_y``
(``mult`` in [2^30, 2^31)). A ReLU after the layer is folded into ``act_min = out_zp``. The model
quantizes its float input once, runs every layer in int8 and dequantizes the output.
:func:`quantized_linear_ref` is the bit-exact Python reference of the C kernel
(`kernels/quantized/quantized_linear.c`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ember.quant import QMAX, QMIN, QuantizationError, QuantizedLinear, qparams_affine
from ember.quant._ops import register_out_variants

_LIB: torch.library.Library | None = None
_SCHEMA = (
    "quantized_linear(Tensor input, Tensor weight, Tensor bias, Tensor multiplier, Tensor shift, "
    "int input_zero_point, int output_zero_point, int activation_min, int activation_max) -> Tensor"
)
_SCHEMA_OUT = (
    "quantized_linear.out(Tensor input, Tensor weight, Tensor bias, Tensor multiplier, "
    "Tensor shift, int input_zero_point, int output_zero_point, int activation_min, "
    "int activation_max, *, Tensor(a!) out) -> Tensor(a!)"
)


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


def quantized_linear_ref(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, mult: torch.Tensor,
    shift: torch.Tensor, in_zp: int, out_zp: int, act_min: int, act_max: int,
) -> torch.Tensor:  # fmt: skip
    """Bit-exact reference of ``ember::quantized_linear`` (int8 [.., K] x int8 [N, K] -> int8)."""
    acc = (x.to(torch.int64) - in_zp) @ w.to(torch.int64).t() + bias.to(torch.int64)
    t = 31 - shift.to(torch.int64)
    r = (acc * mult.to(torch.int64) + (torch.ones_like(t) << (t - 1))) >> t
    return torch.clamp(r + out_zp, act_min, act_max).to(torch.int8)


def register_ops() -> None:
    """Defines ``ember::quantized_linear`` (+ ``.out``) in PyTorch, once per process."""
    global _LIB
    if _LIB is not None:
        return
    register_out_variants()
    lib = torch.library.Library("ember", "FRAGMENT")
    lib.define(_SCHEMA)
    lib.define(_SCHEMA_OUT)
    lib.impl("quantized_linear", quantized_linear_ref, "CompositeExplicitAutograd")

    def out_impl(*args, out):
        out.copy_(quantized_linear_ref(*args))
        return out

    lib.impl("quantized_linear.out", out_impl, "CompositeExplicitAutograd")

    def fake(x, w, *rest):
        return x.new_empty((*x.shape[:-1], w.shape[0]), dtype=torch.int8)

    torch.library.register_fake("ember::quantized_linear", fake, lib=lib)
    _LIB = lib


class FusedQuantizedLinear(nn.Module):
    """One integer-only linear layer (+ optional ReLU): int8 in, int8 out."""

    def __init__(self, ql: QuantizedLinear, out_scale: float, out_zp: int, relu: bool) -> None:
        super().__init__()
        w = ql.weight_int8_t.t().contiguous()  # [out, in]
        s_w = ql.weight_scales.double()
        s_x = ql.in_scale
        self.register_buffer("weight", w)
        bias_q = torch.round(ql.bias.double() / (s_x * s_w))
        if bias_q.abs().max().item() >= 2**31:
            raise QuantizationError("quantized bias does not fit int32")
        self.register_buffer("bias", bias_q.to(torch.int32))
        pairs = [quantize_multiplier(s_x * float(s) / out_scale) for s in s_w]
        self.register_buffer("multiplier", torch.tensor([p[0] for p in pairs], dtype=torch.int32))
        self.register_buffer("shift", torch.tensor([p[1] for p in pairs], dtype=torch.int32))
        self.in_zp, self.out_zp = int(ql.in_zp), int(out_zp)
        self.act_min, self.act_max = (self.out_zp if relu else QMIN), QMAX
        self.out_scale = float(out_scale)

    def forward(self, xq: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.quantized_linear(
            xq, self.weight, self.bias, self.multiplier, self.shift, self.in_zp, self.out_zp,
            self.act_min, self.act_max,
        )  # fmt: skip


class IntegerMLP(nn.Module):
    """Quantize the float input once, run fused int8 layers, dequantize the logits."""

    def __init__(
        self, layers: list[FusedQuantizedLinear], in_scale: float, in_zp: int, int8_input: bool
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.in_scale, self.in_zp = float(in_scale), int(in_zp)
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
        last = self.layers[-1]
        return qd.dequantize_per_tensor(h, last.out_scale, last.out_zp, QMIN, QMAX, torch.int8)


def lower_to_integer(
    qmodel: nn.Module,
    calibration_data: list[torch.Tensor],
    percentile: float | None = None,
    int8_input: bool = False,
) -> IntegerMLP:
    """Fuses a quantized ``nn.Sequential`` of QuantizedLinear (+ ReLU) layers into integer-only
    layers. Each layer's output scale is the next layer's input scale; the last layer's comes from
    the range of its (float) outputs on `calibration_data`. With `int8_input` the model takes
    the already-quantized int8 input (``model.quantize_input(x)``; for images in [0, 1] with
    scale 1/255 and zero point -128 that is ``pixel - 128``), so no float input buffer exists."""
    register_ops()
    mods = list(qmodel.children()) if isinstance(qmodel, nn.Sequential) else []
    groups: list[tuple[QuantizedLinear, bool]] = []
    for m in mods:
        if isinstance(m, QuantizedLinear):
            groups.append((m, False))
        elif isinstance(m, nn.ReLU) and groups and not groups[-1][1]:
            groups[-1] = (groups[-1][0], True)
        else:
            raise QuantizationError(
                f"integer lowering handles nn.Sequential of QuantizedLinear/ReLU, found {m!r}"
            )
    if not groups:
        raise QuantizationError("nothing to lower: no QuantizedLinear layer")
    with torch.no_grad():
        y = torch.cat([qmodel(x) for x in calibration_data])
    if percentile is None:
        lo, hi = y.min().item(), y.max().item()
    else:
        f = y.flatten().float()
        lo = torch.quantile(f, 1 - percentile / 100).item()
        hi = torch.quantile(f, percentile / 100).item()
    last_scale, last_zp = qparams_affine(lo, hi)
    layers = []
    for i, (ql, relu) in enumerate(groups):
        if i + 1 < len(groups):
            nxt = groups[i + 1][0]
            out_scale, out_zp = nxt.in_scale, nxt.in_zp
        else:
            out_scale, out_zp = last_scale, last_zp
        layers.append(FusedQuantizedLinear(ql, out_scale, out_zp, relu))
    first = groups[0][0]
    return IntegerMLP(layers, first.in_scale, first.in_zp, int8_input).eval()


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
