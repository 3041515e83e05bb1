"""1-d convolutions rewritten as 2-d ones of height 1 at export (python/ember/passes/conv1d.py):
``nn.Conv1d`` (strided, padded, "same", dilated, grouped, depthwise, without bias) runs in
EmberCpuBackend like any 2-d convolution instead of staying portable, and transposed ones stay
right wherever they run. Checked against eager on the default and portable paths at 1 and 2
threads.

Run: .venv/bin/python -m pytest tests/python/test_conv1d.py
"""

from __future__ import annotations

import pytest
import torch
from backend_cpu_common import _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram

CASES = {
    "strided": lambda: nn.Conv1d(4, 8, 5, stride=2, padding=2),
    "same_dilated": lambda: nn.Conv1d(4, 6, 3, padding="same", dilation=2, bias=False),
    "depthwise": lambda: nn.Conv1d(4, 4, 7, groups=4, padding=3),
    "grouped": lambda: nn.Conv1d(4, 8, 3, groups=2),
    "pointwise": lambda: nn.Conv1d(4, 16, 1),
    "stack": lambda: nn.Sequential(
        nn.Conv1d(4, 16, 10, stride=5), nn.GELU(), nn.Conv1d(16, 16, 3, stride=2), nn.ReLU()
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv1d_inside_and_right(name: str) -> None:
    torch.manual_seed(0)
    m = CASES[name]().eval()
    x = torch.randn(2, 4, 53)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    plain = ember.export(m, (x,), backend=None)
    x2 = torch.randn(2, 4, 53)
    want = m(x2)
    for p, threads in ((prog, 1), (prog, 2), (plain, 1)):
        got = RuntimeProgram(p.buffer, threads=threads).run("forward", [x2])[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("output_padding", [0, 1])
def test_transposed_conv1d_right(output_padding: int) -> None:
    torch.manual_seed(0)
    m = nn.ConvTranspose1d(4, 6, 4, stride=2, padding=1, output_padding=output_padding).eval()
    x = torch.randn(1, 4, 19)
    for backend in ("cpu", None):
        prog = ember.export(m, (x,), backend=backend)
        got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x])[0]
        torch.testing.assert_close(got, m(x), rtol=1e-5, atol=1e-5)
