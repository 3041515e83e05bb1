"""A Llama-architecture model for export (RMSNorm, RoPE, GQA, SiLU MLP, tied embeddings) with a
static KV cache held in registered buffers, and loading of SmolLM2-style weights from a GGUF file.

    model = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", max_seq_len=512)
    prog = export(model)                # forward(tokens[1,S], start_pos[1]) + metadata methods
    prog.save("smollm2.pte")

The forward contract is ExecuTorch's LLM runner's: ``forward(tokens [1, S] int64, start_pos [1]
int64) -> logits``; the cache rows [start_pos, start_pos + S) are written, and attention covers
rows [0, start_pos + S) with a causal mask. As in ExecuTorch's Llama export, ``start_pos`` is read
with ``.item()`` (bounded with ``torch._check``), the caches are updated in place by
``llama::update_cache`` and attention is ``llama::custom_sdpa`` (see :mod:`ember.llm.custom_ops`),
which reads only the rows [0, start_pos + S) and maps query heads to kv heads itself.

The projections are ``nn.Linear`` submodules called as modules (``self.wq(x)``), so a quantizer
can swap them for other modules.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ember.llm import custom_ops  # noqa: F401 - registers llama::update_cache / custom_sdpa

log = logging.getLogger(__name__)

__all__ = ["LlamaConfig", "Llama", "load_gguf", "export"]


@dataclass
class LlamaConfig:
    dim: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    hidden_dim: int = 1536
    vocab_size: int = 49152
    norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    max_seq_len: int = 512
    tie_embeddings: bool = True
    bos_id: int = 1
    eos_ids: list[int] = field(default_factory=lambda: [2])

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x * x rather than x.pow(2): the same values, and an elementwise mul the runtime does fast.
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


def _linear_t(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., K] times w [N, K]^T as (w @ x^T)^T: the exported graph transposes only the
    (small) activations and reads w as stored. Used for the output projection when it shares
    its weight with the embedding (folding aten.linear's weight transpose would store a second,
    transposed copy of the largest tensor)."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    return torch.mm(w, x2.t()).t().reshape(*lead, w.shape[0])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.wq = nn.Linear(c.dim, c.n_heads * hd, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(c.n_heads * hd, c.dim, bias=False)
        # [1, max_seq_len, n_kv_heads, head_dim]: ExecuTorch's [B, S, H, D] cache layout.
        shape = (1, c.max_seq_len, c.n_kv_heads, hd)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def forward(
        self,
        x: torch.Tensor,  # [1, S, dim]
        cos: torch.Tensor,  # [1, S, 1, head_dim]
        sin: torch.Tensor,
        start_pos: int,  # a SymInt when exported (from .item())
    ) -> torch.Tensor:
        c = self.c
        B, S, _ = x.shape
        hd = c.head_dim
        q = self.wq(x).view(B, S, c.n_heads, hd)
        k = self.wk(x).view(B, S, c.n_kv_heads, hd)
        v = self.wv(x).view(B, S, c.n_kv_heads, hd)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        torch.ops.llama.update_cache(k, self.k_cache, start_pos)
        torch.ops.llama.update_cache(v, self.v_cache, start_pos)
        y = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start_pos, None, 0.0, True)
        return self.wo(y.reshape(B, S, c.n_heads * hd))


class FeedForward(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.hidden_dim, bias=False)  # gate
        self.w3 = nn.Linear(c.dim, c.hidden_dim, bias=False)  # up
        self.w2 = nn.Linear(c.hidden_dim, c.dim, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(c.dim, c.norm_eps)
        self.attention = Attention(c)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)
        self.feed_forward = FeedForward(c)

    def forward(self, x, cos, sin, start_pos):  # type: ignore[no-untyped-def]
        h = x + self.attention(self.attention_norm(x), cos, sin, start_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """forward(tokens [1, S] int64, start_pos [1] int64) -> logits [1, S, vocab] (or [1, 1, vocab]
    with ``last_logits_only``)."""

    def __init__(self, c: LlamaConfig, last_logits_only: bool = False) -> None:
        super().__init__()
        self.c = c
        self.last_logits_only = last_logits_only
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        hd = c.head_dim
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.outer(torch.arange(c.max_seq_len, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)  # [max_seq_len, head_dim]
        self.register_buffer("rope_cos", ang.cos().float(), persistent=False)
        self.register_buffer("rope_sin", ang.sin().float(), persistent=False)

    def forward(self, tokens: torch.Tensor, start_pos: torch.Tensor) -> torch.Tensor:
        S = tokens.shape[1]
        p = start_pos[0].item()
        torch._check(p >= 0)
        torch._check(p + S <= self.c.max_seq_len)
        # [1, S, 1, head_dim]: the new tokens' rows, shaped once for every layer's broadcast
        cos = self.rope_cos[p : p + S][None, :, None, :]
        sin = self.rope_sin[p : p + S][None, :, None, :]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin, p)
        h = self.norm(h)
        if self.last_logits_only:
            h = h[:, -1:, :]
        if type(self.output) is nn.Linear and self.output.weight is self.tok_embeddings.weight:
            return _linear_t(h, self.output.weight)
        return self.output(h)


# ---------------------------------------------------------------- GGUF weights


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undoes llama.cpp's convert_hf_to_gguf Q/K row permutation (HF rotate-half order)."""
    return (
        w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def load_gguf(
    path: str | os.PathLike[str], max_seq_len: int = 512, last_logits_only: bool = False
) -> Llama:
    """Builds a Llama from a llama.cpp GGUF file (any ggml type ``gguf`` can dequantize)."""
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(str(path))

    def kv(name: str, default=None):  # type: ignore[no-untyped-def]
        f = r.fields.get(name)
        if f is None:
            return default
        if f.types[0].name == "ARRAY":
            return [f.parts[i].tolist()[0] for i in f.data]
        return f.parts[f.data[0]].tolist()[0]

    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}; only llama is supported")
    n_heads = kv("llama.attention.head_count")
    tensors = {t.name: t for t in r.tensors}
    c = LlamaConfig(
        dim=kv("llama.embedding_length"),
        n_layers=kv("llama.block_count"),
        n_heads=n_heads,
        n_kv_heads=kv("llama.attention.head_count_kv", n_heads),
        hidden_dim=kv("llama.feed_forward_length"),
        vocab_size=len(r.fields["tokenizer.ggml.tokens"].data),
        norm_eps=kv("llama.attention.layer_norm_rms_epsilon", 1e-5),
        rope_theta=kv("llama.rope.freq_base", 10000.0),
        max_seq_len=max_seq_len,
        tie_embeddings="output.weight" not in tensors,
        bos_id=kv("tokenizer.ggml.bos_token_id", 1),
        eos_ids=[kv("tokenizer.ggml.eos_token_id", 2)],
    )

    def get(name: str) -> torch.Tensor:
        t = tensors[name]
        a = dequantize(t.data, t.tensor_type)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32).reshape(shape))

    m = Llama(c, last_logits_only=last_logits_only)
    sd: dict[str, torch.Tensor] = {"tok_embeddings.weight": get("token_embd.weight")}
    sd["norm.weight"] = get("output_norm.weight")
    if not c.tie_embeddings:
        sd["output.weight"] = get("output.weight")
    names = {
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
    for i in range(c.n_layers):
        for ours, theirs in names.items():
            w = get(f"blk.{i}.{theirs}.weight")
            if theirs == "attn_q":
                w = _unpermute(w, c.n_heads)
            elif theirs == "attn_k":
                w = _unpermute(w, c.n_kv_heads)
            sd[f"layers.{i}.{ours}"] = w
    missing, unexpected = m.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "output.weight"]
    if missing or unexpected:
        raise ValueError(f"weights do not fit: missing {missing}, unexpected {unexpected}")
    return m.eval()


class _Const(nn.Module):
    def __init__(self, values: list[int]) -> None:
        super().__init__()
        self.values = values

    def forward(self) -> torch.Tensor:
        return torch.tensor(self.values, dtype=torch.int64)


def export(model: Llama, max_prefill: int = 128, **kwargs):  # type: ignore[no-untyped-def]
    """Exports ``model`` with ExecuTorch's LLM-runner methods: forward (prefill up to
    ``max_prefill`` tokens, or one decode token) and the metadata methods. Extra keyword
    arguments go to ``ember.export``."""
    import ember

    c = model.c
    S = torch.export.Dim("seq", min=1, max=min(max_prefill, c.max_seq_len))
    methods = {
        "forward": (
            model,
            (torch.zeros(1, 2, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)),
        ),
        "get_max_seq_len": (_Const([c.max_seq_len]), ()),
        "get_vocab_size": (_Const([c.vocab_size]), ()),
        "get_bos_id": (_Const([c.bos_id]), ()),
        "get_eos_ids": (_Const(list(c.eos_ids)), ()),
        "use_kv_cache": (_Const([1]), ()),
    }
    return ember.export(methods, dynamic_shapes={"forward": ({1: S}, None)}, **kwargs)
