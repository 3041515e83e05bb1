"""A product with a constant left operand, ``W @ x`` (``torch.matmul(self.weight, x)``: token
mixing, graph convolutions), in EmberCpuBackend: W goes into the blob in the GEMM's 6-row A
panels (as a convolution's weights do) and x is read row-major as B, so the product, its bias
add and activation run in the backend instead of a portable ``aten::mm`` between two delegates
(the random graphs' ``matmul(const=left)`` left it portable: "gemm operands").

Checked against eager PyTorch on ragged shapes (rows not a multiple of 6, columns not of 16,
one row, one column, odd depths), with a bias and ReLU fused after it, at 1 and 2 threads, and
that nothing is left portable. A batched product (``bmm``) with a constant left operand (a
weight per batch, or one broadcast over it) reads it as it is, in the backend too.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_const_left.py
"""

from __future__ import annotations

import pytest
import torch
from backend_cpu_common import _run
from random_graph_check import delegation
from torch import nn

import ember


class _WX(nn.Module):
    def __init__(self, m: int, k: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(m, k) / k**0.5)
        self.b = nn.Parameter(torch.randn(m, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.matmul(self.w, x) + self.b)


@pytest.mark.parametrize(
    ("m", "k", "n"), [(9, 9, 24), (1, 5, 3), (13, 64, 7), (6, 128, 200), (7, 3, 1), (25, 300, 33)]
)
def test_constant_left_operand_runs_in_the_backend(m: int, k: int, n: int) -> None:
    torch.manual_seed(m * 1000 + k + n)
    model = _WX(m, k).eval()
    x = torch.randn(k, n)
    prog = ember.export(model, (x,))
    _, outside, delegates, feats = delegation(prog)
    assert delegates == 1 and not outside, (delegates, outside)
    assert feats["gemm"] == 1, feats
    with torch.no_grad():
        want = model(x)
    for th in (1, 2):
        torch.testing.assert_close(_run(prog, (x,), th), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("broadcast", [False, True])
def test_batched_constant_left_operand_inside(broadcast: bool) -> None:
    class BW(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(1 if broadcast else 3, 5, 7))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.matmul(self.w, x) if broadcast else torch.bmm(self.w, x)

    model, x = BW().eval(), torch.randn(3, 7, 4)
    prog = ember.export(model, (x,))
    inside, outside, _, _ = delegation(prog)
    assert not sum(outside.values()), outside
    with torch.no_grad():
        for t in (1, 2):
            torch.testing.assert_close(_run(prog, (x,), t), model(x), rtol=1e-5, atol=1e-5)
