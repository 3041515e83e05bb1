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
from ember.llm import fused_ops as _fused

log = logging.getLogger(__name__)

__all__ = [
    "LlamaConfig",
    "Llama",
    "load_gguf",
    "from_transformers",
    "random_from_config",
    "size_study",
    "export",
    "fuse_projections",
    "set_kv_cache_dtype",
    "use_fused_ops",
]


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
    attention_bias: bool = False  # biases on the q/k/v projections (Qwen2)
    attention_out_bias: bool = False  # a bias on the output projection (Llama attention_bias)
    explicit_head_dim: int | None = None  # None: dim // n_heads

    @property
    def head_dim(self) -> int:
        if self.explicit_head_dim is not None:
            return self.explicit_head_dim
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.fused = False  # one ember::rms_norm (use_fused_ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return _fused.rms_norm(x, self.weight, self.eps)
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
        self.wq = nn.Linear(c.dim, c.n_heads * hd, bias=c.attention_bias)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * hd, bias=c.attention_bias)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * hd, bias=c.attention_bias)
        self.wo = nn.Linear(c.n_heads * hd, c.dim, bias=c.attention_out_bias)
        # q, k and v in one matrix (fuse_projections): one pass over the input per token
        self.wqkv: nn.Module | None = None
        # [1, max_seq_len, n_kv_heads, head_dim]: ExecuTorch's [B, S, H, D] cache layout.
        shape = (1, c.max_seq_len, c.n_kv_heads, hd)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)
        self.fused = False  # RoPE as ember::rope (use_fused_ops)

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
        if self.wqkv is not None:
            nq, nkv = c.n_heads * hd, c.n_kv_heads * hd
            q, k, v = torch.split(self.wqkv(x), [nq, nkv, nkv], dim=-1)
            q = q.reshape(B, S, c.n_heads, hd)
            k = k.reshape(B, S, c.n_kv_heads, hd)
            v = v.reshape(B, S, c.n_kv_heads, hd)
        else:
            q = self.wq(x).view(B, S, c.n_heads, hd)
            k = self.wk(x).view(B, S, c.n_kv_heads, hd)
            v = self.wv(x).view(B, S, c.n_kv_heads, hd)
        if self.fused:
            q, k = _fused.rope(q, cos, sin), _fused.rope(k, cos, sin)
        else:
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        if self.k_cache.dtype != k.dtype:  # an f16 cache (set_kv_cache_dtype)
            k, v = k.to(self.k_cache.dtype), v.to(self.v_cache.dtype)
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
        self.w13: nn.Module | None = None  # gate and up in one matrix (fuse_projections)
        self.hidden_dim = c.hidden_dim
        self.fused = False  # with w13: ember::swiglu (use_fused_ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w13 is not None and self.fused:
            return self.w2(_fused.swiglu(self.w13(x)))
        if self.w13 is not None:
            g, u = torch.split(self.w13(x), [self.hidden_dim, self.hidden_dim], dim=-1)
            return self.w2(F.silu(g) * u)
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


def _cat_linear(parts: list[nn.Linear]) -> nn.Linear:
    w = torch.cat([p.weight.detach() for p in parts])
    has_bias = parts[0].bias is not None
    lin = nn.Linear(w.shape[1], w.shape[0], bias=has_bias)
    with torch.no_grad():
        lin.weight.copy_(w)
        if has_bias:
            lin.bias.copy_(torch.cat([p.bias.detach() for p in parts]))  # type: ignore[union-attr]
    return lin


def fuse_projections(model: Llama) -> Llama:
    """Concatenates, in place, each block's q/k/v projections into one ``wqkv`` and its gate/up
    projections into one ``w13`` (the same input each): on device that is one matrix-vector pass
    (and one thread-pool dispatch) instead of three and two per token. Row-wise quantization
    gives the same numbers fused or not. Returns `model`."""
    for layer in model.layers:
        a, f = layer.attention, layer.feed_forward
        if a.wqkv is None and all(type(m) is nn.Linear for m in (a.wq, a.wk, a.wv)):
            if (a.wq.bias is None) == (a.wk.bias is None) == (a.wv.bias is None):
                a.wqkv = _cat_linear([a.wq, a.wk, a.wv])
                del a.wq, a.wk, a.wv
        if f.w13 is None and type(f.w1) is nn.Linear and type(f.w3) is nn.Linear:
            f.w13 = _cat_linear([f.w1, f.w3])
            del f.w1, f.w3
    return model


def use_fused_ops(model: Llama, on: bool = True) -> Llama:
    """Has ``model`` call Ember's fused operators (:mod:`ember.llm.fused_ops`: RMSNorm, RoPE and,
    with fused gate / up projections, SwiGLU each one ``ember::`` operator) or, with ``on``
    False, their decomposed ATen forms, which stock ExecuTorch also runs. The same values either
    way, in eager and on Ember's runtime (bit for bit there)."""
    for m in model.modules():
        if isinstance(m, (RMSNorm, Attention, FeedForward)):
            m.fused = on
    return model


def _needs_ember(model: nn.Module) -> bool:
    """Whether ``model`` already calls operators only Ember's runtime has (its quantized linears
    and embeddings, :mod:`ember.quant.llm`)."""
    from ember.quant import llm as qllm

    kinds = (qllm.LinearQ4, qllm.LinearQ8, qllm.EmbeddingQ4, qllm.EmbeddingQ8)
    return any(isinstance(m, kinds) for m in model.modules())


def set_kv_cache_dtype(model: Llama, dtype: torch.dtype) -> Llama:
    """Makes every block's KV cache ``dtype`` (f32 or f16), in place: with f16 the new keys and
    values are rounded to f16 (to nearest) as they are written, and attention reads them as the
    f32 values they are (``llama::custom_sdpa`` with an f32 query); half the cache memory.
    Returns `model`."""
    if dtype not in (torch.float32, torch.float16):
        raise ValueError(f"the KV cache must be float32 or float16, got {dtype}")
    for layer in model.layers:
        a = layer.attention
        a.k_cache = torch.zeros(a.k_cache.shape, dtype=dtype)
        a.v_cache = torch.zeros(a.v_cache.shape, dtype=dtype)
    return model


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


# ---------------------------------------------------------------- transformers models

_HF_ARCHS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def _hf_rope_theta(hc) -> float:  # type: ignore[no-untyped-def]
    """The RoPE base of a transformers config; refuses any RoPE scaling (only the default,
    unscaled rotary embedding is implemented)."""
    params = getattr(hc, "rope_parameters", None)  # transformers >= 5
    scaling = getattr(hc, "rope_scaling", None)  # transformers 4
    for d in (params, scaling):
        if isinstance(d, dict):
            kind = d.get("rope_type", d.get("type", "default"))
            if kind not in (None, "default"):
                raise ValueError(
                    f"{hc.model_type}: rope scaling {kind!r} is not supported "
                    "(only the default, unscaled RoPE)"
                )
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    theta = getattr(hc, "rope_theta", None)
    return 10000.0 if theta is None else float(theta)


def config_from_transformers(hc, max_seq_len: int = 512) -> LlamaConfig:  # type: ignore[no-untyped-def]
    """Maps a transformers ``LlamaConfig`` / ``Qwen2Config`` to a :class:`LlamaConfig`; raises
    ValueError for architectures and options this model does not implement."""
    mt = getattr(hc, "model_type", None)
    if mt not in _HF_ARCHS:
        raise ValueError(
            f"model_type {mt!r} is not supported; use one of {sorted(_HF_ARCHS)} "
            "(Llama / Qwen2-style decoders)"
        )
    act = getattr(hc, "hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{mt}: hidden_act {act!r} is not supported (only 'silu')")
    if getattr(hc, "mlp_bias", False):
        raise ValueError(f"{mt}: mlp_bias=True is not supported")
    if getattr(hc, "pretraining_tp", 1) not in (None, 1):
        raise ValueError(f"{mt}: pretraining_tp={hc.pretraining_tp} is not supported (only 1)")
    if getattr(hc, "use_sliding_window", False) and getattr(hc, "sliding_window", None):
        raise ValueError(f"{mt}: sliding-window attention is not supported")
    layer_types = getattr(hc, "layer_types", None)
    if layer_types and any(t != "full_attention" for t in layer_types):
        raise ValueError(
            f"{mt}: layer types {sorted(set(layer_types))} are not supported (only full_attention)"
        )
    theta = _hf_rope_theta(hc)
    n_heads = hc.num_attention_heads
    n_kv = getattr(hc, "num_key_value_heads", None) or n_heads
    if n_heads % n_kv:
        raise ValueError(f"{mt}: {n_heads} attention heads are not a multiple of {n_kv} kv heads")
    head_dim = getattr(hc, "head_dim", None) or hc.hidden_size // n_heads
    if head_dim % 2:
        raise ValueError(f"{mt}: head_dim {head_dim} must be even for RoPE")
    if mt == "qwen2":  # q/k/v always carry biases, o_proj never
        qkv_bias, out_bias = True, False
    else:
        qkv_bias = out_bias = bool(getattr(hc, "attention_bias", False))
    bos = getattr(hc, "bos_token_id", None)
    eos = getattr(hc, "eos_token_id", None)
    eos_ids = (
        [int(e) for e in eos]
        if isinstance(eos, (list, tuple))
        else []
        if eos is None
        else [int(eos)]
    )
    if bos is None or not eos_ids:
        log.warning("%s config has no bos/eos token id (bos=%s, eos=%s); using 0", mt, bos, eos)
    return LlamaConfig(
        dim=hc.hidden_size,
        n_layers=hc.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        hidden_dim=hc.intermediate_size,
        vocab_size=hc.vocab_size,
        norm_eps=float(hc.rms_norm_eps),
        rope_theta=theta,
        max_seq_len=max_seq_len,
        tie_embeddings=bool(getattr(hc, "tie_word_embeddings", False)),
        bos_id=0 if bos is None else int(bos),
        eos_ids=eos_ids or [0],
        attention_bias=qkv_bias,
        attention_out_bias=out_bias,
        explicit_head_dim=head_dim,
    )


def from_transformers(hf_model, max_seq_len: int = 512, last_logits_only: bool = False) -> Llama:  # type: ignore[no-untyped-def]
    """Builds a :class:`Llama` (float32 weights) from a transformers ``LlamaForCausalLM`` or
    ``Qwen2ForCausalLM``."""
    hc = getattr(hf_model, "config", None)
    if hc is None:
        raise ValueError(f"{type(hf_model).__name__} is not a transformers model (no .config)")
    c = config_from_transformers(hc, max_seq_len=max_seq_len)
    src = {k: v.detach().to(torch.float32) for k, v in hf_model.state_dict().items()}
    if "lm_head.weight" not in src and not c.tie_embeddings:
        raise ValueError(f"{type(hf_model).__name__}: no lm_head.weight and untied embeddings")
    sd: dict[str, torch.Tensor] = {
        "tok_embeddings.weight": src["model.embed_tokens.weight"],
        "norm.weight": src["model.norm.weight"],
    }
    if not c.tie_embeddings:
        sd["output.weight"] = src["lm_head.weight"]
    names = {
        "attention_norm": "input_layernorm",
        "attention.wq": "self_attn.q_proj",
        "attention.wk": "self_attn.k_proj",
        "attention.wv": "self_attn.v_proj",
        "attention.wo": "self_attn.o_proj",
        "ffn_norm": "post_attention_layernorm",
        "feed_forward.w1": "mlp.gate_proj",
        "feed_forward.w3": "mlp.up_proj",
        "feed_forward.w2": "mlp.down_proj",
    }
    for i in range(c.n_layers):
        for ours, theirs in names.items():
            for kind in ("weight", "bias"):
                key = f"model.layers.{i}.{theirs}.{kind}"
                if key in src:
                    sd[f"layers.{i}.{ours}.{kind}"] = src[key]
    m = Llama(c, last_logits_only=last_logits_only)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    if c.tie_embeddings:
        missing = [k for k in missing if k != "output.weight"]
    if missing or unexpected:
        raise ValueError(f"weights do not fit: missing {missing}, unexpected {unexpected}")
    return m.eval()


def random_from_config(  # type: ignore[no-untyped-def]
    hf_config, seed: int = 0, max_seq_len: int = 512, last_logits_only: bool = False
) -> Llama:
    """Instantiates the transformers model for ``hf_config`` with its own random initialization
    after ``torch.manual_seed(seed)``, and converts it (:func:`from_transformers`)."""
    import transformers

    config_from_transformers(hf_config, max_seq_len)  # refuse before allocating
    torch.manual_seed(seed)
    cls = getattr(transformers, _HF_ARCHS[hf_config.model_type])
    hf = cls(hf_config).eval()
    return from_transformers(hf, max_seq_len=max_seq_len, last_logits_only=last_logits_only)


class _Const(nn.Module):
    def __init__(self, values: list[int]) -> None:
        super().__init__()
        self.values = values

    def forward(self) -> torch.Tensor:
        return torch.tensor(self.values, dtype=torch.int64)


def export(  # type: ignore[no-untyped-def]
    model: Llama, max_prefill: int = 128, fused_ops: bool | None = None, **kwargs
):
    """Exports ``model`` with ExecuTorch's LLM-runner methods: forward (prefill up to
    ``max_prefill`` tokens, or one decode token) and the metadata methods. Extra keyword
    arguments go to ``ember.export``; ``backend`` defaults to ``None`` (portable kernels) here.

    ``fused_ops`` (:func:`use_fused_ops`): ``True`` exports RMSNorm, RoPE and SwiGLU as Ember's
    fused operators (fewer, faster kernels), ``False`` as ATen operators stock ExecuTorch runs
    too; ``None`` (default): fused when the model already needs Ember's runtime (quantized with
    :func:`ember.llm.quantize_llm`), else not, so an f32 model's file stays stock-compatible."""
    import ember

    c = model.c
    use_fused_ops(model, _needs_ember(model) if fused_ops is None else fused_ops)
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
    # Portable kernels unless the caller asks otherwise: the graph's llama::* and ember::linear_q*
    # custom ops run there, and the LLM kernels were tuned and benchmarked on that path.
    kwargs.setdefault("backend", None)
    return ember.export(methods, dynamic_shapes={"forward": ({1: S}, None)}, **kwargs)


def size_study(  # type: ignore[no-untyped-def]
    hf_config,
    quants: list[str | None] | tuple[str | None, ...] = (None, "8w"),
    seed: int = 0,
    max_seq_len: int = 512,
    max_prefill: int = 128,
) -> list[dict[str, object]]:
    """Exports seeded random weights for ``hf_config`` once per quantization scheme (``None``:
    f32) and returns one row per scheme: ``quant``, ``params`` (parameter count, tied tables
    counted once) and ``pte_bytes``. The model is rebuilt for each scheme (same seed, same
    weights), since quantization works in place."""
    from ember.llm import quantize_llm

    rows: list[dict[str, object]] = []
    for q in quants:
        m = random_from_config(hf_config, seed=seed, max_seq_len=max_seq_len, last_logits_only=True)
        params = sum(p.numel() for p in m.parameters())
        if q is not None:
            quantize_llm(m, q)
        prog = export(m, max_prefill=max_prefill)
        rows.append({"quant": q, "params": params, "pte_bytes": prog.nbytes})
        log.info("size study: quant=%s params=%d pte=%d bytes", q, params, prog.nbytes)
        del m, prog
    return rows
