"""``where(x > 0, x, w * x)`` (``nn.PReLU`` after Core ATen, a hand-written leaky ReLU) exported
as ``clamp(x, min=0) + w * clamp(x, max=0)`` (``ember.passes.prelu``): inside EmberCpuBackend
(no portable comparison or select left), equal to eager on the default and portable paths at 1
and 2 threads, NaN and infinities included; a select that is not this pattern is left alone.

Run: .venv/bin/python -m pytest tests/python/test_prelu_clamps.py
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from backend_cpu_common import _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram


class _Net(nn.Module):
    def __init__(self, act: Callable[[torch.Tensor], torch.Tensor] | nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x - 0.1) * 1.5


def _run(prog: ember.Program, x: torch.Tensor, threads: int) -> torch.Tensor:
    return RuntimeProgram(prog.buffer, threads=threads).run("forward", [x])[0]


@pytest.mark.parametrize(
    "act",
    [
        nn.PReLU(8),
        nn.PReLU(),
        lambda x: torch.where(x > 0, x, 0.2 * x),
        lambda x: torch.where(x > 0, x, x * torch.linspace(-1, 1, 8).view(1, 8, 1, 1)),
    ],
    ids=["prelu_channels", "prelu_one", "leaky_by_hand", "slope_tensor"],
)
def test_prelu_inside_and_equal(act: Callable[[torch.Tensor], torch.Tensor] | nn.Module) -> None:
    torch.manual_seed(0)
    if isinstance(act, nn.PReLU):
        act.weight.data.uniform_(-0.5, 0.5)
    m = _Net(act).eval()
    x = torch.randn(2, 8, 9, 7)
    x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    with torch.no_grad():
        want = m(x)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    for t in (1, 2):
        torch.testing.assert_close(_run(prog, x, t), want, equal_nan=True)
    plain = ember.export(m, (x,), backend=None)
    torch.testing.assert_close(_run(plain, x, 1), want, equal_nan=True)


def test_other_selects_untouched() -> None:
    """x >= 0 (not >), a select of another tensor: still right, not rewritten."""
    m = _Net(lambda x: torch.where(x >= 0, x, 0.3 * x) + torch.where(x > 0, x.exp(), x)).eval()
    x = torch.randn(1, 8, 5, 5)
    prog = ember.export(m, (x,))
    assert "aten::where.self_out" in _outside(prog)
    torch.testing.assert_close(_run(prog, x, 1), m(x))
