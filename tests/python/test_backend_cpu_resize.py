"""Nearest and bilinear upsampling in EmberCpuBackend (EMC_OP_RESIZE, blob version 18): the
exporter computes every output row's and column's taps with ATen's coordinate rules (given sizes
or scale factors, align_corners, down- and upsampling, equal sizes), the runtime gathers and
weighs. Nearest equals eager bit for bit, bilinear is within f32 rounding of it (as the portable
kernel is); nothing outside the backend; the taps are checked at load.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_resize.py
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import _blob_ops, _delegate_blob, _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram

RESIZE = 21


class _Up(nn.Module):
    def __init__(self, **kw: Any) -> None:
        super().__init__()
        self.kw = kw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(torch.relu(x) - 0.3, **self.kw) * 2.0


_SHAPES = [(2, 3, 6, 9), (1, 4, 2, 5), (1, 2, 7, 7)]
_NEAREST = [
    dict(scale_factor=2),
    dict(scale_factor=1.7),
    dict(scale_factor=(0.5, 3.0)),
    dict(size=(13, 7)),
    dict(size=(3, 2)),
]
_BILINEAR = [
    dict(scale_factor=2, align_corners=False),
    dict(scale_factor=1.7, align_corners=False),
    dict(scale_factor=0.5, align_corners=False),
    dict(size=(13, 7), align_corners=False),
    dict(size=(13, 7), align_corners=True),
    dict(size=(1, 20), align_corners=True),
    dict(scale_factor=3, align_corners=True),
]


def _check(m: nn.Module, shape: tuple[int, ...], exact: bool) -> None:
    x = torch.randn(shape)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    assert any(o[0] == RESIZE for o in _blob_ops(prog))
    x2 = torch.randn(shape) * 5
    want = m(x2)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        assert got.shape == want.shape
        if exact:
            assert torch.equal(got, want), (got - want).abs().max()
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=4e-7 * want.abs().max().item())


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kw", _NEAREST, ids=str)
def test_nearest_exact(kw: dict[str, Any], shape: tuple[int, ...]) -> None:
    _check(_Up(mode="nearest", **kw), shape, exact=True)


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("kw", _BILINEAR, ids=str)
def test_bilinear_close(kw: dict[str, Any], shape: tuple[int, ...]) -> None:
    _check(_Up(mode="bilinear", **kw), shape, exact=False)


def test_bilinear_same_size_is_a_copy() -> None:
    _check(_Up(mode="bilinear", size=(6, 9), align_corners=False), (2, 3, 6, 9), exact=True)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_one_pixel_input(mode: str) -> None:
    _check(_Up(mode=mode, size=(4, 3)), (1, 3, 1, 1), exact=mode == "nearest")


def test_taps_checked_at_load() -> None:
    """A blob whose taps reach past the input (its height patched smaller) or whose output size
    disagrees with its taps is refused when loaded."""
    from ember.backends.check import runtime_check

    prog = ember.export(_Up(mode="bilinear", scale_factor=2), (torch.randn(1, 2, 6, 9),))
    blob = bytes(_delegate_blob(prog))
    at = next(o[1] for o in _blob_ops(prog) if o[0] == RESIZE)
    assert runtime_check("EmberCpuBackend", blob, 1 << 20) is None
    for slot, value, words in [(1, 3, "tap lies outside"), (3, 11, "taps are not"), (5, 3, "bad")]:
        bad = bytearray(blob)
        struct.pack_into("<i", bad, at + 32 + 4 * slot, value)
        why = runtime_check("EmberCpuBackend", bytes(bad), 1 << 20)
        assert why and words in why, (slot, why)


@pytest.mark.parametrize(
    ("shape", "out"),
    [
        ((2, 3, 13, 13), (6, 6)),
        ((1, 4, 7, 9), (3, 2)),
        ((1, 2, 5, 5), (6, 6)),
        ((1, 3, 1, 7), (1, 3)),
    ],
)
def test_adaptive_avg_pool_uneven_windows(shape: tuple[int, ...], out: tuple[int, int]) -> None:
    """Adaptive average pools whose windows do not divide the map (AlexNet's 6x6 of 13x13, a
    pyramid pooling's bins; also more bins than pixels) as the resize op's adaptive mode: within
    f32 rounding of eager, nothing outside."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.adaptive_avg_pool2d(torch.relu(x) - 0.3, out) * 2.0

    x = torch.randn(shape)
    prog = ember.export(M(), (x,))
    assert not _outside(prog), _outside(prog)
    x2 = torch.randn(shape) * 3
    want = M()(x2)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        torch.testing.assert_close(got, want, rtol=0, atol=4e-7 * want.abs().max().item())


@pytest.mark.parametrize(
    "shape,kernel,ceil,include_pad",
    [
        ((1, 8, 2, 2), 320, True, True),  # HF EfficientNet's AvgPool2d(hidden_dim, ceil_mode)
        ((2, 5, 7, 7), 7, False, True),
        ((1, 3, 3, 5), (4, 9), True, False),
    ],
)
def test_avg_pool_one_window_over_the_map(
    shape: tuple[int, ...], kernel: Any, ceil: bool, include_pad: bool
) -> None:
    """An average pool whose one window covers the whole map (a kernel past it with ceil mode)
    runs in the backend as a mean: within f32 rounding of eager, nothing outside."""
    m = nn.Sequential(
        nn.ReLU(), nn.AvgPool2d(kernel, ceil_mode=ceil, count_include_pad=include_pad)
    )
    x = torch.randn(shape)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    want = m(x)
    assert want.shape[2:] == (1, 1)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0]
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
