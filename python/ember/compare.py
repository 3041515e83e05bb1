"""``ember.compare``: eager PyTorch vs the Ember runtime, output by output and op by op.

When outputs differ beyond tolerance, the program is run again through the runtime's debug API
(``run_debug``) watching every instruction's outputs, and the first instruction whose values
diverge from the eager value of the same FX node (computed by interpreting the decomposed
ExportedProgram) is reported with the node name and the user's source line.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export.graph_signature import InputKind

from ember.errors import EmberRuntimeError, user_source_line

log = logging.getLogger(__name__)


@dataclass
class OutputError:
    index: int
    max_abs: float
    max_rel: float


@dataclass
class Divergence:
    """The first instruction whose result differs from eager."""

    instruction: int
    node: str | None
    source: str | None
    kernel: str
    max_abs: float
    max_rel: float


@dataclass
class CompareReport:
    outputs: list[OutputError] = field(default_factory=list)
    divergence: Divergence | None = None
    ok: bool = True

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((o.max_rel for o in self.outputs), default=0.0)

    def __str__(self) -> str:
        lines = [
            f"output {o.index}: max abs {o.max_abs:.3g}, max rel {o.max_rel:.3g}"
            for o in self.outputs
        ]
        if self.divergence is not None:
            d = self.divergence
            lines.append(
                f"first divergence: instruction {d.instruction} ({d.kernel}) node '{d.node}' "
                f"max abs {d.max_abs:.3g} rel {d.max_rel:.3g}"
                + (f"\n  at {d.source}" if d.source else "")
            )
        return "\n".join(lines)


def _errors(a: Any, b: Any) -> tuple[float, float]:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        same = a == b
        return (0.0, 0.0) if same else (float("inf"), float("inf"))
    if a.shape != b.shape:
        return float("inf"), float("inf")
    if a.numel() == 0:
        return 0.0, 0.0
    a64, b64 = a.detach().double(), b.detach().double()
    diff = (a64 - b64).abs()
    both_inf = torch.isinf(a64) & torch.isinf(b64) & (a64 == b64)
    diff = torch.where(both_inf | (torch.isnan(a64) & torch.isnan(b64)), 0.0, diff)
    max_abs = float(diff.max())
    denom = float(b64.abs().max())
    return max_abs, (max_abs / denom if denom > 0 else max_abs)


def _close(max_abs: float, max_rel: float, rtol: float, atol: float) -> bool:
    return max_abs <= atol or max_rel <= rtol


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n.name] = out
        return out


def eager_intermediates(ep: torch.export.ExportedProgram, flat_inputs: list[Any]) -> dict:
    """Run the decomposed graph in eager PyTorch; node name -> value."""
    args = []
    user = iter(flat_inputs)
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            args.append(next(user))
        elif spec.target in ep.state_dict:
            args.append(ep.state_dict[spec.target].clone())
        elif spec.target is not None and spec.target in ep.constants:
            args.append(ep.constants[spec.target])
        else:
            args.append(None)
    rec = _Recorder(ep.graph_module)
    with torch.no_grad():
        rec.run(*args)
    return rec.values


def compare(
    model: torch.nn.Module,
    program: Any,
    inputs: Any,
    *,
    method: str = "forward",
    rtol: float = 1e-5,
    atol: float = 1e-6,
    runner: Any = None,
) -> CompareReport:
    """Compare ``model(*inputs)`` with ``program`` run on the Ember runtime.

    ``runner`` may replace the Ember runtime with any object offering ``run(method, inputs)``
    and ``run_debug(method, inputs, watch)`` (same contract as ``ember.runtime.RuntimeProgram``).
    Returns a :class:`CompareReport`; ``report.divergence`` names the first diverging FX node
    when outputs differ and the program carries export-time debug info.
    """
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    with torch.no_grad():
        eager = copy.deepcopy(model)(*inputs)
    eager_flat, _ = pytree.tree_flatten(eager)
    rt = runner if runner is not None else program.runtime()
    flat_in = program.flatten_inputs(inputs, method)
    try:
        got = list(rt.run(method, flat_in))
    except Exception as e:
        raise EmberRuntimeError(f"running '{method}' failed: {e}") from e
    report = CompareReport()
    for i, (g, e) in enumerate(zip(got, eager_flat, strict=False)):
        a, r = _errors(g, e)
        report.outputs.append(OutputError(i, a, r))
        report.ok &= _close(a, r, rtol, atol)
    if len(got) != len(eager_flat):
        report.ok = False
    if report.ok:
        return report
    debug = program.debug_info(method)
    ep = program._exported.get(method)
    if (not debug or ep is None) and runner is None and method == "forward":
        # A loaded program carries no debug info: re-export the model (deterministic for the
        # same model and inputs) and locate the divergence on that program.
        from ember.backends.cpu.partition import BACKEND_ID
        from ember.export import export

        log.info("program has no export-time debug info; re-exporting to locate the divergence")
        # The same backend as the loaded program (its delegates name their backend id).
        backend = "cpu" if BACKEND_ID.encode() in program.buffer else None
        try:
            program = export(model, inputs, backend=backend)
        except Exception as e:  # the report above still stands
            log.warning("re-export failed (%s); cannot locate the divergence", e)
            return report
        rt = program.runtime()
        debug, ep = program.debug_info(method), program._exported.get(method)
    if not debug or ep is None:
        log.warning("program has no export-time debug info; cannot locate the divergence")
        return report
    watch: dict[int, list[int]] = {}
    for d in debug:
        if d.node is not None and d.out_values:
            watch[d.index] = list(d.out_values)
    _, captured = rt.run_debug(method, flat_in, watch)
    ref = eager_intermediates(ep, flat_in)
    nodes = {n.name: n for n in ep.graph_module.graph.nodes}
    for d in sorted(debug, key=lambda d: d.index):
        if d.node not in ref:
            continue
        expect = ref[d.node]
        expects = list(expect) if isinstance(expect, (list, tuple)) else [expect]
        for k, vi in enumerate(d.out_values):
            if (d.index, vi) not in captured or k >= len(expects):
                continue
            a, r = _errors(captured[(d.index, vi)], expects[k])
            if not _close(a, r, rtol, atol):
                node = nodes.get(d.node)
                report.divergence = Divergence(
                    d.index,
                    d.node,
                    user_source_line(node) if node is not None else None,
                    d.kernel,
                    a,
                    r,
                )
                return report
    return report
