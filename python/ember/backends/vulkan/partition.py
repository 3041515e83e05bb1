"""EmberVulkanBackend partitioner: MethodIR -> MethodIR with DelegateCalls to the Vulkan backend.

Runs where the CPU backend's partitioner runs (after view elision, before lifetimes and memory
planning) and shares its machinery: each instruction is lowered by the CPU backend's
:func:`~ember.backends.cpu.lowering.lower` (its argument parsing and checks), except the
matrix products, concatenation and slices, which the Vulkan blob describes differently; only the
operator kinds of :data:`ember.backends.vulkan.blob.KINDS` are taken. Every maximal run of
consecutive supported instructions becomes one :class:`DelegateInstr` (batch norm folded into
the convolution before it, the hardswish / hardsigmoid / silu decompositions recognised,
activations fused into the conv or linear before them); a run whose blob
fails the runtime's own validation (``em_vulkan_blob_check``) or raises is split in two until
each part delegates or stays portable (the run machinery is :mod:`ember.backends.runs`, shared
with the CPU backend). ``storage="f16"`` writes blobs with mixed storage
(backends/vulkan/README.md): the conv / linear weight matrices as halves (rounded to nearest
even at export), the other constants as f32, and each activation as f16 unless
:func:`f32_activations` keeps it f32.
"""

from __future__ import annotations

import ctypes
import logging
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backends.cpu.fusion import _fold_bn, _hard_patterns, _silu, _Uses
from ember.backends.cpu.lowering import (
    COPIES,
    Op,
    Unsupported,
    _const_arr,
    _f32,
    _f32x,
    _num,
    _operand,
    _t,
)
from ember.backends.cpu.lowering import lower as cpu_lower
from ember.backends.cpu.partition import _fold_constant_permutes
from ember.backends.delegate import DelegateInstr
from ember.backends.runs import Refused, Runs, partition_runs
from ember.backends.vulkan.blob import KINDS, STORAGE, arena_bytes, build_blob
from ember.passes.ir import Arg, KernelInstr, MethodIR, TensorSpec

log = logging.getLogger(__name__)

BACKEND_ID = "EmberVulkanBackend"
# The largest arena a delegate may have: 2^27 bytes, the maxStorageBufferRange every Vulkan
# device supports (the runtime binds the arena as one storage buffer), so that a file loads on
# any device. A run above it is split.
MAX_ARENA_BYTES = 1 << 27

# The mixed-storage rule of vulkan_storage="f16" (f32_activations): the operators whose outputs
# seed the f32 activations, and those whose inputs are kept f32 too.
F32_SEEDS = {"aten::native_layer_norm.out", "aten::_softmax.out", "aten::_log_softmax.out"}
F32_INPUTS = {"aten::native_layer_norm.out"}
# False: every activation f16 under vulkan_storage="f16" (the rule off; for measurements)
MIXED_RULE = True


def _roots(args: list[Arg]) -> set[int]:
    return {id(t.root()) for a in args for t in a.tensors()}


def f32_activations(ir: MethodIR) -> set[int]:
    """The ids of the TensorSpec roots that ``vulkan_storage="f16"`` keeps f32, over the whole
    method (delegate boundaries do not matter): a layer norm's input (the residual stream of a
    transformer; back through copies), then everything computed from a layer norm's or
    softmax's output or from a tensor already kept, directly or through any other operators.
    A network without layer norm or softmax (the CNNs) keeps every activation f16; in a
    transformer the activations after its first layer norm stay f32 (the measurements:
    bench/results/vulkan_zoo_lavapipe_2026-12-03.md)."""
    if not MIXED_RULE:
        return set()
    instrs = [i for i in ir.instrs if isinstance(i, KernelInstr)]
    keep: set[int] = set()
    for ins in reversed(instrs):
        outs = _roots(ins.outputs)
        if ins.kernel in F32_INPUTS:
            keep |= {id(t.root()) for t in ins.args[0].tensors()}
        elif ins.kernel in COPIES and outs & keep:
            keep |= _roots(ins.args) - outs
    for ins in instrs:
        outs = _roots(ins.outputs)
        if ins.kernel in F32_SEEDS or (_roots(ins.args) - outs) & keep:
            keep |= outs
    return keep


def _lower_gemm(ins: KernelInstr) -> Op:
    k, a = ins.kernel, ins.args
    out = ins.outputs[0].value
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
    if not (_f32(m1) and _f32(m2) and _f32(out)) or _const_arr(m1) is not None:
        raise Unsupported("matrix product operands")
    batch = m1.shape[0] if k == "aten::bmm.out" else 1
    m, kk, n = m1.shape[-2], m1.shape[-1], m2.shape[-1]
    w = _const_arr(m2)
    if w is not None and batch == 1:  # store the weight [N, K]: one contiguous row per output
        from ember.backends.cpu.lowering import Const

        wop: Any = Const(np.ascontiguousarray(w.reshape(kk, n).T))
        trans = 1
    else:
        wop, trans = _operand(m2), 0
    b = None if bias is None else _operand(bias)
    return Op("linear", [m1, wop, b], [out], ip=[batch, m, kk, n, trans, int(batch > 1)])


UPSAMPLE = {"aten::upsample_nearest2d.vec_out": 0, "aten::upsample_bilinear2d.vec_out": 1}


def _source_scale(n: int, on: int, factor: float | None, align: bool) -> float:
    """The f32 step from an output index to its source coordinate, as the portable kernels
    compute it (kernels/portable/nn_sample.c): (n-1)/(on-1) with align_corners, else
    1/factor when a scale factor was given, else n/on."""
    f32 = np.float32
    if align:
        return float(f32(n - 1) / f32(on - 1)) if on > 1 else 0.0
    if factor is not None:
        return float(f32(1.0 / factor))
    return float(f32(n) / f32(on))


def _lower_upsample(ins: KernelInstr) -> Op:
    a, out = ins.args, ins.outputs[0].value
    mode = UPSAMPLE[ins.kernel]
    x = _f32x(a[0])
    align = bool(a[2].value) if mode == 1 else False
    sc = a[3] if mode == 1 else a[2]
    if len(x.shape) != 4 or not _f32(out) or len(out.shape) != 4:
        raise Unsupported("upsample of a non-4-d tensor")
    factors: list[float | None] = [None, None]
    if sc.kind == "doublelist":
        if len(sc.value) != 2 or min(sc.value) <= 0:
            raise Unsupported("upsample scale factors")
        factors = [float(v) for v in sc.value]
    elif sc.kind != "null":
        raise Unsupported("upsample scale factors")
    fp = [_source_scale(x.shape[2 + d], out.shape[2 + d], factors[d], align) for d in range(2)]
    return Op("upsample", [x], [out], ip=[mode, int(align)], fp=fp)


def lower(ins: KernelInstr, only_here: Callable[[TensorSpec], bool]) -> Op:
    """The Vulkan operator for ``ins`` or raise Unsupported."""
    k, a = ins.kernel, ins.args
    if k in ("aten::addmm.out", "aten::mm.out", "aten::bmm.out"):
        for arg in a:
            for t in arg.tensors():
                if t.dynamic or t.root().move_target:
                    raise Unsupported("dynamic or control-flow tensor")
        return _lower_gemm(ins)
    if k in UPSAMPLE and ins.outputs:
        return _lower_upsample(ins)
    if k == "aten::cat.out" and ins.outputs:
        out = ins.outputs[0].value
        if a[0].kind != "tensorlist" or not a[0].value or not _f32(out) or len(out.shape) > 4:
            raise Unsupported("cat operands")
        xs = a[0].value
        dim = int(a[1].value) % len(out.shape)
        if not all(_f32(x) and len(x.shape) == len(out.shape) for x in xs):
            raise Unsupported("cat operands")
        return Op("cat", [_operand(x) for x in xs], [out], attrs=dict(dim=dim))
    if k == "aten::slice_copy.Tensor_out" and ins.outputs:
        x, out = _f32x(a[0]), ins.outputs[0].value
        dim = int(a[1].value) % len(x.shape)
        n = x.shape[dim]
        start = 0 if a[2].kind == "null" else int(a[2].value)
        end = n if a[3].kind == "null" else int(a[3].value)
        start, end, step = slice(start, end, int(a[4].value)).indices(n)
        if len(range(start, end, step)) != out.shape[dim] or out.shape[dim] == 0:
            raise Unsupported("slice shape")
        return Op("slice", [x], [out], attrs=dict(dim=dim, start=start, step=step))
    if k == "aten::expand_copy.out" and ins.outputs:  # numpy broadcasting: x * 1
        x, out = _f32x(a[0]), ins.outputs[0].value
        if not _f32(out) or len(x.shape) > len(out.shape):
            raise Unsupported("expand shapes")
        return Op("expand", [x], [out])
    if k == "aten::select_copy.int_out" and ins.outputs:  # a slice of one, dim dropped
        x, out = _f32x(a[0]), ins.outputs[0].value
        nd = len(x.shape)
        if nd == 0 or not _f32(out):
            raise Unsupported("select of a scalar")
        dim = int(a[1].value) % nd
        index = int(a[2].value)
        index = index + x.shape[dim] if index < 0 else index
        if not 0 <= index < x.shape[dim]:
            raise Unsupported("select index out of range")
        return Op("select", [x], [out], attrs=dict(dim=dim, start=index, step=1))
    if k in ("aten::sum.IntList_out", "aten::sum.dim_IntList") and ins.outputs:
        x, out = _f32x(a[0]), ins.outputs[0].value
        nd = len(x.shape)
        dims = sorted({d % nd for d in a[1].value}) if a[1].kind == "intlist" and nd else []
        if (
            not dims
            or not _f32(out)
            or dims != list(range(dims[0], dims[-1] + 1))
            or (len(a) > 3 and a[3].kind != "null")
        ):
            raise Unsupported("sum over non-adjacent dims or with a dtype")
        outer = math.prod(x.shape[: dims[0]])
        cols = math.prod(x.shape[dims[0] : dims[-1] + 1])
        return Op("mean", [x], [out], ip=[outer, cols, math.prod(x.shape[dims[-1] + 1 :]), 1])
    if k == "aten::constant_pad_nd.out" and ins.outputs:
        x, out = _f32x(a[0]), ins.outputs[0].value
        pad = [int(v) for v in a[1].value] if a[1].kind == "intlist" else None
        nd = len(x.shape)
        if pad is None or len(pad) % 2 or len(pad) > 2 * nd or min(pad, default=0) < 0:
            raise Unsupported("pad: a static, non-negative pad list")
        before = [0] * nd
        for j in range(len(pad) // 2):  # pairs from the last dim backwards
            before[nd - 1 - j] = pad[2 * j]
        value = 0.0 if a[2].kind == "null" else float(a[2].value)
        return Op("pad", [x], [out], attrs=dict(before=before, value=value))
    if k.startswith("quantized_decomposed::"):
        raise Unsupported("quantize / dequantize")
    op = cpu_lower(ins, only_here)
    if (op.kind not in KINDS and op.kind != "bn") or op.kind == "slice":  # (a flip: reversed)
        raise Unsupported(f"{op.kind} is not a Vulkan operator")
    if op.kind == "unary" and op.act == "fakequant":
        raise Unsupported("fake-quant")
    return op


def _fuse_acts(ops: list[Op], u: _Uses) -> None:
    """An activation whose input only it reads, produced by a conv2d or linear of the same
    shape without one, runs inside that op (the shaders apply ``act`` to each output)."""
    for act in [o for o in ops if o.kind == "unary" and o.act != "fakequant"]:
        p = u.producer(act.ins[0])
        if (
            p is not None
            and p.kind in ("conv2d", "linear")
            and p.act == "none"
            and len(p.outs) == 1
            and u.private(act.ins[0], act)
            and tuple(p.outs[0].shape) == tuple(act.outs[0].shape)
        ):
            p.act, p.fp = act.act, list(act.fp)
            p.outs = act.outs
            p.nodes += act.nodes
            ops.remove(act)


def vulkan_check(blob: bytes) -> str | None:
    """The runtime's validation of ``blob`` (``em_vulkan_blob_check``, no device needed):
    ``None`` when accepted or when the runtime cannot be asked, else why it refused."""
    try:
        from ember._lib import lib

        L = lib()
    except Exception as e:  # no runtime library beside this exporter
        log.info("Vulkan blobs are not checked against the runtime (%s)", e)
        return None
    if not hasattr(L, "em_vulkan_blob_check"):
        return None
    n_tensors, n_ops = struct.unpack_from("<2I", blob, 8) if len(blob) >= 16 else (0, 0)
    size = 4096 + 160 * (n_tensors + n_ops) + 8 * len(blob) // 4
    scratch = ctypes.create_string_buffer(size)
    L.em_clear_last_error()
    st = L.em_vulkan_blob_check(blob, ctypes.c_size_t(len(blob)), scratch, ctypes.c_size_t(size))
    if st == 0x10:  # EM_ERR_NOT_SUPPORTED: a library built without Vulkan
        return None
    if st != 0:
        return f"{L.em_status_str(st).decode()}: {L.em_last_error().decode(errors='replace')}"
    return None


class _Runs(Runs):
    """EmberVulkanBackend's runs (:class:`ember.backends.runs.Runs`): :func:`lower`, the CPU
    backend's fusions then :func:`_fuse_acts`, the Vulkan blob (``storage``: "f32" or "f16")
    and ``check`` (``blob -> message or None``) on it."""

    backend_id = BACKEND_ID
    name = "vulkan backend"
    logger = log
    refuse_level = logging.INFO  # an op alone above the arena limit is expected, not a bug

    def __init__(self, ir: MethodIR, check: Any, storage: str = "f32") -> None:
        super().__init__(ir)
        self.check, self.storage = check, storage
        self.keep_f32 = f32_activations(ir) if storage == "f16" else set()

    def lower_instr(self, ins: KernelInstr, only_here: Callable[[TensorSpec], bool]) -> Op:
        return lower(ins, only_here)

    def fuse(self, ops: list[Op], external: set[int]) -> None:
        for fuse in (_fold_bn, _hard_patterns, _silu, _fuse_acts):  # CPU backend's, then ours
            fuse(ops, _Uses(ops, external))

    def make_delegate(
        self, ops: list[Op], inputs: list[TensorSpec], outputs: list[TensorSpec], i: int, j: int
    ) -> DelegateInstr:
        data = build_blob(ops, inputs, outputs, self.storage, self.keep_f32)
        arena = arena_bytes(data)
        if arena > MAX_ARENA_BYTES:
            raise Unsupported(f"arena of {arena} bytes above {MAX_ARENA_BYTES} (split)")
        refused = self.check(data) if self.check is not None else None
        if refused:
            raise Refused(refused)
        kinds = sorted({o.kind for o in ops})
        return DelegateInstr(
            kernel=f"delegate::{BACKEND_ID}",
            args=[Arg("tensor", r) for r in inputs] + [Arg("tensor", r) for r in outputs],
            outputs=[Arg("tensor", r) for r in outputs],
            backend_id=BACKEND_ID,
            processed=data,
            n_inputs=len(inputs),
            summary=f"{j - i} instructions -> {len(ops)} ops ({', '.join(kinds)}), "
            f"{len(data)} bytes, {self.storage} storage",
        )


def partition_vulkan(ir: MethodIR, check: Any = vulkan_check, storage: str = "f32") -> MethodIR:
    """Replace runs of supported instructions by EmberVulkanBackend DelegateInstrs; what
    happened to each instruction is ``ir.partition_report``. ``check``: ``blob -> message or
    None`` (default: the runtime's validation); ``storage``: the tensors' element type on the
    device, ``"f32"`` or ``"f16"`` (:data:`STORAGE`; compute is f32 either way)."""
    if storage not in STORAGE:
        raise ValueError(f"vulkan_storage={storage!r}: expected one of {', '.join(STORAGE)}")
    _fold_constant_permutes(ir)
    runs = _Runs(ir, check, storage)
    lowered = [runs.lower(i) is not None for i in range(len(ir.instrs))]
    partition_runs(ir, runs, lowered)
    n = sum(isinstance(x, DelegateInstr) and x.backend_id == BACKEND_ID for x in ir.instrs)
    log.info("vulkan backend: %d delegate(s) in %s", n, ir.name)
    return ir
