"""Run partitioning shared by the backends' partitioners (EmberCpuBackend, EmberVulkanBackend).

A backend pass lowers each instruction of a :class:`~ember.passes.ir.MethodIR` to one backend
operator or declines it; every maximal run of consecutive lowered instructions becomes one
:class:`DelegateInstr`. :class:`Runs` holds what that takes independently of the backend: who
reads each tensor root, the method's input and output roots, what happened to each instruction
(:class:`Decision`), the run's external inputs and outputs, and the fallback — a run whose
fusion or blob raises, or whose blob the runtime refuses (:class:`Refused`), is split in two
until each part delegates or stays portable. A backend subclasses it with three hooks:
:meth:`Runs.lower_instr` (one instruction -> one operator, or ``Unsupported``),
:meth:`Runs.fuse` (passes over a run's operators) and :meth:`Runs.make_delegate` (the blob and
the DelegateInstr). :func:`partition_runs` is the pass's loop over the runs.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ember.backends.cpu.lowering import Op, Unsupported
from ember.backends.delegate import DelegateInstr
from ember.errors import user_source_line
from ember.passes.ir import MUTABLE, KernelInstr, MethodIR, TensorSpec, instr_args

log = logging.getLogger(__name__)


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


class Refused(Exception):
    """The runtime's own check refused a blob."""


class Runs(abc.ABC):
    """Lowers runs of instructions into DelegateInstrs, falling back to the portable kernels
    for any part of a run whose fusion, blob or runtime check fails. Subclasses set
    :attr:`backend_id` and :attr:`name` and implement the three hooks."""

    backend_id = ""
    name = "backend"  # the log messages' prefix ("cpu backend: ...")
    logger = log  # where they go (a backend's partition module's logger)
    # the level of "<instruction> stays portable" when a single instruction's blob fails
    refuse_level = logging.WARNING

    def __init__(self, ir: MethodIR) -> None:
        self.instrs = ir.instrs
        self.refs: dict[int, set[int]] = {}
        for i, ins in enumerate(self.instrs):
            args = ins.args if isinstance(ins, KernelInstr) else instr_args(ins)
            for a in args:
                for t in a.tensors():
                    self.refs.setdefault(id(t.root()), set()).add(i)
        self.out_roots = {id(t.root()) for a in ir.outputs for t in a.tensors()}
        self.in_roots = {id(t.root()) for a in ir.inputs for t in a.tensors()}
        self.decisions: dict[int, Decision] = {}

    # ---- the backend's hooks ----
    @abc.abstractmethod
    def lower_instr(self, ins: KernelInstr, only_here: Callable[[TensorSpec], bool]) -> Op:
        """The backend operator for ``ins``, or raise ``Unsupported``. ``only_here(spec)``:
        whether nothing but ``ins`` reads ``spec`` (and it is no method output)."""

    def fuse(self, ops: list[Op], external: set[int]) -> None:
        """Rewrites a run's operators in place (fusions); ``external``: the roots produced in
        the run that something outside it reads. By default none (a backend without fusions)."""
        del ops, external

    @abc.abstractmethod
    def make_delegate(
        self, ops: list[Op], inputs: list[TensorSpec], outputs: list[TensorSpec], i: int, j: int
    ) -> DelegateInstr:
        """The DelegateInstr of instructions [i, j) lowered to ``ops``; raises ``Unsupported``
        or :class:`Refused` when the run cannot be one."""

    # ---- shared ----
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
            return self.lower_instr(
                ins,
                lambda s: (
                    self.refs.get(id(s.root()), set()) <= {i} and id(s.root()) not in self.out_roots
                ),
            )
        except Unsupported as e:
            why = str(e) or "unsupported"
            self.logger.info("%s: %s stays portable: %s", self.name, _describe(ins), why)
        except Exception as e:  # a bug in one lowering must not break the export
            why = f"lowering failed: {type(e).__name__}: {e}"
            self.logger.warning("%s: %s stays portable: %s", self.name, _describe(ins), why)
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
            node = self.instrs[t].node
            op.nodes = [node.name] if node is not None else []
            ops.append(op)
        produced = {id(o.root()) for op in ops for o in op.outs}
        external = {r for r in produced if (self.refs.get(r, set()) - run) or r in self.out_roots}
        self.fuse(ops, external)
        # Inputs: roots read but not produced in the run (a fusion may add tensors of its own,
        # as the dynamic int8 linears' quantized rows); outputs: produced roots read outside.
        made = produced | {id(o.root()) for op in ops for o in op.outs}
        inputs: list[TensorSpec] = []
        seen: set[int] = set()
        for op in ops:
            for v in op.ins:
                if isinstance(v, TensorSpec):
                    r = v.root()
                    if id(r) not in made and id(r) not in seen:
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
        return self.make_delegate(ops, inputs, outputs, i, j), produced - external

    def place(self, i: int, j: int, out: list[Any]) -> set[int]:
        """Appends [i, j) to ``out`` as delegates where possible; a run that fails is split in
        two and each half tried again, down to single instructions that stay portable. Returns
        the roots private to the delegates made (they leave the method's specs)."""
        first = self.instrs[i]
        try:
            built = self.build(i, j)
        except Exception as e:
            what = (
                f"the runtime refused its blob: {e}"
                if isinstance(e, Refused)
                else f"{type(e).__name__}: {e}"
                if not isinstance(e, Unsupported)
                else str(e)
            )
            if j - i == 1:
                self.logger.log(
                    self.refuse_level,
                    "%s: %s stays portable: %s",
                    self.name,
                    _describe(first),
                    what,
                )
                self.decide(i, False, what)
                out.append(first)
                return set()
            self.logger.info(
                "%s: run of %d instructions from %s split in two: %s",
                self.name,
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
            self.decide(t, True, f"{self.backend_id} delegate {n}")
        out.append(d)
        return private


def _roots(ins: KernelInstr) -> tuple[set[int], set[int], bool]:
    """(roots ``ins`` reads or writes, roots it writes, whether one is mutable state or a move
    target: such an instruction keeps its place)."""
    every: set[int] = set()
    pinned = False
    for a in ins.args:
        for t in a.tensors():
            r = t.root()
            every.add(id(r))
            pinned |= r.kind == MUTABLE or bool(r.move_target)
    written = {id(t.root()) for a in ins.outputs for t in a.tensors()}
    return every, written, pinned


def hoist_portable(ir: MethodIR, lowered: list[bool]) -> bool:
    """Moves each instruction that stays portable above the run of lowered instructions just
    before it when it commutes with the whole run (it reads nothing the run writes, the run
    reads and writes nothing it writes, neither touches mutable state), so the runs on either
    side of it join into one delegate: a transformer's attention-mask arithmetic between its
    embedding's layer norm and the first projections no longer cuts the graph there. Only
    kernel calls move, never across control flow; the relative order of the moved instructions
    and of the lowered ones is kept. Reorders ``ir.instrs`` and ``lowered`` in place; returns
    whether anything moved."""
    instrs = ir.instrs
    order: list[int] = []
    block = 0  # where the trailing run of lowered instructions starts in `order`
    info: dict[int, tuple[set[int], set[int], bool]] = {}

    def roots(k: int) -> tuple[set[int], set[int], bool]:
        if k not in info:
            info[k] = _roots(instrs[k])
        return info[k]

    for k, ins in enumerate(instrs):
        if not isinstance(ins, KernelInstr) or isinstance(ins, DelegateInstr):
            order.append(k)
            block = len(order)
            continue
        if lowered[k]:
            order.append(k)
            continue
        every, written, pinned = roots(k)
        ok = not pinned and block < len(order)
        for j in order[block:] if ok else ():
            e2, w2, p2 = roots(j)
            if p2 or w2 & every or written & e2:
                ok = False
                break
        if ok:
            order.insert(block, k)
            block += 1
        else:
            order.append(k)
            block = len(order)
    if order == list(range(len(instrs))):
        return False
    ir.instrs = [instrs[k] for k in order]
    lowered[:] = [lowered[k] for k in order]
    return True


def partition_runs(ir: MethodIR, runs: Runs, lowered: list[bool]) -> int:
    """Replaces each maximal run of instructions with ``lowered[i]`` true by what
    :meth:`Runs.place` makes of it; sets ``ir.instrs``, drops the roots private to the new
    delegates from ``ir.specs`` and sets ``ir.partition_report``. Returns the number of
    delegates added."""
    instrs = ir.instrs
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
    n = sum(isinstance(x, DelegateInstr) for x in new_instrs) - sum(
        isinstance(x, DelegateInstr) for x in instrs
    )
    ir.instrs = new_instrs
    ir.specs = [s for s in ir.specs if id(s.root()) not in removed_roots]
    ir.partition_report = [runs.decisions[k] for k in sorted(runs.decisions)]
    return n
