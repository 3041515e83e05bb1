"""Int8 depthwise convs whose padded input their writer stores (EmberCpuBackend,
``emc_q8_pad_plan`` in backends/cpu/cpu_op_qpw.c).

A padded int8 depthwise conv reads a zero-point padded copy of its u8 input, which it used to
build in its scratch on every run (a pass over the image and a barrier between threads). Where a
pixel-major int8 conv (or its fused lookup) alone writes that input for it, the writer now
stores its pixels straight into the padded layout inside its own output's bytes (sized as f32,
room to spare; each pixel's place given to the tile, so rows of any width) and the depthwise
conv only sets the border to its zero point. It must give the very bytes of the copy (the
backend's ``no_fuse`` turns the plan off). Checked here on a 1x1 conv into a 3x3 depthwise conv
and a 1x1 conv with its hardswish lookup into a strided 5x5 one, on rows of 24 and 20 pixels,
and on a stem (the network's first conv, run with its input's fake-quant as one) into a
depthwise conv, at 1 and 2 threads, one image and two; the profile names the planned convs.

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


class _Stem(nn.Module):
    """The first conv (a strided 3x3 stem, its input's fake-quant fused in) into a depthwise
    conv: the stem writes the padded layout too."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 24, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.proj = nn.Conv2d(24, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.relu(self.dw(F.relu(self.stem(x)))))


# (net, batch, height, width): rows of 24 and of 20 pixels (no multiple of the tile's 8), a stem
SHAPES = [(_Net, 1, 13, 24), (_Net, 2, 9, 24), (_Net, 1, 11, 20), (_Stem, 1, 30, 26)]
PLANNED = {_Net: 2, _Stem: 1}


@pytest.fixture(
    scope="module", params=SHAPES, ids=lambda s: s[0].__name__ + "x".join(map(str, s[1:]))
)
def program(request) -> tuple[ember.Program, tuple, type]:
    net, *shape = request.param
    return (*_static_int8(net, (shape[0], 3, *shape[1:]), 11), net)


def test_same_bytes_as_the_copy(program) -> None:
    _assert_fused_same_as_apart(*program[:2])


def test_the_profile_names_the_planned_convs(program, tmp_path) -> None:
    prog, _, net = program
    pte = tmp_path / "m.pte"
    prog.save(pte)
    planned = [ln for ln in _profile_lines(str(pte)) if "input padded by its writer" in ln]
    # the pixel-major tile (AVX-512 VNNI) writes every depthwise conv's input
    want = PLANNED[net] if _pixel_major_tile() else 0
    assert len(planned) == want, planned
