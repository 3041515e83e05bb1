"""Transposed convolutions whose kernel equals their stride (the 2x / 4x upsampling of U-Nets,
DPT's reassemble stage) in EmberCpuBackend: a 1x1 conv to Co * kh * kw channels and a permute that
moves each tap next to its pixel, nothing outside the backend, within f32 rounding of eager at 1
and 2 threads; other transposed convs (padding, groups, kernel != stride) stay portable and equal.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_conv_transpose.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from backend_cpu_common import _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram


class _Up(nn.Module):
    def __init__(self, ci: int, co: int, **kw: Any) -> None:
        super().__init__()
        self.c = nn.ConvTranspose2d(ci, co, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.c(torch.relu(x) - 0.2))


@pytest.mark.parametrize(
    ("ci", "co", "kw", "inside"),
    [
        (8, 4, dict(kernel_size=2, stride=2), True),
        (16, 8, dict(kernel_size=4, stride=4, bias=False), True),
        (3, 5, dict(kernel_size=(2, 3), stride=(2, 3)), True),
        (32, 17, dict(kernel_size=2, stride=2), True),
        (8, 4, dict(kernel_size=3, stride=2, padding=1), False),
        (8, 8, dict(kernel_size=2, stride=2, groups=2), False),
        (8, 4, dict(kernel_size=2, stride=2, output_padding=1), False),
    ],
)
def test_transposed_conv(ci: int, co: int, kw: dict[str, Any], inside: bool) -> None:
    torch.manual_seed(0)
    m = _Up(ci, co, **kw).eval()
    x = torch.randn(2, ci, 5, 7)
    prog = ember.export(m, (x,))
    assert (not _outside(prog)) == inside, _outside(prog)
    x2 = torch.randn(2, ci, 5, 7)
    want = m(x2)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * want.abs().max().item())
