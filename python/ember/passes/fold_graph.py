"""Stage: fold constant subgraphs of the exported graph into constants.

What a model computes from its weights and from nothing but static shapes is the same on every
call: a weight-standardized convolution's normalized weight (BiT's StdConv2d), a class token
expanded to the batch, attention masks and position tables built from ``arange`` / ``full`` /
comparisons (Hugging Face's encoders and decoders), the ``full_like`` of an input's shape. Run as
written, each is an operator per call, and most run on the portable kernels between two
delegates (a non-constant weight keeps a convolution out of the CPU backend altogether). This
pass evaluates them once, at export, with PyTorch's own kernels (so the values are eager's), and
the graph reads the results as lifted constants.

Guarantees afterwards: no Core ATen ``call_function`` node whose inputs are all foldable (non-
mutated parameters, buffers and lifted constants; other folded nodes; Python values; for the
``*_like`` factories, only the static shape of a tensor) is left computing, unless

- its result would be a constant larger than both 1 MiB and the largest constant it was computed
  from (a causal mask for a long context: it stays an operator so the file does not grow), one
  value repeated over more than 64 KiB (a ``zeros_like`` of the attention matrix: filling costs
  nothing), a broadcast (``expand``: stored, it would only be its source repeated), or a
  constant through layout operators alone (the IR's fold does those);
- it is random, mutates, has symbolic shapes, is a graph output itself, or is not an ``aten``
  operator (quantized_decomposed's Q/DQ and Ember's own operators stay, for the backends'
  patterns: an int8 weight's dequantize is what marks it int8);
- the method keeps its weights in an external ``.ptd`` and the node reads a parameter or buffer
  (the ``.ptd`` keys stay the model's names).

Parameters, buffers and constants no longer read are dropped from the program (a standardized
weight replaces its original: the file does not hold both).
"""

from __future__ import annotations

import logging
import operator
from typing import Any

import torch
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
from torch.fx import Node
from torch.fx.node import map_aggregate

log = logging.getLogger(__name__)

SMALL_BYTES = 1 << 20  # a folded result up to this size is kept whatever it came from
SPLAT_BYTES = 1 << 16  # one value repeated is not stored beyond this: filling it costs nothing
_MAX_EVAL_NUMEL = 1 << 26  # never materialize more than this many elements at export
_SHAPE_ONLY = {  # factories that read only the static shape / dtype of their tensor argument
    "full_like",
    "zeros_like",
    "ones_like",
}
_CONST_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
# Layout operators: a result reached from one constant through these alone is not stored (the
# IR's own fold, ember.passes.fold, handles a weight's transpose once it knows every reader: a
# tied embedding and output projection keep one copy, backends see their weights as such).
_LAYOUT = {
    torch.ops.aten.permute.default,
    torch.ops.aten.t.default,
    torch.ops.aten.transpose.int,
    torch.ops.aten.view.default,
    torch.ops.aten._unsafe_view.default,
    torch.ops.aten.reshape.default,
    torch.ops.aten.clone.default,
    torch.ops.aten._to_copy.default,
    torch.ops.aten.alias.default,
    torch.ops.aten.squeeze.dim,
    torch.ops.aten.squeeze.dims,
    torch.ops.aten.unsqueeze.default,
    torch.ops.aten.contiguous.default,
}
# Folded inside a constant chain but never stored as its result: a broadcast stays an operator
# on its smaller source (the CPU backend broadcasts it, or its reader does: a batched product
# with a broadcast weight is the product with the weight).
_NOT_STORED = {torch.ops.aten.expand.default}


def _nbytes(v: Any) -> int:
    if isinstance(v, torch.Tensor):
        return v.numel() * v.element_size()
    if isinstance(v, (tuple, list)):
        return sum(_nbytes(x) for x in v)
    return 0


def _static(val: Any) -> bool:
    """Whether a node's example value (a tensor or a tuple of them) has only static sizes."""
    if isinstance(val, torch.Tensor):
        return all(isinstance(s, int) for s in val.shape)
    if isinstance(val, (tuple, list)):
        return all(_static(v) for v in val)
    return not isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _foldable_op(n: Node) -> bool:
    t = n.target
    if t is operator.getitem:
        return True
    if not isinstance(t, torch._ops.OpOverload) or t.namespace != "aten":
        return False
    if t._schema.is_mutable or torch.Tag.nondeterministic_seeded in t.tags:
        return False
    return not t._schema.name.startswith("aten::empty")


def _evaluate(n: Node, vals: dict[Node, Any]) -> Any:
    """The node's value from its inputs' values, or None when one input is not constant."""
    shape_only = isinstance(n.target, torch._ops.OpOverload) and (
        n.target._schema.name.split("::")[-1] in _SHAPE_ONLY
    )
    missing = False

    def value(a: Any) -> Any:
        nonlocal missing
        if not isinstance(a, Node):
            return a
        if a in vals:
            return vals[a]
        ex = a.meta.get("val")
        if shape_only and isinstance(ex, torch.Tensor) and _static(ex):
            return torch.zeros(tuple(ex.shape), dtype=ex.dtype)  # only its shape is read
        missing = True
        return None

    args = map_aggregate(n.args, value)
    kwargs = map_aggregate(n.kwargs, value)
    if missing:
        return None
    with torch.no_grad():
        return n.target(*args, **kwargs)  # type: ignore[operator]


def fold_constant_subgraphs(
    ep: torch.export.ExportedProgram, external: bool = False
) -> torch.export.ExportedProgram:
    """Fold ``ep``'s constant subgraphs in place (see the module docstring); returns ``ep``."""
    gm, sig = ep.graph_module, ep.graph_signature
    graph = gm.graph
    mutated = set(sig.buffers_to_mutate.values())
    specs = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
    vals: dict[Node, Any] = {}
    roots: dict[Node, int] = {}  # the largest original constant each value was computed from
    reads_weights: dict[Node, bool] = {}
    for n in graph.nodes:
        if n.op != "placeholder":
            continue
        s = specs.get(n.name)
        if s is None or s.kind not in _CONST_KINDS or s.target in mutated:
            continue
        data = ep.state_dict.get(s.target)
        if data is None:
            data = ep.constants.get(s.target)
        if isinstance(data, torch.Tensor):
            vals[n] = data.detach()
            roots[n] = _nbytes(data)
            reads_weights[n] = s.kind != InputKind.CONSTANT_TENSOR
    sources = set(vals)
    out_node = next(n for n in graph.nodes if n.op == "output")
    outputs = {a for a in out_node.all_input_nodes}
    for n in graph.nodes:
        if n.op != "call_function" or n in outputs or not _foldable_op(n):
            continue
        ex = n.meta.get("val")
        if (
            not _static(ex)
            or sum(
                v.numel()
                for v in (ex if isinstance(ex, (tuple, list)) else [ex])
                if isinstance(v, torch.Tensor)
            )
            > _MAX_EVAL_NUMEL
        ):
            continue
        ins = [a for a in n.all_input_nodes if a in vals]
        weights = any(reads_weights.get(a, False) for a in ins)
        if external and weights:
            continue
        try:
            v = _evaluate(n, vals)
        except Exception as e:  # noqa: BLE001  (an op that fails here runs at run time instead)
            log.debug("not folding %s: %s", n.name, e)
            continue
        if v is None or not isinstance(v, (torch.Tensor, tuple, list)):
            continue
        vals[n] = v
        roots[n] = max([roots.get(a, 0) for a in ins], default=0)
        reads_weights[n] = weights
    folded = set(vals) - sources
    # Keep only results worth storing: a boundary value (read by a node left computing) must be
    # a tensor no larger than SMALL_BYTES or the largest constant it came from; a tuple only
    # through getitems. Unfolding a node makes its inputs boundaries: repeat until stable.
    changed = True
    while changed:
        changed = False
        for n in list(folded):
            users = [u for u in n.users if u not in folded]
            if not users:
                continue
            v = vals[n]
            if (
                not isinstance(v, torch.Tensor)
                or _nbytes(v) > max(SMALL_BYTES, roots[n])
                or (n.target in _NOT_STORED and _nbytes(v) > roots[n])
                or _layout_only(n, sources)
                or (_nbytes(v) > SPLAT_BYTES and _splat(v))
            ):
                folded.discard(n)
                changed = True
    boundary = [n for n in graph.nodes if n in folded and any(u not in folded for u in n.users)]
    if not boundary:
        return ep
    first_user = next(
        (n for n in graph.nodes if n.op == "placeholder" and _is_user_input(specs.get(n.name))),
        None,
    ) or next(n for n in graph.nodes if n.op != "placeholder")
    spec_at = next(
        (i for i, s in enumerate(sig.input_specs) if s.kind == InputKind.USER_INPUT),
        len(sig.input_specs),
    )
    taken = set(ep.constants) | set(ep.state_dict)
    made: list[tuple[torch.Tensor, Node]] = []  # equal results share one constant
    for n in boundary:
        v = vals[n].detach()
        ph = next(
            (p for t, p in made if t.dtype == v.dtype and t.shape == v.shape and torch.equal(t, v)),
            None,
        )
        if ph is None:
            name = f"_ember_folded_{len(made)}"
            while name in taken:
                name += "_"
            taken.add(name)
            with graph.inserting_before(first_user):
                ph = graph.placeholder(name)
            ph.meta = dict(n.meta)
            ep.constants[name] = v.clone().contiguous()
            sig.input_specs.insert(
                spec_at + len(made),
                InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name), name),
            )
            made.append((v, ph))
        n.replace_all_uses_with(ph)
    for n in reversed(list(graph.nodes)):
        if n in folded and not n.users:
            graph.erase_node(n)
    dropped = 0
    for n in list(graph.nodes):
        s = specs.get(n.name)
        if n.op == "placeholder" and not n.users and s is not None and n in sources:
            graph.erase_node(n)
            sig.input_specs.remove(s)
            ep.state_dict.pop(s.target, None)
            ep.constants.pop(s.target, None)
            dropped += 1
    graph.lint()
    gm.recompile()
    log.info(
        "folded %d constant node(s) into %d constant(s); %d constant input(s) no longer read",
        len(folded),
        len(made),
        dropped,
    )
    return ep


def _splat(v: torch.Tensor) -> bool:
    """Every element the same (a ``full`` / ``zeros_like``)."""
    flat = v.reshape(-1)
    return bool(flat.numel() > 0 and (flat == flat[0]).all())


def _layout_only(n: Node, sources: set[Node]) -> bool:
    """Whether ``n`` is one constant through layout operators alone."""
    while n not in sources:
        if n.op != "call_function" or n.target not in _LAYOUT:
            return False
        ins = n.all_input_nodes
        if len(ins) != 1:
            return False
        n = ins[0]
    return True


def _is_user_input(s: InputSpec | None) -> bool:
    return s is None or s.kind == InputKind.USER_INPUT
