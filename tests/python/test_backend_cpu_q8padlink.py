"""Int8 depthwise convs whose padded input their writer stores (EmberCpuBackend,
``emc_q8_pad_plan`` in backends/cpu/cpu_op_qpw.c).

A padded int8 depthwise conv reads a zero-point padded copy of its u8 input, which it used to
build in its scratch on every run (a pass over the image and a barrier between threads). Where a
pixel-major int8 conv (or its fused lookup) alone writes that input for it, on rows of whole
8-pixel tiles, the writer now stores its pixels straight into the padded layout inside its own
output's bytes (sized as f32, room to spare) and the depthwise conv only sets the border to its
zero point. It must give the very bytes of the copy (the backend's ``no_fuse`` turns the plan
off). Checked here on a 1x1 conv into a 3x3 depthwise conv and a 1x1 conv with its hardswish
lookup into a strided 5x5 one (24-pixel rows), against a row width that is no multiple of 8
(not planned), at 1 and 2 threads, one image and two; the profile names the planned convs.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8padlink.py
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
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.exp = nn.Conv2d(16, 32, 1)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.exp2 = nn.Conv2d(32, 24, 1)
        self.dw5 = nn.Conv2d(24, 24, 5, stride=2, padding=2, groups=24)
        self.proj = nn.Conv2d(24, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.stem(x))
        y = F.relu(self.dw(F.relu(self.exp(y))))  # planned: the 1x1 writes the dw's padded input
        y = F.relu(self.dw5(F.hardswish(self.exp2(y))))  # planned: the 1x1 and its lookup
        return self.proj(y)


# (batch, height, width): 24-pixel rows (planned), 20-pixel rows (not: split tiles)
SHAPES = [(1, 13, 24), (2, 9, 24), (1, 11, 20)]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "x".join(map(str, s)))
def program(request) -> tuple[ember.Program, tuple]:
    return _static_int8(_Net, (request.param[0], 3, *request.param[1:]), 11)


def test_same_bytes_as_the_copy(program) -> None:
    _assert_fused_same_as_apart(*program)


def test_the_profile_names_the_planned_convs(program, tmp_path) -> None:
    prog, inputs = program
    pte = tmp_path / "m.pte"
    prog.save(pte)
    planned = [ln for ln in _profile_lines(str(pte)) if "input padded by its writer" in ln]
    # the pixel-major tile (AVX-512 VNNI) writes both depthwise convs' inputs on 24-pixel rows
    want = 2 if _pixel_major_tile() and inputs[0].shape[3] % 8 == 0 else 0
    assert len(planned) == want, planned
