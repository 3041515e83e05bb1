"""Ember's fused LLM operators in a Llama (ember.llm.llama.use_fused_ops; the kernels are tested
one by one in tests/python/kernels/test_kernels_llm_fused.py): the exported program with them
gives the same bits on the C runtime as the decomposed one, prefill and decode; it runs fewer
instructions; eager logits do not change; and the default keeps an f32 model's file to stock
ExecuTorch operators while a quantized one (already Ember-only) gets the fused ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_llm_llama import _random_llama

import ember
from ember.inspect import program_instructions
from ember.llm import export
from ember.llm.llama import Llama, fuse_projections, use_fused_ops

FUSED = {"ember::rms_norm.out", "ember::rope.out", "ember::swiglu.out"}


def _reset(m: Llama) -> None:
    for layer in m.layers:
        layer.attention.k_cache.zero_()
        layer.attention.v_cache.zero_()


def _run_c(path: Path, toks: torch.Tensor, prefill: int) -> torch.Tensor:
    """Logits of a prefill of ``prefill`` tokens then one decode step per further token."""
    r = ember.load(path)
    outs = [r.run(toks[:, :prefill], torch.tensor([0]))]
    outs += [r.run(toks[:, i : i + 1], torch.tensor([i])) for i in range(prefill, toks.shape[1])]
    return torch.cat(outs, 1)


def _names(path: Path) -> list[str]:
    return [i.name for i in program_instructions(path.read_bytes())]


def test_fused_program_same_bits_fewer_instructions(tmp_path: Path) -> None:
    m = _random_llama(max_seq_len=24, n_layers=3)
    fuse_projections(m)
    toks = torch.randint(0, 300, (1, 15), generator=torch.Generator().manual_seed(5))
    got, names = {}, {}
    for fused in (False, True):
        _reset(m)
        p = tmp_path / f"fused_{fused}.pte"
        export(m, p, max_prefill=8, fused_ops=fused)
        names[fused] = _names(p)
        got[fused] = _run_c(p, toks, 8)
    assert not FUSED & set(names[False])
    assert FUSED <= set(names[True])
    for gone in ("aten::rsqrt.out", "aten::neg.out", "aten::cat.out", "aten::sigmoid.out"):
        assert gone in names[False] and gone not in names[True], gone
    assert names[True].count("ember::rms_norm.out") == 2 * 3 + 1
    assert names[True].count("ember::rope.out") == 2 * 3
    assert len(names[True]) < 0.65 * len(names[False])
    assert torch.equal(got[True], got[False])
    _reset(m)
    with torch.no_grad():
        ref = m(toks, torch.tensor([0]))
    torch.testing.assert_close(got[True], ref, rtol=1e-4, atol=1e-4)


def test_eager_logits_unchanged() -> None:
    m = _random_llama(max_seq_len=16)
    toks = torch.randint(0, 300, (1, 7), generator=torch.Generator().manual_seed(6))
    out = {}
    for fused in (False, True):
        use_fused_ops(m, fused)
        for proj in (False, True):
            if proj:
                fuse_projections(m)
            _reset(m)
            with torch.no_grad():
                out[fused, proj] = m(toks, torch.tensor([0]))
        m = _random_llama(max_seq_len=16)
    assert torch.equal(out[True, False], out[False, False])
    assert torch.equal(out[True, True], out[False, True])


def test_default_fuses_only_ember_only_models(tmp_path: Path) -> None:
    from ember.llm import quantize_llm

    m = _random_llama(max_seq_len=16)
    export(m, tmp_path / "f32.pte", max_prefill=4)
    assert not FUSED & set(_names(tmp_path / "f32.pte"))
    quantize_llm(m, "4w32")
    export(m, tmp_path / "q4.pte", max_prefill=4)
    assert FUSED <= set(_names(tmp_path / "q4.pte"))


class _Bad(torch.nn.Module):
    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from ember.llm import fused_ops

        if self.op == "rope":
            return fused_ops.rope(x, y, y)
        if self.op == "rms_norm":
            return fused_ops.rms_norm(x, y, 1e-5)
        return fused_ops.swiglu(x)


@pytest.mark.parametrize(
    "op,xs,ys,match",
    [
        ("rope", (2, 3, 8), (3, 4), "rope: cos"),
        ("rope", (2, 3, 8), (2, 8, 8), "rope: cos"),
        ("rope", (2, 3, 7), (3, 7), "rope: last dim must be even"),
        ("rms_norm", (2, 8), (7,), "rms_norm: weight"),
        ("swiglu", (2, 5), (1,), "swiglu: last dim must be even"),
    ],
)
def test_bad_shapes_refused_at_export(op: str, xs: tuple, ys: tuple, match: str) -> None:
    """Shapes the kernels refuse are refused by ember.export first, naming what was wrong."""
    args = (torch.randn(xs), torch.randn(ys))
    with pytest.raises(Exception, match=match):
        ember.export(_Bad(op), args)
