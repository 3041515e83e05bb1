"""EmberCpuBackend partitioner: MethodIR -> MethodIR with DelegateCalls.

Runs after view elision, before lifetimes and memory planning. Guarantees afterwards:

- Every maximal run of consecutive supported f32 instructions (static shapes, no mutable
  buffers or control-flow targets) is one :class:`DelegateInstr` whose args are the run's
  external inputs then the values it produces that anything outside the run reads.
- Inside a run: batch norm is folded into the convolution before it, activations (relu,
  relu6/hardtanh, clamp, hardswish, hardsigmoid, sigmoid, silu, gelu, tanh) are fused into the
  operator that produces their input, and the hardswish / hardsigmoid / silu decompositions are
  recognised. Weights are packed for the micro-kernels (see ``blob.py``).
- Tensors private to a run leave ``ir.specs`` (the backend plans them in its own arena); constant
  transposes feeding the run are folded at export time.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from ember.backends.check import runtime_check
from ember.backends.cpu import blob as B
from ember.backends.delegate import DelegateInstr
from ember.errors import user_source_line
from ember.passes.ir import (
    CONSTANT,
    MUTABLE,
    Arg,
    KernelInstr,
    MethodIR,
    TensorSpec,
    instr_args,
)

log = logging.getLogger(__name__)

BACKEND_ID = "EmberCpuBackend"
INF = float("inf")


@dataclass(eq=False)
class Const:
    """A constant produced at export time (packed or folded weights)."""

    arr: np.ndarray
    key: Any = None


@dataclass(eq=False)
class Op:
    """One backend operator. Compared by identity: the fusion passes find and remove ops in
    lists (``in``, ``remove``), and two equal-looking ops are still two ops (their attrs hold
    numpy arrays, which have no truth value)."""

    kind: str
    ins: list[Any]  # TensorSpec | Const | None
    outs: list[TensorSpec]
    ip: list[int] = field(default_factory=list)
    fp: list[float] = field(default_factory=list)
    act: str = "none"
    attrs: dict[str, Any] = field(default_factory=dict)


class Unsupported(Exception):
    pass


# ---- helpers ----------------------------------------------------------------------------------
def _f32(s: Any) -> bool:
    return isinstance(s, TensorSpec) and s.dtype == torch.float32 and not s.dynamic


def _const_arr(s: TensorSpec) -> np.ndarray | None:
    if s.kind == CONSTANT and s.data is not None:
        return s.data.detach().to(torch.float32).contiguous().numpy().reshape(s.shape)
    return None


def _t(a: Arg) -> TensorSpec:
    if a.kind != "tensor":
        raise Unsupported(f"argument is {a.kind}, not a tensor")
    return a.value


def _num(a: Arg) -> float | None:
    if a.kind in ("int", "double"):
        return float(a.value)
    if a.kind == "null":
        return None
    raise Unsupported(f"argument is {a.kind}, not a number")


def _ints(a: Arg) -> list[int]:
    if a.kind != "intlist" or not all(isinstance(x, int) for x in a.value):
        raise Unsupported("needs a static int list")
    return [int(x) for x in a.value]


def _pair(a: Arg, name: str, empty_ok: bool = False) -> list[int]:
    """A 2-d window parameter as two ints: ATen repeats a one-element list (``padding="valid"``
    decomposes to ``[0]``); an empty list is kept where ATen gives it a meaning (a pool's
    stride: the kernel)."""
    v = _ints(a)
    if len(v) == 1:
        v = v * 2
    if len(v) != 2 and not (empty_ok and not v):
        raise Unsupported(f"{name} has {len(v)} values, not 2")
    return v


def _out(ins: KernelInstr, i: int = 0) -> TensorSpec:
    return ins.outputs[i].value


def _operand(s: TensorSpec) -> Any:
    """A tensor operand: constants become Const (so they are packed into the blob)."""
    arr = _const_arr(s)
    return Const(arr, ("spec", id(s))) if arr is not None else s


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
    if not ins.outputs or not all(o.kind == "tensor" for o in ins.outputs):
        raise Unsupported("no tensor output")
    out = _out(ins)
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
        if (
            len(x.shape) != 4
            or not _f32(x)
            or wa is None
            or (a[2].kind != "null" and ba is None)
            or a[6].value
        ):
            raise Unsupported("conv2d needs 4-d input, constant weights, not transposed")
        stride, pad, dil = _pair(a[3], "stride"), _pair(a[4], "padding"), _pair(a[5], "dilation")
        groups = int(a[8].value)
        return Op(
            "conv2d",
            [x],
            [out],
            attrs=dict(
                w=wa.astype(np.float32), b=ba, stride=stride, pad=pad, dil=dil, groups=groups
            ),
        )
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
        if not (_f32(m1) and _f32(m2)) or _const_arr(m1) is not None:
            raise Unsupported("gemm operands")
        batch = m1.shape[0] if k == "aten::bmm.out" else 1
        m, kk = m1.shape[-2], m1.shape[-1]
        n = m2.shape[-1]
        m2c = _const_arr(m2)
        b_packed = m2c is not None and batch == 1
        bop = (
            Const(B.pack_b_panels(m2c.reshape(kk, n)), ("bpack", id(m2)))
            if b_packed
            else _operand(m2)
        )
        ins_ = [m1, bop, None if bias is None else _operand(bias)]
        return Op(
            "gemm",
            ins_,
            [out],
            ip=[
                batch,
                m,
                kk,
                n,
                m * kk if batch > 1 else 0,
                kk * n if batch > 1 else 0,
                0,
                int(b_packed),
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
    if k == "aten::avg_pool2d.out":
        x = _f32x(a[0])
        kernel, stride = _pair(a[1], "kernel"), _pair(a[2], "stride", empty_ok=True)
        pad = _pair(a[3], "padding")
        stride = stride or kernel
        include_pad = bool(a[5].value)
        div = 0 if a[6].kind == "null" else int(a[6].value)
        if len(x.shape) != 4:
            raise Unsupported("avg pool")
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
        if h % oh or w % ow:
            raise Unsupported("adaptive pool with uneven windows")
        return Op(
            "avgpool2d", [x], [out], ip=[h // oh, w // ow, h // oh, w // ow, 0, 0, 1, 1, 0, 0]
        )
    if k in ("aten::mean.out", "aten::mean.dim_out"):
        x = _f32x(a[0])
        nd = len(x.shape)
        dims = sorted({d % nd for d in _ints(a[1])}) if a[1].kind == "intlist" else list(range(nd))
        if a[3].kind != "null" or not dims or dims != list(range(dims[0], dims[-1] + 1)):
            raise Unsupported("mean over non-adjacent dims")
        outer = math.prod(x.shape[: dims[0]])
        cols = math.prod(x.shape[dims[0] : dims[-1] + 1])
        inner = math.prod(x.shape[dims[-1] + 1 :])
        if cols == 0:
            raise Unsupported("empty mean")
        return Op("mean", [x], [out], ip=[outer, cols, inner])
    if k in ("aten::_softmax.out", "aten::_log_softmax.out"):
        x = _f32x(a[0])
        nd = len(x.shape)
        if nd == 0 or int(a[1].value) % nd != nd - 1:
            raise Unsupported("softmax over a non-last dim")
        cols = x.shape[-1]
        return Op(
            "softmax",
            [x],
            [out],
            ip=[math.prod(x.shape) // cols, cols, 1, int(k == "aten::_log_softmax.out")],
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
    if k == "aten::permute_copy.out":
        x = _f32x(a[0])
        dims = [d % max(len(x.shape), 1) for d in _ints(a[1])]
        return Op("permute", [x], [out], ip=dims)
    if k in COPIES:
        x = _f32x(a[0])
        if math.prod(x.shape) != math.prod(out.shape):
            raise Unsupported("copy changes the element count")
        return Op("copy", [x], [out])
    if k == "aten::cat.out":
        if a[0].kind != "tensorlist" or not 1 <= len(a[0].value) <= 4:
            raise Unsupported("cat of more than 4")
        xs = a[0].value
        nd = len(out.shape)
        dim = int(a[1].value) % nd
        if not all(_f32(x) and len(x.shape) == nd for x in xs):
            raise Unsupported("cat operands")
        outer = math.prod(out.shape[:dim])
        rows = [math.prod(x.shape[dim:]) for x in xs]
        return Op("cat", [_operand(x) for x in xs], [out], ip=[outer, len(xs), *rows])
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
        return Op(
            "slice",
            [x],
            [out],
            ip=[math.prod(x.shape[:dim]), n, math.prod(x.shape[dim + 1 :]), start, step, length],
        )
    raise Unsupported(k)


def _pool_fits(x: TensorSpec, kernel: list[int], pad: list[int], dil: list[int]) -> None:
    """Raise Unsupported for a pool window larger than the padded input (torch allows one in
    ceil mode: a 1-row map, window 2; the runtime refuses it)."""
    for a in range(2):
        if dil[a] * (kernel[a] - 1) + 1 > x.shape[2 + a] + 2 * pad[a]:
            raise Unsupported("pool window larger than the padded input (ceil mode)")


def _f32x(a: Arg) -> TensorSpec:
    t = _t(a)
    if not _f32(t) or _const_arr(t) is not None:
        raise Unsupported("operand is not an f32 activation")
    return t


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
        ops.remove(c)


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
            ops.remove(bn)
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
            ops.remove(p)


def _fuse_acts(ops: list[Op], u: _Uses) -> None:
    for act in [o for o in ops if o.kind == "unary"]:
        p = u.producer(act.ins[0])
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
        if act.act == "clamp":
            p.fp = (p.fp + [0.0, 0.0])[: max(len(p.fp), 2)]
            p.fp[0], p.fp[1] = act.fp[0], act.fp[1]
        p.outs = act.outs
        ops.remove(act)


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
            p.act, p.fp = add.act, list(add.fp[:2])
            p.outs = add.outs
            k = next(j for j, o in enumerate(ops) if o is add)
            ops[k] = p
            del ops[next(j for j, o in enumerate(ops) if o is p)]
            break


def _fuse_plane_means(ops: list[Op], u: _Uses) -> None:
    """A mean over the spatial dims of a depthwise conv's output (a squeeze-and-excitation
    block's pooling) becomes the conv's second output (blob out[1]): each plane's mean is taken
    right after the plane is computed, while it is in L1, instead of in a pass that reads the
    whole output again (at 2 threads, half of it from the other core's cache)."""
    for mean in [o for o in ops if o.kind == "mean" and o.act == "none" and o.ip[2] <= 1]:
        x = mean.ins[0]
        p = u.producer(x)
        if p is None or p.kind != "conv2d" or len(p.outs) != 1 or not _depthwise(p):
            continue
        y = p.outs[0]
        if len(y.shape) != 4 or math.prod(x.shape) != math.prod(y.shape):
            continue
        n, c, h, w = y.shape
        if mean.ip[0] != n * c or mean.ip[1] != h * w or math.prod(mean.outs[0].shape) != n * c:
            continue
        p.outs = [y, mean.outs[0]]
        del ops[next(j for j, o in enumerate(ops) if o is mean)]


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
                del ops[next(j for j, o in enumerate(ops) if o is m)]
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
    """x+3 clamped to [0,6] then /6 (hardsigmoid), or x * that / 6 (hardswish)."""
    for d in list(ops):
        if d not in ops or not (_is_scalar_bin(d, "div", 6.0) or _is_scalar_bin(d, "mul", 1 / 6)):
            continue
        if d.act != "none":
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
        if h is not None:
            d.kind, d.ins, d.act, d.ip, d.fp = "unary", [h.ins[0]], "hardsigmoid", [], []
            ops.remove(h)
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
                    d.kind, d.ins, d.act, d.ip, d.fp = "unary", [x], "hardswish", [], []
                    ops.remove(h)
                    ops.remove(m)
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
                ops.remove(p)
                break


def _mask_rows(m: Any, x: TensorSpec) -> int:
    """How many rows an additive mask m for the rows of x (last dim) repeats after: m's shape,
    right-aligned with x's, has x's last dim, 1s before some dim and x's sizes from it on
    ([1, 1, S, S] over [1, H, S, S]: S; BERT's [1, 1, 1, S]: 1). 0: no such period."""
    if not isinstance(m, TensorSpec) or not _f32(m) or len(m.shape) > len(x.shape):
        return 0
    ms = [1] * (len(x.shape) - len(m.shape)) + list(m.shape)
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
    for sm in [o for o in ops if o.kind == "softmax" and len(o.ins) == 1 and o.ip[3] == 0]:
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
                    if rows and m.root() is not a.root():
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
            ops.remove(q)
        if mask is not None:
            ops.remove(consumer)
        sm.ins = [x, mask]
        sm.ip = sm.ip[:4] + [int(scaled), rows if mask is not None else 0]


# ---- building the blob ------------------------------------------------------------------------
class PackedConv(NamedTuple):
    """How a conv is stored and run: packed weights and the ip[] choices that go with them."""

    packed: np.ndarray
    depthwise: bool
    scratch: int  # arena bytes while it runs
    transposed: bool = False
    wino: int = 0  # Winograd tile m (0: direct)
    wino_slots: int = 0
    pairs: np.ndarray | None = None  # the weights again as bf16 pairs (EMC_CONV_PAIRS)


def _pack_conv(op: Op, x: TensorSpec, out: TensorSpec, pairs: bool = False) -> PackedConv:
    w = op.attrs["w"]
    g = op.attrs["groups"]
    co, cg, kh, kw = w.shape
    if _depthwise(op):
        return PackedConv(w.reshape(co, kh * kw), True, 0)
    mg, kg = co // g, cg * kh * kw
    oh, ow = out.shape[2], out.shape[3]
    npix = oh * ow
    small = WINO_SMALL if WINO_SMALL is not None else not pairs
    if small and _winograd_small(op, oh, ow):
        # Transposed F(2x2): per element xi, C^T[tiles, co] = V[xi]^T @ U[xi]^T with U^T in
        # 16-column B panels; the scratch also holds each xi's C^T, transposed into place.
        return PackedConv(
            _winograd_filters(w, 2, transposed=True),
            False,
            _wino_scratch(2, 1, cg, co, transposed=True),
            transposed=True,
            wino=2,
            wino_slots=1,
        )
    m = _winograd_tile(op, oh, ow)
    if m:
        slots = _wino_slots(m, oh, ow)
        scratch = _wino_scratch(m, slots, cg, co, transposed=False)
        return PackedConv(_winograd_filters(w, m), False, scratch, wino=m, wino_slots=slots)
    scratch = kg * (-(-npix // B.NR_PANEL) * B.NR_PANEL) * 4  # B operand in 16-column panels
    with_pairs = pairs and g == 1 and _conv_pairs(co, npix, kg)
    if g == 1 and _conv_transposed(co, npix, kg):
        # C^T[npix, co] = im2col^T @ W^T: weights as 16-column B panels, the im2col as 6-row A
        # panels in the scratch, then C^T (transposed into the output after the GEMM). With
        # pairs, the AMX runtime runs it untransposed from them (the scratch fits either).
        packed = B.pack_b_panels(np.ascontiguousarray(w.reshape(co, kg).T))
        t_scratch = (_align(-(-npix // B.MR) * B.MR * kg * 4) + npix * co * 4) + 64
        return PackedConv(
            packed,
            False,
            max(scratch, t_scratch),
            transposed=True,
            pairs=_bf16_pairs(w.reshape(co, kg)) if with_pairs else None,
        )
    packed = np.concatenate(
        [B.pack_a_panels(w[i * mg : (i + 1) * mg].reshape(mg, kg)) for i in range(g)]
    )
    if not with_pairs:
        return PackedConv(packed, False, scratch)
    return PackedConv(packed, False, scratch, pairs=_bf16_pairs(w.reshape(co, kg)))


# ---- bf16 pairs for the AMX path ----------------------------------------------------------------
def _conv_pairs(co: int, npix: int, kg: int) -> bool:
    """Whether a direct conv also stores its weights as bf16 pairs (EMC_CONV_PAIRS): every conv
    with enough work for the AMX path's tiles (its thresholds: 64+ rows and depth, 2M
    multiply-adds). The AMX path then reads the weights in place instead of splitting them at run
    time, which on small maps (ResNet's 7x7 layers: each weight serves 49 products) costs more
    than the tiles do. Measured (one run each, interleaved): pairs on maps under 64 pixels,
    ResNet-18 1.26x / 1.18x faster at 1 / 2 threads; under 256, a further 1.06x / 1.06x on
    ResNet-18 and 1.04x / 1.01x on ResNet-50; on every map, a further 1.03x / 1.0x and 1.10x /
    1.06x (ResNet-50's 56x56 and 28x28 1x1 convs). The file grows by the pairs: ResNet-18 by
    35 MB, ResNet-50 by 80 MB, MobileNetV2 / V3-Small by 5.5 / 0.7 MB (only their wider 1x1
    convs qualify). Shallower convs (depth 16-63: MobileNets' expansions) qualify with 4M+
    multiply-adds: MobileNetV2's 16 -> 96 on 112x112, 24 -> 144 on 56x56 and 32 -> 192 on 28x28
    ran 1.15-1.5x faster on the tiles, the model 1.06x (interleaved, 1 and 2 threads); with 2M+,
    MobileNetV3-Small's 16 -> 72 on 56x56 and 48 -> 288 on 14x14 gained a few microseconds and
    the model lost 2 %."""
    if co < 64 or kg < 16:
        return False
    return co * npix * kg >= (1 << 21 if kg >= 64 else 1 << 22)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """The bf16 nearest each f32 of x (ties to even), as uint32 in the low 16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)


def _bf16_pairs(w: np.ndarray) -> np.ndarray:
    """[M, K] -> EMC_CONV_PAIRS words (as float32 bit patterns): hi = bf16(w), lo = bf16(w - hi),
    word = hi | lo << 16; rows padded to 32 and K to 16 with zeros, in [M / 16][K / 16] tiles of
    [16 rows][16 k]."""
    m, k = w.shape
    mp, kp = -(-m // 32) * 32, -(-k // 16) * 16
    x = np.zeros((mp, kp), dtype=np.float32)
    x[:m, :k] = w
    hi = _bf16_bits(x)
    lo = _bf16_bits(x - (hi << 16).view(np.float32))
    words = hi | (lo << 16)
    tiles = words.reshape(mp // 16, 16, kp // 16, 16).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(tiles).reshape(-1).view(np.float32)


# ---- Winograd F(m x m, 3 x 3) ---------------------------------------------------------------
WINO_TILES = 64  # tiles per block (EM_WINO_MAX_TILES): one 64-column GEMM strip
WINO_MAX_SLOTS = 4  # blocks in flight at once (scratch slots)
# Transposed F(2x2) for wide convs on maps of 9 to 64 tiles (_winograd_small). None (the
# default): on when the file carries no bf16 pairs (a target without AMX), off when it does.
# With the AMX path, ResNet-18 / ResNet-50 ran 6 % / 11 % faster at 1 thread and 4 % / 7 % at 2
# with those layers direct (the filters it streams are 16 / 9 the bytes, and the AMX tiles take
# the direct GEMM at over the FMA peak). On the FMA path (Zen 4, no AMX) they ran 8-11 % / 0-1 %
# faster as Winograd (paired, bench/ab_quantiles.sh, 1 and 2 threads). True / False force it.
WINO_SMALL: bool | None = None
# Filter transforms G (Lavin & Gray; F(4, 3) on the points 0, +-1, +-2, infinity).
_WINO_G = {
    2: np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
    4: np.array(
        [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ]
    ),
}


def _winograd_tile(op: Op, oh: int, ow: int) -> int:
    """The Winograd tile m for a conv, or 0 to run it as a direct GEMM.

    Only 3x3, stride 1, undilated, ungrouped convs with enough channels (an RGB stem stays
    direct). F(4x4) (4x fewer multiplies) when the map has at least 48 tiles of 4x4 (28x28 and
    up: each block of 64 tiles is a full GEMM strip), else F(2x2) (2.25x) with at least 48 tiles
    of 2x2 (14x14); smaller maps stay direct: with a handful of tiles the GEMMs become
    matrix-vector products that stream the (m + 2)^2 / 9 times larger transformed filters. F(4x4)
    costs some accuracy (~1e-5 of the largest output on one random layer, against ~4e-7 for
    F(2x2); still ~4e-7 on ResNet-18's logits).
    """
    if not _winograd_shape(op, 16):
        return 0
    for m in (4, 2):
        if -(-oh // m) * -(-ow // m) >= 48:
            return m
    return 0


def _wino_slots(m: int, oh: int, ow: int) -> int:
    """Scratch slots: one per thread that runs its own range of tiles, block by block (up to
    WINO_MAX_SLOTS threads with a whole block each); more threads than slots split each
    block's phases instead, in one slot."""
    tiles = -(-oh // m) * -(-ow // m)
    return max(1, min(WINO_MAX_SLOTS, tiles // WINO_TILES))


def _winograd_filters(w: np.ndarray, m: int, transposed: bool = False) -> np.ndarray:
    """[co, ci, 3, 3] -> the (m + 2)^2 matrices (G g G^T)[p, q] of [co, ci], each in A panels
    (transposed: each [ci, co] in 16-column B panels)."""
    g = _WINO_G[m]
    u = np.einsum("pi,ocij,qj->pqoc", g, w.astype(np.float64), g)  # [a, a, co, ci]
    a = m + 2
    u = u.reshape(a * a, *w.shape[:2]).astype(np.float32)
    if transposed:
        return np.concatenate(
            [B.pack_b_panels(np.ascontiguousarray(u[xi].T)) for xi in range(a * a)]
        )
    return np.concatenate([B.pack_a_panels(u[xi]) for xi in range(a * a)])


def _winograd_shape(op: Op, min_channels: int) -> bool:
    """A 3x3, stride 1, undilated, ungrouped conv with min_channels or more in and out."""
    a = op.attrs
    co, cg, kh, kw = a["w"].shape
    return (
        (kh, kw) == (3, 3)
        and a["groups"] == 1
        and tuple(a["stride"]) == (1, 1)
        and tuple(a["dil"]) == (1, 1)
        and min(cg, co) >= min_channels
    )


def _wino_scratch(m: int, slots: int, cg: int, co: int, transposed: bool) -> int:
    """Scratch bytes of a Winograd conv (the runtime's wino_slot_floats per slot, + alignment):
    [(m+2)^2][cg][64] transformed inputs and [(m+2)^2][co][64] products a slot; transposed, also
    [(m+2)^2][64][co] for the GEMMs' C^T."""
    a = m + 2
    return 64 + slots * a * a * (cg + co * (2 if transposed else 1)) * WINO_TILES * 4


def _winograd_small(op: Op, oh: int, ow: int) -> bool:
    """Whether a wide 3x3 conv on a small map (9 to 64 tiles of 2x2: ResNet's 7x7 layer, 16
    tiles, and its 14x14 layer, 49) runs as a transposed F(2x2): each element's GEMM is then
    C^T[tiles, co] = V^T @ U^T, the tiles the 6-row side and the output channels whole 16-lane
    vectors. On 7x7 maps the untransposed GEMMs would be matrix-vector products (_winograd_tile
    leaves them direct); transposed they do 1.7x fewer multiplies than the direct conv (49
    outputs cost 64 in 2x2 tiles) for 16 / 9 more filter bytes streamed. On 14x14 maps the
    untransposed F(2x2) computes 49 tiles as a 64-column strip; transposed they are 54 rows of
    6-row tiles (16 % fewer multiplies): Zen 4, paired, that conv 1.77 -> 1.58 ms at 1 thread
    and 1.01 -> 0.84 at 2, ResNet-18 3 % / 1-3 % faster, ResNet-50 1-2 % / 0-1 %. For wide
    layers only (>= 256 channels in and out), where the direct GEMM is also weight-bound."""
    return _winograd_shape(op, 256) and 9 <= -(-oh // 2) * -(-ow // 2) <= WINO_TILES


def _align(n: int) -> int:
    return -(-n // 64) * 64


def _conv_transposed(co: int, npix: int, kg: int) -> bool:
    """Whether a conv runs as C^T = im2col^T @ W^T (pixels as the 6-row broadcast side, output
    channels as the vector side): for few pixels (7x7 maps), whose 16-lane vectors are partly
    idle (49 pixels fill 49 of 64 lanes), while output channels come in multiples of 16. The
    kernels' cost is per 16-lane vector and per whole 6-row tile. C^T must then be transposed
    into the output, about 1 ns per element on this Xeon against 2 * kg FMAs per element of the
    GEMM (~120 GFLOP/s), so it pays only for deep K (measured: 1x1 convs with K <= 160 on 7x7 and
    14x14 maps ran 1.1-2x slower; 14x14 maps, 196 of 208 lanes used, gain too little). It pays
    for 512+ output channels too (ResNet's 7x7 layers), now that the untransposed kernel
    prefetches its C tile: run in one process alternately with untransposed files on an
    FMA-only Xeon, ResNet-18 ran 3 % faster at 1 and 2 threads and ResNet-50 3 % / 2 %."""
    if npix > 64 or kg < 256:
        return False
    used_n = npix / (-(-npix // 16) * 16) * co / (-(-co // B.MR) * B.MR)
    used_t = npix / (-(-npix // B.MR) * B.MR) * co / (-(-co // 16) * 16)
    return used_t > used_n * 1.05


def build_blob(
    ops: list[Op], inputs: list[TensorSpec], outputs: list[TensorSpec], pairs: bool = False
) -> tuple[bytes, int]:
    g = B.Graph()
    g.n_inputs, g.n_outputs = len(inputs), len(outputs)
    in_idx = {id(r): i for i, r in enumerate(inputs)}
    out_idx = {id(r): i for i, r in enumerate(outputs)}
    ids: dict[int, int] = {}
    # A copy (clone, expand or dtype no-op of a contiguous tensor) whose result is not a delegate
    # output is dropped: its result becomes a second shape over the source's storage (nothing
    # in the backend writes a tensor after producing it, so the two can never differ).
    alias: dict[int, TensorSpec] = {}
    for op in ops:
        if op.kind == "copy" and isinstance(op.ins[0], TensorSpec):
            o = op.outs[0]
            if o.root() is o and id(o) not in out_idx:
                alias[id(o)] = op.ins[0]
    ops = [op for op in ops if not (op.kind == "copy" and id(op.outs[0]) in alias)]

    def tid(v: Any) -> int:
        if v is None:
            return -1
        if isinstance(v, Const):
            return g.const(v.arr, v.key)
        if id(v) in ids:
            return ids[id(v)]
        r = v.root()
        while id(r) in alias:
            r = alias[id(r)].root()
        shape = tuple(v.shape)
        if id(r) in out_idx:
            bt = B.BTensor(B.OUTPUT, shape, index=out_idx[id(r)])
        elif id(r) in in_idx:
            bt = B.BTensor(B.INPUT, shape, index=in_idx[id(r)])
        else:
            bt = B.BTensor(B.ARENA, shape, root=id(r))
        ids[id(v)] = g.add(bt)
        return ids[id(v)]

    for op in ops:
        if op.kind == "conv2d":
            x, out = op.ins[0], op.outs[0]
            pc = _pack_conv(op, x, out, pairs)
            a = op.attrs
            ip = [
                a["groups"],
                a["w"].shape[2],
                a["w"].shape[3],
                *a["stride"],
                *a["pad"],
                *a["dil"],
                int(pc.depthwise),
                0,
                0,
                int(pc.transposed),
                pc.wino,
                pc.wino_slots,
                0 if pc.pairs is None else g.const(pc.pairs) + 1,
            ]
            scale = -1 if a.get("in_scale") is None else tid(a["in_scale"])
            ip.append(scale + 1)  # EMC_CONV_IN_SCALE
            b = a["b"]
            res = tid(op.ins[1]) if len(op.ins) > 1 else -1
            bop = B.BOp(
                "conv2d",
                [tid(x), g.const(pc.packed), -1 if b is None else g.const(b), res],
                [tid(o) for o in op.outs],
                ip=ip,
                fp=list(op.fp),
                act=op.act,
                scratch=pc.scratch,
                reads=[scale] if scale >= 0 else [],
            )
        else:
            bop = B.BOp(
                op.kind,
                [tid(i) for i in op.ins],
                [tid(o) for o in op.outs],
                ip=list(op.ip),
                fp=list(op.fp),
                act=op.act,
            )
        g.ops.append(bop)
    data = g.serialize()
    return data, g.arena_nbytes


# ---- the pass ---------------------------------------------------------------------------------
def _fold_constant_permutes(ir: MethodIR) -> None:
    kept = []
    for ins in ir.instrs:
        if (
            isinstance(ins, KernelInstr)
            and ins.kernel == "aten::permute_copy.out"
            and ins.args[0].kind == "tensor"
            and ins.args[0].value.kind == CONSTANT
            and ins.args[0].value.data is not None
            and ins.outputs
            and not ins.outputs[0].value.dynamic
            and ins.args[1].kind == "intlist"
        ):
            out = ins.outputs[0].value
            if out.root() is out and out.kind != MUTABLE:
                src = ins.args[0].value
                out.kind = CONSTANT
                out.data = src.data.permute(*[int(d) for d in ins.args[1].value]).contiguous()
                out.fqn = None
                continue
        kept.append(ins)
    ir.instrs = kept


def host_has_amx() -> bool:
    """Whether this machine's CPU has what the runtime's AMX path needs: AMX-BF16, AMX-TILE and
    AVX512-BF16 (Linux: /proc/cpuinfo; elsewhere False)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False
    return all(f" {x}" in flags for x in ("amx_bf16", "amx_tile", "avx512_bf16"))


def amx_pairs_for(target: str | None) -> bool:
    """Whether convs store bf16-pair weights for the AMX path (EMC_CONV_PAIRS) for ``target``:
    for ``"x86-64"`` (some x86-64 CPUs have AMX), not for ``"aarch64"``; for this host
    (``None`` / ``"host"``) when its CPU has AMX-BF16. Elsewhere they would only grow the file."""
    if target == "x86-64":
        return True
    if target in (None, "host"):
        return host_has_amx()
    return False


@dataclass
class Decision:
    """What the partitioner did with one instruction (``ember.export(..., explain=True)``)."""

    index: int
    kernel: str
    node: str | None
    delegated: bool
    why: str  # the reason it stays portable, or the delegate it went to
    source: str | None = None


def _where(ins: KernelInstr) -> tuple[str | None, str | None]:
    """The FX node name and the user's source line of ``ins``."""
    node = ins.node
    return (node.name if node is not None else None), user_source_line(node)


def _describe(ins: KernelInstr) -> str:
    node, src = _where(ins)
    return f"{ins.kernel} (node {node or '?'}{', at ' + src if src else ''})"


class _Runs:
    """Lowers runs of instructions into DelegateInstrs, falling back to the portable kernels
    for any part of a run whose fusion, packing or runtime check fails."""

    def __init__(self, ir: MethodIR, pairs: bool, check: Any) -> None:
        self.instrs = ir.instrs
        self.pairs, self.check = pairs, check
        self.refs: dict[int, set[int]] = {}
        for i, ins in enumerate(self.instrs):
            args = ins.args if isinstance(ins, KernelInstr) else instr_args(ins)
            for a in args:
                for t in a.tensors():
                    self.refs.setdefault(id(t.root()), set()).add(i)
        self.out_roots = {id(t.root()) for a in ir.outputs for t in a.tensors()}
        self.in_roots = {id(t.root()) for a in ir.inputs for t in a.tensors()}
        self.decisions: dict[int, Decision] = {}

    def decide(self, i: int, delegated: bool, why: str) -> None:
        ins = self.instrs[i]
        kernel = getattr(ins, "kernel", type(ins).__name__)
        node, src = _where(ins) if isinstance(ins, KernelInstr) else (None, None)
        self.decisions[i] = Decision(i, kernel, node, delegated, why, src)

    def lower(self, i: int) -> Op | None:
        """The backend op for instruction ``i``, or None (logged) when it stays portable."""
        ins = self.instrs[i]
        if not isinstance(ins, KernelInstr) or isinstance(ins, DelegateInstr):
            self.decide(i, False, "not a kernel call")
            return None
        try:
            return lower(
                ins,
                lambda s: (
                    self.refs.get(id(s.root()), set()) <= {i} and id(s.root()) not in self.out_roots
                ),
            )
        except Unsupported as e:
            why = str(e) or "unsupported"
            log.info("cpu backend: %s stays portable: %s", _describe(ins), why)
        except Exception as e:  # a bug in one lowering must not break the export
            why = f"lowering failed: {type(e).__name__}: {e}"
            log.warning("cpu backend: %s stays portable: %s", _describe(ins), why)
        self.decide(i, False, why)
        return None

    def build(self, i: int, j: int) -> tuple[DelegateInstr, set[int]] | None:
        """One DelegateInstr for instructions [i, j) (lowered afresh: fusion edits the ops) and
        the roots private to it, or None when the run stays portable because its outputs would
        alias method inputs."""
        run = set(range(i, j))
        ops: list[Op] = []
        for t in range(i, j):
            op = self.lower(t)
            if op is None:
                raise Unsupported(f"{self.instrs[t].kernel} no longer lowers")
            ops.append(op)
        produced = {id(o.root()) for op in ops for o in op.outs}
        external = {r for r in produced if (self.refs.get(r, set()) - run) or r in self.out_roots}
        u = _Uses(ops, external)
        for fuse in _FUSIONS:
            (globals()[fuse] if isinstance(fuse, str) else fuse)(ops, u)
        # Inputs: roots read but not produced in the run; outputs: produced roots read outside.
        inputs: list[TensorSpec] = []
        seen: set[int] = set()
        for op in ops:
            for v in op.ins:
                if isinstance(v, TensorSpec):
                    r = v.root()
                    if id(r) not in produced and id(r) not in seen:
                        seen.add(id(r))
                        inputs.append(r)
        outputs: list[TensorSpec] = []
        seen = set()
        for op in ops:
            for o in op.outs:
                r = o.root()
                if id(r) in external and id(r) not in seen:
                    seen.add(id(r))
                    outputs.append(r)
        if any(id(r) in self.in_roots for r in outputs):
            return None
        data, arena = build_blob(ops, inputs, outputs, self.pairs)
        refused = self.check(BACKEND_ID, data, arena) if self.check is not None else None
        if refused:
            raise _Refused(refused)
        kinds = sorted({o.kind for o in ops})
        d = DelegateInstr(
            kernel=f"delegate::{BACKEND_ID}",
            args=[Arg("tensor", r) for r in inputs] + [Arg("tensor", r) for r in outputs],
            outputs=[Arg("tensor", r) for r in outputs],
            backend_id=BACKEND_ID,
            processed=data,
            n_inputs=len(inputs),
            summary=f"{j - i} instructions -> {len(ops)} ops ({', '.join(kinds)}), "
            f"{len(data)} bytes, arena {arena}",
        )
        return d, produced - external

    def place(self, i: int, j: int, out: list[Any]) -> set[int]:
        """Appends [i, j) to ``out`` as delegates where possible; a run that fails is split in
        two and each half tried again, down to single instructions that stay portable. Returns
        the roots private to the delegates made (they leave the method's specs)."""
        first = self.instrs[i]
        try:
            built = self.build(i, j)
        except Exception as e:
            refused = isinstance(e, _Refused)
            what = (
                f"the runtime refused its blob: {e}"
                if refused
                else f"{type(e).__name__}: {e}"
                if not isinstance(e, Unsupported)
                else str(e)
            )
            if j - i == 1:
                log.warning("cpu backend: %s stays portable: %s", _describe(first), what)
                self.decide(i, False, what)
                out.append(first)
                return set()
            log.info(
                "cpu backend: run of %d instructions from %s split in two: %s",
                j - i,
                _describe(first),
                what,
            )
            mid = (i + j) // 2
            return self.place(i, mid, out) | self.place(mid, j, out)
        if built is None:
            for t in range(i, j):
                self.decide(t, False, "its run's outputs are method inputs")
            out.extend(self.instrs[i:j])
            return set()
        d, private = built
        n = sum(isinstance(x, DelegateInstr) for x in out)
        for t in range(i, j):
            self.decide(t, True, f"{BACKEND_ID} delegate {n}")
        out.append(d)
        return private


class _Refused(Exception):
    """The runtime's own check refused a blob."""


# The fusion passes of a run, in order (looked up by name when a run is built).
_FUSIONS: tuple[Any, ...] = (
    "_see_through_copies",
    "_fold_bn",
    "_merge_clamps",
    "_fuse_acts",
    "_hard_patterns",
    "_silu",
    "_fuse_softmax_input",
    "_fuse_acts",
    "_fuse_residual",
    "_fuse_plane_means",
    "_fuse_input_scale",
)


def partition_cpu(ir: MethodIR, pairs: bool = False, check: Any = runtime_check) -> MethodIR:
    """Replace runs of supported instructions by EmberCpuBackend DelegateInstrs; ``pairs``:
    convs also store their weights as bf16 pairs for the AMX path (:func:`amx_pairs_for`).

    Never fails on what the portable path accepts: an instruction whose lowering raises stays
    portable (INFO for an expected decline, WARNING naming the node and source line for an
    unexpected error), and a run whose fusion or packing raises, or whose blob ``check``
    (``(backend_id, blob, arena_nbytes) -> message or None``; default: the runtime's own init)
    refuses, is split until each part delegates or stays portable. What happened to each
    instruction is ``ir.partition_report`` (a list of :class:`Decision`)."""
    _fold_constant_permutes(ir)
    runs = _Runs(ir, pairs, check)
    instrs = ir.instrs
    lowered = [runs.lower(i) is not None for i in range(len(instrs))]
    new_instrs: list[Any] = []
    removed_roots: set[int] = set()
    i = 0
    while i < len(instrs):
        if not lowered[i]:
            new_instrs.append(instrs[i])
            i += 1
            continue
        j = i
        while j < len(instrs) and lowered[j]:
            j += 1
        removed_roots |= runs.place(i, j, new_instrs)
        i = j
    n_deleg = sum(isinstance(x, DelegateInstr) for x in new_instrs) - sum(
        isinstance(x, DelegateInstr) for x in instrs
    )
    ir.instrs = new_instrs
    ir.specs = [s for s in ir.specs if id(s.root()) not in removed_roots]
    ir.partition_report = [runs.decisions[k] for k in sorted(runs.decisions)]
    log.info("cpu backend: %d delegate(s) in %s", n_deleg, ir.name)
    return ir
