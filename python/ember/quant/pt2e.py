"""Int8 post-training quantization on the graph ``torch.export`` captures (PT2E-style, own code).

:func:`quantize_exported` exports a model (or takes an ``ExportedProgram``), decomposes it to Core
ATen as :func:`ember.export` does (keeping ``hardswish`` / ``silu`` / ``hardsigmoid`` whole so
they can be quantized as one operator), folds every BatchNorm that follows a convolution into the
convolution, and then rewrites the graph in ExecuTorch's Q/DQ representation:

* convolution weights (regular, depthwise, grouped, transposed) and the weights of linear layers
  (``addmm`` / ``mm`` with a constant right-hand side) become int8 constants, **per-channel
  symmetric**, read through ``quantized_decomposed::dequantize_per_channel`` (linear weights
  stored ``[in, out]``, so no run-time transpose);
* activations are int8 **per-tensor affine**: a ``quantize_per_tensor`` →
  ``dequantize_per_tensor`` pair on every input and output of a quantized operator —
  convolutions, ``addmm`` / ``mm`` / ``bmm``, residual ``add`` / ``mul`` of two tensors, ``cat``,
  max / average / adaptive-average pooling and ``mean``, and the activations ``relu``,
  ``hardtanh`` (relu6), ``hardswish``, ``sigmoid``, ``silu``, ``gelu``. ``cat`` shares one set of
  qparams between its inputs and output, max pooling between input and output; a ``relu`` /
  ``hardtanh`` that is the only user of a convolution, linear or add is fused with it (only the
  activation's output is quantized), as integer kernels compute them.

Scales and zero points come from running the float graph on the calibration batches in a
``torch.fx.Interpreter`` with the observers of :mod:`ember.quant` (``minmax``, ``percentile``,
``mse``). With ``dynamic=True`` only linear layers are quantized: int8 per-channel weights and
activations quantized per row at run time (``choose_qparams_per_token_asymmetric`` →
``quantize_per_token`` → ``dequantize_per_token``, which Ember's portable kernels implement); no
calibration data is needed.

The result is an ``ExportedProgram`` that :func:`ember.export` takes as it is.

    ep = ember.quant.quantize_exported(model, (x,), calibration_batches)
    prog = ember.export(ep, (x,), backend=None)
"""

from __future__ import annotations

import copy
import logging
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch._decomp import core_aten_decompositions
from torch.utils import _pytree as pytree

from ember.quant import (
    QMAX,
    QMIN,
    QuantizationError,
    _batches,
    _Observer,
    qparams_affine,
    weight_qparams,
)

log = logging.getLogger(__name__)

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed

__all__ = ["QuantSummary", "quantize_exported", "summarize"]

_CONV = aten.convolution.default
_MM = (aten.addmm.default, aten.mm.default)
_BMM = aten.bmm.default
_BINARY = (aten.add.Tensor, aten.mul.Tensor)
_CAT = aten.cat.default
_MAXPOOL = (aten.max_pool2d_with_indices.default, aten.max_pool2d.default)
#: A constant pad keeps its input's qparams (its value joins the observed range), as a max pool
#: does: a pad then a conv (TensorFlow's "same" padding, EfficientNet) stays one int8 link.
_PAD = aten.constant_pad_nd.default
_POOL = (
    aten.avg_pool2d.default,
    aten._adaptive_avg_pool2d.default,
    aten.adaptive_avg_pool2d.default,
    aten.mean.dim,
)
_FUSED_ACT = (aten.relu.default, aten.hardtanh.default)
_ACT = _FUSED_ACT + (
    aten.hardswish.default,
    aten.sigmoid.default,
    aten.silu.default,
    aten.gelu.default,
)
#: Producers a following relu / hardtanh fuses with (only the activation's output is quantized).
_FUSABLE = (_CONV, *_MM, aten.add.Tensor)
#: Kept whole while annotating (Core ATen would split them into arithmetic); ember.export
#: decomposes them later, between the same Q/DQ pairs.
_KEEP_WHOLE = (aten.hardswish.default, aten.silu.default, aten.hardsigmoid.default)
_TRANSPOSES = (aten.permute.default, aten.t.default, aten.transpose.int)
_BN = aten._native_batch_norm_legit_no_training.default
_QDQ_OPS = {
    qd.quantize_per_tensor.default,
    qd.quantize_per_tensor.tensor,
    qd.dequantize_per_tensor.default,
    qd.dequantize_per_tensor.tensor,
    qd.dequantize_per_channel.default,
    qd.quantize_per_token.default,
    qd.dequantize_per_token.default,
}


def _is_float_tensor(n: Any) -> bool:
    if not isinstance(n, fx.Node):
        return False
    v = n.meta.get("val")
    return isinstance(v, torch.Tensor) and v.is_floating_point()


def _is_call(n: Any, targets: Any) -> bool:
    if not isinstance(n, fx.Node) or n.op != "call_function":
        return False
    return n.target in targets if isinstance(targets, tuple | set) else n.target == targets


def _attr(gm: fx.GraphModule, target: str) -> torch.Tensor:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _new_attr(gm: fx.GraphModule, base: str, t: torch.Tensor) -> str:
    name = base.replace(".", "_")
    k = 0
    while hasattr(gm, f"{name}_{k}"):
        k += 1
    gm.register_buffer(f"{name}_{k}", t.detach().contiguous())
    return f"{name}_{k}"


def _drop_attr(gm: fx.GraphModule, target: str) -> None:
    """Deletes the (now unused) parameter or buffer ``target`` so re-export does not keep it."""
    mod_path, _, name = target.rpartition(".")
    mod = gm.get_submodule(mod_path) if mod_path else gm
    if hasattr(mod, name):
        delattr(mod, name)


def _cleanup(gm: fx.GraphModule) -> None:
    """Erases pure nodes nobody uses (permutes of replaced weights, old get_attr nodes) and the
    attributes only they read."""
    changed = True
    while changed:
        changed = False
        for n in reversed(list(gm.graph.nodes)):
            if n.users or n.op not in ("get_attr", "call_function"):
                continue
            if n.op == "call_function" and n.target not in _TRANSPOSES:
                continue
            target = n.target if n.op == "get_attr" else None
            gm.graph.erase_node(n)
            if isinstance(target, str) and not any(
                m.op == "get_attr" and m.target == target for m in gm.graph.nodes
            ):
                _drop_attr(gm, target)
            changed = True


def _decomposed(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    table = core_aten_decompositions()
    for op in _KEEP_WHOLE:
        table.pop(op, None)
    return ep.run_decompositions(table)


# --------------------------------------------------------------------------- BatchNorm folding


def fold_batch_norms(gm: fx.GraphModule) -> int:
    """Folds ``_native_batch_norm_legit_no_training`` after a ``convolution`` (whose only user it
    is, with constant weights) into the convolution's weight and bias. Returns how many."""
    folded = 0
    for bn in list(gm.graph.nodes):
        if not _is_call(bn, _BN):
            continue
        conv = bn.args[0]
        if not _is_call(conv, _CONV) or len(conv.users) != 1:
            continue
        w_node, b_node = conv.args[1], conv.args[2]
        params = bn.args[1:5]
        if w_node.op != "get_attr" or (b_node is not None and b_node.op != "get_attr"):
            continue
        if any(p is not None and p.op != "get_attr" for p in params):
            continue
        if any(u.target is not operator.getitem or u.args[1] != 0 for u in bn.users):
            continue
        w = _attr(gm, w_node.target).detach().float()
        bn_w, bn_b, mean, var = (None if p is None else _attr(gm, p.target).detach().float()
                                 for p in params)  # fmt: skip
        eps = float(bn.args[6])
        transposed, groups = bool(conv.args[6]), int(conv.args[8])
        c_out = mean.shape[0]
        scale = torch.rsqrt(var + eps) * (bn_w if bn_w is not None else 1.0)
        shift = (bn_b if bn_b is not None else 0.0) - mean * scale
        if transposed:  # [in, out/groups, k...]: output channel g * (out/groups) + j
            shp = w.shape
            wg = w.reshape(groups, shp[0] // groups, shp[1], *shp[2:])
            s = scale.reshape(groups, 1, shp[1], *([1] * (w.dim() - 2)))
            new_w = (wg * s).reshape(shp)
        else:
            new_w = w * scale.reshape(-1, *([1] * (w.dim() - 1)))
        bias = _attr(gm, b_node.target).detach().float() if b_node is not None else 0.0
        new_b = bias * scale + shift if b_node is not None else shift.expand(c_out).clone()
        with gm.graph.inserting_before(conv):
            nw = gm.graph.get_attr(_new_attr(gm, f"{w_node.target}_bnfold", new_w))
            nb = gm.graph.get_attr(_new_attr(gm, f"{w_node.target}_bnfold_bias", new_b))
        args = list(conv.args)
        args[1], args[2] = nw, nb
        conv.args = tuple(args)
        conv.meta = dict(conv.meta)
        for u in list(bn.users):
            u.replace_all_uses_with(conv)
            gm.graph.erase_node(u)
        gm.graph.erase_node(bn)
        for p in (w_node, b_node, *params, *(a for a in bn.args[5:] if isinstance(a, fx.Node))):
            if isinstance(p, fx.Node) and not p.users:
                gm.graph.erase_node(p)
                if not any(m.op == "get_attr" and m.target == p.target for m in gm.graph.nodes):
                    _drop_attr(gm, p.target)
        folded += 1
    if folded:
        for n in list(gm.graph.nodes):  # num_batches_tracked and other BN leftovers
            if n.op == "get_attr" and not n.users:
                gm.graph.erase_node(n)
                _drop_attr(gm, n.target)
        gm.graph.lint()
        gm.recompile()
    return folded


# --------------------------------------------------------------------------- annotation


@dataclass
class _Plan:
    """What to quantize: activation values (grouped by shared qparams) and weights."""

    acts: list[fx.Node] = field(default_factory=list)
    parent: dict[fx.Node, fx.Node] = field(default_factory=dict)
    # (user, arg index, get_attr node, is [out, in] weight read through a transpose)
    weights: list[tuple[fx.Node, int, fx.Node, bool]] = field(default_factory=list)
    adds: int = 0

    def add(self, n: Any) -> None:
        if _is_float_tensor(n) and n not in self.parent:
            self.parent[n] = n
            self.acts.append(n)

    def root(self, n: fx.Node) -> fx.Node:
        while self.parent[n] is not n:
            self.parent[n] = self.parent[self.parent[n]]
            n = self.parent[n]
        return n

    def share(self, nodes: list[Any]) -> None:
        nodes = [n for n in nodes if n in self.parent]
        for n in nodes[1:]:
            self.parent[self.root(n)] = self.root(nodes[0])


def _const_weight(n: Any) -> tuple[fx.Node, bool] | None:
    """``(get_attr, transposed)`` when `n` is a constant 2-D weight, directly or transposed."""
    if isinstance(n, fx.Node) and n.op == "get_attr":
        return n, False
    if _is_call(n, _TRANSPOSES):
        src = n.args[0]
        if isinstance(src, fx.Node) and src.op == "get_attr" and _is_float_tensor(src):
            if n.target != aten.permute.default or list(n.args[1]) == [1, 0]:
                return src, True
    return None


def _fused_with_act(n: fx.Node) -> bool:
    """`n` (a conv / linear / add) feeds only a relu / hardtanh that absorbs it."""
    return _is_call(n, _FUSABLE) and len(n.users) == 1 and _is_call(next(iter(n.users)), _FUSED_ACT)


def _annotate(gm: fx.GraphModule, dynamic: bool) -> _Plan:
    plan = _Plan()
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        linear_w = None
        if t in _MM:
            idx = 2 if t == aten.addmm.default else 1
            cw = _const_weight(n.args[idx])
            if cw is not None and cw[0].meta["val"].dim() == 2:
                linear_w = (idx, *cw)
        if dynamic:
            if linear_w is not None:
                plan.weights.append((n, *linear_w))
                plan.add(n.args[idx - 1])
            continue
        out_q = not _fused_with_act(n)
        if t == _CONV:
            if isinstance(n.args[1], fx.Node) and n.args[1].op == "get_attr":
                plan.weights.append((n, 1, n.args[1], False))
            else:
                plan.add(n.args[1])
            plan.add(n.args[0])
        elif t in _MM:
            a_idx = 1 if t == aten.addmm.default else 0
            plan.add(n.args[a_idx])
            if linear_w is not None:
                plan.weights.append((n, *linear_w))
            else:
                plan.add(n.args[a_idx + 1])
        elif t == _BMM:
            plan.add(n.args[0])
            plan.add(n.args[1])
        elif t in _BINARY:
            if not all(_is_float_tensor(a) for a in n.args[:2]):
                continue
            plan.add(n.args[0])
            plan.add(n.args[1])
            plan.adds += t == aten.add.Tensor
        elif t == _CAT:
            for a in n.args[0]:
                plan.add(a)
            plan.add(n)
            plan.share([*n.args[0], n])
            continue
        elif t in _MAXPOOL:
            out = n
            if t == aten.max_pool2d_with_indices.default:
                gets = [u for u in n.users if u.args[1] == 0]
                if not gets:
                    continue
                out = gets[0]
            plan.add(n.args[0])
            plan.add(out)
            plan.share([n.args[0], out])
            continue
        elif t == _PAD:
            plan.add(n.args[0])
            plan.add(n)
            plan.share([n.args[0], n])
            continue
        elif t in _POOL:
            plan.add(n.args[0])
        elif t in _ACT:
            src = n.args[0]
            if not (t in _FUSED_ACT and isinstance(src, fx.Node) and _fused_with_act(src)):
                plan.add(src)
        else:
            continue
        if out_q:
            plan.add(n)
    return plan


# --------------------------------------------------------------------------- rewriting


def _per_channel(w: torch.Tensor, axis: int) -> tuple[torch.Tensor, torch.Tensor]:
    q, s = weight_qparams(w.movedim(axis, 0))
    return q.movedim(0, axis).contiguous(), s


def _quantize_weights(gm: fx.GraphModule, plan: _Plan) -> None:
    g = gm.graph
    for user, idx, attr, transposed in plan.weights:
        w = _attr(gm, attr.target).detach().float()
        if user.target == _CONV:
            axis = 1 if user.args[6] else 0  # transposed conv: [in, out/groups, k...]
            q, s = _per_channel(w, axis)
        elif transposed:  # [out, in] read as its transpose: store [in, out], channels on axis 1
            q, s = _per_channel(w, 0)
            q, axis = q.t().contiguous(), 1
        else:  # a [in, out] weight used as is
            q, s = _per_channel(w, 1)
            axis = 1
        with g.inserting_before(user):
            qn = g.get_attr(_new_attr(gm, f"{attr.target}_int8", q))
            sn = g.get_attr(_new_attr(gm, f"{attr.target}_scales", s))
            zn = g.get_attr(
                _new_attr(gm, f"{attr.target}_zp", torch.zeros_like(s, dtype=torch.int64))
            )
            dq = g.call_function(qd.dequantize_per_channel.default,
                                 (qn, sn, zn, axis, -127, 127, torch.int8))  # fmt: skip
        user.update_arg(idx, dq)


def _calibrate(
    gm: fx.GraphModule,
    plan: _Plan,
    batches: list[tuple[Any, ...]],
    observer: str,
    percentile: float,
    progress: bool,
) -> dict[fx.Node, tuple[float, int]]:
    roots = {plan.root(n) for n in plan.acts}
    obs = {r: _Observer(observer, percentile) for r in roots}
    watch = {n: obs[plan.root(n)] for n in plan.acts}

    class _Calib(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            out = super().run_node(n)
            o = watch.get(n)
            if o is not None and isinstance(out, torch.Tensor):
                o(out)
            return out

    from tqdm import tqdm

    it = tqdm(batches, desc="calibrating", unit="batch", leave=False, disable=not progress or None)
    interp = _Calib(gm)
    with torch.no_grad():
        for b in it:
            interp.run(*pytree.tree_leaves(b))
    out = {}
    for n in plan.acts:
        o = obs[plan.root(n)]
        if o.n == 0:
            raise QuantizationError(f"{n.format_node()} never ran during calibration")
        out[n] = qparams_affine(o.lo, o.hi)
    return out


def _insert_static(
    gm: fx.GraphModule, plan: _Plan, qparams: dict[fx.Node, tuple[float, int]]
) -> None:
    g = gm.graph
    order = {n: i for i, n in enumerate(g.nodes)}
    for v in plan.acts:
        users = [u for u in v.users if u.op != "call_module"]
        if not users:
            continue
        scale, zp = qparams[v]
        with g.inserting_before(min(users, key=order.__getitem__)):
            q = g.call_function(qd.quantize_per_tensor.default,
                                (v, scale, zp, QMIN, QMAX, torch.int8))  # fmt: skip
            dq = g.call_function(qd.dequantize_per_tensor.default,
                                 (q, scale, zp, QMIN, QMAX, torch.int8))  # fmt: skip
        for u in users:
            u.replace_input_with(v, dq)


def _insert_dynamic(gm: fx.GraphModule, plan: _Plan) -> None:
    g = gm.graph
    order = {n: i for i, n in enumerate(g.nodes)}
    for v in plan.acts:
        users = [u for u in v.users if u.op != "call_module"]
        with g.inserting_before(min(users, key=order.__getitem__)):
            qp = g.call_function(qd.choose_qparams_per_token_asymmetric.default, (v, torch.int8))
            s = g.call_function(operator.getitem, (qp, 0))
            z = g.call_function(operator.getitem, (qp, 1))
            q = g.call_function(qd.quantize_per_token.default, (v, s, z, QMIN, QMAX, torch.int8))
            dq = g.call_function(qd.dequantize_per_token.default,
                                 (q, s, z, QMIN, QMAX, torch.int8, torch.float32))  # fmt: skip
        for u in users:
            if u in {e[0] for e in plan.weights}:
                u.replace_input_with(v, dq)


# --------------------------------------------------------------------------- API


def quantize_exported(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Any,
    calibration_data: Iterable[Any] | None = None,
    *,
    observer: str = "minmax",
    percentile: float = 99.99,
    dynamic: bool = False,
    progress: bool = True,
) -> torch.export.ExportedProgram:
    """Quantizes `model` (an ``nn.Module``, exported here with `example_inputs`, or an
    ``ExportedProgram``) to int8 on its exported graph, as described in the module docstring,
    and returns the quantized ``ExportedProgram`` (ATen dialect) for :func:`ember.export`.

    `calibration_data` yields model inputs (a tensor or a tuple per batch), each run once
    through the float graph (with a progress bar) while observers record the range of every
    quantized activation; `observer` / `percentile` are as for :func:`ember.quant.quantize`.
    With ``dynamic=True`` it may be ``None``. The model is not modified. A graph that already
    holds Q/DQ operators (e.g. from PyTorch's ``convert_pt2e``) is refused: export it as is.
    """
    from ember.passes.capture import capture

    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
    else:
        if model.training:
            log.info("quantize_exported: the model is in training mode; quantizing it in eval mode")
            model = copy.deepcopy(model).eval()
        ep = capture(model, inputs)
    if any(n.op == "call_function" and n.target in _QDQ_OPS for n in ep.graph.nodes):
        raise QuantizationError(
            "the graph is already quantized (it has quantize/dequantize operators): pass it to "
            "ember.export as it is"
        )
    gm = copy.deepcopy(_decomposed(ep).module())
    folded = fold_batch_norms(gm)
    plan = _annotate(gm, dynamic)
    if not plan.weights and not plan.acts:
        raise QuantizationError("the model has no operator this quantizer handles")
    if dynamic:
        _insert_dynamic(gm, plan)
    else:
        if calibration_data is None:
            raise QuantizationError("static quantization needs calibration_data")
        qparams = _calibrate(gm, plan, _batches(calibration_data), observer, percentile, progress)
        _insert_static(gm, plan, qparams)
    _quantize_weights(gm, plan)
    _cleanup(gm)
    gm.graph.lint()
    gm.recompile()
    qep = torch.export.export(gm, inputs, strict=False)
    s = summarize(qep)
    log.info(
        "quantize_exported: %d BatchNorm folded, %d weights int8 per-channel, %d activation "
        "Q/DQ pairs%s, %d/%d residual adds quantized",
        folded,
        s.weights,
        s.quantize,
        " (dynamic, per token)" if dynamic else "",
        s.adds_quantized,
        s.adds,
    )
    return qep


@dataclass
class QuantSummary:
    """Counts of a quantized graph's Q/DQ operators and of its tensor-tensor adds."""

    quantize: int = 0  # quantize_per_tensor / quantize_per_token
    dequantize: int = 0  # dequantize_per_tensor / dequantize_per_token
    weights: int = 0  # dequantize_per_channel
    adds: int = 0  # add.Tensor of two float tensors
    adds_quantized: int = 0  # ... whose inputs are dequantized and whose output is quantized


_Q = (qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor, qd.quantize_per_token.default)
_DQ = (
    qd.dequantize_per_tensor.default,
    qd.dequantize_per_tensor.tensor,
    qd.dequantize_per_token.default,
)


def summarize(g: torch.export.ExportedProgram | fx.GraphModule | fx.Graph) -> QuantSummary:
    """Counts Q/DQ nodes and quantized residual adds (both inputs from a dequantize, output into
    a quantize, directly or through a fused relu / hardtanh) in `g`."""
    graph = g.graph if not isinstance(g, fx.Graph) else g
    s = QuantSummary()
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        s.quantize += n.target in _Q
        s.dequantize += n.target in _DQ
        s.weights += n.target == qd.dequantize_per_channel.default
        if n.target == aten.add.Tensor and all(_is_float_tensor(a) for a in n.args[:2]):
            s.adds += 1
            ins = all(_is_call(a, _DQ) for a in n.args[:2])
            outs = list(n.users)
            if len(outs) == 1 and _is_call(outs[0], _FUSED_ACT):
                outs = list(outs[0].users)
            s.adds_quantized += ins and bool(outs) and all(_is_call(u, _Q) for u in outs)
    return s
