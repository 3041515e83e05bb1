"""Stage: fold layout operations on constants into new constants.

``aten.linear`` decomposes to ``permute_copy(weight) + addmm``; run as written, every call would
transpose every weight again (most of an LLM's decode time, and a full copy of each weight in
planned RAM on a microcontroller). This pass evaluates such operations at export time.

Guarantees afterwards: no ``KernelInstr`` whose kernel is a pure layout/dtype copy
(permute/transpose/t/clone/_to_copy) reads only constant tensors; its output spec is a
``CONSTANT`` holding the computed data, and the instruction is gone. Constants that live in an
external ``.ptd`` are left alone, so ``.ptd`` keys stay the model's fully-qualified names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from ember.passes.ir import CONSTANT, Arg, KernelInstr, MethodIR, TensorSpec

log = logging.getLogger(__name__)


def _ints(a: Arg) -> list[int] | None:
    if a.kind == "intlist" and all(isinstance(v, int) for v in a.value):
        return list(a.value)
    return None


def _permute(t: torch.Tensor, args: list[Arg]) -> torch.Tensor | None:
    dims = _ints(args[1])
    return None if dims is None else t.permute(dims)


def _transpose(t: torch.Tensor, args: list[Arg]) -> torch.Tensor | None:
    if args[1].kind != "int" or args[2].kind != "int":
        return None
    return t.transpose(args[1].value, args[2].value)


def _same(t: torch.Tensor, args: list[Arg]) -> torch.Tensor | None:
    del args
    return t


def _t(t: torch.Tensor, args: list[Arg]) -> torch.Tensor | None:
    del args
    return t.t() if t.dim() == 2 else t


FOLDABLE: dict[str, Callable[[torch.Tensor, list[Arg]], torch.Tensor | None]] = {
    "aten::permute_copy.out": _permute,
    "aten::transpose_copy.int_out": _transpose,
    "aten::t_copy.out": _t,
    "aten::clone.out": _same,
    "aten::_to_copy.out": _same,  # the output spec's dtype decides the cast below
}


def _constant_input(a: Arg) -> TensorSpec | None:
    if a.kind != "tensor":
        return None
    root = a.value.root()
    if root.kind != CONSTANT or root.data is None or root.external or a.value.dynamic:
        return None
    return a.value


def _constant_uses(ir: MethodIR) -> dict[int, int]:
    """How many instruction arguments read each constant (by the root spec's identity)."""
    uses: dict[int, int] = {}
    for ins in ir.instrs:
        if not isinstance(ins, KernelInstr):
            continue
        outs = {id(t) for a in ins.outputs for t in a.tensors()}
        for a in ins.args:
            for t in a.tensors():
                if id(t) not in outs and t.root().kind == CONSTANT:
                    uses[id(t.root())] = uses.get(id(t.root()), 0) + 1
    return uses


def fold_constants(ir: MethodIR, external: bool = False) -> MethodIR:
    """Evaluate foldable layout copies of constants (see module docstring). A constant that is
    also read elsewhere (a tied embedding/output weight) is not folded: that would store it
    twice."""
    uses = _constant_uses(ir)
    kept = []
    folded = 0
    for ins in ir.instrs:
        fn = FOLDABLE.get(ins.kernel) if isinstance(ins, KernelInstr) else None
        src = _constant_input(ins.args[0]) if fn and ins.args else None
        out = ins.outputs[0] if fn and len(ins.outputs) == 1 else None
        if src is None or out is None or out.kind != "tensor" or out.value.dynamic:
            kept.append(ins)
            continue
        if (external and src.root().fqn) or uses.get(id(src.root()), 0) > 1:
            kept.append(ins)
            continue
        data = src.root().data.reshape(src.shape)
        res = fn(data, ins.args)
        spec = out.value
        if res is None or tuple(res.shape) != tuple(spec.shape):
            kept.append(ins)
            continue
        spec.kind = CONSTANT
        spec.data = res.to(spec.dtype).contiguous()
        spec.fqn = None
        spec.base = None
        folded += 1
    if folded:
        log.debug("%s: folded %d constant layout copies", ir.name, folded)
    ir.instrs = kept
    return ir
