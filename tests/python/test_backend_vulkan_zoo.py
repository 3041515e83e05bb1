"""The zoo's vision models end to end on EmberVulkanBackend (issue 34): MobileNetV3-Small,
ResNet-18 and MobileNetV2 at 224x224 and ViT-Tiny (224, patch 16), seeded architectures from
tests/python/zoo/models.py, each exported with ``backend="vulkan"`` and run once, with f32
storage and with f16 storage (``vulkan_storage="f16"``).

Each model checks the share of its instructions placed on the Vulkan device (>= 95 % on the
CNNs; ViT-Tiny keeps its mask arithmetic portable, so its floor is the share measured today) and
its output against eager PyTorch: max |got - eager| <= tol x max |eager|, tol 1e-4 with f32
storage and 1e-3 with f16 storage (ViT-Tiny: 2.5e-3, see REL_TOL_VIT_F16).

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
# ViT-Tiny with f16 storage measures 2.0e-3 on lavapipe, above the 1e-3 the CNNs meet: rounding
# its activations to f16 alone gives 1.8e-3 (eager PyTorch with every op's output rounded), its
# weights alone 7.5e-4; twelve layers of 11-bit activations against logits of magnitude 0.8.
REL_TOL_VIT_F16 = 2.5e-3


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
    # ViT keeps its boolean mask arithmetic and the CLS select portable (76.9 % measured)
    "vit_tiny": (zoo.vit_tiny, 0.75),
}


CASES = [(name, storage) for storage in ("f32", "f16") for name in MODELS]


@pytest.mark.parametrize("name, storage", CASES)
def test_zoo_model_on_vulkan_matches_eager(name: str, storage: str) -> None:
    from ember.runtime import RuntimeProgram

    build, floor = MODELS[name]
    m, inputs = build()
    assert inputs[0].shape[-2:] == (224, 224)
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
    tol = REL_TOL_VIT_F16 if (name, storage) == ("vit_tiny", "f16") else REL_TOL[storage]
    assert err <= tol, (name, storage, err)
