"""Ember's method-level IR: tensor specs, argument values and instructions.

A :class:`MethodIR` is what the lowering pass builds from one decomposed ExportedProgram and what
every later pass (view elision, spec propagation, memory planning) rewrites and the emitter
serializes. It stays close to the file format: one :class:`KernelInstr` is one KernelCall with its
full ATen argument list; :class:`MoveInstr` / :class:`JumpFalseInstr` are the control-flow
instructions.

Invariants:
- Every tensor is contiguous (dim order ``0..n-1``); ``shape`` is the exact shape for static
  tensors and the upper bound for ``dynamic`` ones.
- A spec with ``base`` set is an elided view: it owns no memory and resolves to ``root()``'s.
- ``lifetime`` is ``[first, last]`` instruction index (inclusive) of the *root* spec's uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from ember.dtypes import SIZES, torch_to_code

# Spec kinds.
ACTIVATION = "activation"  # planned, no initial state
INPUT = "input"  # planned user input
CONSTANT = "constant"  # parameter / buffer / lifted constant, lives in the constant segment
MUTABLE = "mutable"  # mutated buffer: planned, initial state, live for the whole method


@dataclass(eq=False)
class TensorSpec:
    """One tensor value of a method (identity = object identity)."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    kind: str = ACTIVATION
    dynamic: bool = False
    fqn: str | None = None
    data: torch.Tensor | None = None
    base: TensorSpec | None = None
    move_target: bool = False
    external: bool = False
    mem_id: int | None = None
    mem_offset: int | None = None
    lifetime: list[int] = field(default_factory=lambda: [-1, -1])

    def root(self) -> TensorSpec:
        """The spec that owns this spec's memory (itself unless it is an elided view)."""
        s = self
        while s.base is not None:
            s = s.base
        return s

    @property
    def dim_order(self) -> tuple[int, ...]:
        return tuple(range(len(self.shape)))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes needed at the (upper-bound) shape."""
        return self.numel * dtype_size(self.dtype)

    @property
    def planned(self) -> bool:
        """True if the tensor lives in planned (arena) memory."""
        return self.root().kind in (ACTIVATION, INPUT, MUTABLE)

    def __repr__(self) -> str:
        return f"TensorSpec({self.name}, {self.dtype}, {list(self.shape)}, {self.kind})"


@dataclass(eq=False)
class IntValue:
    """A runtime scalar (SymInt / SymBool / SymFloat) produced by a prim op such as
    ``aten::sym_size.int``; ``kind`` is ``int``, ``bool`` or ``double``."""

    name: str
    kind: str = "int"


@dataclass
class Arg:
    """One argument occurrence of an instruction.

    kinds: ``tensor`` (TensorSpec), ``symint`` (IntValue), ``int``, ``double``, ``bool``,
    ``null``, ``string``, ``intlist`` (list of int | IntValue), ``doublelist``, ``boollist``,
    ``tensorlist`` (list of TensorSpec), ``opt_tensorlist`` (list of TensorSpec | None),
    ``empty_tensor`` (a non-optional Tensor argument given None).
    """

    kind: str
    value: Any = None

    def tensors(self) -> list[TensorSpec]:
        """Tensor specs this argument references."""
        if self.kind == "tensor":
            return [self.value]
        if self.kind in ("tensorlist", "opt_tensorlist"):
            return [t for t in self.value if t is not None]
        return []


@dataclass
class KernelInstr:
    """A KernelCall: ``kernel`` is the runtime name (``aten::add.out``), args in ATen order."""

    kernel: str
    args: list[Arg]
    node: torch.fx.Node | None = None
    outputs: list[Arg] = field(default_factory=list)  # the args this call writes


@dataclass
class MoveInstr:
    """``values[dst] = values[src]`` (binds a control-flow branch output)."""

    src: Arg
    dst: Arg
    node: torch.fx.Node | None = None


@dataclass
class JumpFalseInstr:
    """Jump to label ``target`` when ``cond`` is false (``cond`` is a Bool arg or Bool tensor)."""

    cond: Arg
    target: str
    node: torch.fx.Node | None = None


@dataclass
class Label:
    """A jump destination; removed (resolved to an instruction index) at emission."""

    name: str


Instr = KernelInstr | MoveInstr | JumpFalseInstr | Label


@dataclass
class MethodIR:
    """Everything the emitter needs for one method."""

    name: str
    ep: Any  # torch.export.ExportedProgram (decomposed)
    inputs: list[Arg] = field(default_factory=list)
    outputs: list[Arg] = field(default_factory=list)
    instrs: list[Instr] = field(default_factory=list)
    specs: list[TensorSpec] = field(default_factory=list)
    in_spec: Any = None
    out_spec: Any = None
    arena_bytes: int = 0
    # What a backend pass did with each instruction (ember.backends.cpu.partition.Decision).
    partition_report: list[Any] = field(default_factory=list)

    def new_spec(self, *args: Any, **kwargs: Any) -> TensorSpec:
        spec = TensorSpec(*args, **kwargs)
        self.specs.append(spec)
        return spec

    def executable(self) -> list[Instr]:
        """Instructions without labels (their positions are the runtime instruction indices)."""
        return [i for i in self.instrs if not isinstance(i, Label)]


def dtype_size(dtype: torch.dtype) -> int:
    """Element size in bytes (ember.dtypes; torch's own for a type the table lacks)."""
    code = torch_to_code().get(dtype)
    if code is not None:
        return SIZES[code]
    return torch.empty((), dtype=dtype).element_size()


def instr_args(instr: Instr) -> list[Arg]:
    """Every argument an instruction references."""
    if isinstance(instr, KernelInstr):
        return instr.args
    if isinstance(instr, MoveInstr):
        return [instr.src, instr.dst]
    if isinstance(instr, JumpFalseInstr):
        return [instr.cond]
    return []
