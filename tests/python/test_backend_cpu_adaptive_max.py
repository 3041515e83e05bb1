"""Adaptive max pools in EmberCpuBackend: even windows (the input a multiple of the output,
global max pooling included) as a max pool of kernel = stride inside the backend; uneven ones on
the portable kernel. Bit for bit equal to eager (NaN kept) at 1 and 2 threads.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_adaptive_max.py
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import _inside_and_equal
from torch import nn


class _Pool(nn.Module):
    def __init__(self, size: tuple[int, int]) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_max_pool2d(x * 2.0, self.size) - 1.0


@pytest.mark.parametrize(
    ("shape", "size", "inside"),
    [
        ((2, 5, 12, 8), (1, 1), True),
        ((1, 3, 12, 8), (3, 2), True),
        ((1, 3, 12, 8), (12, 8), True),
        ((1, 3, 10, 7), (3, 2), False),
    ],
)
def test_adaptive_max_pool(shape: tuple[int, ...], size: tuple[int, int], inside: bool) -> None:
    torch.manual_seed(0)
    x = torch.randn(*shape)
    x[0, 0, 1, 1] = float("nan")
    _inside_and_equal(_Pool(size), x, inside=inside, exact=True)
