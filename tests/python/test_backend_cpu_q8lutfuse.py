"""An int8 conv with the u8 table lookup after it, run as one (EmberCpuBackend,
``emc_q8_pw_fuse_lut`` in backends/cpu/cpu_op_qpw.c).

In a statically quantized MobileNetV3 the expansion's hardswish (with its fake-quant) is a
lookup of the conv's u8 levels into u8 levels (EMC_UNARY_Q8 form 1). Where the conv runs on the
pixel-major tile and alone feeds the lookup, each job of the conv looks its pixels up in place
right after computing them, into the lookup's output: the conv's own output is never written and
the lookup is no operator of its own (no pass over memory, no barrier between threads). The
exporter keeps the conv's input and scratch alive until the lookup (blob.py
``_extend_for_chains``), so the lookup's output never takes their memory. It must give the very
bytes of the two operators run one by one (the backend's ``no_fuse``). Checked here on a net with
a padded strided stem on the f32 input (its scratch in use), an unpadded 1x1 expansion of u8
levels and a 1x1 conv on the f32 input (one phase: each job quantizes its pixels) (all three
fused), and a projection to 30 channels (a last group of 4 with padding bytes: its
lookup stays an operator), at 1 and 2 threads, one image and two; and the profile shows the three
lookups gone where the tile runs (AVX-512 VNNI).

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8lutfuse.py
"""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F
from backend_cpu_common import (
    _assert_fused_same_as_apart,
    _pixel_major_tile,
    _profile_lines,
    _static_int8,
)
from torch import nn

import ember


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.dw0 = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.exp = nn.Conv2d(16, 32, 1)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.proj = nn.Conv2d(32, 30, 1)
        self.head = nn.Conv2d(30, 12, 1)
        self.side = nn.Conv2d(3, 8, 1)
        self.side2 = nn.Conv2d(8, 12, 1)

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = F.hardswish(self.stem(x0))  # fused: f32 input, padded (the conv's scratch)
        y = F.relu(self.dw0(x))
        y = F.hardswish(self.exp(y))  # fused: u8 input where it lies
        y = F.relu(self.dw(y))
        y = F.hardswish(self.proj(y))  # apart: 30 channels (padding bytes in the last group)
        # fused: a 1x1 conv on the f32 input in one phase (each job quantizes its pixels)
        side = self.side2(F.hardswish(self.side(x0))).mean((2, 3), keepdim=True)
        return self.head(y) + side


SHAPES = [(1, 3, 19, 23), (2, 3, 11, 13)]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "x".join(map(str, s)))
def program(request) -> tuple[ember.Program, tuple]:
    return _static_int8(_Net, request.param, 7)


def test_same_bytes_as_the_operators_one_by_one(program) -> None:
    _assert_fused_same_as_apart(*program)


def test_the_lookups_are_gone(program, tmp_path) -> None:
    prog, _ = program
    pte = tmp_path / "m.pte"
    prog.save(pte)
    fused, apart = _profile_lines(str(pte)), _profile_lines(str(pte), True)
    # with the pixel-major tile the stem's, the expansion's and the side conv's lookups run
    # inside their convs; otherwise every operator runs
    assert len(apart) - len(fused) == (3 if _pixel_major_tile() else 0), (len(apart), len(fused))


class _Stem(nn.Module):
    """A network's start: its input's fake-quant read by one int8 conv alone (a padded strided 3x3,
    or a 1x1: one phase), whose hardswish lookup an int8 depthwise conv reads."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, k, stride=2 if k == 3 else 1, padding=k // 2)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.out = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.dw(F.hardswish(self.stem(x)))))


@pytest.mark.parametrize("k", [3, 1])
def test_input_fake_quant_in_the_conv(k: int, tmp_path) -> None:  # noqa: ANN001
    """The input's fake-quant, the conv and its lookup run as one (emc_q8_pw_fuse_fq: the conv
    quantizes the input itself), with the bytes of the three operators one by one."""
    prog, inputs = _static_int8(lambda: _Stem(k), (1, 3, 21, 19), 9)
    _assert_fused_same_as_apart(prog, inputs)
    pte = tmp_path / "m.pte"
    prog.save(pte)
    fused, apart = _profile_lines(str(pte)), _profile_lines(str(pte), True)
    # the fake-quant and the lookup run inside the conv where the tile runs
    assert len(apart) - len(fused) == (2 if _pixel_major_tile() else 0), (len(apart), len(fused))
