"""Stage: a float16 / bfloat16 model computed in float32 (how EmberCpuBackend runs it).

Models are often shipped in half precision (``model.half()``, Hugging Face checkpoints loaded
with ``torch_dtype=torch.bfloat16``). The CPU backend's kernels are f32, so such a graph ran
entirely on the portable kernels: correct, with ATen's half semantics, but ~50x slower than the
same model in f32 (MobileNetV2: 400 / 349 ms in f16 / bf16 against 7.1 ms in f32, 1 thread).

With ``ember.export(..., half="f32")`` (the default for the CPU backend) the exported graph is
rewritten before lowering: half parameters, buffers and constants become f32 tensors, every
dtype argument naming a half type (``_to_copy``, ``full``, ``sum(dtype=)``...) names f32, the
method's half inputs are cast to f32 where they enter and its half outputs cast back where they
leave. The caller sees the same signature and dtypes; the values are the model's computed in
f32 and rounded once at the end (closer to the exact result than eager half, which rounds after
every operator), so they can differ from eager half by its rounding. ``half="keep"`` keeps the
model's dtypes on the portable kernels (ATen's half results). The CPU backend's blob stores a
constant as 16-bit halves wherever that is exact (``blob.half_bytes``: the weights it keeps as
they are, a linear's; not a conv's with a batch norm folded in) and widens it once at init.

The rewrite is all or nothing: a graph it cannot re-type (a bitcast ``view(dtype)``, a
higher-order operator, an operator whose meta function refuses f32) is left as it was, logged.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch._guards import detect_fake_mode
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import Node
from torch.utils import _pytree as pytree

log = logging.getLogger(__name__)

aten = torch.ops.aten
HALF = (torch.float16, torch.bfloat16)
MODES = ("f32", "keep")

# Operators whose result depends on the bits of a half type, not only its value.
_REFUSE = {aten.view.dtype}
# Operators with a flag that only a half input allows: cleared when the input becomes f32.
_HALF_TO_FLOAT = {aten._softmax.default: 2, aten._log_softmax.default: 2}


def _is_half(v: Any) -> bool:
    return isinstance(v, torch.Tensor) and v.dtype in HALF


def _has_half(v: Any) -> bool:
    return any(_is_half(x) for x in pytree.tree_leaves(v))


def _retype(a: Any) -> Any:
    """``a`` with every half dtype (in lists and dicts too) replaced by float32."""
    if isinstance(a, torch.dtype):
        return torch.float32 if a in HALF else a
    if isinstance(a, (list, tuple)):
        return type(a)(_retype(x) for x in a)
    if isinstance(a, dict):
        return {k: _retype(v) for k, v in a.items()}
    return a


def _f32(v: Any) -> Any:
    return pytree.tree_map(lambda t: t.to(torch.float32) if _is_half(t) else t, v)


def _state_f32(t: torch.Tensor) -> torch.Tensor:
    f = t.detach().to(torch.float32)
    return torch.nn.Parameter(f, requires_grad=False) if isinstance(t, torch.nn.Parameter) else f


def half_as_f32(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Rewrite ``ep`` in place to compute its half-precision tensors in f32 (see the module
    docstring); returns ``ep``, unchanged when it has no half tensor or cannot be re-typed."""
    graph = ep.graph_module.graph
    nodes = list(graph.nodes)
    if not any(_has_half(n.meta.get("val")) for n in nodes):
        return ep
    vals = [v for n in nodes for v in pytree.tree_leaves(n.meta.get("val"))]
    fake = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    if fake is None:
        return ep
    sig = ep.graph_signature
    if any(s.kind == OutputKind.USER_INPUT_MUTATION for s in sig.output_specs):
        log.info("half-precision graph kept as it is: it mutates an input")
        return ep
    user_inputs = {s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT}

    # First every node's f32 value, without touching the graph: any refusal leaves it as it was.
    new: dict[Node, Any] = {}
    new_args: dict[Node, tuple[tuple, dict]] = {}

    def val_of(a: Any) -> Any:
        return new[a] if isinstance(a, Node) else a

    try:
        with fake:
            for n in nodes:
                if n.op == "placeholder":
                    v = n.meta.get("val")
                    new[n] = _f32(v)
                elif n.op == "call_function":
                    if n.target in _REFUSE or not callable(n.target):
                        raise TypeError(f"{n.target} depends on the half type's bits")
                    if isinstance(n.target, torch._ops.HigherOrderOperator):
                        raise TypeError(f"higher-order operator {n.target}")
                    args, kwargs = _retype(n.args), _retype(n.kwargs)
                    flag = _HALF_TO_FLOAT.get(n.target)  # type: ignore[call-overload]
                    if flag is not None and len(args) > flag and args[flag]:
                        if not _is_half(val_of(args[0])):
                            args = (*args[:flag], False, *args[flag + 1 :])
                    new_args[n] = (args, kwargs)
                    a2, k2 = pytree.tree_map(val_of, (args, kwargs))
                    new[n] = n.target(*a2, **k2)
                elif n.op == "get_attr":
                    new[n] = n.meta.get("val")
    except Exception as e:  # noqa: BLE001 - any refusal keeps the model's own dtypes
        log.warning(
            "half-precision graph kept in its dtypes on the portable kernels (not re-typed to "
            "f32): %s",
            e,
        )
        return ep

    # The state the graph reads: half tensors become f32 copies (the model is not touched).
    for spec in sig.input_specs:
        if spec.kind == InputKind.USER_INPUT or spec.target is None:
            continue
        store = ep.constants if spec.target in ep.constants else ep.state_dict
        t = store.get(spec.target)
        if isinstance(t, torch.Tensor) and t.dtype in HALF:
            store[spec.target] = _state_f32(t)

    out_node = next(n for n in nodes if n.op == "output")
    outs = list(out_node.args[0])
    out_dtype = {
        i: o.meta["val"].dtype
        for i, (spec, o) in enumerate(zip(sig.output_specs, outs, strict=False))
        if spec.kind == OutputKind.USER_OUTPUT
        and isinstance(o, Node)
        and _is_half(o.meta.get("val"))
    }
    half_inputs = [n for n in nodes if n.name in user_inputs and _is_half(n.meta.get("val"))]
    for n in nodes:
        if n.op == "call_function":
            n.args, n.kwargs = new_args[n]
        if n.op in ("placeholder", "call_function") and "val" in n.meta and n not in half_inputs:
            n.meta["val"] = new[n]
            n.meta.pop("tensor_meta", None)
    # A user input keeps its own dtype; a cast to f32 feeds its users.
    for n in half_inputs:
        with graph.inserting_after(n):
            cast = graph.call_function(aten._to_copy.default, (n,), {"dtype": torch.float32})
        cast.meta = {k: v for k, v in n.meta.items() if k not in ("val", "tensor_meta")}
        cast.meta["val"] = new[n]
        n.replace_all_uses_with(cast, delete_user_cb=lambda u, c=cast: u is not c)
    # A user output the model returned in half precision is cast back to it.
    for i, want in out_dtype.items():
        o = outs[i]
        if o.meta["val"].dtype == want:
            continue  # a half input returned as it is
        with graph.inserting_before(out_node):
            cast = graph.call_function(aten._to_copy.default, (o,), {"dtype": want})
        cast.meta = {k: v for k, v in o.meta.items() if k not in ("val", "tensor_meta")}
        with fake:
            cast.meta["val"] = o.meta["val"].to(want)
        outs[i] = cast
    out_node.args = (tuple(outs), *out_node.args[1:])
    graph.lint()
    ep.graph_module.recompile()
    log.info(
        "half-precision model computed in f32 (%d input / %d output casts)",
        len(half_inputs),
        len(out_dtype),
    )
    return ep
