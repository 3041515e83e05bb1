"""Transposed convolutions in EmberCpuBackend, every form ``nn.ConvTranspose2d`` takes: kernel =
stride (U-Net's 2x upsampling: a 1x1 conv to Co * kh * kw channels and a permute), and any other
(padding, output padding, groups, dilation, stride 1, kernel shorter than the stride) as the
sub-pixel split of ``lowering_convt.py`` (one ordinary conv per output phase, a cat, an
interleaving permute, a crop). Nothing outside the backend, within f32 rounding of eager at 1
and 2 threads; the phases' index arithmetic against a direct enumeration of the transposed
conv's products.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_conv_transpose.py
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from backend_cpu_common import _inside_and_equal
from torch import nn

from ember.backends.cpu.lowering_convt import CONST_PHASE_MAX, phases


class _Up(nn.Module):
    def __init__(self, ci: int, co: int, **kw: Any) -> None:
        super().__init__()
        self.c = nn.ConvTranspose2d(ci, co, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.c(torch.relu(x) - 0.2))


def _check(m: nn.Module, shape: tuple[int, ...], inside: bool = True) -> None:
    _inside_and_equal(m, torch.randn(*shape), inside=inside, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("ci", "co", "kw"),
    [
        (8, 4, dict(kernel_size=2, stride=2)),
        (16, 8, dict(kernel_size=4, stride=4, bias=False)),
        (3, 5, dict(kernel_size=(2, 3), stride=(2, 3))),
        (32, 17, dict(kernel_size=2, stride=2)),
        (8, 4, dict(kernel_size=3, stride=2, padding=1)),
        (8, 8, dict(kernel_size=2, stride=2, groups=2)),
        (8, 4, dict(kernel_size=2, stride=2, output_padding=1)),
        (24, 16, dict(kernel_size=4, stride=2, padding=1)),  # DCGAN
        (16, 8, dict(kernel_size=3, stride=2, padding=1, output_padding=1)),  # a decoder's
        (12, 12, dict(kernel_size=4, stride=2, padding=1, groups=12)),  # depthwise
        (6, 9, dict(kernel_size=3, stride=2, padding=2, dilation=2, groups=3)),
        (5, 7, dict(kernel_size=3, stride=1, padding=1)),  # stride 1: one flipped conv
        (5, 7, dict(kernel_size=(5, 1), stride=(3, 1), padding=(1, 0))),
        (4, 6, dict(kernel_size=(4, 3), stride=(2, 3), padding=(1, 0), output_padding=(1, 2))),
        (4, 6, dict(kernel_size=1, stride=2)),  # phases no tap reaches: the bias
        (4, 6, dict(kernel_size=2, stride=3, padding=1, output_padding=2)),
        (4, 3, dict(kernel_size=5, stride=2, padding=4)),  # crops on both sides
    ],
)
def test_transposed_conv(ci: int, co: int, kw: dict[str, Any]) -> None:
    torch.manual_seed(0)
    _check(_Up(ci, co, **kw).eval(), (2, ci, 5, 7))


def test_transposed_conv_random() -> None:
    """60 seeded random transposed convs (kernel 1-5, stride 1-3, dilation 1-3, padding, output
    padding, groups, maps of 1-9): every one inside the backend and equal to eager."""
    rng = random.Random(7)
    torch.manual_seed(7)
    done = 0
    while done < 60:
        s = (rng.randint(1, 3), rng.randint(1, 3))
        k = (rng.randint(1, 5), rng.randint(1, 5))
        d = (rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2]))
        p = (rng.randint(0, d[0] * (k[0] - 1)), rng.randint(0, d[1] * (k[1] - 1)))
        op = (rng.randint(0, max(s[0], d[0]) - 1), rng.randint(0, max(s[1], d[1]) - 1))
        g = rng.choice([1, 1, 2, 3])
        ci, co, h, w = g * rng.randint(1, 5), g * rng.randint(1, 5), rng.randint(1, 9), 9
        oh = (h - 1) * s[0] - 2 * p[0] + d[0] * (k[0] - 1) + op[0] + 1
        ow = (w - 1) * s[1] - 2 * p[1] + d[1] * (k[1] - 1) + op[1] + 1
        if min(oh, ow) < 1 or any(o >= max(a, b) for o, a, b in zip(op, s, d, strict=True)):
            continue
        m = nn.ConvTranspose2d(ci, co, k, s, p, op, g, True, d).eval()
        _check(m, (2, ci, h, w))
        done += 1


def test_large_tapless_phase_stays_portable() -> None:
    """A phase no tap reaches is stored as the bias map only up to CONST_PHASE_MAX elements;
    past that the conv stays portable, still right."""
    ci, h = 4, 128
    m = nn.ConvTranspose2d(ci, 8, 1, stride=2).eval()  # three of four phases: the bias
    assert 8 * h * h > CONST_PHASE_MAX
    _check(m, (1, ci, h, h), inside=False)


@pytest.mark.parametrize("seed", range(4))
def test_phases_cover_every_product(seed: int) -> None:
    """Each phase's conv (taps, padding before, tap dilation) reads exactly the input rows the
    transposed conv multiplies by each tap for each of its outputs: the (output, input, tap)
    triples of the definition y[i * s - p + k * d] += x[i] w[k], enumerated directly."""
    rng = random.Random(seed)
    for _ in range(300):
        k, s, d = rng.randint(1, 6), rng.randint(1, 4), rng.randint(1, 4)
        p, n_in = rng.randint(0, d * (k - 1)), rng.randint(1, 12)
        n_out = (n_in - 1) * s - 2 * p + d * (k - 1) + 1 + rng.randint(0, max(s, d) - 1)
        if n_out < 1:
            continue
        want = {
            (i * s - p + t * d, i, t)
            for i in range(n_in)
            for t in range(k)
            if 0 <= i * s - p + t * d < n_out
        }
        got = set()
        nq = -(-n_out // s)
        for r, f in enumerate(phases(k, s, p, d, n_in, n_out)):
            # the phase's conv: output q, tap m reads padded row q + m * dil
            if f.taps:  # its padded input gives nq outputs
                assert f.after == nq - n_in - f.before + (len(f.taps) - 1) * f.dil
            for q in range(nq):
                for m, t in enumerate(f.taps):
                    i = q + m * f.dil - f.before
                    if 0 <= i < n_in and s * q + r < n_out:
                        got.add((s * q + r, i, t))
        assert got == want, (k, s, p, d, n_in, n_out)
