"""Permutes in EmberCpuBackend: any permutation of 2-6 dims, bit for bit equal to eager (values are
copies: NaN and -0.0 kept), at 1 and 2 threads and on every ISA this CPU runs. A permute that moves
the input's last dim away from the output's last (attention's K^T, NCHW <-> NHWC) runs as 16 x 16
block transposes; one that keeps it copies rows. Shapes drawn at random, some past the size from
which a permute runs on both threads, with dims of 1-3 (which keep the row copy) mixed in.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_permute.py
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from backend_cpu_common import _blob_ops, _outside, _run_per_isa
from torch import nn

import ember
from ember.runtime import RuntimeProgram

PERMUTE = 10  # blob op kind (backends/cpu/emc_format.h EMC_OP_PERMUTE)


class _Perm(nn.Module):
    def __init__(self, perm: tuple[int, ...]) -> None:
        super().__init__()
        self.perm = perm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).permute(self.perm) * 2.0


def _hostile(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    flat[0], flat[-1] = float("nan"), -0.0
    return x


def _cases(n: int, seed: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    r = random.Random(seed)
    out = []
    while len(out) < n:
        nd = r.randint(2, 6)
        shape = [r.choice((1, 2, 3, 4, 5, 7, 16, 17, 31, 33, 64)) for _ in range(nd)]
        perm = list(range(nd))
        r.shuffle(perm)
        if perm == list(range(nd)) or torch.Size(shape).numel() > 400_000:
            continue
        out.append((tuple(shape), tuple(perm)))
    return out


# attention's shapes (ViT-B/16's K^T, MiniLM's heads), NCHW <-> NHWC, and sizes past 262144
# elements (both threads), plus random ones
_FIXED = [
    ((1, 12, 197, 64), (0, 1, 3, 2)),
    ((1, 128, 12, 32), (0, 2, 1, 3)),
    ((1, 24, 56, 56), (0, 2, 3, 1)),
    ((1, 56, 56, 24), (0, 3, 1, 2)),
    ((2, 8, 130, 130), (0, 1, 3, 2)),
    ((3, 300, 301), (0, 2, 1)),
    ((640, 515), (1, 0)),
]


@pytest.mark.parametrize("shape,perm", _FIXED + _cases(24, 7))
def test_permute_bit_exact(shape: tuple[int, ...], perm: tuple[int, ...]) -> None:
    x = _hostile(shape, sum(shape) + len(perm))
    m = _Perm(perm)
    prog = ember.export(m, (torch.randn(shape),))
    assert not _outside(prog), _outside(prog)
    if torch.Size(shape).numel() > 1 and any(s > 1 for s in shape):
        kinds = [k for k, _, _ in _blob_ops(prog)]
        assert PERMUTE in kinds or not any(
            shape[p] > 1 and shape[i] > 1 and p != i for i, p in enumerate(perm)
        ), kinds
    want = m(x)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0]
        assert got.shape == want.shape
        assert torch.equal(torch.nan_to_num(got, 7.0), torch.nan_to_num(want, 7.0)), (t, shape)
        assert torch.equal(torch.signbit(got), torch.signbit(want))


def test_transposing_permute_same_on_every_isa(tmp_path: Any) -> None:
    shape, perm = (2, 5, 37, 45), (0, 3, 1, 2)
    x = _hostile(shape, 3)
    m = _Perm(perm)
    prog = ember.export(m, (torch.randn(shape),))
    want = m(x)
    outs = _run_per_isa(prog, x, tmp_path, (None, "avx2", "scalar"))
    for isa, got in outs.items():
        assert torch.equal(torch.nan_to_num(got, 7.0), torch.nan_to_num(want, 7.0)), isa
