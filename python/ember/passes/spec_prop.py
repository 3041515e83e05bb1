"""Spec propagation: shapes, dynamism and lifetimes of every tensor spec.

Two halves:

- :func:`spec_from_val` (used while lowering) turns a node's FakeTensor into a
  :class:`~ember.passes.ir.TensorSpec`: dtype, and sizes that are exact for static dims and the
  *upper bound* for symbolic dims (``torch.export.Dim(max=N)`` -> DYNAMIC_BOUND). An unbounded
  symbolic dim raises :class:`~ember.errors.MemoryPlanError` (the runtime rejects DYNAMIC_UNBOUND).
- :func:`propagate_specs` (a pass, run after view elision) guarantees that every planned root spec
  has ``lifetime = [first, last]`` instruction indices covering every instruction that reads or
  writes it or any elided view of it; user inputs start at 0, user outputs and mutable buffers
  end at the last instruction, and a Move source lives as long as its destination (the
  destination aliases the source's memory after the Move).
"""

from __future__ import annotations

import sympy
import torch
import torch.fx

from ember.errors import MemoryPlanError
from ember.passes.ir import (
    ACTIVATION,
    INPUT,
    MUTABLE,
    MethodIR,
    MoveInstr,
    TensorSpec,
    instr_args,
)


def upper_bound(dim: int | torch.SymInt, node: torch.fx.Node | None = None) -> int:
    """The largest value a (symbolic) dimension can take."""
    if isinstance(dim, int):
        return dim
    expr = dim.node.expr
    if getattr(expr, "is_number", False):
        return int(expr)
    shape_env = dim.node.shape_env
    upper = shape_env.bound_sympy(expr).upper
    if (
        upper in (sympy.oo, sympy.zoo)
        or not getattr(upper, "is_finite", True)
        or str(upper) in ("oo", "int_oo")
    ):
        raise MemoryPlanError(
            f"dimension {expr} has no upper bound; give it one with "
            f"torch.export.Dim(name, max=N) (Ember plans dynamic tensors at their bound)",
            node=node,
        )
    return int(upper)


def spec_from_val(
    ir: MethodIR,
    name: str,
    val: torch.Tensor,
    kind: str = ACTIVATION,
    node: torch.fx.Node | None = None,
) -> TensorSpec:
    """Make (and register in ``ir``) the spec of a FakeTensor ``val``."""
    shape = []
    dynamic = False
    for d in val.shape:
        if isinstance(d, int):
            shape.append(d)
        else:
            dynamic = True
            shape.append(upper_bound(d, node))
    return ir.new_spec(name, val.dtype, tuple(shape), kind=kind, dynamic=dynamic)


def _extend(spec: TensorSpec, lo: int, hi: int) -> None:
    lt = spec.lifetime
    if lt[0] < 0 or lo < lt[0]:
        lt[0] = lo
    if hi > lt[1]:
        lt[1] = hi


def propagate_specs(ir: MethodIR) -> MethodIR:
    """Compute lifetimes of root specs over the executable instruction order (see module doc)."""
    instrs = ir.executable()
    last = max(len(instrs) - 1, 0)
    for s in ir.specs:
        s.lifetime = [-1, -1]
    for i, ins in enumerate(instrs):
        for a in instr_args(ins):
            for t in a.tensors():
                _extend(t.root(), i, i)
    for a in ir.inputs:
        for t in a.tensors():
            _extend(t.root(), 0, 0)
    for a in ir.outputs:
        for t in a.tensors():
            _extend(t.root(), last, last)
    for s in ir.specs:
        if s.root().kind == MUTABLE:
            _extend(s.root(), 0, last)
    # A Move makes dst alias src's memory: src must live as long as dst. Iterate to a fixed
    # point for nested control flow.
    moves = [ins for ins in instrs if isinstance(ins, MoveInstr)]
    changed = True
    while changed:
        changed = False
        for mv in moves:
            for src, dst in zip(mv.src.tensors(), mv.dst.tensors(), strict=False):
                s, d = src.root(), dst.root()
                before = list(s.lifetime)
                _extend(s, *d.lifetime)
                changed |= before != s.lifetime
    for s in ir.specs:
        r = s.root()
        if r.kind in (ACTIVATION, INPUT, MUTABLE) and r.lifetime[0] < 0:
            r.lifetime = [0, 0]  # produced but never used (e.g. an unused second output)
    return ir
