"""Lookups into f32 planes that are never written (cpu_op_qlut.c: emc_q8_lk_plan).

In an int8 MobileNetV3 block the depthwise conv's u8 output goes through a table lookup (its
hardswish) into f32 planes, read by exactly two operators: the squeeze-and-excitation mean and
the gate's product, which the projection conv quantizes itself (emc_q8_pw_fuse_scale). The
backend lets both read the lookup's u8 input instead (em_q8_lutm_fn, em_q8_lutq_fn) and skips
the lookup. Checked here: the same bytes as every operator run one by one (the backend's
``no_fuse``), at 1 and 2 threads, on channel counts that end inside the 16-channel blocks (20,
40) and maps whose pixel counts leave 1, 2 or 3 pixels after the groups of 4 (13 x 13, 6 x 7,
7 x 9), before a 1x1 and a padded 3x3 projection; close to the portable kernels; the profile
names each lookup left to its readers, and none where the planes have a third reader (a
residual sum) or a batch of 2.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8lk.py
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

LABEL = "(u8 lookup read by its readers)"


class _Block(nn.Module):
    """An expansion, a depthwise conv with hardswish, its squeeze-and-excitation gate and the
    projection after the scale; with ``third`` the hardswish planes also feed a residual sum."""

    def __init__(self, c: int, e: int, co: int, k: int, third: bool = False) -> None:
        super().__init__()
        self.expand = nn.Conv2d(c, e, 1)
        self.dw = nn.Conv2d(e, e, 3, padding=1, groups=e)
        self.f1 = nn.Conv2d(e, 8, 1)
        self.f2 = nn.Conv2d(8, e, 1)
        self.proj = nn.Conv2d(e, co, k, padding=k // 2)
        self.third = third

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hs = nn.functional.hardswish
        y = hs(self.dw(hs(self.expand(x))))
        g = nn.functional.hardsigmoid(self.f2(torch.relu(self.f1(y.mean((2, 3), keepdim=True)))))
        out = self.proj(y * g)
        return out + y[:, : out.shape[1]] if self.third else out


class _Net(nn.Module):
    def __init__(self, third: bool = False) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.a = _Block(16, 40, 24, 1)  # 40 channels: two 16-channel blocks and 8 more
        self.b = _Block(24, 20, 16, 3, third)  # 20: a block and 4; a padded 3x3 after the scale
        self.head = nn.Conv2d(16, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.b(self.a(torch.relu(self.stem(x)))))


SHAPES = [(1, 3, 13, 13), (1, 3, 6, 7), (1, 3, 7, 9), (2, 3, 7, 9)]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "x".join(map(str, s)))
def program(request) -> tuple[ember.Program, tuple]:
    return _static_int8(_Net, request.param, 7)


def test_same_bytes_as_the_operators_one_by_one(program) -> None:
    _assert_fused_same_as_apart(*program)


def test_close_to_the_portable_kernels(program) -> None:
    _assert_close_to_portable(_Net, *program, 7, 2)


def test_the_profile_names_the_lookups_left_to_their_readers(program, tmp_path) -> None:
    prog, inputs = program
    pte = tmp_path / "m.pte"
    prog.save(pte)
    named = [ln for ln in _profile_lines(str(pte)) if LABEL in ln]
    # one image, the pixel-major tile (the scaled conv's chain): both blocks' lookups
    want = 2 if inputs[0].shape[0] == 1 and _pixel_major_tile() else 0
    assert len(named) == want, named
    assert not [ln for ln in _profile_lines(str(pte), True) if LABEL in ln]


def test_planes_with_a_third_reader_are_written(tmp_path) -> None:
    prog, inputs = _static_int8(lambda: _Net(third=True), (1, 3, 7, 9), 7)
    _assert_fused_same_as_apart(prog, inputs)
    pte = tmp_path / "m.pte"
    prog.save(pte)
    named = [ln for ln in _profile_lines(str(pte)) if LABEL in ln]
    assert len(named) == (1 if _pixel_major_tile() else 0), named  # block a's only
