"""A 1B-class Llama for the LLM benchmark (issue 29): seeded random weights written as a GGUF.

The model has Llama-3.2-1B's shape (16 layers, hidden 2048, 32 query / 8 KV heads of 64, FFN
8192, 128256-token vocabulary, tied embeddings, RoPE base 500000, RMSNorm eps 1e-5). Its weights
are drawn here (normal, std 0.02, from ``numpy.random.default_rng(seed)``; the norm gains
1 + N(0, 0.1) so that a swapped norm shows) and stored as an F16 GGUF, which is the one source
of every runtime's file: llama.cpp quantizes it with its own quantizer, Ember and ExecuTorch read
it through ``ember.llm.llama.load_gguf`` (F16 is exact in f32).

The weights are drawn directly in llama.cpp's layout, so no conversion is made on the way in: the
Q/K rows are in its RoPE order (adjacent pairs), which ``load_gguf`` turns back into the
rotate-half order Ember's model uses, as it does for any GGUF.

The tokenizer is SmolLM2's byte-level BPE (tokens, types, merges, pre-tokenizer) padded to
128256 entries with control tokens ``<|ember_pad_N|>`` that no text encodes to: the benchmark's
prompt then has the same 128 token ids in every runtime, and every id a model can emit decodes.

Files go to ``~/.cache/ember-bench/1b/seed<N>/``: made once, reused by later runs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("bench.llm_1b")

TOKEN_CONTROL = 3  # GGUF token type


@dataclass(frozen=True)
class Shape:
    n_layers: int = 16
    dim: int = 2048
    n_heads: int = 32
    n_kv_heads: int = 8
    hidden_dim: int = 8192
    vocab: int = 128256
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def kv_cache_bytes(self, seq: int, elem: int) -> int:
        """K and V caches of every layer for ``seq`` positions, ``elem`` bytes per value."""
        return 2 * self.n_layers * seq * self.n_kv_heads * self.head_dim * elem


LLAMA_1B = Shape()


def cache_dir(seed: int) -> Path:
    base = Path(os.path.expanduser("~/.cache/ember-bench/1b"))
    d = base / f"seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def tokenizer_fields(src_gguf: str | os.PathLike[str], vocab: int) -> dict:
    """SmolLM2's tokenizer from ``src_gguf`` padded to ``vocab`` tokens with control tokens."""
    from gguf import GGUFReader

    r = GGUFReader(str(src_gguf))

    def arr(name: str) -> list:
        f = r.fields[name]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    merges = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.merges")]
    if len(tokens) > vocab:
        raise ValueError(f"{src_gguf}: {len(tokens)} tokens, more than the vocabulary {vocab}")
    pad = [f"<|ember_pad_{i}|>" for i in range(len(tokens), vocab)]
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()

    def u32(name: str) -> int:
        return int(r.fields[name].parts[-1][0])

    return {
        "tokens": tokens + pad,
        "types": types + [TOKEN_CONTROL] * len(pad),
        "merges": merges,
        "pre": pre,
        "bos": u32("tokenizer.ggml.bos_token_id"),
        "eos": u32("tokenizer.ggml.eos_token_id"),
    }


def tensor_specs(s: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """(GGUF name, numpy shape [rows, cols], kind) of every tensor, in file order; kind is
    ``"w"`` for a matrix, ``"norm"`` for a norm gain. A matrix's rows are its outputs."""
    kv = s.n_kv_heads * s.head_dim
    out: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (s.vocab, s.dim), "w")]
    for i in range(s.n_layers):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (s.dim,), "norm"),
            (b + "attn_q.weight", (s.dim, s.dim), "w"),
            (b + "attn_k.weight", (kv, s.dim), "w"),
            (b + "attn_v.weight", (kv, s.dim), "w"),
            (b + "attn_output.weight", (s.dim, s.dim), "w"),
            (b + "ffn_norm.weight", (s.dim,), "norm"),
            (b + "ffn_gate.weight", (s.hidden_dim, s.dim), "w"),
            (b + "ffn_up.weight", (s.hidden_dim, s.dim), "w"),
            (b + "ffn_down.weight", (s.dim, s.hidden_dim), "w"),
        ]
    out.append(("output_norm.weight", (s.dim,), "norm"))
    return out


def write_gguf(
    path: str | os.PathLike[str],
    s: Shape,
    seed: int,
    tok: dict,
    std: float = 0.02,
    name: str = "ember-random-llama-1b",
) -> None:
    """Writes an F16 llama GGUF of shape ``s`` with weights drawn from ``seed`` (norm gains F32,
    as llama.cpp keeps them) and the tokenizer ``tok`` (:func:`tokenizer_fields`)."""
    from gguf import GGUFWriter, LlamaFileType

    rng = np.random.default_rng(seed)
    tmp = Path(str(path) + ".part")
    w = GGUFWriter(str(tmp), "llama")
    w.add_name(name)
    w.add_block_count(s.n_layers)
    w.add_context_length(8192)
    w.add_embedding_length(s.dim)
    w.add_feed_forward_length(s.hidden_dim)
    w.add_head_count(s.n_heads)
    w.add_head_count_kv(s.n_kv_heads)
    w.add_rope_freq_base(s.rope_theta)
    w.add_rope_dimension_count(s.head_dim)
    w.add_layer_norm_rms_eps(s.norm_eps)
    w.add_vocab_size(s.vocab)
    w.add_file_type(LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(tok["pre"])
    w.add_token_list(tok["tokens"])
    w.add_token_types(tok["types"])
    w.add_token_merges(tok["merges"])
    w.add_bos_token_id(tok["bos"])
    w.add_eos_token_id(tok["eos"])
    w.add_add_bos_token(False)
    for tname, shape, kind in tensor_specs(s):
        if kind == "norm":
            a = (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        else:
            a = (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float16)
        w.add_tensor(tname, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)


def quantize(src: Path, dst: Path, ggml_type: str, threads: int = 2, pure: bool = False) -> None:
    """``dst`` from ``src`` by llama.cpp's own quantizer (its default recipe for the type; with
    ``pure``, every matrix in that type, the tied embedding / output table included)."""
    import ctypes

    import llama_cpp

    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ggml_type}")
    p.nthread = threads
    p.pure = pure
    tmp = Path(str(dst) + ".part")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(p))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {ggml_type} failed ({rc})")
    tmp.replace(dst)


def llama_cpp_logits(path: str, ids: list[int], threads: int = 2) -> np.ndarray:
    """Every position's logits from llama.cpp for ``ids`` (one batch from position 0)."""
    from llama_cpp import Llama

    llm = Llama(
        path,
        n_ctx=max(64, len(ids)),
        n_batch=max(64, len(ids)),
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=True,
        verbose=False,
    )
    llm.eval(ids)
    nv = llm.n_vocab()
    out = np.array(llm.scores[: len(ids), :nv], dtype=np.float32)
    llm.close()
    return out


def agreement(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """How close two [positions, vocab] logit arrays are: top-1 agreement, the largest
    difference relative to the reference's spread, and the worst per-position cosine of the
    centred logits."""
    top1 = float(np.mean(ref.argmax(-1) == got.argmax(-1)))
    rc = ref - ref.mean(-1, keepdims=True)
    gc = got - got.mean(-1, keepdims=True)
    cos = (rc * gc).sum(-1) / (np.linalg.norm(rc, axis=-1) * np.linalg.norm(gc, axis=-1))
    return {
        "top1": top1,
        "max_abs": float(np.abs(ref - got).max()),
        "rel_max": float(np.abs(ref - got).max() / ref.std()),
        "min_cos": float(cos.min()),
    }


_NAMES = {
    "attention_norm.weight": "attn_norm",
    "attention.wq.weight": "attn_q",
    "attention.wk.weight": "attn_k",
    "attention.wv.weight": "attn_v",
    "attention.wo.weight": "attn_output",
    "ffn_norm.weight": "ffn_norm",
    "feed_forward.w1.weight": "ffn_gate",
    "feed_forward.w3.weight": "ffn_up",
    "feed_forward.w2.weight": "ffn_down",
}


def state_dict_f16(path: str | os.PathLike[str]) -> dict:
    """The GGUF's weights under Ember's (and ExecuTorch's llama) parameter names, as f16 torch
    tensors (norm gains f32), Q/K rows back in rotate-half order as ``load_gguf`` puts them: the
    ExecuTorch checkpoint, made without an f32 copy of the model."""
    import torch
    from gguf import GGUFReader

    from ember.llm import llama

    r = GGUFReader(str(path))
    t = {x.name: x for x in r.tensors}
    heads = {"attn_q": "llama.attention.head_count", "attn_k": "llama.attention.head_count_kv"}

    def get(name: str) -> torch.Tensor:
        x = t[name]
        shape = [int(v) for v in reversed(x.shape.tolist())]
        return torch.from_numpy(np.array(x.data).reshape(shape))

    sd = {
        "tok_embeddings.weight": get("token_embd.weight"),
        "norm.weight": get("output_norm.weight"),
    }
    n_layers = int(r.fields["llama.block_count"].parts[-1][0])
    for i in range(n_layers):
        for ours, theirs in _NAMES.items():
            w = get(f"blk.{i}.{theirs}.weight")
            if theirs in heads:
                w = llama._unpermute(w, int(r.fields[heads[theirs]].parts[-1][0])).contiguous()
            sd[f"layers.{i}.{ours}"] = w
    return sd


def ember_config(s: Shape, max_seq_len: int = 512):  # type: ignore[no-untyped-def]
    """Ember's :class:`ember.llm.llama.LlamaConfig` for ``s``."""
    from ember.llm import llama

    return llama.LlamaConfig(
        dim=s.dim,
        n_layers=s.n_layers,
        n_heads=s.n_heads,
        n_kv_heads=s.n_kv_heads,
        hidden_dim=s.hidden_dim,
        vocab_size=s.vocab,
        norm_eps=s.norm_eps,
        rope_theta=s.rope_theta,
        max_seq_len=max_seq_len,
    )
