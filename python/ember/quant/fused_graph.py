"""Integer-only lowering of any torch.fx-traceable model (:func:`lower_graph_to_integer`):
residual adds, branches and flattening between the integer layers of
:mod:`ember.quant.fused_modules`.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ember.quant import (
    QMAX,
    QMIN,
    QuantizationError,
    QuantizedAdd,
    QuantizedConv2d,
    QuantizedLinear,
    qparams_affine,
)
from ember.quant.fused_modules import (
    _COMPUTE,
    _INF,
    FusedQuantizedAdd,
    FusedQuantizedConv2d,
    FusedQuantizedConv2dMaxPool2d,
    FusedQuantizedLinear,
    QuantizedAvgPool2d,
    QuantizedClamp,
    QuantizedMaxPool2d,
    QuantizedReshape,
    _module_act_bounds,
)
from ember.quant.fused_ref import activation_clamp, register_ops

log = logging.getLogger(__name__)

# -- graph lowering (any traceable model: residual adds, branches) ------------------------------
_LEAVES = (QuantizedLinear, QuantizedConv2d, QuantizedAdd, nn.ReLU, nn.Hardtanh, nn.MaxPool2d,
           nn.AvgPool2d, nn.Flatten, nn.Identity, nn.Dropout)  # fmt: skip


def _call_params(n: torch.fx.Node, names: tuple[str, ...], defaults: tuple[Any, ...]) -> list[Any]:
    """Values of the parameters after the first (tensor) argument of a call node, by position
    or keyword, else their defaults."""
    rest = list(n.args[1:])
    return [rest[i] if i < len(rest) else n.kwargs.get(k, d)
            for i, (k, d) in enumerate(zip(names, defaults, strict=True))]  # fmt: skip


def _act_bounds(n: torch.fx.Node, m: nn.Module | None) -> tuple[float, float] | None:
    """The float clamp [lo, hi] node `n` computes when it is an activation int8 can run as a
    clamp (ReLU, ReLU6, Hardtanh or torch.clamp with constant bounds, as a module, a function or
    a method; in place only when it is its input's one user), else None."""
    if m is not None:
        return _module_act_bounds(m)
    fn = n.target if n.op == "call_function" else None
    meth = n.target if n.op == "call_method" else None
    if fn in (torch.relu, F.relu) or meth == "relu":
        lo, hi, inplace = 0.0, _INF, _call_params(n, ("inplace",), (False,))[0]
    elif fn is F.relu6:
        lo, hi, inplace = 0.0, 6.0, _call_params(n, ("inplace",), (False,))[0]
    elif fn is F.hardtanh:
        lo, hi, inplace = _call_params(n, ("min_val", "max_val", "inplace"), (-1.0, 1.0, False))
    elif fn is torch.clamp or meth == "clamp":
        lo, hi = _call_params(n, ("min", "max"), (None, None))
        lo, hi, inplace = (-_INF if lo is None else lo), (_INF if hi is None else hi), False
    else:
        return None
    src = n.args[0] if n.args else None
    if not isinstance(src, torch.fx.Node) or not all(isinstance(v, int | float) for v in (lo, hi)):
        return None
    if inplace and len(src.users) != 1:
        return None
    return float(lo), float(hi)


def _flatten_dims(n: torch.fx.Node) -> tuple[int, int] | None:
    """(start, end) of a torch.flatten / Tensor.flatten call node, None for any other node."""
    if not (
        (n.op == "call_function" and n.target is torch.flatten)
        or (n.op == "call_method" and n.target == "flatten")
    ):
        return None
    rest = list(n.args[1:])
    start = int(rest[0]) if rest else int(n.kwargs.get("start_dim", 0))
    end = int(rest[1]) if len(rest) > 1 else int(n.kwargs.get("end_dim", -1))
    return start, end


def _is_reshape(n: torch.fx.Node) -> bool:
    return (n.op == "call_method" and n.target in ("reshape", "view")) or (
        n.op == "call_function" and n.target is torch.reshape
    )


def _reshape_layer(
    n: torch.fx.Node, shapes: dict[torch.fx.Node, tuple[int, ...] | None]
) -> QuantizedReshape:
    """The int8 reshape for a reshape / view node: its constant shape, or (when the shape reads
    sizes at run time, ``x.view(x.size(0), -1)``) the calibrated output shape with the batch
    dimension kept from the input."""
    spec = n.args[1:] if n.op == "call_method" else n.args[1:2]
    if len(spec) == 1 and isinstance(spec[0], list | tuple):
        spec = tuple(spec[0])
    if spec and all(isinstance(v, int) for v in spec):
        return QuantizedReshape(list(spec), keep_batch=False)
    src, out = shapes.get(n.args[0]), shapes.get(n)  # type: ignore[arg-type]
    if not src or not out or src[0] != out[0]:
        raise QuantizationError(
            f"{n.name}: reshape to a computed shape is supported only when it keeps the batch "
            f"dimension (got {list(src or ())} -> {list(out or ())})"
        )
    return QuantizedReshape(list(out[1:]), keep_batch=True)


class _Tracer(torch.fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, _LEAVES) or super().is_leaf_module(m, qualname)


class IntegerGraph(nn.Module):
    """An integer-only network as a list of steps over named int8 values: quantize the float
    input once, run each step (``layers[name](*inputs) -> output``), dequantize the output."""

    def __init__(
        self, steps: list[tuple[str, list[str], str]], layers: dict[str, nn.Module],
        in_q: tuple[float, int], out_value: str, out_q: tuple[float, int], int8_input: bool,
    ) -> None:  # fmt: skip
        super().__init__()
        self.steps = steps
        self.layers = nn.ModuleDict(layers)
        self.in_scale, self.in_zp = float(in_q[0]), int(in_q[1])
        self.out_value = out_value
        self.out_scale, self.out_zp = float(out_q[0]), int(out_q[1])
        self.int8_input = int8_input

    def quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        """The int8 input an ``int8_input`` model expects for float input `x`."""
        qd = torch.ops.quantized_decomposed
        return qd.quantize_per_tensor(x, self.in_scale, self.in_zp, QMIN, QMAX, torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed
        env = {"input": x if self.int8_input else self.quantize_input(x)}
        for name, ins, out in self.steps:
            env[out] = self.layers[name](*[env[i] for i in ins])
        y = env[self.out_value]
        return qd.dequantize_per_tensor(y, self.out_scale, self.out_zp, QMIN, QMAX, torch.int8)


def lower_graph_to_integer(
    qmodel: nn.Module,
    calibration_data: list[torch.Tensor],
    percentile: float | None = None,
    int8_input: bool = False,
    fuse_pool: bool = True,
) -> IntegerGraph:
    """Fuses a quantized model of any (torch.fx-traceable) structure into integer-only steps.

    The model (from :func:`ember.quant.quantize`) may branch and join through residual sums
    (:class:`ember.quant.Add`, which :func:`~ember.quant.quantize` also makes of a plain
    ``a + b``; both operands must have the same shape). Activations (ReLU, ReLU6, Hardtanh,
    ``torch.clamp`` with constant bounds) and flatten / reshape / view may be modules, functions
    or methods. Every int8 value takes the scale and zero point of the range its producer's
    output had on `calibration_data` (min/max or the given `percentile`); consumers requantize
    from it (their own bias and multipliers are recomputed for that input scale), so a value
    feeding several layers needs no extra operator. An activation that is the only user of a
    Linear/Conv2d/Add is folded into that layer's output clamp (the range is taken after it);
    any other becomes an ``ember::quantized_clamp`` step on its input's quantization. Pooling,
    flatten and reshape keep their input's quantization too. With `fuse_pool` a conv whose only
    user is an unpadded max pool becomes ``ember::quantized_conv2d_max_pool2d``."""
    register_ops()
    graph = _Tracer().trace(qmodel)
    mods = dict(qmodel.named_modules())
    nodes = list(graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise QuantizationError(f"graph lowering takes a model with one input, not {len(inputs)}")

    def mod_of(n: torch.fx.Node) -> nn.Module | None:
        return mods.get(str(n.target)) if n.op == "call_module" else None

    producers = _COMPUTE + (QuantizedAdd,)
    acts = {n: b for n in nodes if (b := _act_bounds(n, mod_of(n))) is not None}
    # Activations folded into the single producer they follow: act node -> producer.
    folded: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in acts:
        p = n.args[0]
        if isinstance(p, torch.fx.Node) and isinstance(mod_of(p), producers) and len(p.users) == 1:
            folded[n] = p
    act_of = {p: a for a, p in folded.items()}

    # Calibration: the range of every value a quantized producer (or the input) makes, and the
    # shape (or non-tensor-ness: x.size(0)...) of every value.
    watch = set(inputs) | {n for n in nodes if isinstance(mod_of(n), producers)} | set(folded)
    seen: dict[torch.fx.Node, list[torch.Tensor]] = {n: [] for n in watch}
    shapes: dict[torch.fx.Node, tuple[int, ...] | None] = {}

    class _Rec(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            is_t = isinstance(out, torch.Tensor)
            shapes.setdefault(n, tuple(out.shape) if is_t else None)
            if n in seen and is_t:
                seen[n].append(out.detach().flatten().float())
            return out

    gm = torch.fx.GraphModule(qmodel, graph)
    with torch.no_grad():
        for x in calibration_data:
            _Rec(gm).run(x)

    def qp(n: torch.fx.Node) -> tuple[float, int]:
        v = torch.cat(seen[n])
        if percentile is None:
            return qparams_affine(v.min().item(), v.max().item())
        lo = torch.quantile(v, 1 - percentile / 100).item()
        return qparams_affine(lo, torch.quantile(v, percentile / 100).item())

    qparams: dict[torch.fx.Node, tuple[float, int]] = {}
    names: dict[torch.fx.Node, str] = {}
    steps: list[tuple[str, list[str], str]] = []
    layers: dict[str, nn.Module] = {}
    out_node = None
    for n in nodes:
        if n.op == "placeholder":
            qparams[n], names[n] = qp(n), "input"
            continue
        if n.op == "output":
            out_node = n.args[0]
            continue
        if shapes.get(n) is None:
            continue  # integer arithmetic on sizes (x.size(0)): only reshapes read it
        m = mod_of(n)
        args = [a for a in n.args if isinstance(a, torch.fx.Node) and shapes.get(a) is not None]
        if n in folded:  # the producer already clamps
            qparams[n], names[n] = qparams[folded[n]], names[folded[n]]
            continue
        if isinstance(m, nn.Identity | nn.Dropout) or (
            n.op == "call_method" and n.target == "contiguous"
        ):
            qparams[n], names[n] = qparams[args[0]], names[args[0]]
            continue
        key = n.name
        if isinstance(m, producers):
            act = act_of.get(n)
            out_q = qp(act if act is not None else n)
            clamp = activation_clamp(*acts[act], *out_q) if act is not None else None
            if isinstance(m, QuantizedAdd):
                if shapes[args[0]] != shapes[args[1]]:
                    raise QuantizationError(
                        f"{n.name}: the integer add needs operands of one shape, got "
                        f"{list(shapes[args[0]] or ())} + {list(shapes[args[1]] or ())} "
                        "(broadcasting is not supported)"
                    )
                layer: nn.Module = FusedQuantizedAdd(*qparams[args[0]], *qparams[args[1]], *out_q,
                                                     act=clamp)  # fmt: skip
            else:
                cls = (
                    FusedQuantizedLinear if isinstance(m, QuantizedLinear) else FusedQuantizedConv2d
                )
                layer = cls(m, *out_q, False, in_q=qparams[args[0]], act=clamp)
            qparams[n] = out_q
            args = args[:2] if isinstance(m, QuantizedAdd) else args[:1]
        elif n in acts:
            layer = QuantizedClamp(*activation_clamp(*acts[n], *qparams[args[0]]))
            qparams[n], args = qparams[args[0]], args[:1]
        elif isinstance(m, nn.MaxPool2d):
            layer, qparams[n] = QuantizedMaxPool2d(m), qparams[args[0]]
        elif isinstance(m, nn.AvgPool2d):
            layer, qparams[n] = QuantizedAvgPool2d(m, qparams[args[0]][1]), qparams[args[0]]
        elif isinstance(m, nn.Flatten | nn.Unflatten):
            layer, qparams[n] = m, qparams[args[0]]
        elif _flatten_dims(n) is not None:  # torch.flatten(x, start, end) / x.flatten(...)
            layer, qparams[n] = nn.Flatten(*_flatten_dims(n)), qparams[args[0]]
        elif _is_reshape(n):
            layer, qparams[n], args = _reshape_layer(n, shapes), qparams[args[0]], args[:1]
        else:
            target = getattr(n.target, "__name__", n.target)
            what = f"module {type(m).__name__}" if m is not None else f"{n.op} {target}"
            raise QuantizationError(
                f"{n.name}: {what} has no integer lowering (supported: quantized Linear, Conv2d, "
                "Add or a + b, ReLU, ReLU6, Hardtanh, clamp, MaxPool2d, AvgPool2d, flatten, "
                "reshape, view)"
            )
        layers[key] = layer
        steps.append((key, [names[a] for a in args], key))
        names[n] = key
    if not isinstance(out_node, torch.fx.Node) or out_node not in names:
        raise QuantizationError("graph lowering needs a model returning one tensor")
    if not any(isinstance(v, producers) for v in map(mod_of, nodes)):
        raise QuantizationError("nothing to lower: no quantized layer")
    if fuse_pool:
        uses: dict[str, int] = {names[out_node]: 1}
        for _, ins, _ in steps:
            for i in ins:
                uses[i] = uses.get(i, 0) + 1
        fused_steps: list[tuple[str, list[str], str]] = []
        for name, ins, out in steps:
            prev = fused_steps[-1] if fused_steps else None
            pool = layers[name]
            if (
                prev is not None
                and isinstance(pool, QuantizedMaxPool2d)
                and pool.padding == [0, 0]
                and isinstance(layers[prev[0]], FusedQuantizedConv2d)
                and ins == [prev[2]]
                and uses.get(prev[2], 0) == 1
            ):
                layers[name] = FusedQuantizedConv2dMaxPool2d(layers.pop(prev[0]), pool)
                fused_steps[-1] = (name, prev[1], out)
            else:
                fused_steps.append((name, ins, out))
        steps = fused_steps
    log.info("lowered %d step(s) to integer-only ember:: operators", len(steps))
    return IntegerGraph(
        steps, layers, qparams[inputs[0]], names[out_node], qparams[out_node], int8_input
    ).eval()
