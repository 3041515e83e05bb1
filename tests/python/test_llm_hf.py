"""ember.llm from transformers: tiny random Llama / Qwen2 configurations converted with
``llama.from_transformers`` / ``llama.random_from_config`` and exported with ``ember.llm.export``;
the C runtime's prefill and KV-cached decode steps match transformers' eager logits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember.llm import export, llama

transformers = pytest.importorskip("transformers")

TINY: dict[str, Any] = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=96,
    vocab_size=256,
    rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
    attn_implementation="eager",
)
PREFILL, DECODE = 6, 3


def _hf_llama(**kw: Any) -> Any:
    return transformers.LlamaConfig(**{**TINY, "bos_token_id": 1, "eos_token_id": 2, **kw})


def _hf_qwen2(**kw: Any) -> Any:
    return transformers.Qwen2Config(**{**TINY, "bos_token_id": 5, "eos_token_id": [6, 7], **kw})


def _random_hf(hc: Any, seed: int = 0) -> Any:
    """The transformers model with every parameter (norm weights and biases included) drawn
    large enough that a wrong mapping shows far above the tolerance."""
    torch.manual_seed(seed)
    arch = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}
    hf = arch[hc.model_type](hc).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(torch.randn_like(p) * 0.15 + (1.0 if "norm" in name else 0.0))
    return hf


def _tokens(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (1, n), generator=torch.Generator().manual_seed(seed))


def _runtime_logits(prog: Any, toks: torch.Tensor) -> torch.Tensor:
    """Prefill PREFILL tokens, then decode the rest one at a time at increasing start_pos."""
    outs = [prog.run(toks[:, :PREFILL], torch.tensor([0]))]
    for i in range(PREFILL, toks.shape[1]):
        outs.append(prog.run(toks[:, i : i + 1], torch.tensor([i])))
    return torch.cat(outs, 1)


def _check_runtime(hf: Any, tmp_path: Path, tol: float = 1e-4, **kw: Any) -> float:
    toks = _tokens(PREFILL + DECODE)
    with torch.no_grad():
        ref = hf(toks).logits
    assert ref.std().item() > 0.3, "reference logits too flat to test the mapping"
    prog = export(
        hf, tmp_path / "m.pte", max_seq_len=16, max_prefill=8, last_logits_only=False, **kw
    )
    rt = ember.load(tmp_path / "m.pte")
    assert rt.run(method="get_vocab_size").tolist() == [256]
    out = _runtime_logits(rt, toks)
    assert out.shape == ref.shape
    err = (out - ref).abs().max().item()
    assert err <= tol, f"max |runtime - transformers| = {err}"
    del prog
    return err


@pytest.mark.parametrize(
    "hc",
    [
        pytest.param(_hf_llama(), id="llama"),
        pytest.param(_hf_llama(tie_word_embeddings=True, head_dim=32), id="llama-tied-hd32"),
        pytest.param(_hf_qwen2(tie_word_embeddings=True), id="qwen2-tied"),
        pytest.param(_hf_qwen2(tie_word_embeddings=False), id="qwen2-untied"),
    ],
)
def test_runtime_matches_transformers(hc: Any, tmp_path: Path) -> None:
    hf = _random_hf(hc)
    m = llama.from_transformers(hf, max_seq_len=16)
    assert m.c.tie_embeddings == hc.tie_word_embeddings
    assert m.c.attention_bias == (hc.model_type == "qwen2")
    assert m.c.head_dim == (getattr(hc, "head_dim", None) or 64 // 4)
    _check_runtime(hf, tmp_path)


def test_metadata_from_config(tmp_path: Path) -> None:
    prog = export(_hf_qwen2(), tmp_path / "q.pte", max_seq_len=16, max_prefill=4)
    assert prog.run(method="get_bos_id").tolist() == [5]
    assert prog.run(method="get_eos_ids").tolist() == [6, 7]
    assert prog.run(method="get_max_seq_len").tolist() == [16]


def test_random_from_config_is_transformers_init() -> None:
    """random_from_config(seed) is transformers' own initialization under that seed, and
    last_logits_only returns the last position only."""
    hc = _hf_qwen2()
    torch.manual_seed(3)
    hf = transformers.Qwen2ForCausalLM(hc).eval()
    m = llama.random_from_config(hc, seed=3, max_seq_len=16, last_logits_only=True)
    toks = _tokens(PREFILL)
    with torch.no_grad():
        ref = hf(toks).logits[:, -1:]
        out = m(toks, torch.tensor([0]))
    assert out.shape == ref.shape
    assert (out - ref).abs().max().item() <= 1e-5
    other = llama.random_from_config(hc, seed=4, max_seq_len=16)
    assert not torch.equal(other.tok_embeddings.weight, m.tok_embeddings.weight)


def test_quantized_8w_stays_close(tmp_path: Path) -> None:
    hf = _random_hf(_hf_qwen2())
    toks = _tokens(PREFILL + DECODE)
    with torch.no_grad():
        ref = hf(toks).logits
    export(
        hf, tmp_path / "q8.pte", max_seq_len=16, max_prefill=8, last_logits_only=False, quant="8w"
    )
    out = _runtime_logits(ember.load(tmp_path / "q8.pte"), toks)
    err = (out - ref).abs().max().item()
    # int8 per channel: visibly not exact, yet far closer than a mis-mapped model (errors ~1)
    assert 0 < err <= 0.1 * ref.abs().max().item(), err


@pytest.mark.parametrize(
    ("hc", "match"),
    [
        pytest.param(
            _hf_llama(
                rope_parameters={
                    "rope_type": "llama3",
                    "rope_theta": 500000.0,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
                max_position_embeddings=16384,
            ),
            "rope scaling 'llama3'",
            id="rope-llama3",
        ),
        pytest.param(
            _hf_qwen2(use_sliding_window=True, sliding_window=4), "sliding", id="sliding-window"
        ),
        pytest.param(_hf_llama(hidden_act="gelu"), "hidden_act", id="gelu"),
        pytest.param(_hf_llama(mlp_bias=True), "mlp_bias", id="mlp-bias"),
        pytest.param(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2), "gpt2", id="gpt2"),
    ],
)
def test_unsupported_config_raises(hc: Any, match: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=match):
        export(hc, tmp_path / "x.pte", max_seq_len=16)


def test_unsupported_object_raises() -> None:
    with pytest.raises(ValueError, match="cannot export"):
        export(torch.nn.Linear(2, 2))


def test_size_study_rows() -> None:
    hc = _hf_llama(num_hidden_layers=1, tie_word_embeddings=True)
    rows = llama.size_study(hc, quants=(None, "8w"), max_seq_len=16, max_prefill=4)
    # tied: the embedding once; per layer q,o [64x64] + k,v [64x32] + 3 MLP [64x96] + 2 norms
    params = 256 * 64 + (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96 + 2 * 64) + 64
    assert [r["quant"] for r in rows] == [None, "8w"]
    assert all(r["params"] == params for r in rows)
    f32, q8 = (int(r["pte_bytes"]) for r in rows)  # type: ignore[call-overload]
    assert f32 > 4 * params and q8 < f32 / 2


@pytest.mark.parametrize(
    "hc",
    [
        pytest.param(_hf_llama(attention_bias=True), id="llama-attention-bias"),
        pytest.param(_hf_llama(num_key_value_heads=4), id="llama-mha"),
    ],
)
def test_eager_matches_transformers(hc: Any) -> None:
    """Configurations checked in eager only (the runtime path is the same graph)."""
    hf = _random_hf(hc)
    m = llama.from_transformers(hf, max_seq_len=16)
    toks = _tokens(PREFILL + DECODE)
    with torch.no_grad():
        err = (m(toks, torch.tensor([0])) - hf(toks).logits).abs().max().item()
    assert err <= 1e-4, err
