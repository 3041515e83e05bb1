"""Zoo models end to end on EmberVulkanBackend (issue 34): MobileNetV3-Small, ResNet-18 and
MobileNetV2 at 224x224, ViT-Tiny (224, patch 16), seeded architectures from
tests/python/zoo/models.py, and all-MiniLM-L6-v2 (trained weights), each exported with
``backend="vulkan"`` and run once, with f32 storage and with f16 storage (``vulkan_storage="f16"``,
mixed: backends/vulkan/README.md).

Each model checks the share of its instructions placed on the Vulkan device (>= 95 % on the
CNNs; the transformers keep their mask arithmetic portable, so their floors are the shares
measured today) and its output against eager PyTorch: max |got - eager| <= tol x max |eager|,
tol 1e-4 with f32 storage and 1e-3 with f16 storage, the transformers included (their
activations from the first layer norm on stay f32: with every activation f16, ViT-Tiny measures
2.0e-3, which test_f16_rule_is_what_keeps_vit_tiny_within_bound checks).

Runs on any Vulkan device (lavapipe in CI, `make vulkan-deps`). Skipped, with a message, only
when the library was built without Vulkan or no device exists.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from vulkan_common import VK, needs_vulkan

import ember
from ember.backends.delegate import DelegateInstr

_spec = importlib.util.spec_from_file_location(
    "ember_zoo_models", Path(__file__).parent / "zoo" / "models.py"
)
assert _spec is not None and _spec.loader is not None
zoo = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("ember_zoo_models", zoo)
_spec.loader.exec_module(zoo)

log = logging.getLogger(__name__)
REL_TOL = {"f32": 1e-4, "f16": 1e-3}  # max abs error / max |eager output|, by storage


pytestmark = needs_vulkan


def _at224(build: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]) -> Callable:
    """The zoo builder's seeded model, fed a seeded 224x224 image instead of its default size."""

    def b() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        m, _ = build()
        return m, (zoo._randn(1, 3, 224, 224),)

    return b


# name -> (builder, minimum share of instructions on Vulkan)
MODELS: dict[str, tuple[Callable, float]] = {
    "mobilenet_v3_small": (_at224(zoo.mobilenet_v3_small), 0.95),
    "resnet18": (lambda: zoo._resnet(18, 224), 0.95),
    "mobilenet_v2": (_at224(zoo.mobilenet_v2), 0.95),
    # ViT keeps its boolean mask arithmetic and the CLS select portable (77.1 % measured)
    "vit_tiny": (zoo.vit_tiny, 0.75),
    # MiniLM its embeddings, mask arithmetic and the final normalisation (73.8 % measured)
    "minilm": (zoo.minilm, 0.72),
}


CASES = [(name, storage) for storage in ("f32", "f16") for name in MODELS]


def _error(name: str, storage: str) -> tuple[float, float, ember.Program]:
    """Exports zoo model ``name`` with ``storage``, runs it once: (error vs eager, share of
    instructions on Vulkan, program)."""
    from ember.runtime import RuntimeProgram

    m, inputs = MODELS[name][0]()
    with torch.inference_mode():
        want = m(*inputs)
    want = want[0] if isinstance(want, (tuple, list)) else want
    prog = ember.export(m, inputs, backend="vulkan", vulkan_storage=storage)
    report = prog._irs["forward"].partition_report
    assert report, prog.explain()
    share = sum(d.delegated for d in report) / len(report)
    got = RuntimeProgram(prog.buffer).run("forward", list(inputs))[0]
    assert got.shape == want.shape and got.dtype == torch.float32
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-12)), share, prog


@pytest.mark.parametrize("name, storage", CASES)
def test_zoo_model_on_vulkan_matches_eager(name: str, storage: str) -> None:
    from ember.runtime import RuntimeProgram

    build, floor = MODELS[name]
    m, inputs = build()
    assert name == "minilm" or inputs[0].shape[-2:] == (224, 224)
    with torch.inference_mode():
        want = m(*inputs)
    want = want[0] if isinstance(want, (tuple, list)) else want
    prog = ember.export(m, inputs, backend="vulkan", vulkan_storage=storage)

    ir = prog._irs["forward"]
    report = ir.partition_report
    assert report, prog.explain()
    share = sum(d.delegated for d in report) / len(report)
    assert share >= floor, (name, share, sorted({d.kernel for d in report if not d.delegated}))
    delegates = [i for i in ir.instrs if isinstance(i, DelegateInstr)]
    assert delegates and all(d.backend_id == VK for d in delegates), prog.explain()

    got = RuntimeProgram(prog.buffer).run("forward", list(inputs))[0]
    assert got.shape == want.shape and got.dtype == torch.float32
    err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))
    log.info(
        "%s (%s storage): %.1f %% of instructions on Vulkan, error %.1e",
        name,
        storage,
        100 * share,
        err,
    )
    assert err <= REL_TOL[storage], (name, storage, err)


def test_f16_rule_is_what_keeps_vit_tiny_within_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the mixed-storage rule (every activation f16) ViT-Tiny leaves the 1e-3 bound
    (2.0e-3 on lavapipe); the rule brings it within (7.8e-4), keeping its weight matrices f16."""
    import ember.backends.vulkan.partition as P
    from ember.backends.vulkan.blob import tensor_table

    monkeypatch.setattr(P, "MIXED_RULE", False)
    err, _, _ = _error("vit_tiny", "f16")
    assert err > REL_TOL["f16"], err
    monkeypatch.setattr(P, "MIXED_RULE", True)
    err, _, prog = _error("vit_tiny", "f16")
    assert err <= REL_TOL["f16"], err
    weights = [
        (n, st)
        for d in prog._irs["forward"].instrs
        if isinstance(d, DelegateInstr)
        for _, w, n, st in tensor_table(d.processed)[0]
        if w != 0xFFFFFFFF
    ]
    f16 = sum(2 * n for n, st in weights if st == 1)
    assert f16 > 0.97 * sum(n * (2 if st else 4) for n, st in weights), weights
