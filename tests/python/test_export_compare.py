"""ember.compare: per-output errors, and the first diverging FX node with its source line."""

from __future__ import annotations

import torch
from conftest import (
    MLP,
    ember_runtime_module,
    export_for_tests,
    load_runtime,
    require_ember_kernels,
)

import ember
from ember.compare import eager_intermediates


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        h = torch.tanh(h)  # TANH
        return self.b(h)


class FakeRuntime:
    """Stands in for ember.runtime.RuntimeProgram: eager values, with one node corrupted."""

    def __init__(self, prog: ember.Program, bad_node: str | None) -> None:
        self.prog = prog
        self.bad = bad_node

    def _values(self, inputs: list) -> dict:
        vals = eager_intermediates(self.prog._exported["forward"], inputs)
        if self.bad is not None:
            vals[self.bad] = vals[self.bad] + 0.5
        return vals

    def run(self, method: str, inputs: list) -> list:
        ep = self.prog._exported[method]
        vals = self._values(inputs)
        out_node = next(n for n in ep.graph.nodes if n.op == "output")
        res = [vals[a.name] for a in out_node.args[0]]
        if self.bad is not None:
            res = [r + 0.5 for r in res]
        return res

    def run_debug(self, method: str, inputs: list, watch: dict) -> tuple[list, dict]:
        vals = self._values(inputs)
        captured = {}
        for d in self.prog.debug_info(method):
            if d.index not in watch:
                continue
            v = vals[d.node]
            vs = list(v) if isinstance(v, (list, tuple)) else [v]
            for k, vi in enumerate(d.out_values):
                captured[(d.index, vi)] = vs[k]
        return self.run(method, inputs), captured


def _marker_line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# {marker}"))


def test_compare_reports_first_divergent_node() -> None:
    m = Net().eval()
    x = torch.randn(2, 8)
    prog = export_for_tests(m, (x,))
    dbg = prog.debug_info()
    assert dbg and all(d.node for d in dbg)
    tanh_node = next(d.node for d in dbg if d.kernel == "aten::tanh.out")
    report = ember.compare(m, prog, (x,), runner=FakeRuntime(prog, tanh_node))
    assert not report.ok
    assert report.max_abs > 0.1
    d = report.divergence
    assert d is not None and d.node == tanh_node and d.kernel == "aten::tanh.out"
    assert f"{__file__}:{_marker_line('TANH')}" in d.source
    assert tanh_node in str(report)


def test_compare_ok_when_equal() -> None:
    m = Net().eval()
    x = torch.randn(2, 8)
    prog = export_for_tests(m, (x,))
    report = ember.compare(m, prog, (x,), runner=FakeRuntime(prog, None))
    assert report.ok and report.divergence is None
    assert report.max_abs < 1e-6


def test_debug_info_maps_instructions_to_nodes() -> None:
    prog = export_for_tests(MLP().eval(), (torch.randn(1, 16),))
    dbg = prog.debug_info()
    assert [d.index for d in dbg] == sorted(d.index for d in dbg)
    nodes = {n.name for n in prog._exported["forward"].graph.nodes}
    assert all(d.node in nodes for d in dbg)
    assert all(d.out_values for d in dbg)
    assert any("test_export_compare" in (d.stack_trace or "") or d.stack_trace for d in dbg)


def test_compare_on_ember_runtime() -> None:
    ember_runtime_module()
    m = Net().eval()
    x = torch.randn(2, 8)
    prog = export_for_tests(m, (x,))
    require_ember_kernels(prog)
    load_runtime(prog)
    report = ember.compare(m, prog, (x,))
    assert report.ok, str(report)


def test_debug_values_match_eager_on_ember_runtime() -> None:
    """Every instruction's recorded outputs, read back through run_debug, equal the eager
    value of the FX node the debug info names (so compare's localisation is trustworthy)."""
    from conftest import SmallCNN, randomize_bn

    ember_runtime_module()
    m = randomize_bn(SmallCNN())
    x = torch.randn(1, 3, 8, 8)
    prog = export_for_tests(m, (x,))
    require_ember_kernels(prog)
    rt = load_runtime(prog)
    dbg = [d for d in prog.debug_info() if d.out_values]
    watch = {d.index: d.out_values for d in dbg}
    flat = prog.flatten_inputs((x,))
    _, captured = rt.run_debug("forward", flat, watch)
    ref = eager_intermediates(prog._exported["forward"], flat)
    checked = 0
    for d in dbg:
        want = ref[d.node]
        wants = list(want) if isinstance(want, (list, tuple)) else [want]
        for k, vi in enumerate(d.out_values):
            got = captured[(d.index, vi)]
            assert got.shape == wants[k].shape, d
            if got.dtype.is_floating_point:
                assert torch.allclose(got, wants[k], rtol=1e-4, atol=1e-5), d
            checked += 1
    assert checked >= len(dbg)
