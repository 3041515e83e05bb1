"""3-d convolutions and max pools in EmberCpuBackend. Convs (``lowering_conv3d.py``): the depth
taps' slices stacked into the channels of one image per output depth, one conv2d; kernels,
strides, paddings, dilations and groups in all three dims, batch 1 and 2, seeded random shapes.
Max pools: a pool along depth, then one along H x W (max is separable), ceil mode, dilation,
NaN kept. Nothing outside the backend, within f32 rounding of eager at 1 and 2 threads (pools:
bit for bit); a pool whose indices are used stays portable.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_conv3d.py
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from backend_cpu_common import _inside_and_equal, _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram


class _Net(nn.Module):
    def __init__(self, ci: int, co: int, **kw: Any) -> None:
        super().__init__()
        self.c = nn.Conv3d(ci, co, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.c(x - 0.1))


def _check(m: nn.Module, shape: tuple[int, ...]) -> None:
    _inside_and_equal(m, torch.randn(*shape))


@pytest.mark.parametrize(
    ("ci", "co", "kw", "shape"),
    [
        (4, 8, dict(kernel_size=3, padding=1), (1, 4, 5, 9, 9)),
        (3, 6, dict(kernel_size=(3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3)), (2, 3, 4, 16, 16)),
        (6, 6, dict(kernel_size=3, padding=1, groups=6), (1, 6, 6, 7, 8)),  # depthwise
        (4, 6, dict(kernel_size=(1, 3, 3), padding=(0, 1, 1), groups=2), (1, 4, 3, 6, 6)),
        (5, 4, dict(kernel_size=(3, 1, 1)), (1, 5, 7, 4, 5)),  # R(2+1)D's temporal conv
        (3, 4, dict(kernel_size=2, stride=2, dilation=1), (1, 3, 6, 8, 8)),
        (3, 4, dict(kernel_size=3, dilation=(2, 1, 2), padding=(2, 0, 1)), (1, 3, 7, 6, 9)),
        (2, 3, dict(kernel_size=(2, 3, 3), stride=(3, 1, 2)), (2, 2, 8, 7, 7)),
    ],
)
def test_conv3d(ci: int, co: int, kw: dict[str, Any], shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    _check(_Net(ci, co, **kw).eval(), shape)


def test_conv3d_random() -> None:
    rng = random.Random(3)
    torch.manual_seed(3)
    done = 0
    while done < 25:
        k = [rng.randint(1, 3) for _ in range(3)]
        s = [rng.randint(1, 2) for _ in range(3)]
        d = [rng.choice([1, 1, 2]) for _ in range(3)]
        p = [rng.randint(0, d[i] * (k[i] - 1) // 2 + 1) for i in range(3)]
        g = rng.choice([1, 1, 2])
        ci, co = g * rng.randint(1, 3), g * rng.randint(1, 3)
        shape = (rng.randint(1, 2), ci, rng.randint(1, 6), rng.randint(1, 8), rng.randint(1, 8))
        if any(shape[2 + i] + 2 * p[i] < d[i] * (k[i] - 1) + 1 for i in range(3)):
            continue
        m = nn.Conv3d(ci, co, k, s, p, d, g).eval()
        _check(m, shape)
        done += 1


class _Pool(nn.Module):
    def __init__(self, **kw: Any) -> None:
        super().__init__()
        self.p = nn.MaxPool3d(**kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.p(x * 2.0) + 1.0


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=(1, 2, 2)),
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(2, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), ceil_mode=True),
        dict(kernel_size=(3, 2, 2), stride=(2, 1, 1), dilation=(2, 1, 2)),
        dict(kernel_size=(2, 1, 1)),
    ],
)
def test_max_pool3d_separable(kw: dict[str, Any]) -> None:
    """3-d max pools as a depth pool then an H x W pool: inside, equal to eager (NaN kept)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 9, 10)
    x[0, 1, 2, 3, 4] = float("nan")
    _inside_and_equal(_Pool(**kw), x, exact=True)


def test_max_pool3d_with_indices_used_stays_portable() -> None:
    class _Idx(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.nn.functional.max_pool3d(x, 2, return_indices=True)

    x = torch.randn(1, 2, 4, 6, 6)
    prog = ember.export(_Idx().eval(), (x,))
    assert "aten::max_pool3d_with_indices.out" in _outside(prog)
    got = RuntimeProgram(prog.buffer, threads=1).run("forward", [x])
    want = _Idx()(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
