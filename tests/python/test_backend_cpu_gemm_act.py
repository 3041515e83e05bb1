"""Activations in the f32 micro-kernels' stores (EmberCpuBackend, em_minmax_params.hswish): a
hardswish after a 1x1 conv (a GEMM), a depthwise conv (planes, bands, 16 small planes at once)
or a stem conv (few input channels) runs in the AVX-512 kernel's registers instead of as a vact
pass over each tile or plane. It must give the bits of that pass: for the GEMM, the AVX2 table
(no fused hardswish; its GEMM rounds as the AVX-512 one does) runs the pass, so the two must
agree, on ragged tiles (rows not a multiple of 6, columns not of 64), NaN and infinite inputs,
a residual before the activation (which keeps the pass), and 1 and 2 threads, and eager
PyTorch within f32 tolerance; for the depthwise and stem kernels, each conv against the same
conv without the activation followed by the hardswish's f32 steps.

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


class _Conv(nn.Module):
    def __init__(self, conv: nn.Conv2d, act: bool) -> None:
        super().__init__()
        self.conv, self.act = conv, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(self.conv(x)) if self.act else self.conv(x)


def _hardswish_f32(y: torch.Tensor) -> torch.Tensor:
    """vact's hardswish, step by step in f32 (each elementwise op rounds once, as the kernels)."""
    return (y * torch.clamp(y + 3.0, 0.0, 6.0)) * (1.0 / 6.0)


# (name, conv, input channels, size): a stem (3 channels, stride 2: the direct stem kernel) and
# depthwise convs by plane, by bands of rows, 16 small planes at once, flat planes (under 4
# columns or 65-128 pixels), padded (dilated) and generic (stride 3)
_CONVS = [
    ("stem", lambda: nn.Conv2d(3, 16, 3, stride=2, padding=1), 3, 56),
    ("stem-19", lambda: nn.Conv2d(3, 19, 3, stride=2, padding=1), 3, 30),
    ("dw3-56", lambda: nn.Conv2d(16, 16, 3, padding=1, groups=16), 16, 56),
    ("dw3s2-28", lambda: nn.Conv2d(24, 24, 3, stride=2, padding=1, groups=24), 24, 28),
    ("dw5-14", lambda: nn.Conv2d(40, 40, 5, padding=2, groups=40), 40, 14),
    ("dw5s2-14", lambda: nn.Conv2d(40, 40, 5, stride=2, padding=2, groups=40), 40, 14),
    ("dw5-7", lambda: nn.Conv2d(48, 48, 5, padding=2, groups=48), 48, 7),
    ("dw3-7", lambda: nn.Conv2d(19, 19, 3, padding=1, groups=19), 19, 7),
    ("dw3-dil", lambda: nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16), 16, 20),
    ("dw3-10", lambda: nn.Conv2d(20, 20, 3, padding=1, groups=20), 20, 10),
    ("dw5-3", lambda: nn.Conv2d(16, 16, 5, padding=2, groups=16), 16, 3),
    ("dw3s3-20", lambda: nn.Conv2d(16, 16, 3, stride=3, padding=1, groups=16), 16, 20),
]


@pytest.mark.parametrize("name,make,cin,hw", _CONVS, ids=[c[0] for c in _CONVS])
def test_hardswish_in_depthwise_and_stem_kernels(name: str, make, cin: int, hw: int) -> None:  # type: ignore[no-untyped-def]
    """The conv with its hardswish gives the bits of the same conv (the same kernel, no
    activation) followed by the hardswish's f32 steps; at 1 and 2 threads."""
    torch.manual_seed(hw + cin)
    conv = make().eval()
    x = _input(cin, hw, name == "stem-19")
    raw = _run(ember.export(_Conv(conv, False), (x,), backend="cpu"), (x,))
    prog = ember.export(_Conv(conv, True), (x,), backend="cpu")
    for t in (1, 2):
        _same_bits(_run(prog, (x,), threads=t), _hardswish_f32(raw))


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
