"""View elision: static reshapes share their base's memory instead of copying.

Guarantees afterwards: every ``aten::view_copy.out`` / ``aten::squeeze_copy.*`` /
``aten::unsqueeze_copy.out`` / ``aten::alias_copy.out`` call whose input and output are static
(and, like every Ember tensor, contiguous) is removed and its output spec gets ``base`` = the
input spec, so it resolves to the same planned memory (ExecuTorch's ``memory.view``). A view of a
constant becomes a constant holding the reshaped data (same bytes, deduplicated at emission).
Views are kept as copies when either side is dynamic, when the input is a Move target (its memory
is rebound at runtime), when the input is a mutable buffer (the end-of-method ``copy_`` write-back
would change the view) or when the output is itself a Move source.
"""

from __future__ import annotations

from ember.passes.ir import CONSTANT, MUTABLE, KernelInstr, MethodIR, MoveInstr

VIEW_KERNELS = {
    "aten::view_copy.out",
    "aten::squeeze_copy.out",
    "aten::squeeze_copy.dim_out",
    "aten::squeeze_copy.dims_out",
    "aten::unsqueeze_copy.out",
    "aten::alias_copy.out",
    "aten::detach_copy.out",
    "aten::_unsafe_view.out",
}


def elide_views(ir: MethodIR) -> MethodIR:
    """Remove static contiguous view copies (see module docstring)."""
    move_srcs = {
        id(t) for ins in ir.instrs if isinstance(ins, MoveInstr) for t in ins.src.tensors()
    }
    kept = []
    for ins in ir.instrs:
        if isinstance(ins, KernelInstr) and ins.kernel in VIEW_KERNELS and ins.args:
            src_arg, out_arg = ins.args[0], ins.outputs[0] if ins.outputs else None
            if (
                out_arg is not None
                and src_arg.kind == "tensor"
                and out_arg.kind == "tensor"
                and not src_arg.value.dynamic
                and not out_arg.value.dynamic
                and not src_arg.value.root().move_target
                and src_arg.value.root().kind != MUTABLE  # copy_ write-back would show through
                and id(out_arg.value) not in move_srcs
                and src_arg.value.nbytes == out_arg.value.nbytes
            ):
                src, out = src_arg.value, out_arg.value
                if src.root().kind == CONSTANT:
                    out.kind = CONSTANT
                    out.data = src.root().data.reshape(out.shape)
                    out.fqn = None  # a reshaped copy of the bytes; never an external entry
                else:
                    out.base = src
                continue
        kept.append(ins)
    ir.instrs = kept
    return ir
