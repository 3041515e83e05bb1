"""Emission: MethodIRs -> ``schema.ExecutionPlan`` values, operators and instructions.

Conventions (ExecuTorch's emitter, docs/pte-format.md section 6):

- ``values`` holds every EValue; scalars get one value per argument occurrence; list elements
  are emitted before the list that refers to them; each tensor spec is one value (elided views
  are separate Tensor values placed at their base's memory).
- Constants are deduplicated by SHA-256 across all methods into one table (entry 0 is the
  placeholder) whose index is the tensor's ``data_buffer_idx``. With ``external`` they are
  written to the ``.ptd`` instead, keyed by fully-qualified name, and the tensor carries
  ``ExtraTensorInfo{fqn, EXTERNAL}``.
- Mutable buffers are planned tensors whose ``data_buffer_idx`` points into the mutable-data
  table (their initial state).
- One chain; labels of the IR become absolute instruction indices.
- Per-instruction debug info (FX node name, stack trace, output value indices) is recorded for
  :func:`ember.compare`.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from ember import pytree_str
from ember import schema as S
from ember.backends.delegate import DelegateInstr
from ember.errors import SerializationError
from ember.passes.ir import (
    CONSTANT,
    MUTABLE,
    Arg,
    IntValue,
    JumpFalseInstr,
    KernelInstr,
    Label,
    MethodIR,
    MoveInstr,
    TensorSpec,
)
from ember.passes.out_variants import SCALAR_TYPE
from ember.serialize import PtdEntry

log = logging.getLogger(__name__)


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """Contiguous raw bytes of ``t`` (zero-copy when already contiguous on CPU)."""
    t = t.detach().cpu().contiguous()
    arr = t.reshape(-1).view(torch.uint8).numpy()
    return memoryview(arr)


@dataclass
class InstrDebug:
    """What instruction ``index`` computes: for :func:`ember.compare`."""

    index: int
    node: str | None
    stack_trace: str | None
    out_values: list[int]
    kernel: str = ""
    # A delegate call: its delegate debug ids -> FX node names (DelegateInstr.debug_ids).
    delegate_ids: dict[str, list[str]] = field(default_factory=dict)


_PROBE = 4096


def _probe_key(mv: memoryview) -> tuple[int, bytes]:
    """Cheap pre-filter for deduplication: length plus a hash of the first and last 4 KiB.
    Buffers with different probe keys cannot be equal, so the full SHA-256 is only computed
    for buffers whose probe keys collide."""
    n = mv.nbytes
    head = mv[:_PROBE]
    tail = mv[max(n - _PROBE, _PROBE) :] if n > _PROBE else b""
    return n, hashlib.sha256(bytes(head) + bytes(tail)).digest()


@dataclass
class BufferTable:
    """A table of byte buffers deduplicated by SHA-256; index 0 is the unused placeholder."""

    dedupe: bool = True
    buffers: list = field(default_factory=lambda: [b""])
    by_probe: dict[tuple[int, bytes], list[int]] = field(default_factory=dict)
    sha: dict[int, bytes] = field(default_factory=dict)

    def _sha(self, idx: int) -> bytes:
        if idx not in self.sha:
            self.sha[idx] = hashlib.sha256(self.buffers[idx]).digest()
        return self.sha[idx]

    def add(self, data: torch.Tensor) -> int:
        mv = tensor_bytes(data)
        if not self.dedupe:
            self.buffers.append(mv)
            return len(self.buffers) - 1
        key = _probe_key(mv)
        same = self.by_probe.setdefault(key, [])
        if same:
            h = hashlib.sha256(mv).digest()
            for idx in same:
                if self._sha(idx) == h:
                    return idx
        idx = len(self.buffers)
        self.buffers.append(mv)
        same.append(idx)
        if same[0] != idx:
            self.sha[idx] = h
        return idx


@dataclass
class ProgramTables:
    """State shared by every method of one program."""

    external: bool = False
    constants: BufferTable = field(default_factory=BufferTable)
    mutables: BufferTable = field(default_factory=lambda: BufferTable(dedupe=False))
    ptd: dict[str, PtdEntry] = field(default_factory=dict)
    ptd_hash: dict[str, bytes] = field(default_factory=dict)


class _MethodEmitter:
    def __init__(self, ir: MethodIR, tables: ProgramTables) -> None:
        self.ir = ir
        self.t = tables
        self.values: list[S.EValue] = []
        self.spec_idx: dict[int, int] = {}
        self.int_idx: dict[int, int] = {}
        self.ops: list[S.Operator] = []
        self.op_idx: dict[str, int] = {}
        self.debug: list[InstrDebug] = []
        self.delegates: list[S.BackendDelegate] = []

    def add(self, v: S.EValue) -> int:
        self.values.append(v)
        return len(self.values) - 1

    # -- tensors ------------------------------------------------------------------------------
    def _external_key(self, spec: TensorSpec) -> str:
        key = spec.fqn or spec.name
        h = hashlib.sha256(tensor_bytes(spec.data)).digest()
        if key in self.t.ptd_hash and self.t.ptd_hash[key] != h:
            key = f"{self.ir.name}.{key}"
        if key not in self.t.ptd:
            self.t.ptd[key] = PtdEntry(
                key, SCALAR_TYPE[spec.dtype], list(spec.shape), tensor_bytes(spec.data)
            )
            self.t.ptd_hash[key] = h
        return key

    def tensor(self, spec: TensorSpec) -> int:
        idx = self.spec_idx.get(id(spec))
        if idx is not None:
            return idx
        if spec.dtype not in SCALAR_TYPE:
            raise SerializationError(f"dtype {spec.dtype} of {spec.name} cannot be serialized")
        t = S.Tensor(SCALAR_TYPE[spec.dtype], list(spec.shape), list(spec.dim_order))
        if spec.dynamic:
            t.shape_dynamism = S.DYNAMIC_BOUND
        root = spec.root()
        if spec.kind == CONSTANT:
            if spec.data is None:
                raise SerializationError(f"constant {spec.name} has no data")
            if self.t.external and spec.fqn:
                key = self._external_key(spec)
                t.extra_tensor_info = S.ExtraTensorInfo(0, key, S.LOC_EXTERNAL)
            else:
                t.data_buffer_idx = self.t.constants.add(spec.data)
        else:
            if root.mem_id is None or root.mem_offset is None:
                raise SerializationError(f"tensor {spec.name} was not memory planned")
            t.allocation_info = S.AllocationDetails(
                root.mem_id, root.mem_offset & 0xFFFFFFFF, root.mem_offset >> 32
            )
            if spec is root and spec.kind == MUTABLE and spec.data is not None:
                t.data_buffer_idx = self.t.mutables.add(spec.data)
                t.extra_tensor_info = S.ExtraTensorInfo(0, spec.fqn, S.LOC_SEGMENT)
        idx = self.add(S.EValue(S.K_TENSOR, t))
        self.spec_idx[id(spec)] = idx
        return idx

    def symint(self, iv: IntValue) -> int:
        idx = self.int_idx.get(id(iv))
        if idx is None:
            if iv.kind == "bool":
                idx = self.add(S.EValue(S.K_BOOL, False))
            elif iv.kind == "double":
                idx = self.add(S.EValue(S.K_DOUBLE, 0.0))
            else:
                idx = self.add(S.EValue(S.K_INT, 0))
            self.int_idx[id(iv)] = idx
        return idx

    def arg(self, a: Arg) -> int:
        k, v = a.kind, a.value
        if k == "tensor":
            return self.tensor(v)
        if k == "symint":
            return self.symint(v)
        if k == "int":
            return self.add(S.EValue(S.K_INT, int(v)))
        if k == "double":
            return self.add(S.EValue(S.K_DOUBLE, float(v)))
        if k == "bool":
            return self.add(S.EValue(S.K_BOOL, bool(v)))
        if k == "null":
            return self.add(S.EValue(S.K_NULL))
        if k == "string":
            return self.add(S.EValue(S.K_STRING, str(v)))
        if k == "empty_tensor":
            return self.add(S.EValue(S.K_TENSOR, S.Tensor(0, [0], [0])))
        if k == "intlist":
            items = [
                self.symint(x) if isinstance(x, IntValue) else self.add(S.EValue(S.K_INT, int(x)))
                for x in v
            ]
            return self.add(S.EValue(S.K_INTLIST, items))
        if k == "doublelist":
            return self.add(S.EValue(S.K_DOUBLELIST, list(v)))
        if k == "boollist":
            return self.add(S.EValue(S.K_BOOLLIST, list(v)))
        if k == "tensorlist":
            return self.add(S.EValue(S.K_TENSORLIST, [self.tensor(x) for x in v]))
        if k == "opt_tensorlist":
            items = [-1 if x is None else self.tensor(x) for x in v]
            return self.add(S.EValue(S.K_OPTTENSORLIST, items))
        raise SerializationError(f"unknown argument kind {k}")

    def operator(self, kernel: str) -> int:
        idx = self.op_idx.get(kernel)
        if idx is None:
            ns, rest = kernel.split("::", 1)
            name, _, overload = rest.partition(".")
            idx = len(self.ops)
            self.ops.append(S.Operator(f"{ns}::{name}", overload))
            self.op_idx[kernel] = idx
        return idx

    # -- method -------------------------------------------------------------------------------
    def emit(self) -> S.ExecutionPlan:
        ir = self.ir
        inputs = [self.arg(a) for a in ir.inputs]
        labels: dict[str, int] = {}
        n = 0
        for ins in ir.instrs:
            if isinstance(ins, Label):
                labels[ins.name] = n
            else:
                n += 1
        instrs: list[S.Instruction] = []
        for ins in ir.instrs:
            if isinstance(ins, Label):
                continue
            index = len(instrs)
            if isinstance(ins, DelegateInstr):
                args = [self.arg(a) for a in ins.args]
                self.delegates.append(
                    S.BackendDelegate(ins.backend_id, ins.processed, list(ins.compile_specs))
                )
                instrs.append(S.Instruction(S.I_DELEGATE, (len(self.delegates) - 1, args)))
                outs = [i for a in ins.outputs for i in self.arg_indices(a)]
                self._debug(index, ins.node, outs, ins.kernel)
                self.debug[-1].delegate_ids = dict(ins.debug_ids)
            elif isinstance(ins, KernelInstr):
                args = [self.arg(a) for a in ins.args]
                instrs.append(S.Instruction(S.I_KERNEL, (self.operator(ins.kernel), args)))
                outs = [i for a in ins.outputs for i in self.arg_indices(a)]
                self._debug(index, ins.node, outs, ins.kernel)
            elif isinstance(ins, MoveInstr):
                src, dst = self.arg(ins.src), self.arg(ins.dst)
                instrs.append(S.Instruction(S.I_MOVE, (src, dst)))
                self._debug(index, ins.node, [dst], "move")
            elif isinstance(ins, JumpFalseInstr):
                cond = self.arg(ins.cond)
                instrs.append(S.Instruction(S.I_JUMPFALSE, (cond, labels[ins.target])))
        outputs = [self.arg(a) for a in ir.outputs]
        return S.ExecutionPlan(
            name=ir.name,
            encoded_inp_str=pytree_str.encode(ir.in_spec) if ir.in_spec is not None else "",
            encoded_out_str=pytree_str.encode(ir.out_spec) if ir.out_spec is not None else "",
            values=self.values,
            inputs=inputs,
            outputs=outputs,
            instructions=instrs,
            operators=self.ops,
            non_const_buffer_sizes=[0, ir.arena_bytes],
            delegates=self.delegates,
        )

    def arg_indices(self, a: Arg) -> list[int]:
        if a.kind == "symint":
            return [self.int_idx[id(a.value)]]
        return [self.spec_idx[id(t)] for t in a.tensors()]

    def _debug(self, index: int, node: Any, outs: list[int], kernel: str) -> None:
        self.debug.append(
            InstrDebug(
                index,
                node.name if node is not None else None,
                node.meta.get("stack_trace") if node is not None else None,
                [o for o in outs if o >= 0],
                kernel,
            )
        )


def emit_method(ir: MethodIR, tables: ProgramTables) -> tuple[S.ExecutionPlan, list[InstrDebug]]:
    """Emit one method into an ExecutionPlan, adding its constants to ``tables``."""
    em = _MethodEmitter(ir, tables)
    plan = em.emit()
    log.debug(
        "method %s: %d values, %d instructions, %d operators",
        ir.name,
        len(plan.values),
        len(plan.instructions),
        len(plan.operators),
    )
    return plan, em.debug
