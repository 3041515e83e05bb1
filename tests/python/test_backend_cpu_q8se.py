"""A squeeze-and-excitation scale computed inside the int8 conv after it (cpu_op_qpw.c:
emc_q8_pw_fuse_scale, emc_q8_pw_run_scaled).

In an int8 MobileNetV3 / EfficientNet block the SE gate multiplies the depthwise conv's planes
by a value per plane, a fake-quant rounds the product, and the projection (an int8 conv) reads
those f32 planes back into u8. The backend instead lets the conv quantize x[c] * s[c] itself,
block by block, and never writes the product. Checked here: the same bytes as the two operators
run one by one (the backend's ``no_fuse`` option), at 1 and 2 threads, on blocks whose channel
counts end inside the quantizer's 16-channel blocks (20, 3), whose maps are longer than its
128-pixel spans (13 x 13) or not (7 x 9), with a 1x1 conv (its rows read as one span) and a
padded 3x3 conv (row by row) after the scale; close to the portable kernels; and the profile
shows each product gone (a batch of 2 keeps the operators apart, and gives their bytes too).

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8se.py
"""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
from backend_cpu_common import (
    _assert_close_to_portable,
    _assert_fused_same_as_apart,
    _pixel_major_tile,
    _profile_lines,
    _static_int8,
)
from torch import nn

import ember


class _SE(nn.Module):
    """A depthwise conv, its squeeze-and-excitation gate, the scale and an int8 conv after it."""

    def __init__(self, c: int, co: int, k: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.f1 = nn.Conv2d(c, 8, 1)
        self.f2 = nn.Conv2d(8, c, 1)
        self.proj = nn.Conv2d(c, co, k, padding=k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.dw(x))
        g = nn.functional.hardsigmoid(self.f2(torch.relu(self.f1(x.mean((2, 3), keepdim=True)))))
        return self.proj(x * g)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 20, 3, padding=1)
        self.a = _SE(20, 24, 1)  # 16 + 4 channels, a 1x1 after it
        self.b = _SE(24, 3, 3)  # a padded 3x3 after it, 3 output channels
        self.c = _SE(3, 16, 1)  # 3 channels: the stem-like quantizer rows
        self.head = nn.Conv2d(16, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(torch.relu(self.stem(x))))
        return self.head(torch.relu(self.c(torch.relu(self.b(y)))))


SHAPES = [(1, 3, 13, 13), (1, 3, 7, 9), (2, 3, 7, 9)]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "x".join(map(str, s)))
def program(request) -> tuple[ember.Program, tuple]:
    return _static_int8(_Net, request.param, 5)


def test_same_bytes_as_the_operators_one_by_one(program) -> None:
    _assert_fused_same_as_apart(*program)


def test_close_to_the_portable_kernels(program) -> None:
    _assert_close_to_portable(_Net, *program, 5, 1)


def test_the_products_are_gone(program, tmp_path) -> None:
    prog, inputs = program
    pte = tmp_path / "m.pte"
    prog.save(pte)
    fused, apart = _profile_lines(str(pte)), _profile_lines(str(pte), True)
    # with the pixel-major tile (AVX-512 VNNI) and one image, each of the three scales runs
    # inside its conv; with it, the input's fake-quant and each gate's mean's fake-quant too
    # (emc_q8_pw_fuse_fq: four, any batch); otherwise every operator runs
    want = (3 if inputs[0].shape[0] == 1 else 0) + 4 if _pixel_major_tile() else 0
    assert len(apart) - len(fused) == want, (len(apart), len(fused))
