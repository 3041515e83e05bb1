"""torch's ``_safe_softmax`` (what ``scaled_dot_product_attention`` decomposes into, so every
Hugging Face encoder and decoder exported with its default attention) in EmberCpuBackend.

The decomposition is a softmax and five operators on booleans that zero the rows whose every
logit is -inf (fully masked): ``eq(x, -inf)``, ``logical_not``, ``any`` over the last dim,
``logical_not``, then ``where(that, zeros, softmax(x))``. Run as written, the boolean operators
run portable over the whole attention matrix between two delegates in every layer. Here the
whole pattern, found at the instructions, becomes the softmax's EMC_SOFTMAX_SAFE flag (blob
version 17: such a row is written as zeros); a pattern only partly in the backend stays portable
as a whole, and the softmax plain.

- :func:`find` marks the instructions of each complete pattern (before lowering);
- :func:`lower_part` lowers a marked boolean instruction into a marker op (``ss_*``) that exists
  only until :func:`fuse` joins it into its softmax;
- :func:`keep` unlowers the markers of a pattern whose parts are not all in one run.
"""

from __future__ import annotations

import math
from typing import Any

from ember.backends.cpu.lowering import Op, Unsupported
from ember.passes.ir import CONSTANT, KernelInstr, MethodIR, TensorSpec

_EQ, _NOT, _ANY = "aten::eq.Scalar_out", "aten::logical_not.out", "aten::any.out"
_WHERE, _FULL_LIKE, _SOFTMAX = "aten::where.self_out", "aten::full_like.out", "aten::_softmax.out"
SAFE_SLOT = 6  # EMC_SOFTMAX_SAFE


def _root(a: Any) -> int | None:
    return id(a.value.root()) if a.kind == "tensor" else None


def _zeros(a: Any) -> bool:
    """A constant tensor of zeros."""
    if a.kind != "tensor" or a.value.root().kind != CONSTANT or a.value.root().data is None:
        return False
    d = a.value.root().data
    return bool(d.numel() > 0 and not d.any())


def find(ir: MethodIR) -> dict[int, tuple[str, int]]:
    """``id(instruction) -> (role, index of its pattern's where)`` for every instruction of a
    complete ``_safe_softmax`` pattern: each intermediate read once, by the next part, and by
    nothing outside the pattern (nor a method output)."""
    instrs = ir.instrs
    writer: dict[int, int] = {}
    readers: dict[int, int] = {}
    for i, ins in enumerate(instrs):
        if not isinstance(ins, KernelInstr):
            continue
        outs = {id(t.root()) for o in ins.outputs for t in o.tensors()}
        for o in outs:
            writer.setdefault(o, i)
        for a in ins.args:
            for t in a.tensors():
                r = id(t.root())
                if r not in outs:
                    readers[r] = readers.get(r, 0) + 1
    out_roots = {id(a.value.root()) for a in ir.outputs if a.kind == "tensor"}

    def producer(a: Any, kernel: str) -> KernelInstr | None:
        r = _root(a)
        j = writer.get(r) if r is not None else None
        if j is None or instrs[j].kernel != kernel or r in out_roots or readers.get(r, 0) != 1:
            return None
        return instrs[j]

    found: dict[int, tuple[str, int]] = {}
    for w, ins in enumerate(instrs):
        if not isinstance(ins, KernelInstr) or ins.kernel != _WHERE:
            continue
        cond, zeros, soft = ins.args[:3]
        sm = writer.get(_root(soft)) if _root(soft) is not None else None
        if sm is None or instrs[sm].kernel != _SOFTMAX:
            continue
        x = instrs[sm].args[0]
        nd = len(x.value.shape)
        if nd == 0 or int(instrs[sm].args[1].value) % nd != nd - 1:
            continue
        n2 = producer(cond, _NOT)
        an = producer(n2.args[0], _ANY) if n2 else None
        n1 = producer(an.args[0], _NOT) if an else None
        eq = producer(n1.args[0], _EQ) if n1 else None
        if eq is None or an is None:
            continue
        if (
            _root(eq.args[0]) != _root(x)
            or eq.args[1].kind not in ("double", "int")
            or float(eq.args[1].value) != -math.inf
            or int(an.args[1].value) % nd != nd - 1
            or not an.args[2].value
        ):
            continue
        full = None if _zeros(zeros) else producer(zeros, _FULL_LIKE)
        if full is None and not _zeros(zeros):
            continue
        if full is not None and (full.args[1].kind not in ("double", "int") or full.args[1].value):
            continue
        parts = [(ins, "where"), (n2, "not"), (an, "any"), (n1, "not"), (eq, "eq")]
        if full is not None:
            parts.append((full, "zeros"))
        for p, role in parts:
            found[id(p)] = (role, w)
    return found


def lower_part(ins: KernelInstr, role: str) -> Op:
    """The marker op of one part (``ss_<role>``), its tensors as the instruction's."""
    outs = [o.value for o in ins.outputs[:1]]
    if role == "where":
        cond, zeros, soft = (a.value for a in ins.args[:3])
        return Op("ss_where", [cond, None, soft], outs)
    if role == "zeros":
        return Op("ss_zeros", [], outs)
    return Op(f"ss_{role}", [ins.args[0].value], outs)


def keep(runs: Any, lowered: list[bool], parts: dict[int, tuple[str, int]], run_of: Any) -> bool:
    """Unlowers every part of a pattern whose parts are not all lowered in its where's run.
    Returns whether it changed anything."""
    instrs = runs.instrs
    by_where: dict[int, list[int]] = {}
    for i, ins in enumerate(instrs):
        if id(ins) in parts:
            by_where.setdefault(parts[id(ins)][1], []).append(i)
    changed = False
    run = run_of(lowered)
    for w, idx in by_where.items():
        if all(lowered[i] and run[i] == run[w] for i in idx) or not any(lowered[i] for i in idx):
            continue
        unlower(runs, lowered, idx, "safe softmax with a part outside its run")
        changed = True
        run = run_of(lowered)
    return changed


def unlower(runs: Any, lowered: list[bool], idx: list[int], why: str) -> None:
    """Leaves the instructions ``idx`` of one pattern portable, each with ``why``."""
    for i in idx:
        if lowered[i]:
            lowered[i] = False
            runs.decide(i, False, why)


def fuse(ops: list[Op], u: Any) -> None:
    """Each ``ss_where`` and its chain back to ``ss_eq`` of the softmax's own input become the
    softmax's EMC_SOFTMAX_SAFE flag; the softmax writes the where's output."""
    for w in [o for o in ops if o.kind == "ss_where"]:
        sm = u.producer(w.ins[2])
        chain, cur = [], w
        for kind in ("ss_not", "ss_any", "ss_not", "ss_eq"):
            p = u.producer(cur.ins[0])
            if p is None or p.kind != kind:
                raise Unsupported("a safe softmax's parts apart")
            chain.append(p)
            cur = p
        if sm is None or sm.kind != "softmax" or not isinstance(sm.ins[0], TensorSpec):
            raise Unsupported("a safe softmax's parts apart")
        if cur.ins[0].root() is not sm.ins[0].root() or sm.ip[2] != 1 or sm.ip[3] != 0:
            raise Unsupported("a safe softmax of another tensor")
        if id(sm.outs[0].root()) in u.external or any(c is not w for c in u.consumers(sm.outs[0])):
            raise Unsupported("a safe softmax's plain result read elsewhere")
        sm.ip = (list(sm.ip) + [0] * (SAFE_SLOT + 1))[: max(len(sm.ip), SAFE_SLOT + 1)]
        sm.ip[SAFE_SLOT] = 1
        sm.outs = w.outs
        for p in chain:
            _drop(ops, p, sm)
        _drop(ops, w, sm)
    for z in [o for o in ops if o.kind == "ss_zeros"]:
        if not u.consumers(z.outs[0]) and id(z.outs[0].root()) not in u.external:
            _drop(ops, z, None)
    if any(o.kind.startswith("ss_") for o in ops):
        raise Unsupported("a safe softmax's parts apart")


def _drop(ops: list[Op], gone: Op, into: Op | None) -> None:
    from ember.backends.cpu.fusion import _absorb

    _absorb(ops, gone, into)
