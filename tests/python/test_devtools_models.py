"""Ember's ETDump + ETRecord of real architectures, opened by **stock ExecuTorch's** Inspector
(issue 32's must-show): MobileNetV2 delegated to EmberCpuBackend and a ViT on the portable
kernels (seeded random weights, full 224x224 inputs). For each: every event of the run is
resolved to graph nodes, the delegate's own operators appear as events of their own, and the
Inspector's ``calculate_numeric_gap`` compares every operator's output (inside the delegate too)
with the exported graph's. The SmolLM2 4-bit program is checked in ``test_llm_quant.py`` (it
shares that file's export).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

import ember

devtools = pytest.importorskip("executorch.devtools")
transformers = pytest.importorskip("transformers")
log = logging.getLogger(__name__)


class _Logits(torch.nn.Module):
    def __init__(self, m: torch.nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m(x).logits


def _mobilenet_v2() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.MobileNetV2Config(num_labels=1000, tf_padding=False)
    m = transformers.MobileNetV2ForImageClassification(cfg).eval()
    with torch.no_grad():  # batch norms with non-trivial statistics
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    return _Logits(m).eval()


def _vit_tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(
        hidden_size=192,
        num_hidden_layers=12,
        num_attention_heads=3,
        intermediate_size=768,
        num_labels=1000,
        attn_implementation="eager",
    )
    return _Logits(transformers.ViTForImageClassification(cfg).eval()).eval()


def _run(name: str, model: torch.nn.Module, tmp: Path, **kw: Any) -> tuple[ember.Program, Any]:
    x = torch.randn(1, 3, 224, 224)
    rec = tmp / f"{name}.etrecord"
    prog = ember.export(model, (x,), etrecord=rec, **kw)
    etdp, dbin = tmp / f"{name}.etdp", tmp / f"{name}.bin"
    got = prog.run(x, etdump=etdp, etdump_debug=dbin)
    torch.testing.assert_close(got, model(x), rtol=1e-3, atol=1e-3)
    ins = devtools.Inspector(etdump_path=str(etdp), etrecord=str(rec), debug_buffer_path=str(dbin))
    buf = io.StringIO()
    ins.print_data_tabular(file=buf)
    log.info("%s: stock Inspector on Ember's ETDump + ETRecord:\n%s", name, buf.getvalue())
    return prog, ins


def _drifted(gap: Any) -> list[tuple[Any, ...]]:
    """The compared operators whose runtime output is not within 60 dB SNR of the graph's (an
    all-zero output, SNR 0/0, must then be equal)."""
    rows = zip(
        gap.aot_ops, gap.runtime_ops, gap.gap, gap.aot_intermediate_output,
        gap.runtime_intermediate_output, strict=True,
    )  # fmt: skip
    return [
        (a, r, g[0])
        for a, r, g, want, got in rows
        if not (
            g[0] > 60 or (g[0] != g[0] and torch.equal(torch.as_tensor(want), torch.as_tensor(got)))
        )
    ]


def _execute_events(ins: Any) -> list[Any]:
    (block,) = [b for b in ins.event_blocks if b.name == "Execute"]
    return [e for e in block.events if e.name != "Method::execute"]


def test_mobilenet_v2_delegated(tmp_path: Path) -> None:
    prog, ins = _run("mobilenet_v2", _mobilenet_v2(), tmp_path)
    debug = prog.debug_info("forward")
    calls = {d.index for d in debug if d.kernel.startswith("delegate::")}
    assert calls, "MobileNetV2 was not delegated"
    events = _execute_events(ins)
    inner = [e for e in events if e.is_delegated_op]
    # every convolution of the model is an event of its own inside the delegate, named by its
    # delegate debug id and resolved to its nodes and the model's source
    assert all(e.delegate_backend_name == "EmberCpuBackend" and e.op_types for e in inner)
    convs = sum(e.op_types.count("convolution.default") for e in inner)
    n_conv = sum(1 for m in _mobilenet_v2().modules() if isinstance(m, torch.nn.Conv2d))
    assert convs == n_conv and all(e._instruction_id in calls for e in inner)
    assert any("modeling_mobilenet_v2.py" in t for e in inner for t in e.stack_traces.values())
    gap = ins.calculate_numeric_gap("SNR")
    log.info("mobilenet_v2: %d operators compared, min SNR %.1f dB", len(gap), min(gap.gap)[0])
    assert len(gap) >= 0.8 * len(inner) and not _drifted(gap), _drifted(gap)


def test_vit_portable(tmp_path: Path) -> None:
    prog, ins = _run("vit_tiny", _vit_tiny(), tmp_path, backend=None)
    debug = prog.debug_info("forward")
    events = _execute_events(ins)
    assert not any(e.is_delegated_op for e in events)
    kernels = [e for e in events if e.name not in ("DELEGATE_CALL",)]
    assert len(kernels) == len(debug)
    named = [e for e in kernels if e.op_types]
    assert len(named) >= 0.9 * len(debug)
    for op in ("addmm.default", "bmm.default", "_softmax.default", "native_layer_norm.default"):
        assert any(op in e.op_types for e in named), op
    assert any("modeling_vit.py" in t for e in named for t in e.stack_traces.values())
    gap = ins.calculate_numeric_gap("SNR")
    log.info("vit_tiny: %d operators compared, min SNR %.1f dB", len(gap), min(gap.gap)[0])
    assert len(gap) >= 0.8 * len(named) and not _drifted(gap), _drifted(gap)
