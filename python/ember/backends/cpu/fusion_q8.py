"""EmberCpuBackend fusion passes that choose int8 operators and head layouts, run after those
of :mod:`ember.backends.cpu.fusion` (same conventions: each edits ``ops`` in place and only
fuses what nothing outside the run reads): int8 linears and convs over fake-quantized inputs,
the dynamic int8 linears behind per-token Q/DQ, and attention's head permutes folded into the
products around them.
"""

from __future__ import annotations

import math

import numpy as np

from ember.backends.cpu import blob as B
from ember.backends.cpu.fusion import _absorb, _depthwise, _fuse_plane_means, _Uses
from ember.backends.cpu.lowering import Const, Op, Unsupported
from ember.passes.ir import TensorSpec


def _merge_fake_quants(ops: list[Op], u: _Uses) -> None:
    """A clamping fake-quant unary (PT2E's Q/DQ after a ReLU6 that shares its input's qparams:
    XNNPACKQuantizer's form of conv -> Q/DQ -> hardtanh -> Q/DQ) that alone reads an op whose
    own activation is a fake-quant with the same qparams goes, that op clamping first: with r(x)
    = the rounded level of x (monotone) and v(q) its value (r(v(q)) = q), fq(clamp(fq(y))) =
    fq(clamp(y)) for every finite y. The int8 fusions after it then see conv -> fake-quant ->
    conv, as Ember's quantizer writes it, and find the u8 links. (A NaN y gives qmin's value
    instead of the clamp's.)"""
    for f in [o for o in ops if o.kind == "unary" and o.act == "fakequant"]:
        p = u.producer(f.ins[0])
        if (
            p is None
            or p is f
            or p.act != "fakequant"
            or len(p.outs) != 1
            or len(f.outs) != 1
            or f.ins[0] is not p.outs[0]
            or list(p.fp[3:8]) != list(f.fp[3:8])
            or max(p.fp[0], f.fp[0]) > min(p.fp[1], f.fp[1])
            or not u.private(f.ins[0], f)
        ):
            continue
        p.fp[0], p.fp[1] = max(p.fp[0], f.fp[0]), min(p.fp[1], f.fp[1])
        p.outs = [f.outs[0]]
        _absorb(ops, f, p)


#: Activations without parameters that may run first in a unary (EMC_UNARY_PRE).
_PRE_ACTS = ("sigmoid", "silu", "gelu", "gelu_tanh", "tanh", "hardswish", "hardsigmoid")


def _act_then_fq(ops: list[Op], u: _Uses) -> None:
    """An activation that alone feeds a plain fake-quant (PT2E's sigmoid / GELU / tanh between
    Q/DQ pairs) becomes one unary: the fake-quant with that activation first (EMC_UNARY_PRE);
    so does PT2E's decomposed SiLU, ``x * sigmoid(x)`` fake-quantized (the multiply's operands x
    and a sigmoid of x that only it reads). The same f32 steps in the same order; on a u8 link
    the op then becomes a table (:func:`_lut_candidate`)."""
    for f in [o for o in ops if o.kind == "unary" and o.act == "fakequant"]:
        p = u.producer(f.ins[0])
        if (
            p is None
            or p.kind != "unary"
            or p.act not in _PRE_ACTS
            or "pre" in p.attrs
            or len(p.ins) != 1
            or len(p.outs) != 1
            or f.ins[0] is not p.outs[0]
            or not u.private(p.outs[0], f)
        ):
            continue
        f.ins = list(p.ins)
        f.attrs["pre"] = (B.ACT[p.act], 0)
        _absorb(ops, p, f)
    for m in [o for o in ops if o.kind == "binary" and o.act == "fakequant"]:
        if m.ip[:1] != [B.BIN["mul"]] or len(m.ins) != 2 or len(m.outs) != 1:
            continue
        for k in (0, 1):
            x, s = m.ins[k], m.ins[1 - k]
            p = u.producer(s)
            if (
                isinstance(x, TensorSpec)
                and p is not None
                and p.kind == "unary"
                and p.act == "sigmoid"
                and len(p.ins) == 1
                and p.ins[0] is x
                and s is p.outs[0]
                and tuple(x.shape) == tuple(m.outs[0].shape)
                and u.private(s, m)
            ):
                m.kind, m.ins, m.ip = "unary", [x], []
                m.attrs["pre"] = (B.ACT["sigmoid"], 1)
                _absorb(ops, p, m)
                break


def _linear_q8(ops: list[Op], u: _Uses) -> None:
    """A one-row linear layer with int8 weights (``lin_wq``: the partitioner kept them through
    the weight's transpose) whose input a fake-quant wrote becomes a 1x1 conv over a 1x1 image
    with those weights, for :func:`_conv_q8` to run in int8: a CNN's classifier (MobileNetV3's
    two, ResNet's and MobileNetV2's one) reads its weights once per inference, so a quarter of
    the bytes is most of the time. Its row and output are seen as [1, k, 1, 1] and [1, n, 1, 1]
    (views of the same storage). Only one row: the int8 conv runs image by image, and rows as
    images would read the weights once per row."""
    for g in [o for o in ops if o.kind == "gemm" and "lin_wq" in o.attrs]:
        x, y = g.ins[0], g.outs[0]
        p = u.producer(x)
        if (
            g.ip[1] != 1  # M
            or not isinstance(x, TensorSpec)
            or len(x.shape) != 2
            or len(g.ins) != 3
            or len(g.outs) != 1
            or not isinstance(x, TensorSpec)
            or p is None
            or p.act not in ("fakequant", "hardswish_fq")
        ):
            continue
        wq, s, wf, b = g.attrs.pop("lin_wq")
        n, k = wq.shape
        x4 = TensorSpec(f"{x.name}.image", x.dtype, (1, k, 1, 1), base=x)
        y4 = TensorSpec(f"{y.name}.image", y.dtype, (1, n, 1, 1), base=y)
        g.kind, g.ins, g.outs, g.ip = "conv2d", [x4], [y4], []
        g.attrs = dict(
            w=np.ascontiguousarray(wf.T).reshape(n, k, 1, 1),
            b=b,
            stride=[1, 1],
            pad=[0, 0],
            dil=[1, 1],
            groups=1,
            wq=(wq.reshape(n, k, 1, 1), s),
        )


def _linear_dq8(ops: list[Op], u: _Uses) -> None:
    """A linear layer with int8 weights (``lin_wq``) whose input a per-token fake-quant
    (``tokenfq``: PT2E's dynamic quantization) wrote becomes a dynamic int8 linear (blob
    EMC_OP_DQ_LINEAR): it reads the fake-quant's input and quantizes each row itself into u8 (the
    same int8 values), then sums int8 products exactly, so the file stores the int8 weights (a
    quarter of the f32 bytes) and the products run on ``vpdpbusd``. It keeps the gemm's residual
    and activation. The fake-quant goes when nothing else reads it. Weights in blocks of 16
    channels, [ceil(N/16)][ceil(K/4)][16][4] bytes; the table N weight scales, then N int32
    weight sums. The first dq linear of an activation writes its quantized rows to an arena
    tensor (out[1]); later ones of the same activation (a transformer's K and V projections after
    Q) read them instead (EMC_DQL_QUANTIZED)."""
    rows: dict[tuple[int, int, tuple[float, ...]], TensorSpec] = {}
    for g in [o for o in ops if o.kind == "gemm" and "lin_wq" in o.attrs]:
        x = g.ins[0]
        p = u.producer(x)
        batch, m, k, n = g.ip[:4]
        rowq = _rowq(p, x)
        if (
            p is None
            or rowq is None
            or batch != 1
            or len(g.ins) not in (3, 4)
            or len(g.outs) != 1
            or g.ip[7] != 1  # B packed: a constant weight
            or not any(o.root() is x.root() for o in p.outs[:1])
            or math.prod(p.outs[0].shape) != m * k
            or (p.kind == "tokenfq" and p.ip[1] != k)
            or k > 65536
        ):
            continue
        mode, tail = rowq
        wq, s, _, b = g.attrs.pop("lin_wq")
        kq, blocks = -(-k // 4), -(-n // 16)
        w = np.zeros((blocks * 16, kq * 4), dtype=np.int8)
        w[:n, :k] = wq
        packed = np.ascontiguousarray(w.reshape(blocks, 16, kq, 4).transpose(0, 2, 1, 3))
        wsum = wq.astype(np.int64).sum(1).astype(np.int32)
        table = np.concatenate(
            [np.asarray(s, dtype=np.float32).reshape(-1), wsum.view(np.float32), tail]
        )
        bias, res = g.ins[2], g.ins[3] if len(g.ins) == 4 else None
        src = p.ins[0] if mode != B.DQL_STATIC else x
        key = (id(src.root()), k, tuple(tail.view(np.int32).tolist()))
        q = rows.get(key)
        if q is None:
            nbytes = B.align_up(m * kq * 4, B.ALIGN) + 8 * m
            q = TensorSpec(f"{src.name}.q8rows", src.dtype, (-(-nbytes // 4),))
            rows[key] = q
            g.ins, g.outs = [src], [g.outs[0], q]
        else:
            g.ins = [q]
        g.kind = "dqlinear"
        g.ins += [Const(packed.reshape(-1).view(np.float32)), bias, res]
        g.ip = [m, k, n, 0, int(g.ins[0] is q), 0, 0, mode]
        g.attrs = dict(table=table)
        if (
            mode != B.DQL_STATIC
            and not u.consumers(p.outs[0])
            and id(p.outs[0].root()) not in u.external
        ):
            _absorb(ops, p, g)
    for o in [o for o in ops if o.kind == "tensorfq"]:
        _tensor_fq_op(o)


def _tensor_fq_op(o: Op) -> None:
    """A per-tensor dynamic fake-quant that some reader other than a dynamic int8 linear needs
    (a convolution's input: XNNPACKQuantizer's dynamic form) keeps its own op (blob
    EMC_OP_TENSOR_FQ: ip rows, cols, qmin, qmax; fp[2] eps): the qparams of the whole tensor,
    then its values through int8 and back, as the portable kernels; its readers run in f32."""
    qmin, qmax, eps = o.attrs["q"]
    shape = tuple(o.ins[0].shape)
    e = np.float32(eps)
    if not (-128 <= int(qmin) < int(qmax) <= 127) or not (np.isfinite(e) and e >= 0):
        raise Unsupported(f"per-tensor dynamic Q/DQ with range [{qmin}, {qmax}] and eps {eps}")
    if math.prod(shape) < 1:
        raise Unsupported("per-tensor dynamic Q/DQ of an empty tensor")
    rows, cols = (math.prod(shape[:-1]), int(shape[-1])) if shape else (1, 1)
    o.ip = [rows, cols, int(qmin), int(qmax)]
    o.fp = [0.0, 0.0, float(e)]


def _rowq(p: Op | None, x: TensorSpec) -> tuple[int, np.ndarray] | None:
    """How a dynamic int8 linear reading ``x`` (written by ``p``) quantizes its rows
    (EMC_DQL_ROWQ) and the table's tail of 5 words for it: per token behind a ``tokenfq``; per
    tensor behind a ``tensorfq`` (qmin, qmax, eps); static behind an int8 fake-quant over all of
    ``x`` (qmin, qmax, scale, zero point, 1 / scale; a uint8 range shifted by -128 onto int8's:
    the same stored bytes); None otherwise."""
    if p is None:
        return None
    if p.kind == "tokenfq":
        return B.DQL_PER_TOKEN, np.zeros(0, dtype=np.float32)
    words = np.zeros(5, dtype=np.float32)
    ints = words.view(np.int32)
    if p.kind == "tensorfq":
        qmin, qmax, eps = p.attrs["q"]
        ints[0], ints[1], words[2] = qmin, qmax, eps
        return B.DQL_PER_TENSOR, words
    if (
        p.act not in ("fakequant", "hardswish_fq")
        or not any(o.root() is x.root() for o in p.outs[:1])
        or math.prod(p.outs[0].shape) != math.prod(x.shape)
    ):
        return None
    inv, scale, zp, qmin, qmax = (float(v) for v in p.fp[3:8])
    shift = 128 if qmin >= 0 else 0
    lo, hi, z = int(qmin) - shift, int(qmax) - shift, int(zp) - shift
    if not (-128 <= lo < hi <= 127 and lo <= z <= hi and 0 < scale < 1e30 and 0 < inv < 1e30):
        return None
    ints[0], ints[1], words[2], ints[3], words[4] = lo, hi, scale, z, inv
    return B.DQL_STATIC, words


def _swap_heads(pm: Op) -> tuple[int, int, int] | None:
    """The input's last three dims (a, b, d) when permute ``pm`` swaps the two before the last,
    [1, a, b, d] -> [1, b, a, d] or [a, b, d] -> [b, a, d] (attention's heads in or out)."""
    shape, perm = tuple(pm.ins[0].shape), list(pm.ip[: len(pm.ins[0].shape)])
    if len(shape) == 4 and shape[0] == 1 and perm == [0, 2, 1, 3]:
        return shape[1], shape[2], shape[3]
    if len(shape) == 3 and perm == [1, 0, 2]:
        return shape[0], shape[1], shape[2]
    return None


def _dq_heads(ops: list[Op], u: _Uses) -> None:
    """A permute of a dynamic int8 linear's output seen as attention's heads, [1, M, H, D] ->
    [1, H, M, D] (or [M, H, D] -> [H, M, D]), read by nothing else, goes: the linear stores its
    output head-major as it writes it (EMC_DQL_HEAD_DIM = D, a multiple of 32 so each 32-channel
    tile lies in one head). A transformer's Q, K and V projections: one pass over each fewer,
    and none on a single thread between two split over the threads. A transpose of each head
    after that (K^T) goes the same way (EMC_DQL_HEAD_T: each head stored [D, M])."""
    for pm in [o for o in ops if o.kind == "permute"]:
        x = pm.ins[0]
        p = u.producer(x)
        if p is None or p.kind != "dqlinear" or p.ins[3] is not None or p.ip[5]:
            continue
        dims = _swap_heads(pm)
        if dims is None:
            continue
        mm, h, d = dims
        m, _, n = p.ip[:3]
        if (
            mm != m
            or h * d != n
            or d % 32
            or x.root() is not p.outs[0].root()
            or not u.private(x, pm)
            or math.prod(pm.outs[0].shape) != m * n
        ):
            continue
        p.outs[0] = pm.outs[0]
        p.ip[5] = d
        _absorb(ops, pm, p)
    # then a transpose of each head ([1, H, M, D] -> [1, H, D, M]: attention's K^T) of such a
    # linear without an activation: its heads stored transposed (EMC_DQL_HEAD_T)
    for pm in [o for o in ops if o.kind == "permute"]:
        x = pm.ins[0]
        p = u.producer(x)
        if p is None or p.kind != "dqlinear" or not p.ip[5] or p.ip[6] or p.act != "none":
            continue
        shape, perm = tuple(x.shape), list(pm.ip[: len(x.shape)])
        if not (
            (len(shape) == 4 and shape[0] == 1 and perm == [0, 1, 3, 2])
            or (len(shape) == 3 and perm == [0, 2, 1])
        ):
            continue
        if (
            shape[-1] != p.ip[5]
            or shape[-2] != p.ip[0]
            or x.root() is not p.outs[0].root()
            or not u.private(x, pm)
            or math.prod(pm.outs[0].shape) != p.ip[0] * p.ip[2]
        ):
            continue
        p.outs[0] = pm.outs[0]
        p.ip[6] = 1
        _absorb(ops, pm, p)


def _gemm_heads(ops: list[Op], u: _Uses) -> None:
    """A permute [1, H, M, D] -> [1, M, H, D] (or [H, M, D] -> [M, H, D]) of a batched gemm's
    output (H products of [M, D]: attention's softmax x V), read by nothing else, goes: the gemm
    writes its products' rows interleaved (EMC_GEMM_C_HEADS), as the linear after it reads
    them. No residual."""
    for pm in [o for o in ops if o.kind == "permute"]:
        x = pm.ins[0]
        p = u.producer(x)
        if p is None or p.kind != "gemm" or len(p.ins) != 3 or len(p.ip) < 9 or p.ip[8]:
            continue
        dims = _swap_heads(pm)
        if dims is None:
            continue
        h, mm, d = dims
        batch, m, _, n = p.ip[:4]
        if (
            (batch, m, n) != (h, mm, d)
            or batch < 2
            or len(p.outs) != 1
            or x.root() is not p.outs[0].root()
            or not u.private(x, pm)
            or math.prod(pm.outs[0].shape) != batch * m * n
        ):
            continue
        p.outs[0] = pm.outs[0]
        p.ip[8] = 1
        _absorb(ops, pm, p)


def _conv_q8(ops: list[Op], u: _Uses) -> None:
    """A conv with int8 weights (``wq``: the partitioner folded their dequantize) whose input a
    fake-quant wrote runs in int8 (blob EMC_CONV_Q8): the input's qparams go to ``q8``, and the
    packer stores the int8 weights (not f32 ones) with a per-channel table. Ungrouped convs that
    are not depthwise and take no input scale or plane means; the input's quantized values must
    map into u8 (int8 ranges shift by 128, uint8 ones stay). Every such conv, shallow and 1x1
    ones included: with the input quantized and transposed in 16x16 blocks and the panels
    packed by word transposes, int8 beats f32 on each (Zen 5, 1 thread: int8 MobileNetV2 4.3 ->
    2.7 ms, ResNet-50 21 -> 16, MobileNetV3-Small 1.30 -> 1.10 against the earlier rule that
    kept depths under 64 and 1x1 convs under 256 channels in f32, measured on Zen 4 with the
    slower quantizer). Where the f32 path would be a Winograd F(4x4) the packer adds that
    Winograd conv as the alternative a CPU may prefer (EMC_CONV_Q8_WINO). The fake-quant may
    be one step back, through a zero pad (an asymmetric one :func:`_fold_pads` leaves: the
    padded values are on the same grid when 0 is)."""
    for conv in [o for o in ops if o.kind == "conv2d" and "wq" in o.attrs]:
        a = conv.attrs
        x = conv.ins[0]
        p = u.producer(x)
        via_pad = p is not None and p.kind == "pad" and p.fp[2] == 0.0 and p.act == "none"
        if via_pad:
            x = p.ins[0]
            p = u.producer(x)
        if (
            a["groups"] != 1
            or _depthwise(conv)
            or a.get("in_scale") is not None
            or len(conv.outs) != 1
            or p is None
            or p.act not in ("fakequant", "hardswish_fq")
            or not any(o.root() is x.root() for o in p.outs[:1])
            or math.prod(p.outs[0].shape) != math.prod(x.shape)
            or a["w"].shape[1] * a["w"].shape[2] * a["w"].shape[3] > 65536
        ):
            continue
        inv, scale, zp, qmin, qmax = (float(v) for v in p.fp[3:8])
        off = 128 if qmin < 0 else 0
        lo, hi, z = int(qmin) + off, int(qmax) + off, int(zp) + off
        if not (0 <= lo <= hi <= 255 and 0 <= z <= 255) or (via_pad and not qmin <= zp <= qmax):
            continue
        a["q8"] = dict(inv=inv, scale=scale, zp=z, lo=lo, hi=hi)


def _dwconv_q8(ops: list[Op], u: _Uses) -> None:
    """A depthwise conv with int8 weights (one channel per group) between int8 convs becomes an
    int8 depthwise conv (blob EMC_CONV_Q8 with EMC_CONV_DEPTHWISE) on u8 activations: its input
    a fake-quant conv wrote, its output fake-quantized, no residual or plane means. It runs on
    u8 only, so :func:`_conv_q8_u8` keeps it int8 only where both its tensors become u8 links
    (MobileNetV2's blocks: expansion -> depthwise -> projection). An asymmetric zero pad between
    (EfficientNet's stride-2 "same" padding) becomes its own padding, more after than before
    (``pad_extra``, blob version 14): the u8 link then skips the pad's pass over an f32 map;
    :func:`_conv_q8_u8` puts the pad op back if the conv does not stay int8. Its input may also
    come through a table lookup (:func:`_lut_candidate`: MobileNetV3's hardswish after the
    expansion) of an int8 conv's output: the lookup's own fake-quant is then the input's."""
    for conv in [o for o in ops if o.kind == "conv2d" and "wq" in o.attrs and _depthwise(o)]:
        x = conv.ins[0]
        p = u.producer(x)
        pad = _asymmetric_pad(conv, p, u)
        if pad is not None:
            x = pad.ins[0]
            p = u.producer(x)
        if (
            conv.act != "fakequant"
            or len(conv.ins) != 1
            or len(conv.outs) != 1
            or conv.attrs.get("in_scale") is not None
            or conv.attrs["w"].shape[0] != x.shape[1]
            or conv.attrs["w"].shape[2] * conv.attrs["w"].shape[3] > 256
            or not _u8_source(p, u)
        ):
            continue
        assert p is not None
        inv, scale, zp, qmin, qmax = (float(v) for v in p.fp[3:8])
        off = 128 if qmin < 0 else 0
        lo, hi, z = int(qmin) + off, int(qmax) + off, int(zp) + off
        if 0 <= lo <= hi <= 255 and 0 <= z <= 255 and (pad is None or lo <= z <= hi):
            conv.attrs["q8"] = dict(inv=inv, scale=scale, zp=z, lo=lo, hi=hi)
            conv.attrs["q8dw"] = True
            if pad is not None:  # the conv pads itself (version 14); the pad op waits aside
                _, _, _, top, bottom, left, right = pad.ip
                conv.ins[0] = x
                conv.attrs.update(pad=[top, left], pad_extra=[bottom - top, right - left])
                conv.attrs["q8pad"] = pad
                _absorb(ops, pad, conv)


def _int8_reader(r: Op, y: TensorSpec) -> bool:
    """Whether op ``r`` may read ``y`` as a u8 link (:func:`_conv_q8_u8`'s readers): an int8
    conv, a max pool, a table lookup or an add."""
    if r.kind == "conv2d":
        return "q8" in r.attrs and len(r.ins) == 1
    return _lut_candidate(r) or r.kind in ("maxpool2d", "binary")


def _dw_f32_out(ops: list[Op], u: _Uses) -> None:
    """An int8 depthwise conv (:func:`_dwconv_q8`) whose output a float op reads (the mean and
    the scale of MobileNetV3's first squeeze-and-excitation block) writes u8 levels for a new
    table lookup of its own fake-quant, which writes the f32 values (EMC_UNARY_Q8 form 2: each
    level's value, as the fake-quant made it; a fake-quant of those changes nothing): an int8
    conv and a pass over u8 levels instead of a float conv and, before it, a lookup writing f32.
    :func:`_conv_q8_u8` takes the lookup away again (``dw_lut``) if the conv does not stay int8."""
    for conv in [o for o in ops if o.kind == "conv2d" and o.attrs.get("q8dw")]:
        y = conv.outs[0]
        readers = u.consumers(y)
        if (
            id(y.root()) in u.external
            or y.root() is not y
            or not readers
            or all(_int8_reader(r, y) for r in readers)
        ):
            continue
        link = TensorSpec(name=f"{y.name}_u8", dtype=y.dtype, shape=tuple(y.shape))
        fp = [float(conv.fp[0]), float(conv.fp[1]), 0.0, *(float(v) for v in conv.fp[3:8])]
        lut = Op("unary", [link], [y], act="fakequant", fp=fp, attrs={"dw_lut": conv})
        lut.nodes = list(conv.nodes[-1:])
        conv.outs[0] = link
        ops.insert(ops.index(conv) + 1, lut)


def _u8_source(p: Op | None, u: _Uses) -> bool:
    """Whether ``p`` may write its fake-quantized output as u8 values: an int8 conv (input side
    settled by :func:`_conv_q8`) fake-quantizing its output, or a table lookup
    (:func:`_lut_candidate`) of one's output."""
    if p is not None and _lut_candidate(p):
        p = u.producer(p.ins[0])
    return p is not None and p.kind == "conv2d" and "q8" in p.attrs and p.act == "fakequant"


def _lut_candidate(op: Op) -> bool:
    """A unary fake-quant, or hardswish then one (EMC_ACT_HARDSWISH_FQ), over a 4-d tensor: on
    u8 input levels it is a 256-entry table of u8 output levels (EMC_UNARY_Q8; its range must map
    into u8), which :func:`_conv_q8_u8` uses where its input is a u8 link: the levels when only
    int8 ops read its output (form 1), else their f32 values (form 2)."""
    return (
        op.kind == "unary"
        and op.act in ("fakequant", "hardswish_fq")
        and len(op.ins) == 1
        and len(op.outs) == 1
        and isinstance(op.ins[0], TensorSpec)
        and len(op.ins[0].shape) == 4
        and tuple(op.ins[0].shape) == tuple(op.outs[0].shape)
        and op.ins[0].root() is not op.outs[0].root()
        and _u8_form(op) is not None
    )


def _asymmetric_pad(conv: Op, p: Op | None, u: _Uses) -> Op | None:
    """The zero pad a depthwise conv that pads nothing reads, when only that conv reads it and it
    pads at least as much after as before (TensorFlow's "same" padding at stride 2, which
    :func:`_fold_pads` leaves as a pad op), the input's zero point among the int8 values so the
    padded u8 image holds the same values."""
    if p is None or p.kind != "pad" or p.fp[2] != 0.0 or p.act != "none":
        return None
    _, h, w, top, bottom, left, right = p.ip
    x, y = p.ins[0], p.outs[0]
    ok = (
        len(x.shape) == 4
        and tuple(x.shape[2:]) == (h, w)
        and list(conv.attrs["pad"]) == [0, 0]
        and 0 <= top <= bottom < top + 32768
        and 0 <= left <= right < left + 32768
        and max(top, left) < 65536
        and id(y.root()) not in u.external
        and u.consumers(y) == [conv]
        and conv.ins[0] is y
    )
    return p if ok else None


def _u8_form(op: Op) -> tuple[float, int] | None:
    """The scale and u8 zero point of an op's fake-quantized output when its range maps into u8
    (int8 ranges shift by 128)."""
    _, scale, zp, qmin, qmax = (float(v) for v in op.fp[3:8])
    off = 128 if qmin < 0 else 0
    if not (0 <= qmin + off <= qmax + off <= 255 and 0 <= zp + off <= 255):
        return None
    return scale, int(zp) + off


def _add_q8_candidate(a: Op) -> bool:
    """An add of two distinct 4-d tensors of its output's shape, fake-quantized into u8's range:
    it may run on u8 operands (EMC_BINARY_Q8) if both are u8 links and so is its output."""
    y = a.outs[0] if len(a.outs) == 1 else None
    return (
        a.kind == "binary"
        and a.ip[:1] == [B.BIN["add"]]
        and a.act == "fakequant"
        and y is not None
        and len(y.shape) == 4
        and len(a.ins) == 2
        and all(isinstance(i, TensorSpec) and tuple(i.shape) == tuple(y.shape) for i in a.ins)
        and a.ins[0].root() is not a.ins[1].root()
        and _u8_form(a) is not None
    )


def _pool_q8_candidate(p: Op, u: _Uses) -> bool:
    """A max pool fake-quantized with its producer's own qparams (PT2E shares them; its clamp no
    tighter): on u8 levels it is the same max (EMC_POOL_Q8) if both its sides are u8 links."""
    q = u.producer(p.ins[0]) if p.kind == "maxpool2d" and len(p.ins) == 1 else None
    return (
        q is not None
        and p.act == "fakequant"
        and q.act == "fakequant"
        and len(p.outs) == 1
        and len(p.outs[0].shape) == 4
        and list(q.fp[3:8]) == list(p.fp[3:8])
        and p.fp[0] <= q.fp[0]
        and p.fp[1] >= q.fp[1]
        and _u8_form(p) is not None
    )


def _conv_q8_u8(ops: list[Op], u: _Uses) -> None:
    """An int8 conv whose fake-quantized output only int8 convs read (as their input, in this
    run) writes it as u8 values channels last, and they read those (blob EMC_CONV_Q8_U8): the
    value never exists in f32, and neither the fake-quant's pass over it nor the readers'
    quantization runs. The bytes are the ones the readers would have made (each reader's q8
    comes from this very fake-quant). Not for outputs with a residual or read outside the run.
    A fake-quantized residual add (ResNet's blocks) joins the links when both its operands and
    its output are u8 links (EMC_BINARY_Q8: each u8 dequantized to exactly its f32 fake-quant
    value, added, fake-quantized into u8), so the blocks' outputs never exist in f32 either; so
    does a max pool with its input's qparams (ResNet's stem, EMC_POOL_Q8). An int8 depthwise
    conv (:func:`_dwconv_q8`), add or pool left without a u8 link on any side goes back to f32,
    and the links are made again without it. A table lookup (:func:`_lut_candidate`) joins on
    its input side: where that is a u8 link it runs on the levels (EMC_UNARY_Q8), writing u8
    levels if its output is a u8 link too, else f32 values; without one it stays f32."""
    adds = [o for o in ops if _add_q8_candidate(o)]
    pools = [o for o in ops if _pool_q8_candidate(o, u)]
    luts = [o for o in ops if _lut_candidate(o)]
    while True:
        convs = [o for o in ops if o.kind == "conv2d" and "q8" in o.attrs]
        for c in convs + adds + pools + luts:
            for k in ("q8_in", "q8_out", "q8_ins"):
                c.attrs.pop(k, None)
        writers = [
            c
            for c in convs
            if c.act == "fakequant" and len(c.ins) == 1 and len(c.outs[0].shape) == 4
        ]
        for w in writers + adds + pools + luts:
            y = w.outs[0]
            readers = u.consumers(y)
            if id(y.root()) in u.external or not readers:
                continue
            links = []
            for r in readers:
                if (r.kind == "conv2d" and "q8" in r.attrs and len(r.ins) == 1) or any(
                    r is q for q in pools + luts
                ):
                    at = 0
                elif any(r is a for a in adds):
                    at = next(i for i, x in enumerate(r.ins) if x.root() is y.root())
                else:
                    break
                if r.ins[at].root() is not y.root() or tuple(r.ins[at].shape) != tuple(y.shape):
                    break
                links.append((r, at))
            else:
                w.attrs["q8_out"] = True
                for r, at in links:
                    if r.kind != "binary":
                        r.attrs["q8_in"] = True
                    else:
                        r.attrs.setdefault("q8_ins", set()).add(at)
        loose = [
            c
            for c in convs
            if c.attrs.get("q8dw") and not (c.attrs.get("q8_in") and c.attrs.get("q8_out"))
        ]
        loose_adds = [
            a for a in adds if not (a.attrs.get("q8_out") and a.attrs.get("q8_ins") == {0, 1})
        ]
        loose_pools = [q for q in pools if not (q.attrs.get("q8_in") and q.attrs.get("q8_out"))]
        loose_luts = [q for q in luts if not q.attrs.get("q8_in")]
        if not loose and not loose_adds and not loose_pools and not loose_luts:
            break
        adds = [a for a in adds if not any(a is b for b in loose_adds)]
        pools = [q for q in pools if not any(q is b for b in loose_pools)]
        luts = [q for q in luts if not any(q is b for b in loose_luts)]
        for c in loose:
            for k in ("q8", "q8dw", "q8_in", "q8_out"):
                c.attrs.pop(k, None)
            lut = next((o for o in ops if o.attrs.get("dw_lut") is c), None)
            if lut is not None:  # the conv stays f32: it writes the f32 values again
                c.outs[0] = lut.outs[0]
                luts = [q for q in luts if q is not lut]
                _absorb(ops, lut, c)
            if "q8pad" in c.attrs:  # its pad op comes back (f32 convs pad symmetrically)
                pad = c.attrs.pop("q8pad")
                c.attrs.pop("pad_extra")
                c.attrs["pad"] = [0, 0]
                c.ins[0] = pad.outs[0]
                ops.insert(ops.index(c), pad)
                c.nodes[:] = [n for n in c.nodes if n not in pad.nodes]
    # the means of the depthwise convs that stayed float join them after all
    _fuse_plane_means(ops, u, int8_too=True)
    for q in luts:  # EMC_UNARY_Q8 (1: u8 out, 2: f32 out), its input's scale and u8 zero point
        form = _u8_form(u.producer(q.ins[0]))
        assert form is not None
        q.attrs["q8lut"] = np.array(form, dtype=np.float32)
        q.ip = [1 if q.attrs.get("q8_out") else 2, 0]
    for a in [o for o in ops if o.kind in ("binary", "maxpool2d", "unary")]:
        for k in ("q8_in", "q8_out", "q8_ins"):
            a.attrs.pop(k, None)
    for q in pools:  # EMC_POOL_Q8
        q.ip = [*q.ip[:10], 1]
    for a in adds:  # each operand's scale and u8 zero point: its producer's fake-quant
        forms = [_u8_form(u.producer(x)) for x in a.ins]
        a.attrs["q8add"] = np.array([v for f in forms for v in f], dtype=np.float32)
        a.ip = [a.ip[0], 1, 0]
