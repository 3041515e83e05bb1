"""torch's _safe_softmax (scaled_dot_product_attention's decomposition: a softmax whose fully
masked rows, every logit -inf, give zeros) in EmberCpuBackend as one softmax with
EMC_SOFTMAX_SAFE (blob version 17) instead of a softmax and five portable boolean operators over
the attention matrix. Checked against eager and the portable run of the same graph at 1 and 2
threads, with fully masked rows, NaN rows, causal and boolean masks, nothing left outside the
delegate; a pattern whose plain softmax is also read elsewhere stays as written; the runtime
refuses a bad flag.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_safe_softmax.py
"""

from __future__ import annotations

import struct

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import _blob_ops, _outside
from torch import nn

import ember
from ember.backends.check import runtime_check
from ember.backends.delegate import DelegateInstr
from ember.runtime import RuntimeProgram

SOFTMAX, SAFE = 8, 6  # EMC_OP_SOFTMAX, EMC_SOFTMAX_SAFE


class _Attn(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
    ) -> torch.Tensor:
        if self.mode == "none":
            return F.scaled_dot_product_attention(q, k, v) + m
        if self.mode == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True) + m
        if self.mode == "bool":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _inputs(seed: int, heads: int = 3, s: int = 7, d: int = 16) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, heads, s, d, generator=g) for _ in range(3))
    m = torch.randn(2, 1, s, s, generator=g)
    m[0, 0, 2, :] = float("-inf")  # a fully masked row: zeros
    m[1, 0, :, 3] = float("-inf")
    return [q, k, v, m]


def _safe_flags(prog: ember.Program) -> list[int]:
    out = []
    for kind, at, _ in _blob_ops(prog):
        if kind == SOFTMAX:
            blob = next(
                bytes(i.processed)
                for i in prog._irs["forward"].instrs
                if isinstance(i, DelegateInstr)
            )
            out.append(struct.unpack_from("<i", blob, at + 32 + 4 * SAFE)[0])
    return out


@pytest.mark.parametrize("mode", ["none", "causal", "bool", "additive"])
def test_sdpa_runs_inside_with_safe_rows(mode: str) -> None:
    m = _Attn(mode).eval()
    x = _inputs(0)
    if mode in ("none", "causal"):  # no mask: an addend instead
        x[3] = x[3][:, :, :, :1].expand(-1, -1, -1, 16).contiguous()
    prog = ember.export(m, tuple(x))
    # a boolean mask becomes where(mask, 0, -inf) first: outside, on the mask alone
    allowed = ["aten::gt.Scalar_out", "aten::where.self_out"] if mode == "bool" else []
    assert _outside(prog) == allowed, _outside(prog)
    assert _safe_flags(prog) == [1], _safe_flags(prog)
    plain = ember.export(m, tuple(x), backend=None)
    for seed in (1, 2):
        x2 = _inputs(seed)
        if mode in ("none", "causal"):
            x2[3] = x2[3][:, :, :, :1].expand(-1, -1, -1, 16).contiguous()
        if mode == "bool":
            x2[3][0, 0, 4, :] = -1.0  # every key masked out for one query
        want = RuntimeProgram(plain.buffer).run("forward", x2)[0]
        torch.testing.assert_close(want, m(*x2), rtol=1e-5, atol=1e-6, equal_nan=True)
        for t in (1, 2):
            got = RuntimeProgram(prog.buffer, threads=t).run("forward", x2)[0]
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        if mode in ("additive", "bool"):
            row = want[0, :, 2 if mode == "additive" else 4]
            assert torch.equal(row, torch.zeros_like(row)), row


def test_nan_rows_stay_nan() -> None:
    """A row with a NaN logit is not fully masked: NaN as in eager, not zeros."""
    m = _Attn("additive").eval()
    x = _inputs(0)
    prog = ember.export(m, tuple(x))
    x2 = _inputs(3)
    x2[3][1, 0, 5, :] = float("-inf")
    x2[3][1, 0, 5, 2] = float("nan")
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", x2)[0]
    want = m(*x2)
    assert torch.isnan(want[1, :, 5]).all() and torch.isnan(got[1, :, 5]).all()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


class _Shared(nn.Module):
    """The safe softmax written out, its plain softmax also returned: not fused (its plain
    result is needed), still right."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.softmax(x, -1)
        full = x.eq(float("-inf")).logical_not().any(-1, keepdim=True).logical_not()
        return torch.where(full, torch.zeros_like(s), s), s * 2


def test_plain_softmax_read_elsewhere_is_left_as_written() -> None:
    m = _Shared().eval()
    x = torch.randn(3, 5, 6)
    x[1, 2] = float("-inf")
    prog = ember.export(m, (x,))
    assert _safe_flags(prog) == [0] or not _safe_flags(prog)
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x])
    for g, w in zip(got, m(x), strict=True):
        torch.testing.assert_close(g, w, equal_nan=True)


def test_runtime_refuses_bad_flags() -> None:
    prog = ember.export(_Attn("additive").eval(), tuple(_inputs(0)))
    d = next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr))
    blob = bytes(d.processed)
    at = next(at for kind, at, _ in _blob_ops(prog) if kind == SOFTMAX)
    assert runtime_check("EmberCpuBackend", blob, 1 << 22) is None
    for slot, value in ((SAFE, 2), (SAFE, -1), (3, 1)):  # a bad flag; safe with log
        bad = bytearray(blob)
        struct.pack_into("<i", bad, at + 32 + 4 * slot, value)
        assert runtime_check("EmberCpuBackend", bytes(bad), 1 << 22) is not None, (slot, value)
