"""Static int8 post-training quantization in ExecuTorch's Q/DQ representation.

:func:`quantize` calibrates a float model on sample inputs and returns a module whose every
``nn.Linear`` and ``nn.Conv2d`` carries

* int8 weights, **per-channel symmetric** (one scale per output channel, zero point 0), turned
  back into floats by ``quantized_decomposed::dequantize_per_channel`` (linear weights are stored
  transposed, ``[in, out]``, so the exported program needs no run-time transpose);
* an int8 **per-tensor affine** input activation (scale and zero point from calibration with a
  min/max, percentile or MSE observer), expressed as ``quantize_per_tensor`` →
  ``dequantize_per_tensor``;
* its float bias (the integer-only lowering turns it into int32 with scale ``s_x * s_w``).

The graph therefore uses only ExecuTorch's stock ``quantized_decomposed`` operators plus fp32
``addmm`` / ``convolution`` / ``relu`` / pooling, so the `.pte` runs on stock portable kernels
and on Ember's, and its predictions are those of the quantized arithmetic. Fusing the Q/DQ
patterns into integer-only ``ember::`` operators is a separate lowering
(:mod:`ember.quant.fused`).

    qmodel = ember.quant.quantize(model, calibration_batches, observer="percentile")
    prog = ember.export(qmodel, (x,))
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

# Registers torch.ops.quantized_decomposed.* (ExecuTorch's Q/DQ operators) with PyTorch.
import torch.ao.quantization.fx._decomposed  # noqa: F401  isort: skip

from ember.errors import EmberError
from ember.quant._ops import register_out_variants

register_out_variants()

log = logging.getLogger(__name__)

QMIN, QMAX = -128, 127

__all__ = [
    "Add",
    "QuantizationError",
    "QuantizedAdd",
    "QuantizedConv2d",
    "QuantizedLinear",
    "adds_as_modules",
    "quantize",
    "qparams_affine",
    "quantize_exported",
    "weight_qparams",
]


class QuantizationError(EmberError):
    """The model cannot be quantized as asked (no calibration data, unsupported layer...)."""


def qparams_affine(lo: float, hi: float) -> tuple[float, int]:
    """Scale and zero point mapping [lo, hi] (widened to contain 0) onto int8 [-128, 127]."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / float(QMAX - QMIN)
    if scale <= 0 or not torch.isfinite(torch.tensor(scale)):
        return 1.0, 0
    zp = int(round(QMIN - lo / scale))
    return float(scale), max(QMIN, min(QMAX, zp))


def weight_qparams(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel (dim 0) symmetric int8 weights of ``w`` ([out, in] or [out, in, kh,
    kw]): (int8 tensor of the same shape, float32 scales [out])."""
    amax = w.detach().abs().flatten(1).amax(dim=1).to(torch.float32)
    scales = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    bshape = (-1,) + (1,) * (w.dim() - 1)
    q = torch.clamp(torch.round(w.detach() / scales.view(bshape)), -127, 127).to(torch.int8)
    return q, scales


def _mse_range(x: torch.Tensor, steps: int = 40) -> tuple[float, float]:
    """The clipping range [a*lo, a*hi] of `x` whose int8 affine quantization has the least mean
    squared error, a from 1 down to 2^(-steps/4) in quarter-octave steps."""
    lo, hi = min(x.min().item(), 0.0), max(x.max().item(), 0.0)
    if hi - lo <= 0:
        return lo, hi
    if x.numel() > 1 << 16:
        x = x[torch.randperm(x.numel())[: 1 << 16]]
    best, best_err = (lo, hi), float("inf")
    for i in range(steps + 1):
        a = 2.0 ** (-i / 4)
        scale, zp = qparams_affine(a * lo, a * hi)
        q = torch.clamp(torch.round(x / scale) + zp, QMIN, QMAX)
        err = ((q - zp) * scale - x).pow(2).mean().item()
        if err < best_err:
            best, best_err = (a * lo, a * hi), err
    return best


class _Observer:
    """Running range of a tensor: min/max; a percentile of the values per batch (averaged); or
    the per-batch clipping range with the least quantization MSE (averaged)."""

    def __init__(self, kind: str, percentile: float) -> None:
        if kind not in ("minmax", "percentile", "mse"):
            raise QuantizationError(
                f"unknown observer {kind!r} (use 'minmax', 'percentile' or 'mse')"
            )
        self.kind, self.percentile = kind, percentile
        self.lo, self.hi, self.n = float("inf"), float("-inf"), 0
        self._lo_sum, self._hi_sum = 0.0, 0.0

    def __call__(self, x: torch.Tensor) -> None:
        x = x.detach().float().flatten()
        if x.numel() == 0:
            return
        self.n += 1
        if self.kind == "minmax":
            self.lo, self.hi = min(self.lo, x.min().item()), max(self.hi, x.max().item())
            return
        if self.kind == "mse":
            lo, hi = _mse_range(x)
        else:
            q = self.percentile / 100.0
            if x.numel() > 1 << 24:  # torch.quantile's limit
                x = x[torch.randperm(x.numel())[: 1 << 24]]
            lo, hi = torch.quantile(x, 1.0 - q).item(), torch.quantile(x, q).item()
        self._lo_sum += lo
        self._hi_sum += hi
        self.lo, self.hi = self._lo_sum / self.n, self._hi_sum / self.n


class QuantizedLinear(nn.Module):
    """``nn.Linear`` with int8 per-channel weights and an int8 per-tensor input, as Q/DQ ops."""

    def __init__(self, lin: nn.Linear, in_scale: float, in_zp: int) -> None:
        super().__init__()
        q, scales = weight_qparams(lin.weight)
        # [in, out] int8 and per-output-channel (axis 1) scales: addmm(bias, x, W^T) directly.
        self.register_buffer("weight_int8_t", q.t().contiguous())
        self.register_buffer("weight_scales", scales)
        self.register_buffer("weight_zero_points", torch.zeros_like(scales, dtype=torch.int64))
        bias = lin.bias.detach().clone() if lin.bias is not None else torch.zeros(q.shape[0])
        self.register_buffer("bias", bias.to(torch.float32))
        self.in_scale, self.in_zp = float(in_scale), int(in_zp)
        self.in_features, self.out_features = lin.in_features, lin.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed
        xq = qd.quantize_per_tensor(x, self.in_scale, self.in_zp, QMIN, QMAX, torch.int8)
        xd = qd.dequantize_per_tensor(xq, self.in_scale, self.in_zp, QMIN, QMAX, torch.int8)
        w = qd.dequantize_per_channel(
            self.weight_int8_t, self.weight_scales, self.weight_zero_points, 1, -127, 127,
            torch.int8,
        )  # fmt: skip
        lead = xd.shape[:-1]
        y = torch.addmm(self.bias, xd.reshape(-1, self.in_features), w)
        return y.reshape(*lead, self.out_features) if len(lead) != 1 else y

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, in_scale={self.in_scale:.6g}, "
                f"in_zp={self.in_zp}, weights=int8 per-channel")  # fmt: skip


class QuantizedConv2d(nn.Module):
    """``nn.Conv2d`` with int8 per-channel weights and an int8 per-tensor input, as Q/DQ ops."""

    def __init__(self, conv: nn.Conv2d, in_scale: float, in_zp: int) -> None:
        super().__init__()
        if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            raise QuantizationError(
                f"Conv2d with padding={conv.padding!r}, padding_mode={conv.padding_mode!r}: "
                "only explicit zero padding is supported"
            )
        q, scales = weight_qparams(conv.weight)
        self.register_buffer("weight_int8", q)  # [out, in / groups, kh, kw]
        self.register_buffer("weight_scales", scales)
        self.register_buffer("weight_zero_points", torch.zeros_like(scales, dtype=torch.int64))
        bias = conv.bias.detach().clone() if conv.bias is not None else torch.zeros(q.shape[0])
        self.register_buffer("bias", bias.to(torch.float32))
        self.stride = tuple(int(v) for v in conv.stride)
        self.padding = tuple(int(v) for v in conv.padding)
        self.dilation = tuple(int(v) for v in conv.dilation)
        self.groups = int(conv.groups)
        self.in_scale, self.in_zp = float(in_scale), int(in_zp)
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed
        xq = qd.quantize_per_tensor(x, self.in_scale, self.in_zp, QMIN, QMAX, torch.int8)
        xd = qd.dequantize_per_tensor(xq, self.in_scale, self.in_zp, QMIN, QMAX, torch.int8)
        w = qd.dequantize_per_channel(
            self.weight_int8, self.weight_scales, self.weight_zero_points, 0, -127, 127,
            torch.int8,
        )  # fmt: skip
        return nn.functional.conv2d(
            xd, w, self.bias, self.stride, self.padding, self.dilation, self.groups
        )

    def extra_repr(self) -> str:
        k = tuple(self.weight_int8.shape[2:])
        return (f"{self.in_channels}, {self.out_channels}, kernel={k}, "
                f"stride={self.stride}, padding={self.padding}, in_scale={self.in_scale:.6g}, "
                f"in_zp={self.in_zp}, weights=int8 per-channel")  # fmt: skip


class Add(nn.Module):
    """``a + b`` as a module (like ``torch.ao.nn.quantized.FloatFunctional``): write residual
    sums with it so that :func:`quantize` can calibrate and quantize them."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


class QuantizedAdd(nn.Module):
    """``a + b`` of two int8 per-tensor tensors (each with its own scale and zero point) whose
    sum is quantized to int8 (`out_scale`, `out_zp`), as Q/DQ operators."""

    def __init__(
        self, a_q: tuple[float, int], b_q: tuple[float, int], out_q: tuple[float, int]
    ) -> None:
        super().__init__()
        (self.a_scale, self.a_zp), (self.b_scale, self.b_zp) = a_q, b_q
        self.out_scale, self.out_zp = out_q

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed

        def qdq(x: torch.Tensor, s: float, zp: int) -> torch.Tensor:
            xq = qd.quantize_per_tensor(x, s, zp, QMIN, QMAX, torch.int8)
            return qd.dequantize_per_tensor(xq, s, zp, QMIN, QMAX, torch.int8)

        y = qdq(a, self.a_scale, self.a_zp) + qdq(b, self.b_scale, self.b_zp)
        return qdq(y, self.out_scale, self.out_zp)

    def extra_repr(self) -> str:
        return (f"a=({self.a_scale:.6g}, {self.a_zp}), b=({self.b_scale:.6g}, {self.b_zp}), "
                f"out=({self.out_scale:.6g}, {self.out_zp})")  # fmt: skip


#: Calls that add two tensors; :func:`quantize` turns each into an :class:`Add` module.
_ADD_FUNCTIONS = (operator.add, torch.add)


class _AddTracer(torch.fx.Tracer):
    """Traces through user modules but keeps :class:`Add` (and torch.nn layers) as leaves."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, Add) or super().is_leaf_module(m, qualname)


def _is_binary_add(n: torch.fx.Node) -> bool:
    """True for ``a + b`` / ``torch.add(a, b)`` / ``a.add(b)`` between two graph values (no
    ``alpha``, not in place); whether both are float tensors is checked by running the graph."""
    plain = (n.op == "call_function" and n.target in _ADD_FUNCTIONS) or (
        n.op == "call_method" and n.target == "add"
    )
    return (
        plain
        and len(n.args) == 2
        and not n.kwargs
        and all(isinstance(a, torch.fx.Node) for a in n.args)
    )


def adds_as_modules(model: nn.Module, sample: tuple[Any, ...]) -> nn.Module:
    """Returns `model` with every sum of two float tensors written as a plain ``+``,
    ``torch.add`` or ``Tensor.add`` replaced by a call of a fresh :class:`Add` submodule (so
    :func:`quantize` can calibrate and quantize it), as a ``torch.fx.GraphModule``.

    `sample` (one batch of inputs) is run once to tell tensor sums from integer arithmetic
    (``x.size(0) + 1``). A model without such a sum is returned unchanged (same object); so is
    a model torch.fx cannot trace symbolically (data-dependent control flow), with a log line:
    its residual sums must then be written with :class:`Add`. Broadcasting sums are replaced
    too (the Q/DQ graph handles them; the integer lowering rejects them by name).
    """
    try:
        graph = _AddTracer().trace(model)
    except Exception as e:  # noqa: BLE001  torch.fx raises many types; fall back to modules
        log.info("quantize: the model is not torch.fx-traceable (%s); only ember.quant.Add "
                 "modules are quantized as adds", e)  # fmt: skip
        return model
    candidates = {n for n in graph.nodes if _is_binary_add(n)}
    if not candidates:
        return model
    gm = torch.fx.GraphModule(model, graph)
    tensor_adds: list[torch.fx.Node] = []

    class _Probe(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            if n in candidates:
                a, b = (self.env[v] for v in n.args)  # type: ignore[index]
                if all(isinstance(v, torch.Tensor) and v.is_floating_point() for v in (a, b)):
                    tensor_adds.append(n)
            return super().run_node(n)

    with torch.no_grad():
        _Probe(gm).run(*sample)
    for n in tensor_adds:
        name = n.name
        while hasattr(gm, name):
            name += "_"
        gm.add_submodule(name, Add())
        with graph.inserting_before(n):
            call = graph.call_module(name, tuple(n.args))
        n.replace_all_uses_with(call)
        graph.erase_node(n)
        log.info("quantize: %s becomes ember.quant.Add module %r", n.format_node(), name)
    graph.lint()
    gm.recompile()
    return gm.train(model.training)


def _batches(calibration_data: Iterable[Any]) -> list[tuple[Any, ...]]:
    out = []
    for b in calibration_data:
        out.append(b if isinstance(b, tuple) else tuple(b) if isinstance(b, list) else (b,))
    if not out:
        raise QuantizationError("calibration_data is empty: give at least one batch of inputs")
    return out


def quantize(
    model: nn.Module,
    calibration_data: Iterable[Any],
    *,
    observer: str = "minmax",
    percentile: float = 99.99,
    progress: bool = True,
    method: str = "modules",
    example_inputs: Any = None,
    dynamic: bool = False,
) -> Any:
    """Returns a copy of `model` with every ``nn.Linear`` replaced by :class:`QuantizedLinear`
    and every ``nn.Conv2d`` by :class:`QuantizedConv2d`, and every :class:`Add` by
    :class:`QuantizedAdd` (both inputs and the sum calibrated). A sum of two tensors written as
    ``a + b``, ``torch.add(a, b)`` or ``a.add(b)`` counts as an :class:`Add`: when the model
    has one, the copy is a ``torch.fx.GraphModule`` of the traced model
    (:func:`adds_as_modules`); otherwise it keeps the model's own class.

    `calibration_data` yields model inputs (a tensor or a tuple of tensors per batch); each batch
    is run once in eval mode (with a progress bar) while observers record the range of every
    quantized layer's input. `observer` is ``"minmax"``, ``"percentile"`` (the `percentile`-th
    percentile of each batch, averaged over batches, which ignores outliers) or ``"mse"`` (per
    batch, the clipping range with the least int8 quantization error, averaged). The model is not
    modified.

    ``method="export"`` quantizes the ``torch.export`` graph instead
    (:func:`ember.quant.pt2e.quantize_exported`, with `example_inputs` defaulting to the first
    calibration batch and `dynamic` passed on) and returns an ``ExportedProgram``: every
    convolution, linear, residual add, cat, pooling and activation, no module rewrite needed.
    """
    import copy

    if method not in ("modules", "export"):
        raise QuantizationError(f"unknown method {method!r} (use 'modules' or 'export')")
    if method == "export":
        data = list(calibration_data)
        if example_inputs is None:
            example_inputs = _batches(data)[0]
        return quantize_exported(
            model,
            example_inputs,
            data or None,
            observer=observer,
            percentile=percentile,
            dynamic=dynamic,
            progress=progress,
        )
    batches = _batches(calibration_data)
    qmodel = adds_as_modules(copy.deepcopy(model).eval(), batches[0])
    linears = [(n, m) for n, m in qmodel.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    adds = [(n, m) for n, m in qmodel.named_modules() if isinstance(m, Add)]
    if not linears:
        raise QuantizationError("the model has no nn.Linear or nn.Conv2d layer to quantize")
    observers = {n: _Observer(observer, percentile) for n, _ in linears}
    for n, _ in adds:
        for part in ("a", "b", "out"):
            observers[f"{n}#{part}"] = _Observer(observer, percentile)
    hooks = [m.register_forward_pre_hook(lambda mod, args, n=n: observers[n](args[0]))
             for n, m in linears]  # fmt: skip
    for n, m in adds:

        def pre(mod, args, n=n):
            observers[f"{n}#a"](args[0])
            observers[f"{n}#b"](args[1])

        hooks.append(m.register_forward_pre_hook(pre))
        hooks.append(m.register_forward_hook(lambda mod, a, y, n=n: observers[f"{n}#out"](y)))
    it: Iterable[tuple[Any, ...]] = batches
    if progress:
        try:
            from tqdm import tqdm

            it = tqdm(batches, desc="calibrating", leave=False, disable=None)
        except ImportError:  # pragma: no cover
            pass
    try:
        with torch.no_grad():
            for b in it:
                qmodel(*b)
    finally:
        for h in hooks:
            h.remove()
    for name, lin in linears:
        obs = observers[name]
        if obs.n == 0:
            raise QuantizationError(f"layer {name!r} never ran during calibration")
        scale, zp = qparams_affine(obs.lo, obs.hi)
        parent = qmodel.get_submodule(name.rsplit(".", 1)[0]) if "." in name else qmodel
        qlayer: nn.Module = (
            QuantizedLinear(lin, scale, zp)
            if isinstance(lin, nn.Linear)
            else QuantizedConv2d(lin, scale, zp)
        )
        setattr(parent, name.rsplit(".", 1)[-1], qlayer)
        log.info("quantized %s: input range [%.4g, %.4g] -> scale %.4g zp %d", name, obs.lo,
                 obs.hi, scale, zp)  # fmt: skip
    for name, _ in adds:
        obs3 = [observers[f"{name}#{p}"] for p in ("a", "b", "out")]
        if any(o.n == 0 for o in obs3):
            raise QuantizationError(f"add {name!r} never ran during calibration")
        qa, qb, qo = (qparams_affine(o.lo, o.hi) for o in obs3)
        parent = qmodel.get_submodule(name.rsplit(".", 1)[0]) if "." in name else qmodel
        setattr(parent, name.rsplit(".", 1)[-1], QuantizedAdd(qa, qb, qo))
        log.info("quantized add %s: a %s, b %s -> out %s", name, qa, qb, qo)
    return qmodel


# The torch.export-graph quantizer (imports the helpers above).
from ember.quant.pt2e import quantize_exported  # noqa: E402
