"""EmberCpuBackend lowering: one exported instruction -> one backend operator (:func:`lower`).

:class:`Op` is the backend operator record the fusion passes (:mod:`.fusion`) edit and the
packer (:mod:`.packing`) writes into the blob; :class:`Unsupported` says why an instruction stays
on the portable kernels (both in :mod:`.lowering_base`, re-exported here). Data movement,
reductions, embeddings and resampling are lowered by :mod:`.lowering_data`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch

from ember.backends.cpu import blob as B
from ember.backends.cpu.lowering_base import (  # noqa: F401  (re-exported)
    F32_CODE,
    INF,
    Const,
    Op,
    Unsupported,
    _const_arr,
    _f32,
    _f32x,
    _ints,
    _num,
    _operand,
    _out,
    _pair,
    _t,
)
from ember.backends.cpu.lowering_conv3d import lower_conv3d
from ember.backends.cpu.lowering_convt import ConvGeom, _lower_conv_transpose
from ember.backends.cpu.lowering_data import (
    GATHERS,
    REDUCE_MAX,
    REDUCE_MIN,
    SPLITS,
    _cat,
    _lower_adaptive_avg,
    _lower_embedding,
    _lower_gather,
    _lower_index_select,
    _lower_norm,
    _lower_pad,
    _lower_resize,
    _lower_split,
    _lower_var,
    _reduce,
    _slice,
)
from ember.passes.ir import (
    CONSTANT,
    MUTABLE,
    Arg,
    KernelInstr,
    TensorSpec,
)

log = logging.getLogger(__name__)


UNARY = {
    "aten::sigmoid.out": "sigmoid",
    "aten::tanh.out": "tanh",
    "aten::silu.out": "silu",
    "aten::hardswish.out": "hardswish",
    "aten::hardsigmoid.out": "hardsigmoid",
    "aten::exp.out": "exp",
    "aten::sqrt.out": "sqrt",
    "aten::rsqrt.out": "rsqrt",
    "aten::neg.out": "neg",
    "aten::abs.out": "abs",
    "aten::erf.out": "erf",
    "aten::reciprocal.out": "reciprocal",
    "aten::sign.out": "sign",
    "aten::mish.out": "mish",
}
# Activations with parameters: (act, how many scalar arguments follow the input).
PARAM_ACTS = {
    "aten::leaky_relu.out": ("leaky_relu", 1),
    "aten::elu.out": ("elu", 3),
    "aten::softplus.out": ("softplus", 2),
}
BINARY_T = {
    "aten::add.out": "add",
    "aten::sub.out": "sub",
    "aten::mul.out": "mul",
    "aten::div.out": "div",
}
BINARY_S = {
    "aten::add.Scalar_out": "add",
    "aten::sub.Scalar_out": "sub",
    "aten::mul.Scalar_out": "mul",
    "aten::div.Scalar_out": "div",
    "aten::rsub.Scalar_out": "rsub",
}
COPIES = {
    "aten::view_copy.out",
    "aten::_unsafe_view.out",
    "aten::clone.out",
    "aten::alias_copy.out",
    "aten::detach_copy.out",
    "aten::squeeze_copy.dim_out",
    "aten::squeeze_copy.dims_out",
    "aten::squeeze_copy.out",
    "aten::unsqueeze_copy.out",
    "aten::expand_copy.out",
    "aten::_to_copy.out",
}


def _clamp(lo: float | None, hi: float | None) -> tuple[str, list[float]]:
    lo_, hi_ = -INF if lo is None else lo, INF if hi is None else hi
    return "clamp", [min(lo_, hi_), hi_]  # min > max: every element becomes max, as in eager


# ---- lowering of one instruction --------------------------------------------------------------
def lower(ins: KernelInstr, only_here: Any) -> Op:
    """The backend operator for ``ins`` or raise Unsupported. ``only_here(spec)`` tells whether
    a spec is used by no other instruction (for ops with outputs we drop)."""
    k, a = ins.kernel, ins.args
    for t in [t for arg in [*a, *ins.outputs] for t in arg.tensors()]:
        if len(t.shape) > B.MAX_DIMS:
            raise Unsupported(
                f"a tensor of rank {len(t.shape)} (the backend takes up to {B.MAX_DIMS})"
            )
    if k in SPLITS:
        return _lower_split(ins)
    if not ins.outputs or not all(o.kind == "tensor" for o in ins.outputs):
        raise Unsupported("no tensor output")
    out = _out(ins)
    if k == CHOOSE_PER_TENSOR or (k in QDQ and dynamic_qdq(ins)):
        return _lower_tensor_qdq(ins)
    if k in QDQ:
        return _lower_qdq(ins)
    if k in TOKEN_QDQ:
        return _lower_token_qdq(ins)
    if not _f32(out):
        raise Unsupported("output is not static f32")
    for arg in a:
        for t in arg.tensors():
            if t.dynamic or t.root().kind == MUTABLE or t.root().move_target:
                raise Unsupported("dynamic, mutable or control-flow tensor")
    if k == "aten::convolution.out":
        x, w = _t(a[0]), _t(a[1])
        wa = _const_arr(w)
        ba = None if a[2].kind == "null" else _const_arr(_t(a[2]))
        if len(x.shape) == 5 and _f32(x) and wa is not None and not a[6].value:
            if a[2].kind != "null" and ba is None:
                raise Unsupported("conv3d with a non-constant bias")
            stride3, pad3, dil3 = (_ints(a[i]) for i in (3, 4, 5))
            if not (len(stride3) == len(pad3) == len(dil3) == 3):
                raise Unsupported("conv3d parameters")
            return lower_conv3d(x, wa, ba, out, ConvGeom(stride3, pad3, dil3, int(a[8].value)))
        if len(x.shape) != 4 or not _f32(x) or wa is None or (a[2].kind != "null" and ba is None):
            raise Unsupported("conv2d needs 4-d input, constant weights")
        stride, pad, dil = _pair(a[3], "stride"), _pair(a[4], "padding"), _pair(a[5], "dilation")
        if a[6].value:  # transposed
            outpad, groups = _pair(a[7], "output_padding"), int(a[8].value)
            return _lower_conv_transpose(x, wa, ba, out, stride, pad, dil, outpad, groups)
        groups = int(a[8].value)
        attrs = dict(w=wa.astype(np.float32), b=ba, stride=stride, pad=pad, dil=dil, groups=groups)
        q = getattr(w, "int8_weight", None)  # an int8 weight the partitioner folded
        if q is not None and tuple(q[0].shape) == tuple(wa.shape):
            attrs["wq"] = (q[0].numpy(), q[1].numpy())
        return Op("conv2d", [x], [out], attrs=attrs)
    if k == "aten::_native_batch_norm_legit_no_training.out":
        x = _t(a[0])
        if not _f32(x) or len(x.shape) < 2 or not all(only_here(_out(ins, i)) for i in (1, 2)):
            raise Unsupported("batch norm")
        w = None if a[1].kind == "null" else _const_arr(_t(a[1]))
        b = None if a[2].kind == "null" else _const_arr(_t(a[2]))
        mean, var = _const_arr(_t(a[3])), _const_arr(_t(a[4]))
        if (
            mean is None
            or var is None
            or (a[1].kind != "null" and w is None)
            or (a[2].kind != "null" and b is None)
        ):
            raise Unsupported("batch norm with non-constant statistics")
        eps = float(a[6].value)
        c = x.shape[1]
        scale = (1.0 / np.sqrt(var.astype(np.float64) + eps)) * (w if w is not None else 1.0)
        shift = (b if b is not None else 0.0) - mean * scale
        return Op(
            "bn",
            [x],
            [out],
            attrs=dict(
                scale=np.broadcast_to(scale, (c,)).astype(np.float64),
                shift=np.broadcast_to(shift, (c,)).astype(np.float64),
            ),
        )
    if k == "aten::relu.out":
        return Op("unary", [_f32x(a[0])], [out], act="clamp", fp=[0.0, INF])
    if k == "aten::hardtanh.out":
        act, fp = _clamp(_num(a[1]), _num(a[2]))
        return Op("unary", [_f32x(a[0])], [out], act=act, fp=fp)
    if k == "aten::clamp.out":
        act, fp = _clamp(_num(a[1]), _num(a[2]))
        return Op("unary", [_f32x(a[0])], [out], act=act, fp=fp)
    if k == "aten::gelu.out":
        approx = a[1].value if a[1].kind == "string" else "none"
        return Op("unary", [_f32x(a[0])], [out], act="gelu_tanh" if approx == "tanh" else "gelu")
    if k in UNARY:
        return Op("unary", [_f32x(a[0])], [out], act=UNARY[k])
    if k in PARAM_ACTS:  # parameters in fp[3..5] (EMC_ACT_FP_*)
        act, n_params = PARAM_ACTS[k]
        params = [_num(v) for v in a[1 : 1 + n_params]]
        if any(v is None or not math.isfinite(v) for v in params):
            raise Unsupported("activation parameters not finite constants")
        if act == "softplus" and params[0] == 0.0:
            raise Unsupported("softplus with beta 0")
        return Op("unary", [_f32x(a[0])], [out], act=act, fp=[-INF, INF, 0.0, *params])
    if k in BINARY_T:
        x, y = _t(a[0]), _t(a[1])
        if k in ("aten::add.out", "aten::sub.out") and _num(a[2]) != 1.0:
            raise Unsupported("alpha != 1")
        if k == "aten::div.out" and len(a) > 4 and a[2].kind == "string":
            raise Unsupported("div with rounding mode")
        return _binary(BINARY_T[k], x, y, out)
    if k in BINARY_S:
        x = _f32x(a[0])
        s = _num(a[1])
        if s is None:
            raise Unsupported("scalar")
        op = BINARY_S[k]
        if op in ("add", "sub", "rsub") and _num(a[2]) != 1.0:
            raise Unsupported("alpha != 1")
        return Op("binary", [x, None], [out], ip=[B.BIN[op]], fp=[-INF, INF, s])
    if k in ("aten::addmm.out", "aten::mm.out", "aten::bmm.out"):
        if k == "aten::addmm.out":
            bias, m1, m2 = _t(a[0]), _t(a[1]), _t(a[2])
            if _num(a[3]) != 1.0 or _num(a[4]) != 1.0:
                raise Unsupported("addmm with beta/alpha")
            if (
                not _f32(bias)
                or math.prod(bias.shape) != m2.shape[-1]
                or (len(bias.shape) == 2 and bias.shape[0] != 1)
            ):
                raise Unsupported("addmm bias is not a row")
        else:
            bias, m1, m2 = None, _t(a[0]), _t(a[1])
        batch = m1.shape[0] if k == "aten::bmm.out" else 1
        m, kk = m1.shape[-2], m1.shape[-1]
        n = m2.shape[-1]
        m1c, m2c = _const_arr(m1), _const_arr(m2)
        # a constant left operand (W @ x) of one product: A in 6-row panels, as a conv's weights;
        # of a batched product (a weight broadcast over the batch): read as it is
        a_packed = m1c is not None and batch == 1
        if not (_f32(m1) and _f32(m2)) or (m1c is not None and m2c is not None):
            raise Unsupported("gemm operands")
        b_packed = m2c is not None and batch == 1
        bop = (
            Const(B.pack_b_panels(m2c.reshape(kk, n)), ("bpack", id(m2)))
            if b_packed
            else _operand(m2)
        )
        aop = (
            Const(B.pack_a_panels(m1c.reshape(m, kk)), ("apack", id(m1)))
            if a_packed
            else _operand(m1)
        )
        ins_ = [aop, bop, None if bias is None else _operand(bias)]
        attrs: dict[str, Any] = {}
        # a linear layer's int8 weight, [n, k], for fusion_q8._linear_q8 / _linear_dq8
        q = getattr(m2, "int8_weight_t", None)
        ba = None if bias is None else _const_arr(bias)
        if (
            q is not None
            and b_packed
            and tuple(q[0].shape) == (n, kk)
            and (bias is None or ba is not None)
        ):
            attrs["lin_wq"] = (q[0].numpy(), q[1].numpy(), m2c.reshape(kk, n), ba)
        return Op(
            "gemm",
            ins_,
            [out],
            attrs=attrs,
            ip=[
                batch,
                m,
                kk,
                n,
                m * kk if batch > 1 else 0,
                kk * n if batch > 1 else 0,
                int(a_packed),
                int(b_packed),
                0,  # EMC_GEMM_C_HEADS (fusion_q8._gemm_heads)
            ],
        )
    if k == "aten::max_pool2d_with_indices.out":
        x = _f32x(a[0])
        if len(x.shape) != 4 or not only_here(_out(ins, 1)):
            raise Unsupported("max pool")
        kernel, stride = _pair(a[1], "kernel"), _pair(a[2], "stride", empty_ok=True)
        pad, dil = _pair(a[3], "padding"), _pair(a[4], "dilation")
        stride = stride or kernel
        _pool_fits(x, kernel, pad, dil)
        return Op("maxpool2d", [x], [out], ip=[*kernel, *stride, *pad, *dil, 0, 0])
    if k == "aten::adaptive_max_pool2d.out":  # even windows: a max pool of kernel = stride
        x = _f32x(a[0])
        if len(x.shape) != 4 or not only_here(_out(ins, 1)):
            raise Unsupported("adaptive max pool rank, or its indices are used")
        (h, w), (oh, ow) = x.shape[2:], _ints(a[1])
        if oh < 1 or ow < 1 or h % oh or w % ow:
            raise Unsupported("adaptive max pool of uneven windows")
        kh, kw = h // oh, w // ow
        return Op("maxpool2d", [x], [out], ip=[kh, kw, kh, kw, 0, 0, 1, 1, 0, 0])
    if k == "aten::max_pool3d_with_indices.out":
        # separable: a 2-d max pool along depth over [N * C, 1, D, H * W], then one along H, W
        # over [N * C * OD, 1, H, W] (max of maxes; -inf padding, NaN kept, either way)
        x = _f32x(a[0])
        if len(x.shape) not in (4, 5) or len(out.shape) != len(x.shape):
            raise Unsupported("max pool 3d rank")
        if not only_here(_out(ins, 1)):
            raise Unsupported("max pool 3d indices are used")
        k3, s3, p3, d3 = (_ints(a[i]) for i in (1, 2, 3, 4))
        k3, s3 = k3 * 3 if len(k3) == 1 else k3, s3 or k3
        s3, p3, d3 = (v * 3 if len(v) == 1 else v for v in (s3, p3, d3))
        if not all(len(v) == 3 for v in (k3, s3, p3, d3)):
            raise Unsupported("max pool 3d parameters")
        nc = math.prod(x.shape[:-3])
        d, h, w = x.shape[-3:]
        od, oh, ow = out.shape[-3:]
        f32 = x.dtype
        views = [
            TensorSpec(f"{out.name}.{tag}", f32, shape)
            for tag, shape in (
                ("d_in", (nc, 1, d, h * w)),
                ("d_out", (nc, 1, od, h * w)),
                ("hw_in", (nc * od, 1, h, w)),
                ("hw_out", (nc * od, 1, oh, ow)),
            )
        ]
        _pool_fits(views[0], [k3[0], 1], [p3[0], 0], [d3[0], 1])
        _pool_fits(views[2], k3[1:], p3[1:], d3[1:])
        ip_d = [k3[0], 1, s3[0], 1, p3[0], 0, d3[0], 1, 0, 0]
        ip_hw = [*k3[1:], *s3[1:], *p3[1:], *d3[1:], 0, 0]
        parts = [Op("copy", [x], [views[0]])]
        if ip_d[:8] != [1, 1, 1, 1, 0, 0, 1, 1]:  # else a window of one: the identity
            parts.append(Op("maxpool2d", [views[0]], [views[1]], ip=ip_d))
        else:
            parts.append(Op("copy", [views[0]], [views[1]]))
        parts.append(Op("copy", [views[1]], [views[2]]))
        if ip_hw[:8] != [1, 1, 1, 1, 0, 0, 1, 1]:
            parts.append(Op("maxpool2d", [views[2]], [views[3]], ip=ip_hw))
        else:
            parts.append(Op("copy", [views[2]], [views[3]]))
        parts.append(Op("copy", [views[3]], [out]))
        return Op("parts", [x], [out], attrs=dict(parts=parts))
    if k == "aten::avg_pool2d.out":
        x = _f32x(a[0])
        kernel, stride = _pair(a[1], "kernel"), _pair(a[2], "stride", empty_ok=True)
        pad = _pair(a[3], "padding")
        stride = stride or kernel
        include_pad = bool(a[5].value)
        div = 0 if a[6].kind == "null" else int(a[6].value)
        if len(x.shape) != 4:
            raise Unsupported("avg pool")
        h, w = x.shape[2:]
        if tuple(out.shape[2:]) == (1, 1) and pad == [0, 0] and not div and kernel[0] >= h:
            if kernel[1] >= w:  # one window over the whole map (HF EfficientNet's ceil-mode
                # pool of kernel 1280 on 7x7): its divisor is h * w either way, a mean
                return Op("mean", [x], [out], ip=[x.shape[0] * x.shape[1], h * w, 1])
        _pool_fits(x, kernel, pad, [1, 1])
        return Op("avgpool2d", [x], [out], ip=[*kernel, *stride, *pad, 1, 1, int(include_pad), div])
    if k == "aten::_adaptive_avg_pool2d.out":
        x = _f32x(a[0])
        oh, ow = _ints(a[1])
        h, w = x.shape[-2:]
        if len(x.shape) != 4:
            raise Unsupported("adaptive pool rank")
        if (oh, ow) == (1, 1):
            return Op("mean", [x], [out], ip=[x.shape[0] * x.shape[1], h * w, 1])
        if h % oh or w % ow:  # uneven windows (a pyramid pooling's 3x3 and 6x6 bins)
            return _lower_adaptive_avg(x, out, oh, ow)
        return Op(
            "avgpool2d", [x], [out], ip=[h // oh, w // ow, h // oh, w // ow, 0, 0, 1, 1, 0, 0]
        )
    if k in ("aten::mean.out", "aten::mean.dim_out", "aten::sum.IntList_out"):
        x = _f32x(a[0])
        nd = len(x.shape)
        if nd == 0:
            raise Unsupported("mean or sum of a 0-d tensor")
        dims = sorted({d % nd for d in _ints(a[1])}) if a[1].kind == "intlist" else []
        dims = dims or list(range(nd))  # no dims (None or []): all of them, as ATen
        if a[3].kind != "null" and a[3].value != F32_CODE:
            raise Unsupported("reduction to another dtype")
        if math.prod(x.shape[d] for d in dims) == 0:
            raise Unsupported("empty mean or sum")
        return _reduce(x, out, dims, int(k == "aten::sum.IntList_out"))
    if k in ("aten::amax.out", "aten::amin.out", "aten::max.dim_max", "aten::min.dim_min"):
        # max / min over dims (a hand-written stable softmax's x - x.max(-1)), NaN propagating;
        # max.dim / min.dim only when their indices are not used
        x = _f32x(a[0])
        nd = len(x.shape)
        if nd == 0 or math.prod(x.shape) == 0:
            raise Unsupported("max / min of a 0-d or empty tensor")
        if k.endswith(("dim_max", "dim_min")):
            if not only_here(_out(ins, 1)):
                raise Unsupported("max / min indices are used")
            dims = [int(a[1].value) % nd]
        else:
            dims = sorted({d % nd for d in _ints(a[1])}) or list(range(nd))
        how = REDUCE_MAX if "max" in k else REDUCE_MIN
        return _reduce(x, out, dims, how)
    if k == "aten::var.correction_out":
        return _lower_var(_f32x(a[0]), a, out)
    if k == "aten::linalg_vector_norm.out":  # the 1- and 2-norms: sum of |x| or sqrt(sum(x * x))
        return _lower_norm(_f32x(a[0]), a, out)
    if k in ("aten::upsample_nearest2d.vec_out", "aten::upsample_bilinear2d.vec_out"):
        return _lower_resize(ins, out)
    if k == "aten::embedding.out":
        return _lower_embedding(a, out)
    if k == "aten::flip.out":
        x = _f32x(a[0])
        dims = sorted({d % max(len(x.shape), 1) for d in _ints(a[1])})
        if not x.shape or not dims:
            return Op("copy", [x], [out])
        flips, src = [], x
        for i, d in enumerate(dims):  # one reversed slice per flipped dim
            dst = out if i == len(dims) - 1 else TensorSpec(f"{out.name}.flip{i}", x.dtype, x.shape)
            flips.append(_slice(src, dst, d, 0, 1, x.shape[d]))
            flips[-1].ip.append(1)  # EMC_SLICE_REVERSE
            src = dst
        return flips[0] if len(flips) == 1 else Op("parts", [x], [out], attrs=dict(parts=flips))
    if k in ("aten::_softmax.out", "aten::_log_softmax.out"):
        x = _f32x(a[0])
        nd = len(x.shape)
        if nd == 0:
            raise Unsupported("softmax of a 0-d tensor")
        dim = int(a[1].value) % nd  # a non-last dim: [rows, cols, inner], columns at once
        rows, cols, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1 :])
        if cols < 1:
            raise Unsupported("softmax over an empty dim")
        return Op(
            "softmax",
            [x],
            [out],
            ip=[rows, cols, inner, int(k == "aten::_log_softmax.out")],
            attrs=dict(last=dim == nd - 1),  # (only then may a scale and mask fuse into it)
        )
    if k == "aten::native_layer_norm.out":
        x = _f32x(a[0])
        if not (only_here(_out(ins, 1)) and only_here(_out(ins, 2))):
            raise Unsupported("layer norm statistics are used")
        cols = math.prod(_ints(a[1]))
        w = None if a[2].kind == "null" else _operand(_t(a[2]))
        b = None if a[3].kind == "null" else _operand(_t(a[3]))
        return Op(
            "layernorm",
            [x, w, b],
            [out],
            ip=[math.prod(x.shape) // cols, cols],
            fp=[float(a[4].value)],
        )
    if k == "aten::native_group_norm.out":  # split by fusion._split_group_norm
        x = _f32x(a[0])
        if not (only_here(_out(ins, 1)) and only_here(_out(ins, 2))):
            raise Unsupported("group norm statistics are used")
        n, c, hw, g = (int(v.value) for v in a[3:7])
        if len(x.shape) < 2 or g < 1 or c % g or n * c * hw != math.prod(x.shape):
            raise Unsupported("group norm shape")
        wb = [None if v.kind == "null" else _const_arr(_t(v)) for v in a[1:3]]
        if any(v is None and a[1 + i].kind != "null" for i, v in enumerate(wb)):
            raise Unsupported("group norm with a non-constant weight or bias")
        return Op(
            "groupnorm", [x], [out], ip=[n, c, hw, g], fp=[float(a[7].value)], attrs=dict(wb=wb)
        )
    if k == "aten::_native_batch_norm_legit.no_stats_out":
        # F.instance_norm: the batch seen as [1, N * C, H, W] normalized per channel over H, W
        # with batch statistics: one sample, so a group norm of one channel a group
        x = _f32x(a[0])
        if not (only_here(_out(ins, 1)) and only_here(_out(ins, 2))):
            raise Unsupported("batch norm statistics are used")
        if len(x.shape) < 3 or x.shape[0] != 1:
            raise Unsupported("batch norm on batch statistics of several samples (training mode)")
        c, hw = x.shape[1], math.prod(x.shape[2:])
        wb = [None if v.kind == "null" else _const_arr(_t(v)) for v in a[1:3]]
        if any(v is None and a[1 + i].kind != "null" for i, v in enumerate(wb)):
            raise Unsupported("batch norm with a non-constant weight or bias")
        return Op(
            "groupnorm", [x], [out], ip=[1, c, hw, c], fp=[float(a[5].value)], attrs=dict(wb=wb)
        )
    if k == "aten::permute_copy.out":
        x = _f32x(a[0])
        dims = [d % max(len(x.shape), 1) for d in _ints(a[1])]
        return Op("permute", [x], [out], ip=dims)
    if k == "aten::expand_copy.out" and math.prod(_t(a[0]).shape) != math.prod(out.shape):
        # a broadcast: x * 1 into the output (exact for every value), the binary op's
        # broadcasting; a constant source stays in the file at its own size
        x = _t(a[0])
        if not _f32(x) or len(x.shape) > len(out.shape):
            raise Unsupported("expand of a non-f32 tensor")
        return Op("binary", [_operand(x), None], [out], ip=[B.BIN["mul"]], fp=[-INF, INF, 1.0])
    if k == "aten::index_select.out":
        return _lower_index_select(ins, out)
    if k in GATHERS:  # advanced indexing, gathers and strided views by constant indices
        return _lower_gather(ins, out)
    if k in COPIES:
        x = _f32x(a[0])
        if math.prod(x.shape) != math.prod(out.shape):
            raise Unsupported("copy changes the element count")
        return Op("copy", [x], [out])
    if k == "aten::pow.Tensor_Scalar_out":  # the exponents ATen computes exactly so
        x, e = _f32x(a[0]), _num(a[1])
        if e == 2.0:
            return Op("binary", [x, x], [out], ip=[B.BIN["mul"]], fp=[-INF, INF])
        if e == 0.5:
            return Op("unary", [x], [out], act="sqrt")
        if e == 1.0:
            return Op("copy", [x], [out])
        if e == 3.0:  # (x * x) * x: the tanh GELU of GPT-2, Phi, GPT-J
            return Op("unary", [x], [out], act="cube")
        if e in (-1.0, -0.5):  # ATen's reciprocal and rsqrt
            return Op("unary", [x], [out], act="reciprocal" if e == -1.0 else "rsqrt")
        raise Unsupported(f"pow with exponent {e}")
    if k == "aten::cat.out":
        if a[0].kind != "tensorlist" or not a[0].value:
            raise Unsupported("cat of no tensors")
        nd = len(out.shape)
        # ATen skips 1-d empty operands (a legacy empty KV cache: cat([tensor([]), k]))
        xs = [x for x in a[0].value if nd == 1 or tuple(x.shape) != (0,)]
        if not xs or not all(_f32(x) and len(x.shape) == nd for x in xs):
            raise Unsupported("cat operands")
        dim = int(a[1].value) % nd
        if len(xs) == 1:
            return Op("copy", [_operand(xs[0])], [out])
        return _cat([_operand(x) for x in xs], out, dim)
    if k == "aten::constant_pad_nd.out":
        return _lower_pad(_f32x(a[0]), a, out)
    if k == "aten::slice_copy.Tensor_out":
        x = _f32x(a[0])
        nd = len(x.shape)
        dim = int(a[1].value) % nd
        n = x.shape[dim]
        start = 0 if a[2].kind == "null" else int(a[2].value)
        end = n if a[3].kind == "null" else int(a[3].value)
        step = int(a[4].value)
        start, end, step = slice(start, end, step).indices(n)
        length = len(range(start, end, step))
        if length != out.shape[dim]:
            raise Unsupported("slice shape")
        return _slice(x, out, dim, start, step, length)
    if k == "aten::select_copy.int_out":  # a slice of length 1 (the output drops the dim)
        x = _f32x(a[0])
        if not x.shape:
            raise Unsupported("select of a 0-d tensor")
        dim = int(a[1].value) % len(x.shape)
        n, i = x.shape[dim], int(a[2].value)
        if not -n <= i < n or math.prod(out.shape) * n != math.prod(x.shape):
            raise Unsupported("select index or shape")
        return _slice(x, out, dim, i % n, 1, 1)
    raise Unsupported(k)


def _pool_fits(x: TensorSpec, kernel: list[int], pad: list[int], dil: list[int]) -> None:
    """Raise Unsupported for a pool window larger than the padded input (torch allows one in
    ceil mode: a 1-row map, window 2; the runtime refuses it)."""
    for a in range(2):
        if dil[a] * (kernel[a] - 1) + 1 > x.shape[2 + a] + 2 * pad[a]:
            raise Unsupported("pool window larger than the padded input (ceil mode)")


def _binary(op: str, x: TensorSpec, y: TensorSpec, out: TensorSpec) -> Op:
    if not (_f32(x) and _f32(y)):
        raise Unsupported("binary operands are not f32")
    xa, ya = _const_arr(x), _const_arr(y)
    if xa is not None and ya is not None:
        raise Unsupported("constant binary")
    if ya is not None and ya.size == 1:
        return Op(
            "binary", [x, None], [out], ip=[B.BIN[op]], fp=[-INF, INF, float(ya.reshape(-1)[0])]
        )
    if xa is not None and xa.size == 1 and op in ("add", "mul", "sub"):
        v = float(xa.reshape(-1)[0])
        if op == "sub":
            return Op("binary", [y, None], [out], ip=[B.BIN["rsub"]], fp=[-INF, INF, v])
        return Op("binary", [y, None], [out], ip=[B.BIN[op]], fp=[-INF, INF, v])
    return Op("binary", [_operand(x), _operand(y)], [out], ip=[B.BIN[op]], fp=[-INF, INF])


# ---- int8 Q/DQ (per tensor) ---------------------------------------------------------------------
QUANTIZE = (
    "quantized_decomposed::quantize_per_tensor.out",
    "quantized_decomposed::quantize_per_tensor.Tensor_out",
)
DEQUANTIZE = (
    "quantized_decomposed::dequantize_per_tensor.out",
    "quantized_decomposed::dequantize_per_tensor.Tensor_out",
)
QDQ = QUANTIZE + DEQUANTIZE
_INT8_TYPES = {0: torch.uint8, 1: torch.int8}  # ScalarType codes the pair may use
# Dynamic per-token quantization (ember.quantize(dynamic=True), XNNPACK's dynamic linear): its
# three operators on one activation become one float ``tokenfq`` op (fusion._token_fake_quant).
CHOOSE_PER_TOKEN = "quantized_decomposed::choose_qparams_per_token_asymmetric.out"
QUANTIZE_PER_TOKEN = "quantized_decomposed::quantize_per_token.out"
DEQUANTIZE_PER_TOKEN = "quantized_decomposed::dequantize_per_token.out"
TOKEN_QDQ = (CHOOSE_PER_TOKEN, QUANTIZE_PER_TOKEN, DEQUANTIZE_PER_TOKEN)
# Dynamic per-tensor quantization (ExecuTorch's XNNPACKQuantizer, is_dynamic=True): qparams from
# choose_qparams.tensor feed the Tensor forms of the pair (fusion._tensor_fake_quant).
CHOOSE_PER_TENSOR = "quantized_decomposed::choose_qparams.Tensor_out"


def dynamic_qdq(ins: KernelInstr) -> bool:
    """Whether a per-tensor quantize or dequantize takes its qparams from tensors computed at run
    time (not constants)."""
    a = ins.args
    return (
        ins.kernel.endswith(".Tensor_out")
        and len(a) > 2
        and any(x.kind == "tensor" and x.value.kind != CONSTANT for x in a[1:3])
    )


def _qparam(a: Arg, what: str, integer: bool) -> float:
    """A scalar qparam, given as a number or as a one-element constant tensor (``.Tensor``)."""
    if a.kind in ("int", "double"):
        return float(a.value)
    if a.kind == "tensor":
        arr = a.value.data if a.value.kind == CONSTANT else None
        if arr is not None and arr.numel() == 1:
            v = float(arr.reshape(-1)[0])
            return float(int(v)) if integer else v
    raise Unsupported(f"{what} is not a constant scalar")


def qparams_of(ins: KernelInstr) -> tuple[float, int, int, int]:
    """(scale, zero point, quant_min, quant_max) of a per-tensor quantize or dequantize."""
    a = ins.args
    scale, zp = _qparam(a[1], "scale", False), int(_qparam(a[2], "zero_point", True))
    if a[3].kind != "int" or a[4].kind != "int" or a[5].kind != "int":
        raise Unsupported("quant range or dtype is not a constant")
    qmin, qmax, code = int(a[3].value), int(a[4].value), int(a[5].value)
    dt = _INT8_TYPES.get(code)
    if dt is None:
        raise Unsupported("quantized dtype is not int8 / uint8")
    info = torch.iinfo(dt)
    if not (
        math.isfinite(scale)
        and 1e-30 < scale < 1e30
        and info.min <= qmin <= qmax <= info.max
        and -65536 <= zp <= 65536
    ):
        raise Unsupported("qparams out of range")
    return scale, zp, qmin, qmax


def fakequant_fp(q: tuple[float, int, int, int], lo: float = -INF, hi: float = INF) -> list[float]:
    """The fp slots of EMC_ACT_FAKEQUANT (emc_format.h): clamp bounds, then 1/scale rounded to
    f32 as the portable quantize computes it, the f32 scale, zero point and range."""
    scale, zp, qmin, qmax = q
    inv = float(np.float32(1.0 / scale))
    return [lo, hi, 0.0, inv, float(np.float32(scale)), float(zp), float(qmin), float(qmax)]


def _lower_qdq(ins: KernelInstr) -> Op:
    """A quantize or a dequantize as half of a fake-quant pair: ``quant`` (f32 -> int8) and
    ``dequant`` (int8 -> f32) exist only until the fusion pass ``_fake_quant`` joins each
    dequantize with the quantize it reads into one float ``fakequant`` unary; the int8 tensor
    between them never exists in the backend. One that finds no partner in its run makes the
    run split (an int8 tensor may not cross the delegate's boundary)."""
    x, out = _t(ins.args[0]), _out(ins)
    q = qparams_of(ins)
    if x.dynamic or out.dynamic or tuple(x.shape) != tuple(out.shape):
        raise Unsupported("Q/DQ with dynamic or changing shape")
    if ins.kernel in QUANTIZE:  # (of a constant too: a mask or an added tensor's values)
        if not _f32(x) or out.dtype not in _INT8_TYPES.values():
            raise Unsupported("quantize of a non-f32 tensor")
        return Op("quant", [_operand(x)], [out], attrs=dict(q=q))
    if x.dtype not in _INT8_TYPES.values() or not _f32(out):
        raise Unsupported("dequantize to a non-f32 output")
    if x.kind == CONSTANT:  # an int8 constant (XNNPACKQuantizer's scalars and added tensors)
        if x.data is None:
            raise Unsupported("dequantize of a constant without data")
        return Op("copy", [Const(_dequantized(x.data, q))], [out])
    return Op("dequant", [x], [out], attrs=dict(q=q))


def _dequantized(data: torch.Tensor, q: tuple[float, int, int, int]) -> np.ndarray:
    """(q - zp) * scale in f32, each step rounded as the portable dequantize rounds it."""
    scale, zp = np.float32(q[0]), np.float32(q[1])
    v = data.detach().to(torch.int64).numpy().astype(np.float32)
    return np.ascontiguousarray((v - zp) * scale, dtype=np.float32)


def _lower_tensor_qdq(ins: KernelInstr) -> Op:
    """One of dynamic per-tensor quantization's three operators (``tc_choose``: choose_qparams
    .tensor into an f64 scale and an int64 zero point of one element each; ``tc_quant`` /
    ``tc_dequant``: the pair with those tensors as qparams), f32 activations and int8 in a range
    within [-128, 127]. They exist only until the fusion passes join them and hand the result to
    a dynamic int8 linear (fusion._tensor_fake_quant, fusion_q8._linear_dq8); one left over makes
    the run split."""
    a = ins.args
    x = _t(a[0])
    if x.dynamic or any(o.value.dynamic for o in ins.outputs):
        raise Unsupported("per-tensor dynamic Q/DQ with dynamic shapes")
    if ins.kernel == CHOOSE_PER_TENSOR:
        s, z = _out(ins, 0), _out(ins, 1)
        ok = all(v.kind == "int" for v in a[1:3]) and a[3].kind in ("double", "int")
        if not ok or a[4].kind != "int" or int(a[4].value) != 1:  # ScalarType int8
            raise Unsupported("per-tensor qparams other than int8 with constant range and eps")
        qmin, qmax, eps = int(a[1].value), int(a[2].value), float(a[3].value)
        if not (-128 <= qmin < qmax <= 127 and 0 < eps < 1e30):
            raise Unsupported("per-tensor qparams range or eps out of bounds")
        if not _f32(x) or s.dtype != torch.float64 or z.dtype != torch.int64:
            raise Unsupported("per-tensor qparams other than f32 -> f64 scale, int64 zero point")
        return Op("tc_choose", [x], [s, z], attrs=dict(q=(qmin, qmax, eps)))
    s, z, out = _t(a[1]), _t(a[2]), _out(ins)
    if s.dtype != torch.float64 or z.dtype != torch.int64 or tuple(x.shape) != tuple(out.shape):
        raise Unsupported("per-tensor dynamic Q/DQ with other qparam dtypes")
    if not (a[3].kind == a[4].kind == a[5].kind == "int") or int(a[5].value) != 1:
        raise Unsupported("per-tensor dynamic Q/DQ other than int8 with a constant range")
    rng = (int(a[3].value), int(a[4].value))
    if ins.kernel in QUANTIZE:
        if not _f32(x) or out.dtype != torch.int8:
            raise Unsupported("per-tensor dynamic quantize other than f32 -> int8")
        return Op("tc_quant", [x, s, z], [out], attrs=dict(q=rng))
    if x.dtype != torch.int8 or not _f32(out):
        raise Unsupported("per-tensor dynamic dequantize other than int8 -> f32")
    return Op("tc_dequant", [x, s, z], [out], attrs=dict(q=rng))


def _lower_token_qdq(ins: KernelInstr) -> Op:
    """One of dynamic per-token quantization's three operators, in the one form the backend's
    ``tokenfq`` repeats step for step (the portable kernels' math for these dtypes): an f32
    activation, f64 scales and int64 zero points from ``choose_qparams_per_token_asymmetric``,
    int8 in [-128, 127], an f32 result. ``tq_choose`` / ``tq_quant`` / ``tq_dequant`` exist only
    until the fusion pass joins them; a part without the others makes the run split."""
    a = ins.args
    x = _t(a[0])
    if x.dynamic or any(o.value.dynamic for o in ins.outputs):
        raise Unsupported("per-token Q/DQ with dynamic shapes")
    if ins.kernel == CHOOSE_PER_TOKEN:
        s, z = _out(ins, 0), _out(ins, 1)
        if not _f32(x) or len(x.shape) < 1 or s.dtype != torch.float64 or z.dtype != torch.int64:
            raise Unsupported("per-token qparams other than f32 -> f64 scales, int64 zero points")
        return Op("tq_choose", [x], [s, z])
    s, z, out = _t(a[1]), _t(a[2]), _out(ins)
    if s.dtype != torch.float64 or z.dtype != torch.int64 or tuple(x.shape) != tuple(out.shape):
        raise Unsupported("per-token Q/DQ with other qparam dtypes")
    rng = (a[3].value, a[4].value) if a[3].kind == a[4].kind == "int" else None
    if rng is None or (int(rng[0]), int(rng[1])) != (-128, 127):
        raise Unsupported("per-token Q/DQ with a range other than int8's")
    if ins.kernel == QUANTIZE_PER_TOKEN:
        if not _f32(x) or out.dtype != torch.int8:
            raise Unsupported("per-token quantize other than f32 -> int8")
        return Op("tq_quant", [x, s, z], [out])
    if x.dtype != torch.int8 or not _f32(out):
        raise Unsupported("per-token dequantize other than int8 -> f32")
    return Op("tq_dequant", [x, s, z], [out])
