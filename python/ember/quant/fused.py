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

from ember.oplist import OpList, load_oplist
from ember.quant.fused_graph import IntegerGraph, lower_graph_to_integer
from ember.quant.fused_modules import (
    FusedQuantizedAdd,
    FusedQuantizedConv2d,
    FusedQuantizedConv2dMaxPool2d,
    FusedQuantizedLinear,
    IntegerSequential,
    QuantizedAvgPool2d,
    QuantizedClamp,
    QuantizedMaxPool2d,
    QuantizedReshape,
    lower_to_integer,
)
from ember.quant.fused_ref import (
    ADD_LEFT_SHIFT,
    activation_clamp,
    quantize_multiplier,
    quantized_add_ref,
    quantized_avg_pool2d_ref,
    quantized_clamp_ref,
    quantized_conv2d_max_pool2d_ref,
    quantized_conv2d_ref,
    quantized_linear_ref,
    quantized_max_pool2d_ref,
    register_ops,
    requantize_ref,
)

__all__ = [
    "ADD_LEFT_SHIFT",
    "FusedQuantizedAdd",
    "FusedQuantizedConv2d",
    "FusedQuantizedConv2dMaxPool2d",
    "FusedQuantizedLinear",
    "IntegerGraph",
    "IntegerSequential",
    "QuantizedAvgPool2d",
    "QuantizedClamp",
    "QuantizedMaxPool2d",
    "QuantizedReshape",
    "activation_clamp",
    "lower_graph_to_integer",
    "lower_to_integer",
    "oplist_with_fused",
    "quantize_multiplier",
    "quantized_add_ref",
    "quantized_avg_pool2d_ref",
    "quantized_clamp_ref",
    "quantized_conv2d_max_pool2d_ref",
    "quantized_conv2d_ref",
    "quantized_linear_ref",
    "quantized_max_pool2d_ref",
    "register_ops",
    "requantize_ref",
]


def oplist_with_fused() -> OpList:
    """The runtime's operator list, which includes ``kernels/quantized/ops.def`` (for
    ``ember.export(oplist=)``; kept for callers from before :func:`ember.oplist.load_oplist`
    read the quantized list itself)."""
    return load_oplist()
