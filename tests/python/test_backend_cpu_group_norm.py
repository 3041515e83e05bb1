"""Group norm in EmberCpuBackend: ``native_group_norm`` runs as a layer norm without affine over
each (sample, group)'s values, then the per-channel weight and bias as a channel affine that
takes the activation after it (GroupNorm + SiLU of diffusion UNets; wav2vec2's feature encoder;
BiT; PoolFormer's GroupNorm(1, C)), instead of a portable operator between two delegates.
Checked against eager and the portable path at 1 and 2 threads, affine or not, 2-, 3- and 4-d
inputs, one group to one group per channel.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_group_norm.py
"""

from __future__ import annotations

import pytest
import torch
from backend_cpu_common import _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram


def _gn(groups: int, c: int, affine: bool) -> nn.GroupNorm:
    g = nn.GroupNorm(groups, c, eps=1e-5, affine=affine)
    if affine:
        with torch.no_grad():
            g.weight.normal_()
            g.bias.normal_()
    return g


CASES = {
    "conv_gn_silu": (
        lambda: nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), _gn(8, 32, True), nn.SiLU()),
        (2, 3, 9, 11),
    ),
    "one_group": (lambda: _gn(1, 16, False), (1, 16, 5, 5)),
    "per_channel_1d": (
        lambda: nn.Sequential(nn.Conv1d(4, 16, 3), _gn(16, 16, True), nn.GELU()),
        (2, 4, 40),
    ),
    "rows": (lambda: _gn(4, 12, True), (3, 12)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_group_norm_inside_and_right(name: str) -> None:
    torch.manual_seed(0)
    build, shape = CASES[name]
    m = build().eval()
    x = torch.randn(*shape)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    plain = ember.export(m, (x,), backend=None)
    x2 = torch.randn(*shape) * 3 + 1
    want = m(x2)
    for p, threads in ((prog, 1), (prog, 2), (plain, 1)):
        got = RuntimeProgram(p.buffer, threads=threads).run("forward", [x2])[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
