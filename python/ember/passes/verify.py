"""Edge verification: every operator and dtype must be one the runtime registers.

Guarantees when it returns: each ``call_function`` node of the graph (and of every ``cond``
branch) is a Core ATen op whose out-variant kernel (``aten::add.out``...) is in the runtime
operator list (:mod:`ember.oplist`) and admits the op's primary dtype, or a prim/control-flow
node Ember lowers itself; every tensor has a dtype the runtime represents; no output shape depends
on tensor data without an upper bound (``.item()`` values are runtime Ints; a data-dependent
dim needs a ``torch._check`` bound). Otherwise it raises, naming the op overload, the dtypes and
the user's source line:
:class:`UnsupportedOperatorError`, :class:`UnsupportedDtypeError`, :class:`DataDependentShapeError`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ember.errors import (
    DataDependentShapeError,
    MemoryPlanError,
    UnsupportedDtypeError,
    UnsupportedOperatorError,
)
from ember.oplist import TORCH_DTYPE_NAME, OpList, load_oplist
from ember.passes.ir import KernelInstr, MethodIR
from ember.passes.out_variants import (
    ASSERT_OPS,
    AUTO_FUNCTIONALIZED,
    SYM_ATEN,
    SYM_PRIM,
    is_view_op,
    resolve_mutating_out,
    resolve_out_variant,
    scalar_overload,
)
from ember.passes.spec_prop import upper_bound

_ITEM_OPS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default)
_ELIDABLE = {"view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "alias", "detach"}


def _graphs(gm: torch.fx.GraphModule) -> Iterator[torch.fx.GraphModule]:
    yield gm
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(gm, node.target, None)
            if isinstance(sub, torch.fx.GraphModule):
                yield from _graphs(sub)


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _in_tensors(node: torch.fx.Node) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for a in list(node.args) + list(node.kwargs.values()):
        for n in a if isinstance(a, (list, tuple)) else [a]:
            if isinstance(n, torch.fx.Node):
                out += _tensors(n.meta.get("val"))
    return out


def _dtypes(ts: list[torch.Tensor]) -> str:
    return ", ".join(str(t.dtype).replace("torch.", "") for t in ts) or "none"


def _is_static(node: torch.fx.Node) -> bool:
    ts = _tensors(node.meta.get("val")) + _in_tensors(node)[:1]
    return all(isinstance(d, int) for t in ts for d in t.shape)


def verify_edge(ep: torch.export.ExportedProgram, oplist: OpList | None = None) -> None:
    """Check ``ep`` against ``oplist`` (default: the runtime's). Raises on the first problem."""
    oplist = oplist if oplist is not None else load_oplist()
    for gm in _graphs(ep.graph_module):
        for node in gm.graph.nodes:
            _verify_node(node, oplist)


def lacks_kernel(node: torch.fx.Node, oplist: OpList) -> bool:
    """Whether ``node`` calls an operator the runtime has no kernel (or out variant) for: what
    :func:`ember.passes.decompose.decompose_unsupported` tries to decompose."""
    try:
        _verify_node(node, oplist)
    except UnsupportedOperatorError:
        return True
    except Exception:  # other problems (dtypes, data-dependent shapes) are the verifier's
        return False
    return False


def _verify_node(node: torch.fx.Node, oplist: OpList) -> None:
    if node.op not in ("placeholder", "call_function"):
        return
    val = node.meta.get("val")
    target = node.target
    tname = getattr(target, "__name__", str(target)) if node.op == "call_function" else "input"
    if isinstance(target, torch._ops.OpOverload):
        tname = str(target)
    outs, ins = _tensors(val), _in_tensors(node) if node.op == "call_function" else []
    for t in outs + ins:
        if t.dtype not in TORCH_DTYPE_NAME:
            raise UnsupportedDtypeError(
                f"{tname}: dtype {t.dtype} is not supported by the Ember runtime "
                f"(input dtypes: {_dtypes(ins)}; output dtypes: {_dtypes(outs)})",
                node=node,
            )
    if node.op == "placeholder":
        return
    if free_unbacked_symbols(val):
        _check_unbacked(node, tname, val)
    if target is operator.getitem or target is torch.ops.higher_order.cond:
        return
    if target in AUTO_FUNCTIONALIZED:
        inner = node.args[0]
        ov = resolve_mutating_out(inner)
        if ov is None or ov.kernel not in oplist:
            raise UnsupportedOperatorError(
                f"mutating operator {inner} has no out-variant kernel in the runtime operator list",
                node=node,
            )
        return
    if target in SYM_PRIM:
        kernel = SYM_PRIM[target]
        if kernel not in oplist:
            raise UnsupportedOperatorError(
                f"symbolic op {tname} needs prim kernel '{kernel}', which the runtime lacks",
                node=node,
            )
        return
    if not isinstance(target, torch._ops.OpOverload):
        raise UnsupportedOperatorError(f"unsupported call target {tname}", node=node)
    base = target._schema.name.split("::")[1]
    if base in ASSERT_OPS:
        return
    if base in SYM_ATEN:
        if SYM_ATEN[base] not in oplist:
            raise UnsupportedOperatorError(
                f"operator {tname} (kernel '{SYM_ATEN[base]}') is not in the runtime operator list",
                node=node,
            )
        return
    if base in _ELIDABLE and is_view_op(target) and _is_static(node):
        return  # becomes a memory alias, no kernel
    ov = resolve_out_variant(scalar_overload(node) or target)
    desc = f"input dtypes: {_dtypes(ins)}; output dtypes: {_dtypes(outs)}"
    if ov is None:
        hint = ""
        if "_functional" in tname and "batch_norm" in tname:
            hint = "; the model is in training mode: call model.eval() before exporting"
        raise UnsupportedOperatorError(
            f"operator {tname} has no out-variant overload Ember can call ({desc}){hint}",
            node=node,
        )
    if ov.kernel not in oplist:
        raise UnsupportedOperatorError(
            f"operator {tname} is not supported: kernel '{ov.kernel}' is not in the runtime "
            f"operator list ({desc})",
            node=node,
        )
    primary = ins[0] if ins else (outs[0] if outs else None)
    if primary is not None and not oplist.supports_dtype(ov.kernel, primary.dtype):
        raise UnsupportedDtypeError(
            f"operator {tname} (kernel '{ov.kernel}') does not support dtype "
            f"{str(primary.dtype).replace('torch.', '')} ({desc})",
            node=node,
        )


def _check_unbacked(node: torch.fx.Node, tname: str, val: Any) -> None:
    """Data-dependent values are fine as scalars (``.item()`` gives a runtime Int); a tensor
    whose shape depends on such a value needs a finite upper bound (``torch._check(n <= N)``),
    which memory planning uses. Other ops that create a data-dependent size themselves
    (``nonzero``, ``masked_select``) are refused."""
    if node.meta.get("unbacked_bindings") and node.target not in _ITEM_OPS:
        raise DataDependentShapeError(
            f"operator {tname} produces a data-dependent shape or value ({val}); Ember plans "
            "memory ahead of time and cannot export it (rewrite with a fixed-size op such as "
            "torch.where, or move it out of the model)",
            node=node,
        )
    for t in _tensors(val):
        for d in t.shape:
            if isinstance(d, int) or not free_unbacked_symbols(d):
                continue
            try:
                upper_bound(d)
            except MemoryPlanError:
                raise DataDependentShapeError(
                    f"operator {tname} produces a tensor whose shape depends on tensor data "
                    f"({list(t.shape)}) with no upper bound; Ember plans memory ahead of time: "
                    "bound it with torch._check(n <= N) after .item(), or rewrite with a "
                    "fixed-size op such as torch.where",
                    node=node,
                ) from None


def verify_arity(ir: MethodIR, oplist: OpList | None = None) -> MethodIR:
    """After lowering: every kernel call passes exactly the argument count the runtime's
    operator list declares for it (``-1`` = variable). Raises UnsupportedOperatorError naming
    the kernel, both counts and the source line otherwise (the runtime would refuse to load)."""
    oplist = oplist if oplist is not None else load_oplist()
    for ins in ir.instrs:
        if not isinstance(ins, KernelInstr):
            continue
        info = oplist.get(ins.kernel)
        if info is not None and info.n_args >= 0 and info.n_args != len(ins.args):
            raise UnsupportedOperatorError(
                f"kernel '{ins.kernel}' is registered with {info.n_args} arguments but the "
                f"ATen convention (schema arguments + return) gives {len(ins.args)}",
                node=ins.node,
            )
    return ir
