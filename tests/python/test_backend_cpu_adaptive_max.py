"""Adaptive max pools in EmberCpuBackend: even windows (the input a multiple of the output,
global max pooling included) as a max pool of kernel = stride inside the backend; uneven ones on
the portable kernel. Bit for bit equal to eager (NaN kept) at 1 and 2 threads.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_adaptive_max.py
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram


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
    m = _Pool(size).eval()
    want = m(x)
    prog = ember.export(m, (x,))
    assert (not _outside(prog)) == inside, _outside(prog)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0]
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
