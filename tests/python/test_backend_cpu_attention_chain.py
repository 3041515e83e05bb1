"""Attention's scores gemm, softmax and probabilities-by-V gemm run head by head as one chain
(backends/cpu/cpu_op_attn.c): the same bytes as the three operators one by one, at 1 and 2
threads, with and without a scale and a mask, in f32 and in the dynamic int8 form; the exporter
keeps every tensor the three touch alive through all three, so the runtime finds them apart and
takes the chain (one profile line where the operators ran three).

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_attention_chain.py
"""

from __future__ import annotations

import pytest
import torch
from backend_cpu_common import _assert_fused_same_as_apart, _outside, _profile_lines, _run
from torch import nn

import ember


class _Attn(nn.Module):
    """A projection, multi-head attention over it (heads x seq x d) and an output projection."""

    def __init__(self, dim: int, heads: int, masked: bool, scaled: bool) -> None:
        super().__init__()
        self.h, self.masked, self.scaled = heads, masked, scaled
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = q @ k.transpose(-1, -2)
        if self.scaled:
            a = a * (d // self.h) ** -0.5
        if self.masked:
            a = a + mask
        o = torch.softmax(a, -1) @ v
        return self.out(o.transpose(1, 2).reshape(b, s, d))


def _inputs(seq: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seq + dim)
    mask = torch.zeros(1, 1, seq, seq)
    mask[..., : seq // 3] = float("-inf")
    mask[..., 0] = 0.0  # no row fully masked
    return torch.randn(1, seq, dim, generator=g), mask


@pytest.mark.parametrize(
    "heads,seq,masked,scaled",
    [(4, 37, True, True), (8, 64, False, True), (6, 130, True, False), (2, 17, False, False)],
)
def test_chain_same_bytes_as_apart(
    heads: int, seq: int, masked: bool, scaled: bool, tmp_path
) -> None:
    dim = heads * 16
    torch.manual_seed(heads)
    m = _Attn(dim, heads, masked, scaled).eval()
    x = _inputs(seq, dim)
    prog = ember.export(m, x)
    assert not _outside(prog), _outside(prog)
    _assert_fused_same_as_apart(prog, x)
    torch.testing.assert_close(_run(prog, x, 2), m(*x), rtol=1e-4, atol=1e-5)
    pte = str(tmp_path / "attn.pte")
    prog.save(pte)
    fused, apart = _profile_lines(pte), _profile_lines(pte, no_fuse=True)
    assert len(apart) - len(fused) == 2, (fused, apart)  # three operators, one line


def test_chain_in_the_dynamic_int8_form(tmp_path) -> None:
    import ember.quant.pt2e

    heads, seq, dim = 6, 50, 96
    torch.manual_seed(3)
    m = _Attn(dim, heads, True, True).eval()
    x = _inputs(seq, dim)
    ep = ember.quant.pt2e.quantize_exported(m, x, None, dynamic=True, progress=False)
    prog = ember.export(ep, x)
    _assert_fused_same_as_apart(prog, x)
    pte = str(tmp_path / "attn_q.pte")
    prog.save(pte)
    assert len(_profile_lines(pte, no_fuse=True)) - len(_profile_lines(pte)) == 2
