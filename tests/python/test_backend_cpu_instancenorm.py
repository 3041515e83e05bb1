"""Instance norm in EmberCpuBackend: ``F.instance_norm`` (``nn.InstanceNorm1d/2d``, CycleGAN's
and style transfer's normalization) reaches the exporter as a batch norm on batch statistics of
the input seen as one sample of N * C channels; the backend runs it as a group norm of one channel
a group. Nothing outside the backend, within f32 rounding of eager at 1 and 2 threads; a real
training-mode batch norm (several samples) stays portable and right.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_instancenorm.py
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import _inside_and_equal
from torch import nn


class _Net(nn.Module):
    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(x * 2.0 - 0.5))


def _check(m: nn.Module, x: torch.Tensor, inside: bool = True) -> None:
    _inside_and_equal(m, x, inside=inside)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("affine", [False, True])
def test_instance_norm_2d(batch: int, affine: bool) -> None:
    torch.manual_seed(0)
    norm = nn.InstanceNorm2d(6, affine=affine, eps=1e-3)
    if affine:
        norm.weight.data.uniform_(0.5, 1.5)
        norm.bias.data.uniform_(-0.5, 0.5)
    _check(_Net(norm).eval(), torch.randn(batch, 6, 9, 11) * 3 + 1)


def test_instance_norm_1d() -> None:
    torch.manual_seed(1)
    _check(_Net(nn.InstanceNorm1d(5, affine=True)).eval(), torch.randn(2, 5, 40))


def test_training_batch_norm_stays_portable() -> None:
    """Batch statistics over several samples (F.batch_norm with training=True): not a group
    norm, so portable, and equal to eager."""

    class _Train(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.batch_norm(x, None, None, training=True) + 1

    _check(_Train().eval(), torch.randn(3, 4, 5, 5), inside=False)
