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

The pieces: :mod:`.lowering` (one instruction -> one backend operator), :mod:`.fusion` (passes
over a run's operators), :mod:`.packing` (the run -> the EMC blob); this module finds the runs,
falls back to the portable kernels for whatever raises or is refused, and reports each choice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from ember.backends.check import runtime_check
from ember.backends.cpu import (
    packing,  # noqa: F401  (tests set packing.WINO_SMALL)
    safe_softmax,
)

# The fusion passes are looked up here by name (_FUSIONS), and lower / build_blob through this
# module's globals, so a test can replace any one of them.
from ember.backends.cpu.fusion import (  # noqa: F401
    _expand_parts,
    _fake_quant,
    _fold_bn,
    _fold_pads,
    _fuse_acts,
    _fuse_input_scale,
    _fuse_plane_means,
    _fuse_residual,
    _fuse_softmax_input,
    _hard_patterns,
    _merge_clamps,
    _see_through_copies,
    _silu,
    _split_group_norm,
    _tensor_fake_quant,
    _token_fake_quant,
    _Uses,
)
from ember.backends.cpu.fusion_q8 import (  # noqa: F401
    _act_then_fq,
    _conv_q8,
    _conv_q8_u8,
    _dq_heads,
    _dw_f32_out,
    _dwconv_q8,
    _gemm_heads,
    _linear_dq8,
    _linear_q8,
    _merge_fake_quants,
)
from ember.backends.cpu.lowering import (  # noqa: F401
    DEQUANTIZE,
    INF,
    QDQ,
    QUANTIZE,
    Const,
    Op,
    Unsupported,
    dynamic_qdq,
    lower,
    qparams_of,
)
from ember.backends.cpu.packing import _bf16_pairs, _conv_transposed, build_blob  # noqa: F401
from ember.backends.delegate import DelegateInstr
from ember.backends.runs import (  # noqa: F401  (Decision: re-export)
    Decision,
    Runs,
    hoist_portable,
    partition_runs,
)
from ember.backends.runs import Refused as _Refused
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
                perm = [int(d) for d in ins.args[1].value]
                out.data = src.data.permute(*perm).contiguous()
                out.fqn = None
                q = getattr(src, "int8_weight", None)
                if q is not None and perm == [1, 0]:  # a linear layer's int8 weight, transposed
                    out.int8_weight_t = q  # type: ignore[attr-defined]
                continue
        kept.append(ins)
    ir.instrs = kept


_WEIGHT_DQ = (
    "quantized_decomposed::dequantize_per_channel.out",
    "quantized_decomposed::dequantize_per_tensor.out",
)
# Readers that take a dequantized weight as a constant operand.
_WEIGHT_READERS = (
    "aten::convolution.out",
    "aten::addmm.out",
    "aten::mm.out",
    "aten::bmm.out",
    "aten::permute_copy.out",
)


def _fold_weight_dequant(ir: MethodIR) -> None:
    """int8 weights read through ``dequantize_per_channel`` / ``dequantize_per_tensor`` (PT2E's
    representation) become the f32 constants the dequantize computes, by PyTorch's own operator,
    when only convolutions and matrix products read them: the backend packs them like any f32
    weight instead of dequantizing them on every run."""
    from ember.quant._ops import register_out_variants

    register_out_variants()
    readers: dict[int, list[str]] = {}
    for ins in ir.instrs:
        args = ins.args if isinstance(ins, KernelInstr) else instr_args(ins)
        k = getattr(ins, "kernel", "")
        outs = {id(o.value.root()) for o in getattr(ins, "outputs", []) if o.kind == "tensor"}
        for a in args:
            for t in a.tensors():
                if id(t.root()) not in outs:
                    readers.setdefault(id(t.root()), []).append(k)
    out_roots = {id(t.root()) for a in ir.outputs for t in a.tensors()}
    kept = []
    for ins in ir.instrs:
        if isinstance(ins, KernelInstr) and ins.kernel in _WEIGHT_DQ and ins.outputs:
            a, out = ins.args, ins.outputs[0].value
            vals = [
                x.value.data if x.kind == "tensor" and x.value.kind == CONSTANT else None
                for x in a[:3]
            ]
            rs = readers.get(id(out.root()), [])
            if (
                vals[0] is not None
                and out.root() is out
                and out.kind != MUTABLE
                and id(out) not in out_roots
                and out.dtype == torch.float32
                and rs
                and all(r in _WEIGHT_READERS for r in rs)
                and all(x.kind in ("tensor", "int", "double") for x in a[1:7])
            ):
                qd = torch.ops.quantized_decomposed
                try:
                    if ins.kernel.endswith("per_channel.out"):
                        data = qd.dequantize_per_channel(
                            vals[0],
                            vals[1],
                            vals[2],
                            a[3].value,
                            a[4].value,
                            a[5].value,
                            vals[0].dtype,
                        )
                    else:
                        data = qd.dequantize_per_tensor(
                            vals[0],
                            a[1].value,
                            a[2].value,
                            a[3].value,
                            a[4].value,
                            vals[0].dtype,
                        )
                except Exception as e:  # leave it to the portable kernel's own checks
                    log.info("cpu backend: weight dequantize not folded: %s", e)
                    data = None
                if data is not None and tuple(data.shape) == tuple(out.shape):
                    out.kind, out.data, out.fqn = CONSTANT, data.to(torch.float32), None
                    _remember_int8(out, ins, vals)
                    continue
        kept.append(ins)
    ir.instrs = kept


def _remember_int8(out: TensorSpec, ins: KernelInstr, vals: list[Any]) -> None:
    """Keeps a folded weight's int8 values and per-output-channel scales on its spec
    (``int8_weight``), for the int8 convs (EMC_CONV_Q8): symmetric int8 (zero points 0), one
    scale per row of axis 0 or one for the whole tensor. A 2-d weight with its scales along axis
    1 (Ember's quantizer stores a linear layer's weight as addmm reads it, [k, n]) is kept
    transposed instead (``int8_weight_t``: [n, k], a scale per row), as linear layers read it
    (:func:`_fold_constant_permutes` gives PT2E's [n, k] weights the same through their
    transpose)."""
    q, a = vals[0], ins.args
    if q.dtype != torch.int8 or q.dim() < 1:
        return
    zps = vals[2]
    if (
        ins.kernel.endswith("per_channel.out")
        and q.dim() == 2
        and a[3].kind == "int"
        and int(a[3].value) == 1
        and vals[1] is not None
        and vals[1].numel() == q.shape[1]
        and (zps is None or not bool((zps != 0).any()))
    ):
        s1 = vals[1].detach().to(torch.float32).reshape(-1)
        out.int8_weight_t = (q.detach().t().contiguous(), s1)  # type: ignore[attr-defined]
        return
    if ins.kernel.endswith("per_channel.out"):
        scales, zps = vals[1], vals[2]
        if (
            a[3].kind != "int"
            or int(a[3].value) != 0
            or scales is None
            or scales.numel() != q.shape[0]
            or (zps is not None and bool((zps != 0).any()))
        ):
            return
        s = scales.detach().to(torch.float32).reshape(-1)
    else:
        if a[1].kind != "double" or a[2].kind != "int" or int(a[2].value) != 0:
            return
        s = torch.full((q.shape[0],), float(a[1].value), dtype=torch.float32)
    out.int8_weight = (q.detach().contiguous(), s)  # type: ignore[attr-defined]


def _run_ids(lowered: list[bool]) -> list[int]:
    """Each instruction's run number (a portable instruction starts a new one)."""
    run, r = [], 0
    for low in lowered:
        r += int(not low)
        run.append(r)
    return run


def _keep_tensor_qdq(runs: _Runs, lowered: list[bool]) -> bool:
    """A per-tensor dynamic Q/DQ (choose_qparams.tensor, then the quantize / dequantize pair with
    its tensors) stays in the backend only when its three parts are lowered in one run: the
    fusion joins them into one op (read by int8 linears, which quantize their rows themselves,
    or by anything else through its own EMC_OP_TENSOR_FQ). Otherwise the three stay portable
    from the start, so the run's fusion does not fail on a part without the others: a failing
    run is split in two, and the halves may cut other chains apart. Returns whether it changed
    anything."""
    instrs = runs.instrs
    writer: dict[int, int] = {}
    for i, ins in enumerate(instrs):
        if isinstance(ins, KernelInstr):
            for o in ins.outputs:
                for t in o.tensors():
                    writer.setdefault(id(t.root()), i)
    changed = False
    run = _run_ids(lowered)
    for i, ins in enumerate(instrs):
        if not (isinstance(ins, KernelInstr) and ins.kernel in DEQUANTIZE and dynamic_qdq(ins)):
            continue
        q = writer.get(id(ins.args[0].value.root()))
        c = writer.get(id(ins.args[1].value.root())) if ins.args[1].kind == "tensor" else None
        parts = [p for p in (c, q, i) if p is not None]
        ok = len(parts) == 3 and all(lowered[p] and run[p] == run[i] for p in parts)
        if not ok and any(lowered[p] for p in parts):
            safe_softmax.unlower(
                runs, lowered, parts, "per-tensor dynamic Q/DQ with a part outside its run"
            )
            changed = True
            run = _run_ids(lowered)
    return changed


def _pair_qdq(runs: _Runs, lowered: list[bool]) -> None:
    """Keeps each int8 Q/DQ pair on one side of the delegate boundary: a quantize stays in the
    backend only when every reader is a dequantize of the same qparams lowered in its run, and
    a dequantize only when its quantize is, or when it reads an int8 constant (repeated until
    nothing changes, as each refusal splits a run)."""
    instrs = runs.instrs

    def root_of(ins: Any) -> int:
        return id(ins.outputs[0].value.root())

    writer = {
        root_of(ins): i
        for i, ins in enumerate(instrs)
        if isinstance(ins, KernelInstr)
        and ins.kernel in QUANTIZE
        and ins.outputs
        and not dynamic_qdq(ins)
    }
    changed = True
    while changed:
        changed = False
        run, r = [], 0
        for i in range(len(instrs)):
            r += int(not lowered[i])
            run.append(r)
        for i, ins in enumerate(instrs):
            if not lowered[i] or getattr(ins, "kernel", "") not in QDQ or dynamic_qdq(ins):
                continue
            if ins.kernel in QUANTIZE:
                root = root_of(ins)
                rd = runs.refs.get(root, set()) - {i}
                ok = root not in runs.out_roots and all(
                    lowered[j]
                    and run[j] == run[i]
                    and instrs[j].kernel in DEQUANTIZE
                    and qparams_of(instrs[j]) == qparams_of(ins)
                    for j in rd
                )
            elif ins.args[0].value.kind == CONSTANT:  # an int8 constant, dequantized at export
                continue
            else:
                w = writer.get(id(ins.args[0].value.root()))
                ok = (
                    w is not None
                    and lowered[w]
                    and run[w] == run[i]
                    and qparams_of(instrs[w]) == qparams_of(ins)
                )
            if not ok:
                lowered[i], changed = False, True
                runs.decide(i, False, "its Q/DQ partner is not in the same delegate")


def host_has_amx() -> bool:
    """Whether this machine's CPU has what the runtime's AMX path needs: AMX-BF16, AMX-TILE and
    AVX512-BF16 (Linux: /proc/cpuinfo; elsewhere False)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False
    return all(f" {x}" in flags for x in ("amx_bf16", "amx_tile", "avx512_bf16"))


# Where Winograd filters are transformed: "load" (the default; the file holds each weight once,
# the runtime transforms at init) or "export" (the file holds the transformed filters: (m+2)^2/9
# the bytes of those convs, no work at init). bench/file_size.py measures both.
PACK_MODES = ("load", "export")


def amx_pairs_for(target: str | None) -> bool:
    """Whether convs store bf16-pair weights for the AMX path (EMC_CONV_PAIRS) for ``target``:
    for ``"x86-64"`` (some x86-64 CPUs have AMX), not for ``"aarch64"``; for this host
    (``None`` / ``"host"``) when its CPU has AMX-BF16. Elsewhere they would only grow the file."""
    if target == "x86-64":
        return True
    if target in (None, "host"):
        return host_has_amx()
    return False


class _Runs(Runs):
    """EmberCpuBackend's runs (:class:`ember.backends.runs.Runs`): this module's ``lower``,
    fusion passes (:data:`_FUSIONS`) and ``build_blob``, looked up when called (tests replace
    them), and the runtime's own init as the blob check."""

    backend_id = BACKEND_ID
    name = "cpu backend"
    logger = log

    def __init__(self, ir: MethodIR, pairs: bool, check: Any, pack: str = "load") -> None:
        super().__init__(ir)
        self.pairs, self.check, self.pack = pairs, check, pack
        self.safe_parts = safe_softmax.find(ir)  # torch's _safe_softmax patterns

    def lower_instr(self, ins: KernelInstr, only_here: Callable[[TensorSpec], bool]) -> Op:
        part = self.safe_parts.get(id(ins))
        if part is not None:
            return safe_softmax.lower_part(ins, part[0])
        return lower(ins, only_here)

    def fuse(self, ops: list[Op], external: set[int]) -> None:
        u = _Uses(ops, external)
        for fuse in _FUSIONS:
            (globals()[fuse] if isinstance(fuse, str) else fuse)(ops, u)

    def make_delegate(
        self, ops: list[Op], inputs: list[TensorSpec], outputs: list[TensorSpec], i: int, j: int
    ) -> DelegateInstr:
        op_info: list[tuple[str, list[str]]] = []
        data, arena = build_blob(ops, inputs, outputs, self.pairs, op_info, self.pack)
        refused = self.check(BACKEND_ID, data, arena) if self.check is not None else None
        if refused:
            raise _Refused(refused)
        kinds = sorted({o.kind for o in ops})
        return DelegateInstr(
            kernel=f"delegate::{BACKEND_ID}",
            args=[Arg("tensor", r) for r in inputs] + [Arg("tensor", r) for r in outputs],
            outputs=[Arg("tensor", r) for r in outputs],
            backend_id=BACKEND_ID,
            processed=data,
            n_inputs=len(inputs),
            summary=f"{j - i} instructions -> {len(ops)} ops ({', '.join(kinds)}), "
            f"{len(data)} bytes, arena {arena}",
            debug_ids=delegate_debug_ids(op_info),
        )


_safe_softmax = safe_softmax.fuse

# The longest run of operators the runtime executes as one (backends/cpu/cpu_op_chain.c).
MAX_CHAIN = 3


def delegate_debug_ids(op_info: list[tuple[str, list[str]]]) -> dict[str, list[str]]:
    """The FX nodes behind each delegate debug id the runtime may give a profile event: an
    operator's ``"kind #i"`` and a chain's ``"kind+kind #i-j"`` (backends/cpu/cpu_backend.c
    builds the same strings; which chains run is decided at init, so every run of up to
    MAX_CHAIN operators is listed)."""
    out: dict[str, list[str]] = {}
    for a in range(len(op_info)):
        for n in range(1, MAX_CHAIN + 1):
            if a + n > len(op_info):
                break
            span = op_info[a : a + n]
            key = "+".join(k for k, _ in span) + f" #{a}" + (f"-{a + n - 1}" if n > 1 else "")
            nodes: list[str] = []
            for _, ns in span:
                nodes.extend(x for x in ns if x not in nodes)
            out[key] = nodes
    return out


# The fusion passes of a run, in order (looked up by name when a run is built).
_FUSIONS: tuple[Any, ...] = (
    "_expand_parts",
    "_fake_quant",
    "_token_fake_quant",
    "_tensor_fake_quant",
    "_safe_softmax",
    "_see_through_copies",
    "_fold_bn",
    "_split_group_norm",
    "_merge_clamps",
    "_fuse_acts",
    "_hard_patterns",
    "_silu",
    "_fuse_softmax_input",
    "_fuse_acts",
    "_fold_pads",
    "_fuse_residual",
    "_fuse_plane_means",
    "_fuse_input_scale",
    "_merge_fake_quants",
    "_act_then_fq",
    "_linear_q8",
    "_linear_dq8",
    "_dq_heads",
    "_gemm_heads",
    "_conv_q8",
    "_dwconv_q8",
    "_dw_f32_out",
    "_conv_q8_u8",
)


def partition_cpu(
    ir: MethodIR, pairs: bool = False, check: Any = runtime_check, pack: str = "load"
) -> MethodIR:
    """Replace runs of supported instructions by EmberCpuBackend DelegateInstrs; ``pairs``:
    convs also store their weights as bf16 pairs for the AMX path (:func:`amx_pairs_for`);
    ``pack``: ``"load"`` stores Winograd convs' plain weights, transformed by the runtime at
    init, ``"export"`` stores the transformed filters (:data:`PACK_MODES`).

    Never fails on what the portable path accepts: an instruction whose lowering raises stays
    portable (INFO for an expected decline, WARNING naming the node and source line for an
    unexpected error), and a run whose fusion or packing raises, or whose blob ``check``
    (``(backend_id, blob, arena_nbytes) -> message or None``; default: the runtime's own init)
    refuses, is split until each part delegates or stays portable. What happened to each
    instruction is ``ir.partition_report`` (a list of :class:`Decision`)."""
    _fold_weight_dequant(ir)
    _fold_constant_permutes(ir)
    if pack not in PACK_MODES:
        raise ValueError(f"pack={pack!r}: expected one of {', '.join(PACK_MODES)}")
    runs = _Runs(ir, pairs, check, pack)
    lowered = [runs.lower(i) is not None for i in range(len(ir.instrs))]
    if hoist_portable(ir, lowered):  # the runs join: index anew
        runs = _Runs(ir, pairs, check, pack)
        lowered = [runs.lower(i) is not None for i in range(len(ir.instrs))]
    while _keep_tensor_qdq(runs, lowered):
        pass
    while safe_softmax.keep(runs, lowered, runs.safe_parts, _run_ids):
        pass
    _pair_qdq(runs, lowered)
    n_deleg = partition_runs(ir, runs, lowered)
    log.info("cpu backend: %d delegate(s) in %s", n_deleg, ir.name)
    return ir
