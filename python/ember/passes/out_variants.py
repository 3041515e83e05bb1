"""Functional ATen graph -> out-variant instructions (the lowering pass).

:func:`to_out_variants` walks a decomposed ExportedProgram and produces a
:class:`~ember.passes.ir.MethodIR`. Guarantees afterwards:

- Every functional ATen call is a :class:`KernelInstr` of its ``.out`` overload (view ops first
  become their ``*_copy`` op, e.g. ``view`` -> ``aten::view_copy.out``), with the exact ATen
  argument convention: every schema argument in order (kwarg-only ones too, defaults filled in),
  the out argument(s), then the return value(s) again (one tensor, or a TensorList of the outs
  for multi-output ops; for ops returning ``()`` with a ``Tensor[] out``, a second TensorList
  of the outs, as ExecuTorch's codegen'd wrappers expect ``n_schema_args + 1`` values).
- Scalars are one Int/Double/Bool arg per occurrence; dtypes, memory formats and layouts are Int;
  ``None`` is Null; int lists are IntLists whose items may be runtime ints (SymInts).
- Symbolic-int arithmetic becomes prim ops (``aten::sym_size.int``, ``executorch_prim::*.Scalar``);
  ``Tensor.item()`` (``aten::_local_scalar_dense``) writes a runtime Int that later SymInt
  arguments read. Runtime assertions (``torch._check`` -> ``_assert_scalar``,
  ``sym_constrain_range_for_size``...) are dropped, with the symbolic arithmetic only they use.
- A mutating custom op wrapped by torch.export in ``auto_functionalized[_v2]`` (e.g.
  ``llama::update_cache``) becomes its ``.out`` overload writing the base tensor in place.
- ``torch.cond`` becomes ``JumpFalse(pred -> false)``, true branch, Moves into the cond outputs,
  ``JumpFalse(False -> end)``, false branch, Moves (ExecuTorch's layout).
- Mutated buffers are MUTABLE specs (initial state = the buffer's value at export) written back at
  the end with ``aten::copy_(self, src, non_blocking, ret)``.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.export.graph_signature import InputKind, OutputKind

from ember.dtypes import torch_to_code
from ember.errors import UnsupportedOperatorError
from ember.passes.ir import (
    CONSTANT,
    INPUT,
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
from ember.passes.spec_prop import spec_from_val

# ExecuTorch ScalarType numbering (schema/scalar_type.fbs), from the one dtype table.
SCALAR_TYPE: dict[torch.dtype, int] = dict(torch_to_code())
MEMORY_FORMAT = {
    torch.contiguous_format: 0,
    torch.preserve_format: 1,
    torch.channels_last: 2,
    torch.channels_last_3d: 3,
}

# View ops whose copy variant does not follow the ``<name>_copy`` rule.
_VIEW_COPY = {"_unsafe_view": ("view_copy", "default"), "reshape": ("view_copy", "default")}

ASSERT_OPS = {
    "_assert_async",
    "_assert_scalar",
    "_assert_tensor_metadata",
    "sym_constrain_range",
    "sym_constrain_range_for_size",
    "_functional_sym_constrain_range",
    "_functional_sym_constrain_range_for_size",
    "_functional_assert_async",
    "_functional_assert_scalar",
}

# Python-level symbolic int ops -> prim kernels (functional: args [a, b, result]).
SYM_PRIM = {
    operator.add: "executorch_prim::add.Scalar",
    operator.sub: "executorch_prim::sub.Scalar",
    operator.mul: "executorch_prim::mul.Scalar",
    operator.floordiv: "executorch_prim::floordiv.Scalar",
    operator.truediv: "executorch_prim::truediv.Scalar",
    operator.mod: "executorch_prim::mod.Scalar",
    operator.eq: "executorch_prim::eq.Scalar",
    operator.gt: "executorch_prim::gt.Scalar",
    operator.ge: "executorch_prim::ge.Scalar",
    operator.lt: "executorch_prim::lt.Scalar",
    operator.le: "executorch_prim::le.Scalar",
    operator.neg: "executorch_prim::neg.Scalar",
    math.ceil: "executorch_prim::ceil.Scalar",
    math.trunc: "executorch_prim::trunc.Scalar",
    round: "executorch_prim::round.Scalar",
    torch.sym_float: "executorch_prim::sym_float.Scalar",
    torch.sym_int: "executorch_prim::sym_int.Scalar",
    torch.sym_max: "executorch_prim::sym_max.Scalar",
    torch.sym_min: "executorch_prim::sym_min.Scalar",
    torch.sym_not: "executorch_prim::sym_not.Scalar",
}
SYM_ATEN = {
    "sym_size": "aten::sym_size.int",
    "sym_numel": "aten::sym_numel",
    # ``Tensor.item()``: a prim-style kernel that writes the element into an Int / Double / Bool
    # value at run time (an unbacked SymInt at export; later ops read that value).
    "_local_scalar_dense": "aten::_local_scalar_dense",
}


@dataclass(frozen=True)
class OutVariant:
    """How to call a functional op through the runtime: ``op``'s schema drives the arg list."""

    op: torch._ops.OpOverload
    kernel: str  # runtime name, e.g. "aten::add.out"
    out_names: tuple[str, ...]  # out arguments, in schema order (empty for in-place ops)
    source: torch._ops.OpOverload  # the functional op whose arguments bind to op's


def kernel_name(op: torch._ops.OpOverload) -> str:
    """Runtime kernel name of an overload: ``ns::name.overload`` (no dot for ``default``)."""
    name = op._schema.name
    ov = op._overloadname
    return name if ov in ("default", "") else f"{name}.{ov}"


def _is_write(a: Any) -> bool:
    return a.alias_info is not None and a.alias_info.is_write


def is_view_op(op: torch._ops.OpOverload) -> bool:
    """True if ``op`` returns an alias of an input (view / reshape-like)."""
    base = op._schema.name.split("::")[1]
    if base in _VIEW_COPY:
        return True
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


@functools.cache
def resolve_out_variant(op: torch._ops.OpOverload) -> OutVariant | None:
    """Find the out overload of functional ``op`` (None if there is none).

    Candidates are the overloads of the same packet whose kwarg-only written arguments are the
    outs and whose other arguments all appear, with the same types, in ``op``'s schema. An exact
    match (same argument names) wins over a subset match (e.g. ``_to_copy.out`` drops ``dtype``,
    which the out tensor carries).
    """
    schema = op._schema
    ns, base = schema.name.split("::")
    if any(_is_write(a) for a in schema.arguments):  # already out / in-place (copy_)
        outs = tuple(a.name for a in schema.arguments if _is_write(a) and a.kwarg_only)
        return OutVariant(op, kernel_name(op), outs, op)
    func = op
    if is_view_op(op):
        copy_base, ov = _VIEW_COPY.get(base, (base + "_copy", op._overloadname))
        packet = getattr(getattr(torch.ops, ns), copy_base, None)
        if packet is None or ov not in packet.overloads():
            return None
        func = getattr(packet, ov)
        base = copy_base
    packet = getattr(getattr(torch.ops, ns), base)
    fargs = {a.name: str(a.type) for a in func._schema.arguments}
    n_ret = len(func._schema.returns)
    best: tuple[int, torch._ops.OpOverload, tuple[str, ...]] | None = None
    for ov_name in packet.overloads():
        cand = getattr(packet, ov_name)
        cs = cand._schema
        outs = [a for a in cs.arguments if a.kwarg_only and _is_write(a)]
        if not outs:
            continue
        rest = [a for a in cs.arguments if not (a.kwarg_only and _is_write(a))]
        if not all(a.name in fargs and fargs[a.name] == str(a.type) for a in rest):
            continue
        list_out = len(outs) == 1 and str(outs[0].type).startswith("List")
        if not (len(outs) == n_ret or list_out):
            continue
        # Required functional args missing from the candidate would be lost: reject.
        names = {a.name for a in rest}
        dropped = [
            a
            for a in func._schema.arguments
            if a.name not in names and not a.kwarg_only and not a.has_default_value()
        ]
        if dropped:
            continue
        score = len(rest) * 2 + (1 if len(rest) == len(fargs) else 0)
        if best is None or score > best[0]:
            best = (score, cand, tuple(a.name for a in outs))
    if best is None:
        return None
    return OutVariant(best[1], kernel_name(best[1]), best[2], func)


AUTO_FUNCTIONALIZED = (
    torch.ops.higher_order.auto_functionalized,
    torch.ops.higher_order.auto_functionalized_v2,
)


@functools.cache
def resolve_mutating_out(op: torch._ops.OpOverload) -> OutVariant | None:
    """The out overload of a mutating, non-out op such as ``llama::update_cache(Tensor value,
    Tensor(a!) cache, SymInt start_pos) -> Tensor``: an overload of the same packet with the
    same arguments (the mutated ones included) plus kwarg-only written outs, one per return."""
    args = [(a.name, str(a.type)) for a in op._schema.arguments]
    packet = op.overloadpacket
    for ov_name in packet.overloads():
        cand = getattr(packet, ov_name)
        cs = cand._schema
        outs = [a for a in cs.arguments if a.kwarg_only and _is_write(a)]
        rest = [(a.name, str(a.type)) for a in cs.arguments if not (a.kwarg_only and _is_write(a))]
        if outs and rest == args and len(outs) == len(op._schema.returns):
            return OutVariant(cand, kernel_name(cand), tuple(a.name for a in outs), op)
    return None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, bool)) and not isinstance(v, torch.SymInt)


def scalar_overload(node: torch.fx.Node) -> torch._ops.OpOverload | None:
    """If ``node`` passes Python numbers where its schema wants Tensors (``mul.Tensor(x, 2)``),
    return the overload of the same op taking Scalars there (``mul.Scalar``), else None."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return None
    schema = op._schema
    bound = dict(zip((a.name for a in schema.arguments), node.args, strict=False))
    bound.update(node.kwargs)
    scalar_args = {
        a.name
        for a in schema.arguments
        if a.type.kind() == "TensorType" and _is_number(bound.get(a.name))
    }
    if not scalar_args:
        return None
    packet = op.overloadpacket
    for ov in packet.overloads():
        cand = getattr(packet, ov)
        cs = cand._schema
        if any(_is_write(a) for a in cs.arguments):
            continue
        names = [a.name for a in cs.arguments]
        if names != [a.name for a in schema.arguments]:
            continue
        ok = all(
            (a.type.kind() == "NumberType") == (a.name in scalar_args) or a.type == b.type
            for a, b in zip(cs.arguments, schema.arguments, strict=True)
        )
        if ok and all(a.type.kind() == "NumberType" for a in cs.arguments if a.name in scalar_args):
            return cand
    return None


def is_assert(node: torch.fx.Node) -> bool:
    """True for runtime-assertion nodes (``torch._check`` and friends), which Ember drops."""
    t = node.target
    return isinstance(t, torch._ops.OpOverload) and t._schema.name.split("::")[1] in ASSERT_OPS


def assert_only_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Assertion nodes plus the symbolic-scalar nodes whose results only feed assertions (the
    ``u0 + s0 <= 16`` of a ``torch._check``): none of them becomes an instruction."""
    dead: set[torch.fx.Node] = set()
    for node in reversed(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if is_assert(node):
            dead.add(node)
            continue
        pure_sym = node.target in SYM_PRIM or (
            isinstance(node.target, torch._ops.OpOverload)
            and node.target._schema.name.split("::")[1] in ("sym_size", "sym_numel")
        )
        if pure_sym and node.users and all(u in dead for u in node.users):
            dead.add(node)
    return dead


def _sym_value(node: torch.fx.Node) -> IntValue:
    val = node.meta.get("val")
    kind = "int"
    if isinstance(val, (torch.SymBool, bool)):
        kind = "bool"
    elif isinstance(val, (torch.SymFloat, float)):
        kind = "double"
    return IntValue(node.name, kind)


def _scalar_arg(v: Any) -> Arg:
    if isinstance(v, bool):
        return Arg("bool", v)
    if isinstance(v, int):
        return Arg("int", v)
    if isinstance(v, float):
        return Arg("double", v)
    raise TypeError(f"not a scalar: {v!r}")


class _Lowerer:
    """State of one method's lowering (env: FX node -> spec / IntValue / tuple / python value)."""

    def __init__(self, ep: torch.export.ExportedProgram, name: str) -> None:
        self.ep = ep
        self.ir = MethodIR(name=name, ep=ep)
        self.n_labels = 0

    # -- values ---------------------------------------------------------------------------
    def value(self, env: dict[torch.fx.Node, Any], v: Any) -> Any:
        if isinstance(v, torch.fx.Node):
            if v not in env:
                raise UnsupportedOperatorError(f"value of node '{v.name}' is unavailable", node=v)
            return env[v]
        if isinstance(v, (list, tuple)):
            return type(v)(self.value(env, x) for x in v)
        return v

    def to_arg(self, v: Any, t: Any, node: torch.fx.Node) -> Arg:
        """Convert a (resolved) Python/IR value to an Arg for JIT schema type ``t``."""
        kind = t.kind() if t is not None else ""
        if kind == "OptionalType":
            if v is None:
                return Arg("null")
            t = t.getElementType()
            kind = t.kind()
        if v is None:
            return Arg("empty_tensor") if kind == "TensorType" else Arg("null")
        if isinstance(v, TensorSpec):
            return Arg("tensor", v)
        if kind == "TensorType" and _is_number(v):
            # A number where a Tensor is required and no Scalar overload exists: a 0-dim
            # constant (like ATen's wrapped numbers, it does not promote tensor dtypes).
            data = torch.tensor(v)
            spec = self.ir.new_spec(f"{node.name}_scalar", data.dtype, (), kind=CONSTANT)
            spec.data = data
            return Arg("tensor", spec)
        if isinstance(v, IntValue):
            return Arg("symint", v)
        if isinstance(v, torch.dtype):
            return Arg("int", SCALAR_TYPE[v])
        if isinstance(v, torch.memory_format):
            if v in (torch.channels_last, torch.channels_last_3d):
                # Every planned tensor is laid out contiguously (TensorSpec.dim_order), so a
                # channels-last copy is a plain copy: no format, which stock ExecuTorch's
                # clone / _to_copy kernels also accept (they refuse channels_last).
                return Arg("null")
            return Arg("int", MEMORY_FORMAT[v])
        if isinstance(v, torch.layout):
            return Arg("int", 0)
        if isinstance(v, torch.device):
            return Arg("null")
        if isinstance(v, str):
            return Arg("string", v)
        if isinstance(v, (list, tuple)):
            el = t.getElementType() if kind == "ListType" else None
            ek = el.kind() if el is not None else ""
            if ek == "TensorType" or (not ek and v and isinstance(v[0], TensorSpec)):
                return Arg("tensorlist", list(v))
            if ek == "OptionalType":
                return Arg("opt_tensorlist", list(v))
            if ek == "FloatType":
                return Arg("doublelist", [float(x) for x in v])
            if ek == "BoolType":
                return Arg("boollist", [bool(x) for x in v])
            return Arg("intlist", [x if isinstance(x, IntValue) else int(x) for x in v])
        if kind == "FloatType":
            return Arg("double", float(v))
        if kind in ("IntType", "SymIntType") and not isinstance(v, bool):
            return Arg("int", int(v))
        if kind == "BoolType":
            return Arg("bool", bool(v))
        return _scalar_arg(v)

    def new_label(self) -> str:
        self.n_labels += 1
        return f"L{self.n_labels}"

    # -- graph ----------------------------------------------------------------------------
    def lower_root(self) -> MethodIR:
        ep, ir = self.ep, self.ir
        gm = ep.graph_module
        sig = ep.graph_signature
        mutated = set(sig.buffers_to_mutate.values())
        env: dict[torch.fx.Node, Any] = {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        by_name = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
        for n in placeholders:
            spec = by_name.get(n.name)
            val = n.meta.get("val")
            if spec is None or spec.kind == InputKind.USER_INPUT:
                if isinstance(val, torch.Tensor):
                    t = spec_from_val(ir, n.name, val, INPUT, n)
                    env[n] = t
                    ir.inputs.append(Arg("tensor", t))
                elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                    iv = _sym_value(n)
                    env[n] = iv
                    ir.inputs.append(Arg("symint", iv))
                else:
                    env[n] = val
                    ir.inputs.append(_scalar_arg(val) if val is not None else Arg("null"))
                continue
            if spec.kind == InputKind.TOKEN:
                env[n] = None
                continue
            if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                raise UnsupportedOperatorError(
                    f"graph input kind {spec.kind.name} ('{spec.target}') is not supported", node=n
                )
            data = ep.state_dict.get(spec.target)
            if data is None:
                data = ep.constants.get(spec.target)
            if not isinstance(data, torch.Tensor):
                raise UnsupportedOperatorError(
                    f"constant '{spec.target}' is not a tensor ({type(data).__name__})", node=n
                )
            data = data.detach()
            kind = MUTABLE if spec.target in mutated else CONSTANT
            t = spec_from_val(ir, n.name, data, kind, n)
            t.fqn = spec.target
            t.data = data
            env[n] = t
        results = self.lower_graph(gm, env)
        n_graph = len(ir.instrs)  # buffer write-backs go after this point
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        user_outs = []
        for ospec, val, src in zip(sig.output_specs, results, out_node.args[0], strict=True):
            if ospec.kind == OutputKind.BUFFER_MUTATION:
                buf = env[next(p for p in placeholders if by_name[p.name].target == ospec.target)]
                if val is not buf:
                    src_node = src if isinstance(src, torch.fx.Node) else out_node
                    ir.instrs.append(
                        KernelInstr(
                            "aten::copy_",
                            [
                                Arg("tensor", buf),
                                Arg("tensor", val),
                                Arg("bool", False),
                                Arg("tensor", buf),
                            ],
                            node=src_node,
                            outputs=[Arg("tensor", buf)],
                        )
                    )
            elif ospec.kind == OutputKind.USER_OUTPUT:
                user_outs.append(val)
            elif ospec.kind == OutputKind.TOKEN:
                continue
            else:
                raise UnsupportedOperatorError(
                    f"graph output kind {ospec.kind.name} ('{ospec.target}') is not supported "
                    "(e.g. mutating a user input in place)",
                    node=src if isinstance(src, torch.fx.Node) else None,
                )
        written = {
            id(i.args[0].value)
            for i in ir.instrs[n_graph:]
            if isinstance(i, KernelInstr) and i.kernel == "aten::copy_"
        }
        for k, v in enumerate(user_outs):
            if isinstance(v, TensorSpec) and id(v) in written:
                # Returning a buffer's pre-mutation value: snapshot it before the write-back.
                snap = ir.new_spec(f"{v.name}_out{k}", v.dtype, v.shape, dynamic=v.dynamic)
                ir.instrs.insert(
                    n_graph,
                    KernelInstr(
                        "aten::clone.out",
                        [Arg("tensor", v), Arg("null"), Arg("tensor", snap), Arg("tensor", snap)],
                        node=out_node,
                        outputs=[Arg("tensor", snap)],
                    ),
                )
                n_graph += 1
                v = snap
            ir.outputs.append(self.to_arg(v, None, out_node))
        ir.in_spec = ep.call_spec.in_spec
        ir.out_spec = ep.call_spec.out_spec
        return ir

    def lower_graph(self, gm: torch.fx.GraphModule, env: dict[torch.fx.Node, Any]) -> list[Any]:
        """Lower the nodes of ``gm`` (placeholders pre-bound in ``env``); return output values."""
        dead = assert_only_nodes(gm)
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node in dead:
                env[node] = None
                continue
            if node.op == "get_attr":
                env[node] = getattr(gm, node.target)
                continue
            if node.op == "output":
                return list(self.value(env, node.args[0]))
            if node.op != "call_function":
                raise UnsupportedOperatorError(f"unsupported FX node op '{node.op}'", node=node)
            self.lower_call(gm, node, env)
        return []

    def lower_call(
        self, gm: torch.fx.GraphModule, node: torch.fx.Node, env: dict[torch.fx.Node, Any]
    ) -> None:
        target = node.target
        ir = self.ir
        if target is operator.getitem:
            parent = self.value(env, node.args[0])
            env[node] = parent[node.args[1]]
            return
        if target is torch.ops.higher_order.cond:
            self.lower_cond(gm, node, env)
            return
        if target in AUTO_FUNCTIONALIZED:
            self.lower_auto_functionalized(node, env)
            return
        if target in SYM_PRIM:
            args = [self.value(env, a) for a in node.args]
            out = _sym_value(node)
            ir.instrs.append(
                KernelInstr(
                    SYM_PRIM[target],
                    [self.to_arg(a, None, node) for a in args] + [Arg("symint", out)],
                    node=node,
                    outputs=[Arg("symint", out)],
                )
            )
            env[node] = out
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise UnsupportedOperatorError(f"unsupported call target {target}", node=node)
        base = target._schema.name.split("::")[1]
        if base in ASSERT_OPS:
            env[node] = None
            return
        if base in SYM_ATEN:
            self_spec = self.value(env, node.args[0])
            out = _sym_value(node)
            args = [Arg("tensor", self_spec)] + [Arg("int", int(a)) for a in node.args[1:]]
            ir.instrs.append(
                KernelInstr(
                    SYM_ATEN[base],
                    args + [Arg("symint", out)],
                    node=node,
                    outputs=[Arg("symint", out)],
                )
            )
            env[node] = out
            return
        target = scalar_overload(node) or target
        ov = resolve_out_variant(target)
        if ov is None:
            raise UnsupportedOperatorError(
                f"operator {target} has no out-variant overload", node=node
            )
        bound: dict[str, Any] = {}
        fschema = target._schema
        for a, v in zip(fschema.arguments, node.args, strict=False):
            bound[a.name] = self.value(env, v)
        for k, v in node.kwargs.items():
            bound[k] = self.value(env, v)
        val = node.meta.get("val")
        if not ov.out_names:  # in-place op: result aliases self
            raise UnsupportedOperatorError(
                f"in-place operator {target} in a functional graph is not supported", node=node
            )
        env[node] = self.emit_out(node, target, ov, bound, val)

    def emit_out(
        self,
        node: torch.fx.Node,
        target: torch._ops.OpOverload,
        ov: OutVariant,
        bound: dict[str, Any],
        val: Any,
    ) -> Any:
        """Append the out-variant call of ``target`` with arguments ``bound`` (by schema name)
        and fresh out specs shaped like ``val``; return the result spec(s)."""
        ir = self.ir
        outs: list[TensorSpec] = []
        vals = list(val) if isinstance(val, (list, tuple)) else [val]
        for i, v in enumerate(vals):
            if not isinstance(v, torch.Tensor):
                raise UnsupportedOperatorError(
                    f"operator {target} returns a non-tensor value", node=node
                )
            outs.append(
                spec_from_val(ir, node.name if len(vals) == 1 else f"{node.name}_{i}", v, node=node)
            )
        args: list[Arg] = []
        out_args: list[Arg] = []
        out_iter = iter(outs)
        for a in ov.op._schema.arguments:
            if a.name in ov.out_names:
                if str(a.type).startswith("List"):
                    arg = Arg("tensorlist", list(outs))
                else:
                    arg = Arg("tensor", next(out_iter))
                args.append(arg)
                out_args.append(arg)
                continue
            if a.name in bound:
                v = bound[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                raise UnsupportedOperatorError(
                    f"argument '{a.name}' of {ov.kernel} has no value", node=node
                )
            args.append(self.to_arg(v, a.type, node))
        n_ret = len(ov.op._schema.returns)
        if n_ret == 1:
            args.append(Arg("tensor", outs[0]))
        elif n_ret > 1:
            args.append(Arg("tensorlist", list(outs)))
        else:  # ``-> ()`` ops (split_copy.Tensor_out...): the out argument(s) again
            args.extend(
                Arg(a.kind, list(a.value) if a.kind == "tensorlist" else a.value) for a in out_args
            )
        ir.instrs.append(KernelInstr(ov.kernel, args, node=node, outputs=out_args))
        return tuple(outs) if isinstance(val, (list, tuple)) else outs[0]

    def lower_auto_functionalized(self, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> None:
        """A mutating custom op (``llama::update_cache``) that torch.export wrapped in
        ``auto_functionalized[_v2]``: call its out variant with the mutated arguments bound to
        their base tensors, in place (as ExecuTorch does after removing the wrapper). A base that
        other nodes still read is cloned first, so they keep seeing the old value. The wrapper's
        results are (op result, new value of each base / mutated argument)."""
        op = node.args[0]
        ov = resolve_mutating_out(op)
        if ov is None:
            raise UnsupportedOperatorError(
                f"mutating operator {op} has no out-variant overload Ember can call", node=node
            )
        schema = op._schema
        mutated = [a.name for a in schema.arguments if _is_write(a)]
        kw = node.kwargs
        v2 = node.target is torch.ops.higher_order.auto_functionalized_v2
        base_nodes: list[Any] = list(kw["_all_bases"]) if v2 else [kw[m] for m in mutated]
        bases: list[Any] = []
        for b in base_nodes:
            spec = self.value(env, b)
            if not isinstance(spec, TensorSpec):
                raise UnsupportedOperatorError(f"{op}: mutated argument is not a tensor", node=node)
            if isinstance(b, torch.fx.Node) and any(u is not node for u in b.users):
                spec = self._clone(node, spec)
            bases.append(spec)
        bound: dict[str, Any] = {}
        for a in schema.arguments:
            if a.name in mutated:
                if v2:
                    idx = kw.get(f"_{a.name}_base_index")
                    if idx is None:
                        bound[a.name] = None
                        continue
                    if any(f"_{a.name}_{x}" in kw for x in ("size", "stride", "storage_offset")):
                        raise UnsupportedOperatorError(
                            f"{op} mutates a view of a tensor ('{a.name}'); pass the whole "
                            "tensor instead",
                            node=node,
                        )
                    bound[a.name] = bases[idx]
                else:
                    bound[a.name] = bases[mutated.index(a.name)]
            elif a.name in kw:
                bound[a.name] = self.value(env, kw[a.name])
        val = node.meta.get("val")
        ret = val[0] if isinstance(val, (list, tuple)) and val else None
        n_ret = len(schema.returns)
        if n_ret != 1 or not isinstance(ret, torch.Tensor):
            raise UnsupportedOperatorError(
                f"mutating operator {op} must return exactly one tensor", node=node
            )
        result = self.emit_out(node, op, ov, bound, ret)
        env[node] = (result, *bases)

    def _clone(self, node: torch.fx.Node, src: TensorSpec) -> TensorSpec:
        dst = self.ir.new_spec(f"{node.name}_base", src.dtype, src.shape, dynamic=src.dynamic)
        self.ir.instrs.append(
            KernelInstr(
                "aten::clone.out",
                [Arg("tensor", src), Arg("null"), Arg("tensor", dst), Arg("tensor", dst)],
                node=node,
                outputs=[Arg("tensor", dst)],
            )
        )
        return dst

    def lower_cond(
        self, gm: torch.fx.GraphModule, node: torch.fx.Node, env: dict[torch.fx.Node, Any]
    ) -> None:
        ir = self.ir
        pred, t_ref, f_ref, operands = node.args[:4]
        pred_v = self.value(env, pred)
        pred_arg = (
            Arg("tensor", pred_v)
            if isinstance(pred_v, TensorSpec)
            else self.to_arg(pred_v, None, node)
        )
        ops = [self.value(env, o) for o in operands]
        vals = node.meta["val"]
        outs = []
        for i, v in enumerate(vals):
            s = spec_from_val(ir, f"{node.name}_{i}", v, node=node)
            s.move_target = True
            outs.append(s)
        l_false, l_end = self.new_label(), self.new_label()
        ir.instrs.append(JumpFalseInstr(pred_arg, l_false, node))
        for ref, tail in ((t_ref, True), (f_ref, False)):
            sub = self.value(env, ref)
            sub_env: dict[torch.fx.Node, Any] = {}
            phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
            for p, o in zip(phs, ops, strict=True):
                sub_env[p] = o
            res = self.lower_graph(sub, sub_env)
            for r, o in zip(res, outs, strict=True):
                ir.instrs.append(MoveInstr(self.to_arg(r, None, node), Arg("tensor", o), node))
            if tail:
                ir.instrs.append(JumpFalseInstr(Arg("bool", False), l_end, node))
                ir.instrs.append(Label(l_false))
        ir.instrs.append(Label(l_end))
        env[node] = tuple(outs)


def to_out_variants(ep: torch.export.ExportedProgram, method_name: str = "forward") -> MethodIR:
    """Lower a decomposed ExportedProgram to a :class:`MethodIR` (see the module docstring)."""
    return _Lowerer(ep, method_name).lower_root()
