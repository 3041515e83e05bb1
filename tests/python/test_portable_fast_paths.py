"""The portable kernels' fast paths for common layouts, each against eager on the same program.

A scan of the portable kernels on 1x64x64x64 maps found some of them at 15-50 ns an element
(generic per-element loops through dtype switches and strided offsets); these paths take the
common layouts directly and must give what the generic loops gave:

- index.Tensor gathers of single elements after free leading dims (a reflection pad's
  decomposition), every element size, negative and broadcast indices;
- upsample nearest (4-byte elements as words) and bilinear over f32 (plane by plane, taps per
  block of columns), more columns than one block;
- group norm over contiguous f32, with and without affine parameters.

Run: .venv/bin/python -m pytest tests/python/test_portable_fast_paths.py
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.runtime import RuntimeProgram


class _Fn(torch.nn.Module):
    def __init__(self, f: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.f = f

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x)


def _portable(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    prog = ember.export(_Fn(f).eval(), (x,), backend=None)
    return RuntimeProgram(prog.buffer, threads=1).run("forward", [x])[0]


_IH = torch.tensor([[2], [0], [-1], [1]])
_IW = torch.tensor([3, -2, 0])


@pytest.mark.parametrize(
    ("name", "f", "x"),
    [
        ("f32-hw", lambda x: x[:, :, _IH, _IW], torch.randn(2, 3, 5, 6)),
        ("f32-w", lambda x: x[:, :, :, _IW], torch.randn(2, 3, 5, 6)),
        ("i64", lambda x: x[:, :, _IH, _IW], torch.randint(-9, 9, (2, 3, 5, 6))),
        ("f16", lambda x: x.half()[:, _IH, _IW].float(), torch.randn(3, 5, 6)),
        ("bool", lambda x: (x > 0)[:, :, _IH, _IW].float(), torch.randn(2, 3, 5, 6)),
        ("apart", lambda x: x[:, _IH, :, _IW], torch.randn(2, 5, 4, 6)),
        ("reflect", lambda x: F.pad(x, [2, 3, 1, 2], mode="reflect"), torch.randn(1, 4, 7, 9)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_index_gathers(name: str, f: Callable, x: torch.Tensor) -> None:
    assert torch.equal(_portable(f, x), f(x)), name


@pytest.mark.parametrize("size", [(9, 11), (5, 300)], ids=["small", "wide"])
def test_upsample(size: tuple[int, int]) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, *size)
    near = lambda t: F.interpolate(t, scale_factor=2, mode="nearest")  # noqa: E731
    assert torch.equal(_portable(near, x), near(x))
    for align in (False, True):
        lin = lambda t, a=align: F.interpolate(  # noqa: E731
            t, size=(size[0] * 2 + 1, size[1] + 3), mode="bilinear", align_corners=a
        )
        torch.testing.assert_close(_portable(lin, x), lin(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("affine", [False, True])
def test_group_norm(affine: bool) -> None:
    torch.manual_seed(0)
    gn = torch.nn.GroupNorm(4, 12, affine=affine).eval()
    if affine:
        torch.nn.init.normal_(gn.weight)
        torch.nn.init.normal_(gn.bias)
    x = torch.randn(2, 12, 5, 7) * 3 + 1
    torch.testing.assert_close(_portable(gn, x), gn(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
def test_sum_over_a_middle_dim(mean: bool) -> None:
    """sum / mean of f32 over a middle dim (outputs summed side by side, past one block of 64):
    each output in double over its run in order, rounded once, as the generic loop."""
    torch.manual_seed(0)
    x = torch.randn(2, 7, 70) * 1e3
    f = (lambda t: t.mean(1)) if mean else (lambda t: t.sum(1))
    got = _portable(f, x)
    want = torch.zeros(2, 70, dtype=torch.float64)
    for j in range(7):  # the generic loop's order
        want += x[:, j].double()
    want = (want / 7 if mean else want).float()
    assert torch.equal(got, want)


@pytest.mark.parametrize("fn", [torch.maximum, torch.minimum], ids=["maximum", "minimum"])
def test_maximum_minimum_f32(fn: Callable) -> None:
    """maximum / minimum of f32 (the row path: same shape, and broadcast along a middle dim)
    with NaN, infinities and signed zeros, against eager."""
    vals = torch.tensor([0.0, -0.0, 1.5, -2.0, float("nan"), float("inf"), -float("inf")])
    g = torch.Generator().manual_seed(0)
    x = vals[torch.randint(0, 7, (2, 5, 3, 11), generator=g)]
    m = vals[torch.randint(0, 7, (2, 1, 3, 11), generator=g)]
    got = _portable(lambda t: fn(t, t.flip(3)), x)
    assert torch.allclose(got, fn(x, x.flip(3)), rtol=0, atol=0, equal_nan=True)
    got = _portable(lambda t: fn(t, t[:, :1] * 0.5), x)
    assert torch.allclose(got, fn(x, x[:, :1] * 0.5), rtol=0, atol=0, equal_nan=True)
    got = _portable(lambda t: fn(t, m), x)
    assert torch.allclose(got, fn(x, m), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("fn", [torch.amax, torch.amin], ids=["amax", "amin"])
def test_amax_amin_over_a_middle_dim(fn: Callable) -> None:
    """amax / amin of f32 over a middle dim (outputs side by side) with NaN, infinities and
    signed zeros, against eager."""
    vals = torch.tensor([0.0, -0.0, 1.5, -2.0, float("nan"), float("inf"), -float("inf")])
    g = torch.Generator().manual_seed(1)
    x = vals[torch.randint(0, 7, (2, 4, 70), generator=g)]
    x[:, :, :40] = torch.randn(2, 4, 40, generator=g)  # columns without specials too
    got = _portable(lambda t: fn(t, 1), x)
    assert torch.allclose(got, fn(x, 1), rtol=0, atol=0, equal_nan=True)
