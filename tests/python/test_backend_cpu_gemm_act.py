"""Activations in the f32 GEMM micro-kernel's stores (EmberCpuBackend, em_minmax_params.hswish):
a hardswish after a 1x1 conv (a GEMM) runs in the AVX-512 kernel's registers instead
of as a vact pass over each tile. It must give the bits of that pass: the AVX2 table (no fused
hardswish; its GEMM rounds as the AVX-512 one does) runs the pass, so the two must agree, on shapes with ragged tiles (rows not
a multiple of 6, columns not of 64), NaN and infinite inputs, a residual before the activation
(which keeps the pass), and 1 and 2 threads. And eager PyTorch within f32 tolerance.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_gemm_act.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import _run, _run_per_isa
from torch import nn

import ember


class _Net(nn.Module):
    def __init__(self, cin: int, co: int, residual: bool) -> None:
        super().__init__()
        self.a = nn.Conv2d(cin, co, 1)
        self.b = nn.Conv2d(co, co + 9, 1)
        self.c = nn.Conv2d(co + 9, co, 1)
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.a(x))
        z = self.c(F.hardswish(self.b(y)))
        return F.hardswish(z + y if self.residual else z)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def _input(cin: int, hw: int, special: bool) -> torch.Tensor:
    x = torch.randn(1, cin, hw, hw, generator=torch.Generator().manual_seed(cin * hw)) * 4
    if special:
        x[0, 0, 0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30])
    return x


@pytest.mark.parametrize(
    "cin,co,hw,residual,special",
    [(16, 72, 7, False, False), (24, 40, 13, True, False), (5, 67, 9, False, True)],
)
def test_hardswish_in_gemm_same_bits_every_isa(
    cin: int, co: int, hw: int, residual: bool, special: bool, tmp_path: Path
) -> None:
    torch.manual_seed(co)
    m = _Net(cin, co, residual).eval()
    x = _input(cin, hw, special)
    prog = ember.export(m, (x,), backend="cpu")
    outs = _run_per_isa(prog, x, tmp_path, (None, "avx2"))
    _same_bits(outs[None], outs["avx2"])
    outs = [_run(prog, (x,), threads=t) for t in (1, 2)]
    _same_bits(outs[0], outs[1])
    if not special:
        with torch.no_grad():
            torch.testing.assert_close(outs[0], m(x), rtol=1e-4, atol=1e-4)
