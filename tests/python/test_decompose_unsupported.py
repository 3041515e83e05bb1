"""Operators the runtime has no kernel for, decomposed at export instead of refused
(``ember.passes.decompose.decompose_unsupported``): ``nn.Bilinear``'s ``_trilinear``,
``nn.RReLU`` in eval mode, 3-d average and adaptive average pools (Ember's own decompositions),
and any operator PyTorch's full table decomposes when the operator list lacks its kernel (a 3-D
max pool, an adaptive max pool). Each
against eager on the default path and the portable one; an operator neither table has is still
refused with the verifier's message.

Run: .venv/bin/python -m pytest tests/python/test_decompose_unsupported.py
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember
from ember.errors import UnsupportedOperatorError
from ember.oplist import OpList, load_oplist
from ember.runtime import RuntimeProgram


class _Fn(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor], *mods: nn.Module) -> None:
        super().__init__()
        self.fn, self.mods = fn, nn.ModuleList(mods)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(self.mods, *xs)


def _check(m: nn.Module, xs: tuple[torch.Tensor, ...], oplist: OpList | None = None) -> None:
    with torch.no_grad():
        want = m(*xs)
    for backend in ("cpu", None):
        prog = ember.export(m, xs, backend=backend, oplist=oplist)
        got = RuntimeProgram(prog.buffer, threads=1).run("forward", list(xs))[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _without(*kernels: str) -> OpList:
    full = load_oplist()
    return OpList({k: v for k, v in full.kernels.items() if k not in kernels})


@pytest.mark.parametrize(("i", "j", "o", "bias"), [(6, 5, 4, True), (8, 8, 1, False)])
def test_bilinear(i: int, j: int, o: int, bias: bool) -> None:
    torch.manual_seed(0)
    m = _Fn(lambda ms, a, b: ms[0](a, b), nn.Bilinear(i, j, o, bias=bias)).eval()
    _check(m, (torch.randn(3, i), torch.randn(3, j)))


def test_bilinear_batched_dims() -> None:
    torch.manual_seed(1)
    m = _Fn(lambda ms, a, b: ms[0](a, b), nn.Bilinear(4, 3, 5)).eval()
    _check(m, (torch.randn(2, 3, 4), torch.randn(2, 3, 3)))


def test_rrelu_eval() -> None:
    m = _Fn(lambda ms, x: ms[0](x) * 2, nn.RReLU(0.1, 0.3)).eval()
    _check(m, (torch.randn(4, 7),))


def test_pytorch_table_when_the_kernel_is_missing() -> None:
    """With their kernels taken out of the operator list, a 3-D max pool and an adaptive max
    pool are decomposed by PyTorch's table and still equal eager."""
    torch.manual_seed(2)
    ol = _without("aten::max_pool3d_with_indices.out", "aten::adaptive_max_pool2d.out")
    m3 = _Fn(lambda ms, x: F.max_pool3d(x, 2, stride=(1, 2, 2), padding=1)).eval()
    _check(m3, (torch.randn(1, 3, 5, 6, 7),), ol)
    ma = _Fn(lambda ms, x: F.adaptive_max_pool2d(x, (3, 2)) + 1).eval()
    _check(ma, (torch.randn(2, 4, 6, 4),), ol)  # PyTorch decomposes divisible sizes only


def test_no_decomposition_still_refused() -> None:
    m = _Fn(lambda ms, x: torch.cdist(x, x + 1)).eval()
    with pytest.raises(UnsupportedOperatorError, match="_cdist_forward"):
        ember.export(m, (torch.randn(3, 4),), oplist=_without("aten::_cdist_forward.out"))


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 0), ceil_mode=True),
        dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
        dict(kernel_size=(3, 2, 3), stride=(2, 2, 1), padding=(1, 1, 1), ceil_mode=True,
             count_include_pad=False),
    ],
)  # fmt: skip
def test_avg_pool3d_separable(kw: dict) -> None:
    """3-d average pools (no kernel in the runtime): a depth pool, then an H x W pool."""
    torch.manual_seed(3)
    m = _Fn(lambda ms, x: F.avg_pool3d(x, **kw) * 2).eval()
    _check(m, (torch.randn(2, 3, 7, 9, 8),))


@pytest.mark.parametrize("size", [(1, 1, 1), (2, 3, 3), (3, 4, 5)])
def test_adaptive_avg_pool3d(size: tuple[int, int, int]) -> None:
    torch.manual_seed(4)
    m = _Fn(lambda ms, x: F.adaptive_avg_pool3d(x, size) + 1).eval()
    _check(m, (torch.randn(1, 4, 7, 9, 10),))
    _check(m, (torch.randn(4, 6, 8, 8),))  # unbatched [C, D, H, W]
