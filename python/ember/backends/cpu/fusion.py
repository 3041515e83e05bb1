"""EmberCpuBackend fusion: passes over the operators of one run (batch norm into convs,
activations into their producers, residual adds, plane means, input scales, the hardswish /
hardsigmoid / silu decompositions, softmax scale and mask). Each edits ``ops`` in place and
only fuses what nothing outside the run reads (:class:`_Uses`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ember.backends.cpu import blob as B
from ember.backends.cpu.lowering import INF, Const, Op, Unsupported, _const_arr, _f32, fakequant_fp
from ember.passes.ir import (
    TensorSpec,
)

log = logging.getLogger(__name__)


# ---- fusion inside a run ----------------------------------------------------------------------
class _Uses:
    """Which ops of the run read a root, and whether anything outside the run does."""

    def __init__(self, ops: list[Op], external: set[int]) -> None:
        self.ops, self.external = ops, external

    def consumers(self, spec: TensorSpec) -> list[Op]:
        r = spec.root()
        return [o for o in self.ops for i in o.ins if isinstance(i, TensorSpec) and i.root() is r]

    def private(self, spec: TensorSpec, only: Op) -> bool:
        r = spec.root()
        return id(r) not in self.external and all(c is only for c in self.consumers(spec))

    def producer(self, spec: Any) -> Op | None:
        if not isinstance(spec, TensorSpec):
            return None
        r = spec.root()
        for o in self.ops:
            if any(out.root() is r for out in o.outs):
                return o
        return None


_FUSABLE = {"conv2d", "gemm", "binary", "channel_affine"}


def _absorb(ops: list[Op], gone: Op, into: Op | None) -> None:
    """Removes ``gone`` from ``ops``; ``into`` (the op that now computes what it did) takes its
    FX nodes."""
    if into is not None and into is not gone:
        into.nodes.extend(n for n in gone.nodes if n not in into.nodes)
    del ops[next(j for j, o in enumerate(ops) if o is gone)]


def _expand_parts(ops: list[Op], u: _Uses) -> None:
    """A ``parts`` op (an instruction lowered as several backend ops: a split / chunk / unbind's
    slices, a cat of more than 4 inputs' cats) becomes its parts, each carrying the
    instruction's FX nodes (the first pass: the others see plain ops)."""
    del u
    for i, s in reversed(list(enumerate(ops))):
        if s.kind == "parts":
            for p in s.attrs["parts"]:
                p.nodes = list(s.nodes)
            ops[i : i + 1] = s.attrs["parts"]


def _fake_quant(ops: list[Op], u: _Uses) -> None:
    """Each int8 dequantize reading a quantize of the same qparams (a Q/DQ pair of PT2E's
    representation) becomes one float ``fakequant`` unary of the quantize's input
    (EMC_ACT_FAKEQUANT: the portable kernels' rounding, step for step); the quantize goes once
    nothing reads it. Two pairs in a row with one set of qparams are one (the second changes
    nothing). A quantize read outside the run, or a dequantize of an int8 tensor made outside it,
    would put an int8 tensor on the delegate's boundary: Unsupported (the run is split)."""
    for d in [o for o in ops if o.kind == "dequant"]:
        q = u.producer(d.ins[0])
        if q is None or q.kind != "quant" or q.attrs["q"] != d.attrs["q"]:
            raise Unsupported("an int8 tensor would cross the delegate's boundary")
        d.kind, d.ins, d.act = "unary", [q.ins[0]], "fakequant"
        d.fp = fakequant_fp(d.attrs["q"])
        d.nodes = [*q.nodes, *(n for n in d.nodes if n not in q.nodes)]
    for q in [o for o in ops if o.kind == "quant"]:
        if id(q.outs[0].root()) in u.external or u.consumers(q.outs[0]):
            raise Unsupported("an int8 tensor would cross the delegate's boundary")
        _absorb(ops, q, None)
    for f in [o for o in ops if o.kind == "unary" and o.act == "fakequant"]:
        p = u.producer(f.ins[0])
        if (
            p is not None
            and p.kind == "unary"
            and p.act == "fakequant"
            and p.attrs.get("q") == f.attrs.get("q")
            and u.private(f.ins[0], f)
        ):
            f.ins = p.ins
            _absorb(ops, p, f)


def _dynamic_chains(ops: list[Op], u: _Uses, prefix: str, what: str) -> list[tuple[Op, ...]]:
    """The (choose, quantize, dequantize) triples of dynamic quantization, ops ``<prefix>_choose``,
    ``<prefix>_quant`` and ``<prefix>_dequant``: the dequantize reads the quantize's output and
    the choose's qparams, which nothing else reads, and the quantize the choose's input with
    them. A part without the others, or read outside the three, is Unsupported ("``what``
    whose parts are apart": the run splits)."""
    chains = []
    for d in [o for o in ops if o.kind == f"{prefix}_dequant"]:
        q = u.producer(d.ins[0])
        c = u.producer(d.ins[1])
        if (
            q is None
            or q.kind != f"{prefix}_quant"
            or c is None
            or c.kind != f"{prefix}_choose"
            or q.attrs.get("q") != d.attrs.get("q")
            or any(a.root() is not b.root() for a, b in zip(q.ins[1:], d.ins[1:], strict=True))
            or [o.root() for o in c.outs] != [i.root() for i in q.ins[1:]]
            or c.ins[0].root() is not q.ins[0].root()
            or not u.private(d.ins[0], d)
            or any(
                id(o.root()) in u.external or any(r not in (q, d) for r in u.consumers(o))
                for o in c.outs
            )
        ):
            raise Unsupported(f"{what} whose parts are apart")
        chains.append((c, q, d))
    if sum(o.kind in (f"{prefix}_choose", f"{prefix}_quant") for o in ops) != 2 * len(chains):
        raise Unsupported(f"{what} whose parts are apart")
    return chains


def _join_chain(ops: list[Op], c: Op, q: Op, d: Op) -> None:
    """``d`` takes the FX nodes of ``c`` and ``q`` (in the graph's order), which go."""
    d.nodes = [*c.nodes, *q.nodes, *(n for n in d.nodes if n not in c.nodes + q.nodes)]
    _absorb(ops, q, None)
    _absorb(ops, c, None)


def _token_fake_quant(ops: list[Op], u: _Uses) -> None:
    """Dynamic per-token quantization of an activation — ``tq_choose`` (its per-row scale and
    zero point), ``tq_quant`` and ``tq_dequant`` with those qparams — becomes one float
    ``tokenfq`` op (EMC_OP_TOKEN_FQ: each row's qparams and round trip through int8, step for
    step as the portable kernels). The qparams and the int8 tensor never exist in the backend;
    one read outside the three, or a part without the others, is Unsupported (the run splits)."""
    for c, q, d in _dynamic_chains(ops, u, "tq", "per-token Q/DQ"):
        x = q.ins[0]
        rows = int(np.prod(x.shape[:-1])) if len(x.shape) > 1 else 1
        d.kind, d.ins, d.ip = "tokenfq", [x], [rows, int(x.shape[-1])]
        _join_chain(ops, c, q, d)


def _tensor_fake_quant(ops: list[Op], u: _Uses) -> None:
    """Dynamic per-tensor quantization of an activation — ``tc_choose`` (one scale and zero
    point for the whole tensor), ``tc_quant`` and ``tc_dequant`` with them, ExecuTorch's
    XNNPACKQuantizer's dynamic form — becomes one float ``tensorfq`` op (attrs ``q``: qmin, qmax,
    eps) with the three's nodes. It has no blob form of its own: :func:`fusion_q8._linear_dq8`
    takes it into the dynamic int8 linears that read it (partition._keep_tensor_qdq keeps only
    such chains in a run). A part read outside the three, or without the others, is
    Unsupported."""
    for c, q, d in _dynamic_chains(ops, u, "tc", "per-tensor dynamic Q/DQ"):
        if q.attrs["q"] != c.attrs["q"][:2]:
            raise Unsupported("per-tensor dynamic Q/DQ with two ranges")
        d.kind, d.ins, d.attrs = "tensorfq", [q.ins[0]], dict(q=c.attrs["q"])
        _join_chain(ops, c, q, d)


def _see_through_copies(ops: list[Op], u: _Uses) -> None:
    """A copy (clone, expand, view or dtype no-op: the same elements in the same order) read
    only inside the run, as the very tensor it wrote: its readers take its source instead and
    the copy goes, so it does not hide a producer from the fusions after it (Hugging Face's
    `clone` between a linear layer and its residual add). The blob would alias the two anyway;
    nothing in the backend writes a tensor after producing it."""
    for c in [o for o in ops if o.kind == "copy"]:
        o, src = c.outs[0], c.ins[0]
        if (
            not isinstance(src, TensorSpec)
            or tuple(src.shape) != tuple(o.shape)
            or id(o.root()) in u.external
        ):
            continue
        readers = u.consumers(o)
        if not readers or any(
            i is not o
            for r in readers
            for i in r.ins
            if isinstance(i, TensorSpec) and i.root() is o.root()
        ):
            continue
        for r in readers:
            r.ins = [src if i is o else i for i in r.ins]
        _absorb(ops, c, u.producer(src) or readers[0])


def _fold_bn(ops: list[Op], u: _Uses) -> None:
    for bn in [o for o in ops if o.kind == "bn"]:
        p = u.producer(bn.ins[0])
        if (
            p is not None
            and p.kind == "conv2d"
            and p.act == "none"
            and u.private(bn.ins[0], bn)
            and tuple(p.outs[0].shape) == tuple(bn.outs[0].shape)  # not through a reshape
        ):
            s, t = bn.attrs["scale"], bn.attrs["shift"]
            p.attrs["w"] = (p.attrs["w"] * s[:, None, None, None]).astype(np.float32)
            b = p.attrs["b"] if p.attrs["b"] is not None else 0.0
            p.attrs["b"] = (b * s + t).astype(np.float32)
            p.outs = bn.outs
            _absorb(ops, bn, p)
        else:
            x = bn.ins[0]
            bn.kind = "channel_affine"
            bn.ins = [
                x,
                Const(bn.attrs["scale"].astype(np.float32)),
                Const(bn.attrs["shift"].astype(np.float32)),
            ]
            bn.ip = [x.shape[0], x.shape[1], math.prod(x.shape[2:])]


def _merge_clamps(ops: list[Op], u: _Uses) -> None:
    for c in [o for o in ops if o.kind == "unary" and o.act == "clamp"]:
        p = u.producer(c.ins[0])
        if p is not None and p.kind == "unary" and p.act == "clamp" and u.private(c.ins[0], c):
            # clamp(clamp(x, a, b), c, d) = clamp(x, lo, hi), ordered also when [a, b] and
            # [c, d] are disjoint (then the constant c or d, as in eager)
            (a, b), (lo, hi) = p.fp[:2], c.fp[:2]
            c.fp = [min(max(a, lo), hi), max(min(b, hi), lo)]
            c.ins = p.ins
            _absorb(ops, p, c)


# Ops that may also take a fake-quant activation (their kernels run the generic activation).
_FQ_FUSABLE = _FUSABLE | {"maxpool2d", "avgpool2d"}
# Activations with parameters in fp[3..7] (EMC_ACT_FP_*), which move with them.
_ACT_HIGH_SLOTS = ("fakequant", "hardswish_fq", "leaky_relu", "elu", "softplus")


def _fuse_acts(ops: list[Op], u: _Uses) -> None:
    for act in [o for o in ops if o.kind == "unary"]:
        p = u.producer(act.ins[0])
        fq = act.act == "fakequant" and list(act.fp[:2]) == [-INF, INF]
        if fq and p is not None and (p.act == "none" or p.act == "clamp"):
            # a fake-quant after a clamp (or a fused relu): one fakequant with those bounds
            if (p.kind in _FQ_FUSABLE or (p.kind == "unary" and p.act == "clamp")) and (
                len(p.outs) == 1
                and u.private(act.ins[0], act)
                and tuple(p.outs[0].shape) == tuple(act.outs[0].shape)
            ):
                lo, hi = (p.fp[0], p.fp[1]) if p.act == "clamp" else (-INF, INF)
                fp = (list(p.fp) + [0.0] * 8)[:8]
                fp[0], fp[1], fp[3:8] = lo, hi, act.fp[3:8]
                p.act, p.fp = "fakequant", fp
                p.outs = act.outs
                _absorb(ops, act, p)
            continue
        if (
            p is None
            or p.kind not in _FUSABLE
            or p.act != "none"
            or len(p.outs) != 1
            or not u.private(act.ins[0], act)
            or math.prod(p.outs[0].shape) != math.prod(act.outs[0].shape)
            # through a reshape only into a GEMM (its output is rows x columns whatever its
            # shape); a conv's output stays 4-d and a binary's the shape its operands make
            or (p.kind != "gemm" and tuple(p.outs[0].shape) != tuple(act.outs[0].shape))
        ):
            continue
        p.act = act.act
        if act.act == "hardswish_fq":
            fp = (list(p.fp) + [0.0] * 8)[:8]
            fp[0], fp[1], fp[3:8] = act.fp[0], act.fp[1], act.fp[3:8]
            p.fp = fp
        elif act.act == "clamp":
            p.fp = (p.fp + [0.0, 0.0])[: max(len(p.fp), 2)]
            p.fp[0], p.fp[1] = act.fp[0], act.fp[1]
        elif act.act in ("leaky_relu", "elu", "softplus"):  # EMC_ACT_FP_ALPHA.. above the op's
            fp = (list(p.fp) + [0.0] * 8)[:8]
            fp[3:6] = (list(act.fp[3:6]) + [0.0] * 3)[:3]
            p.fp = fp
        p.outs = act.outs
        _absorb(ops, act, p)


def _fold_pads(ops: list[Op], u: _Uses) -> None:
    """A zero pad of a 4-d map, the same on both sides of each spatial dim, that only convs
    which pad nothing read becomes their padding (EfficientNet's explicit pads before every
    depthwise conv: a pass over the map each, and the conv no longer sees an int8 producer).
    First, a fake-quant after a pad that changes nothing goes: the pad's input is on the same
    int8 grid (its producer's fake-quant has these qparams; the quantizer shares a pad's qparams
    with its input) and 0 is on it (zero point in range), so every value passes unchanged."""
    for f in [o for o in ops if o.kind == "unary" and o.act == "fakequant"]:
        p = u.producer(f.ins[0])
        if p is None or p.kind != "pad" or p.fp[2] != 0.0 or list(f.fp[:2]) != [-INF, INF]:
            continue
        pp = u.producer(p.ins[0])
        zp, qmin, qmax = f.fp[5:8]
        y = f.outs[0]
        if (
            pp is None
            or pp.act not in ("fakequant", "hardswish_fq")
            or list(pp.fp[3:8]) != list(f.fp[3:8])
            or not qmin <= zp <= qmax
            or id(y.root()) in u.external
            or any(i.root() is y.root() and i is not y for r in u.consumers(y) for i in r.ins)
        ):
            continue
        for r in u.consumers(y):
            r.ins = [p.outs[0] if i is y else i for i in r.ins]
        _absorb(ops, f, p)
    for p in [o for o in ops if o.kind == "pad"]:
        _, h, w, top, bottom, left, right = p.ip
        x, y = p.ins[0], p.outs[0]
        readers = u.consumers(y)
        if (
            top != bottom
            or left != right
            or p.fp[2] != 0.0
            or p.act != "none"
            or len(x.shape) != 4
            or not p.attrs.get("last_two")
            or tuple(x.shape[2:]) != (h, w)
            or id(y.root()) in u.external
            or not readers
            or any(
                r.kind != "conv2d"
                or r.ins[0] is not y
                or list(r.attrs["pad"]) != [0, 0]
                or any(i is not None and i.root() is y.root() for i in r.ins[1:])
                for r in readers
            )
        ):
            continue
        for r in readers:
            r.ins = [x, *r.ins[1:]]
            r.attrs["pad"] = [top, left]
        _absorb(ops, p, readers[0])


def _depthwise(op: Op) -> bool:
    w = op.attrs["w"]
    return op.attrs["groups"] == w.shape[0] and w.shape[1] == 1


def _fuse_residual(ops: list[Op], u: _Uses) -> None:
    """A conv2d (not depthwise) or gemm whose only reader is an `add` of a tensor of its output's
    shape takes that tensor as its residual input (blob in[3]) and the add's activation: the
    residual connection is added while each output tile is in L1 instead of in a pass of its own
    (ResNet's block outputs, a transformer's residual stream). The op moves to the add's place:
    the other operand may be computed after it (ResNet's downsample branch)."""
    for add in [o for o in ops if o.kind == "binary" and o.ip[0] == B.BIN["add"]]:
        out = add.outs[0]
        for i in (0, 1):
            x, r = add.ins[i], add.ins[1 - i]
            if not isinstance(x, TensorSpec) or not isinstance(r, TensorSpec):
                continue
            p = u.producer(x)
            if (
                p is None
                or p.kind not in ("conv2d", "gemm")
                or p.act != "none"
                or len(p.outs) != 1
                or r.root() is x.root()
                or not u.private(x, add)
                or _const_arr(r) is not None
                or not (tuple(x.shape) == tuple(r.shape) == tuple(out.shape))
                or math.prod(p.outs[0].shape) != math.prod(out.shape)
                or (p.kind == "conv2d" and tuple(p.outs[0].shape) != tuple(out.shape))
                or (p.kind == "conv2d" and (len(p.ins) != 1 or _depthwise(p)))
                or (p.kind == "gemm" and len(p.ins) != 3)
            ):
                continue
            p.ins = [*p.ins, r]
            p.act = add.act
            # the activation's slots: the clamp's two, and those above the scalar (fp[3..7]:
            # a fake-quant's qparams, leaky ReLU's slope, ELU's parameters)
            p.fp = list(add.fp) if add.act in _ACT_HIGH_SLOTS else list(add.fp[:2])
            p.outs = add.outs
            k = next(j for j, o in enumerate(ops) if o is add)
            ops[k] = p
            del ops[next(j for j, o in enumerate(ops) if o is p)]
            p.nodes.extend(n for n in add.nodes if n not in p.nodes)
            break


def _fuse_plane_means(ops: list[Op], u: _Uses, int8_too: bool = False) -> None:
    """A mean over the spatial dims of a depthwise conv's output (a squeeze-and-excitation
    block's pooling) becomes the conv's second output (blob out[1]): each plane's mean is taken
    right after the plane is computed, while it is in L1, instead of in a pass that reads the
    whole output again (at 2 threads, half of it from the other core's cache). Not (unless
    ``int8_too``: fusion_q8's ``_conv_q8_u8`` for those that stay float) for a conv with int8
    weights and a fake-quantized output, which may become an int8 depthwise conv on u8 levels
    (fusion_q8's ``_dwconv_q8``, one output), nor for one that did."""
    for mean in [
        o
        for o in ops
        if o.kind == "mean" and o.act == "none" and o.ip[2] <= 1 and o.ip[3:4] in ([], [0])
    ]:
        x = mean.ins[0]
        p = u.producer(x)
        if p is None or p.kind != "conv2d" or len(p.outs) != 1 or not _depthwise(p):
            continue
        if p.attrs.get("q8dw") or (not int8_too and "wq" in p.attrs and p.act == "fakequant"):
            continue
        y = p.outs[0]
        if len(y.shape) != 4 or math.prod(x.shape) != math.prod(y.shape):
            continue
        n, c, h, w = y.shape
        if mean.ip[0] != n * c or mean.ip[1] != h * w or math.prod(mean.outs[0].shape) != n * c:
            continue
        p.outs = [y, mean.outs[0]]
        _absorb(ops, mean, p)


def _fuse_input_scale(ops: list[Op], u: _Uses) -> None:
    """A 1x1 stride-1 conv (groups 1) whose input is ``a * s`` with s [N, C, 1, 1] (a
    squeeze-and-excitation gate) reads a and scales each input channel as the GEMM copies its
    rows (blob ip EMC_CONV_IN_SCALE): the product is never written. a must be an unclamped
    product's operand that was computed in this run and that nothing else reads: the runtime may
    scale it in place where its path copies no rows."""
    for conv in [o for o in ops if o.kind == "conv2d" and len(o.ins) <= 2]:
        a_ = conv.attrs
        if (
            _depthwise(conv)
            or a_["groups"] != 1
            or tuple(a_["w"].shape[2:]) != (1, 1)
            or tuple(a_["stride"]) != (1, 1)
            or tuple(a_["pad"]) != (0, 0)
        ):
            continue
        x = conv.ins[0]
        m = u.producer(x)
        if (
            m is None
            or m.kind != "binary"
            or m.ip[0] != B.BIN["mul"]
            or m.act != "none"
            or len(m.outs) != 1
            or list(m.fp[:2]) != [-INF, INF]
            or not u.private(x, conv)
            or any(i.root() is x.root() for i in conv.ins[1:])  # the product as the residual too
            or len(x.shape) != 4
        ):
            continue
        n, c = x.shape[0], x.shape[1]
        for a, s in ((m.ins[0], m.ins[1]), (m.ins[1], m.ins[0])):
            if (
                isinstance(a, TensorSpec)
                and isinstance(s, TensorSpec)
                and tuple(a.shape) == tuple(x.shape)
                and tuple(s.shape) == (n, c, 1, 1)
                and a.root() is not s.root()
                and u.producer(a) is not None
                and u.private(a, m)  # so neither the conv's residual nor anything after
            ):
                conv.ins[0] = a
                a_["in_scale"] = s
                _absorb(ops, m, conv)
                break


def _is_scalar_bin(o: Op | None, op: str, v: float) -> bool:
    return (
        o is not None
        and o.kind == "binary"
        and o.ins[1] is None
        and o.ip[0] == B.BIN[op]
        and abs(o.fp[2] - v) < 1e-6
    )


def _hard_patterns(ops: list[Op], u: _Uses) -> None:
    """x+3 clamped to [0,6] then /6 (hardsigmoid), or x * that / 6 (hardswish). In an int8 Q/DQ
    graph the hardswish's division carries the fake-quant of its output: the three ops become
    one ``hardswish_fq`` (EMC_ACT_HARDSWISH_FQ, the same f32 steps, then the fake-quant)."""
    for d in list(ops):
        if d not in ops or not (_is_scalar_bin(d, "div", 6.0) or _is_scalar_bin(d, "mul", 1 / 6)):
            continue
        fq = d.act == "fakequant" and _is_scalar_bin(d, "div", 6.0)
        if d.act != "none" and not fq:
            continue
        m = u.producer(d.ins[0])
        if m is None or not u.private(d.ins[0], d):
            continue

        def h0_of(spec: Any, consumer: Op) -> Op | None:
            h = u.producer(spec)
            if (
                _is_scalar_bin(h, "add", 3.0)
                and h.act == "clamp"
                and h.fp[0] == 0.0
                and h.fp[1] == 6.0
                and u.private(spec, consumer)
            ):
                return h
            return None

        h = h0_of(d.ins[0], d)
        if h is not None and not fq:
            d.kind, d.ins, d.act, d.ip, d.fp = "unary", [h.ins[0]], "hardsigmoid", [], []
            _absorb(ops, h, d)
            continue
        if (
            m.kind == "binary"
            and m.ip[0] == B.BIN["mul"]
            and m.act == "none"
            and m.ins[1] is not None
        ):
            for xi, ti in ((0, 1), (1, 0)):
                x, t = m.ins[xi], m.ins[ti]
                h = h0_of(t, m) if isinstance(t, TensorSpec) else None
                if (
                    h is not None
                    and isinstance(x, TensorSpec)
                    and h.ins[0].root() is x.root()
                    and x.shape == d.outs[0].shape
                ):
                    if fq:
                        fp = list(d.fp[:8])
                        fp[2] = 0.0
                        d.kind, d.ins, d.act, d.ip, d.fp = "unary", [x], "hardswish_fq", [], fp
                    else:
                        d.kind, d.ins, d.act, d.ip, d.fp = "unary", [x], "hardswish", [], []
                    _absorb(ops, h, d)
                    _absorb(ops, m, d)
                    break


def _silu(ops: list[Op], u: _Uses) -> None:
    for m in list(ops):
        if m not in ops or m.kind != "binary" or m.ip[0] != B.BIN["mul"] or m.act != "none":
            continue
        for xi, si in ((0, 1), (1, 0)):
            x, s = m.ins[xi], m.ins[si]
            p = u.producer(s)
            if (
                p is not None
                and p.kind == "unary"
                and p.act == "sigmoid"
                and isinstance(x, TensorSpec)
                and p.ins[0].root() is x.root()
                and u.private(s, m)
                and x.shape == m.outs[0].shape
            ):
                m.kind, m.ins, m.act, m.ip, m.fp = "unary", [x], "silu", [], []
                _absorb(ops, p, m)
                break


def _mask_rows(m: Any, x: TensorSpec) -> int:
    """How many rows an additive mask m for the rows of x (last dim) repeats after: m's shape,
    right-aligned with x's, has x's last dim, 1s before some dim and x's sizes from it on
    ([1, 1, S, S] over [1, H, S, S]: S; BERT's [1, 1, 1, S]: 1). 0: no such period. The mask
    may be a constant folded at export (a model fed no attention mask: its all-ones mask turned
    into zeros and -infs before the export)."""
    if isinstance(m, Const):
        if m.arr.dtype != np.float32:
            return 0
        shape = tuple(m.arr.shape)
    elif isinstance(m, TensorSpec) and _f32(m):
        shape = tuple(m.shape)
    else:
        return 0
    if len(shape) > len(x.shape):
        return 0
    ms = [1] * (len(x.shape) - len(shape)) + list(shape)
    xs = list(x.shape)
    if not xs or ms[-1] != xs[-1]:
        return 0
    j = len(xs) - 1
    while j > 0 and ms[j - 1] == xs[j - 1]:
        j -= 1
    if any(v != 1 for v in ms[:j]):
        return 0
    return math.prod(ms[j:-1])


def _fuse_softmax_input(ops: list[Op], u: _Uses) -> None:
    """softmax(x * s + mask) as one op (blob version 7: ip[4] = 1 with the scale in fp[0]; the
    mask in in[1], repeating every ip[5] rows): attention scores scaled by a constant and masked
    (Hugging Face's eager attention) are then read and written once instead of three times. Each
    row is scaled and masked into the output row, in L1, then the softmax runs in place; the same
    two roundings as the separate ops, so the same bits."""
    for sm in [
        o
        for o in ops
        if o.kind == "softmax" and len(o.ins) == 1 and o.ip[3] == 0 and o.attrs.get("last", True)
    ]:
        x, consumer = sm.ins[0], sm
        mask, rows = None, 0
        p = u.producer(x)
        if (
            p is not None
            and p.kind == "binary"
            and p.ip[0] == B.BIN["add"]
            and p.act == "none"
            and u.private(x, sm)
        ):
            for i in (0, 1):
                a, m = p.ins[i], p.ins[1 - i]
                if isinstance(a, TensorSpec) and tuple(a.shape) == tuple(x.shape):
                    rows = _mask_rows(m, x)
                    if rows and (isinstance(m, Const) or m.root() is not a.root()):
                        mask, x, consumer = m, a, p
                        break
        q = u.producer(x)
        scaled = (
            q is not None
            and q.kind == "binary"
            and q.ins[1] is None
            and q.ip[0] == B.BIN["mul"]
            and q.act == "none"
            and isinstance(q.ins[0], TensorSpec)
            and tuple(q.ins[0].shape) == tuple(x.shape)
            and u.private(x, consumer)
        )
        if mask is None and not scaled:
            continue
        if scaled:
            assert q is not None
            sm.fp, x = [q.fp[2]], q.ins[0]
            _absorb(ops, q, sm)
        if mask is not None:
            _absorb(ops, consumer, sm)
        sm.ins = [x, mask]
        sm.ip = sm.ip[:4] + [int(scaled), rows if mask is not None else 0] + sm.ip[6:7]


def _split_group_norm(ops: list[Op], u: _Uses) -> None:
    """A group norm (``groupnorm``, lowered from native_group_norm) becomes a layer norm without
    affine over each (sample, group)'s C / G x HW values into a new tensor, then the per-channel
    weight and bias as a channel affine (which takes a following activation: a diffusion UNet's
    GroupNorm + SiLU). The statistics are the layer norm kernel's (within f32 rounding of
    ATen's)."""
    del u
    for i, g in reversed(list(enumerate(ops))):
        if g.kind != "groupnorm":
            continue
        n, c, hw, groups = g.ip
        x, y = g.ins[0], g.outs[0]
        w, b = g.attrs["wb"]
        tmp = TensorSpec(f"{y.name}.normed", y.dtype, tuple(y.shape))
        ln = Op("layernorm", [x, None, None], [tmp], ip=[n * groups, c // groups * hw], fp=g.fp)
        ln.nodes = list(g.nodes)
        ones, zeros = np.ones(c, dtype=np.float32), np.zeros(c, dtype=np.float32)
        aff = Op(
            "channel_affine",
            [
                tmp,
                Const((ones if w is None else w.reshape(-1)).astype(np.float32)),
                Const((zeros if b is None else b.reshape(-1)).astype(np.float32)),
            ],
            [y],
            ip=[n, c, hw],
        )
        aff.nodes = list(g.nodes)
        ops[i : i + 1] = [ln, aff]
