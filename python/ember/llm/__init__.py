"""LLM support: tokenizers and the generation runner (C, through ctypes), and the Llama export
recipe.

    prog = ember.llm.export("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2.pte", max_seq_len=256)
    text, stats = ember.llm.generate("smollm2.pte", "SmolLM2.gguf", "Hi", chat=True)
"""

from __future__ import annotations

import os
from typing import Any

from ember.llm.runner import GenerationStats, generate
from ember.llm.tokenizer import Tokenizer, TokenizerError, compact_from_gguf, write_compact

__all__ = [
    "DEFAULT_KV_CACHE",
    "DEFAULT_QUANT_4BIT",
    "Tokenizer",
    "TokenizerError",
    "compact_from_gguf",
    "write_compact",
    "generate",
    "GenerationStats",
    "export",
    "quantize_llm",
]


# The recommended 4-bit scheme (bench/llm.py's q4): affine groups of 32 with f16 scales and
# offsets, 5 bits per weight; the symmetric 4w32sh (4.5, like Q4_0) loses too much on SmolLM2,
# whose weights come on a Q4_1 grid (bench/results/llm_quant_f16_2026-12-02.md).
DEFAULT_QUANT_4BIT = "4w32h"
# The KV cache's dtype of a quantized export that is not told (f32 exports keep an f32 cache):
# f16 holds test_llm_quant.py's figures and halves the cache.
DEFAULT_KV_CACHE = "f16"


def export(
    model: Any,
    out_path: str | os.PathLike[str] | None = None,
    *,
    max_seq_len: int = 512,
    max_prefill: int = 128,
    quant: str | None = None,
    output_bits: int | None = None,
    kv_cache: str | None = None,
    seed: int = 0,
    last_logits_only: bool = True,
    **kwargs: Any,
) -> Any:
    """Exports a Llama-architecture model for the LLM runner: ``model`` is a GGUF path (weights
    dequantized to f32), an :class:`ember.llm.llama.Llama`, a transformers
    ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (converted to f32), or a transformers
    ``PretrainedConfig`` of those architectures (random weights after ``torch.manual_seed(seed)``,
    for size studies). ``last_logits_only`` applies to the models built here (GGUF,
    transformers). ``quant`` quantizes the weights first, in place (:func:`quantize_llm`, with
    ``output_bits``); ``None`` keeps f32. ``kv_cache``: ``"f32"`` or ``"f16"``
    (:func:`ember.llm.llama.set_kv_cache_dtype`); ``None``: :data:`DEFAULT_KV_CACHE` with
    ``quant``, f32 without. Returns the ``ember.Program`` (saved to
    ``out_path`` when given). ``fused_ops`` (a keyword argument of
    :func:`ember.llm.llama.export`): RMSNorm, RoPE and SwiGLU as Ember's fused operators; by
    default when ``quant`` is given (the file already needs Ember's runtime), so an f32 file
    stays stock-ExecuTorch compatible. Other keyword arguments go to ``ember.export``
    (``backend`` defaults to ``None``, the portable and quantized kernels the LLM operators run
    on)."""
    import torch

    from ember.llm import llama

    if isinstance(model, (str, os.PathLike)):
        model = llama.load_gguf(model, max_seq_len=max_seq_len, last_logits_only=last_logits_only)
    elif isinstance(model, llama.Llama):
        pass
    elif _is_hf_config(model):
        model = llama.random_from_config(
            model, seed=seed, max_seq_len=max_seq_len, last_logits_only=last_logits_only
        )
    elif _is_hf_config(getattr(model, "config", None)):
        model = llama.from_transformers(
            model, max_seq_len=max_seq_len, last_logits_only=last_logits_only
        )
    else:
        raise ValueError(
            f"cannot export a {type(model).__name__}: pass a GGUF path, an ember.llm.llama.Llama, "
            "or a transformers Llama/Qwen2 model or config"
        )
    if kv_cache is None:
        kv_cache = DEFAULT_KV_CACHE if quant is not None else "f32"
    if kv_cache not in ("f32", "f16"):
        raise ValueError(f"kv_cache must be 'f32' or 'f16', got {kv_cache!r}")
    llama.set_kv_cache_dtype(model, torch.float16 if kv_cache == "f16" else torch.float32)
    if quant is not None:
        quantize_llm(model, quant, output_bits)
    prog = llama.export(model, max_prefill=max_prefill, **kwargs)
    if out_path is not None:
        prog.save(out_path)
    return prog


def _is_hf_config(obj: Any) -> bool:
    try:
        from transformers import PretrainedConfig
    except ImportError:
        return False
    return isinstance(obj, PretrainedConfig)


def quantize_llm(model: Any, quant: str, output_bits: int | None = None) -> Any:
    """Quantizes a Llama's weights in place for export.

    ``"4w32"`` / ``"4w64"`` / ``"4w128"``: every matrix of the transformer blocks 4-bit, affine
    groups of that size (``ember::linear_q4`` with offsets; a Q4_1-style grid);
    ``"4w32s"``...: symmetric 4-bit groups (Q4_0-style); ``"4w32h"`` / ``"4w32sh"``...: the same
    with f16 scales and offsets (:data:`ember.quant.llm.SCHEMES`). ``"8w"``: everything int8 per
    output channel / per row.

    The output projection (with SmolLM2 and Llama-3.2, one table tied to the token embedding):
    ``output_bits=8``: int8 per row (``ember::linear_q8``), the embedding the same table
    (``quantized_decomposed::embedding_byte``); ``output_bits=4`` (4-bit schemes only): 4-bit
    groups of the scheme's size and kind (symmetric or affine) with f16 scales
    (``ember::linear_q4``); a tied embedding then reads the same packed table when symmetric
    (``embedding_4bit``), and keeps an 8-bit table of its own (one row read per token)
    otherwise. ``None``: 8 (4 fails test_llm_quant.py's top-1 bar on SmolLM2: 80 %, see
    bench/results/llm_quant_f16_2026-12-02.md).
    An :class:`ember.llm.llama.Llama` first gets its q/k/v and gate/up projections fused
    (:func:`ember.llm.llama.fuse_projections`).
    """
    from torch import nn

    from ember.llm import llama
    from ember.quant.llm import (
        GROUP_SIZES,
        SCHEMES,
        EmbeddingQ4,
        LinearQ4,
        quantize_embeddings,
        quantize_linears,
    )

    if quant not in SCHEMES:
        raise ValueError(f"unknown quant scheme {quant!r}; use one of {sorted(SCHEMES)}")
    bits, gs, affine, _ = SCHEMES[quant]
    if output_bits is None:
        output_bits = 8
    if output_bits not in (4, 8) or (output_bits == 4 and bits != 4):
        raise ValueError(f"output_bits must be 8, or 4 with a 4-bit scheme; got {output_bits}")
    if isinstance(model, llama.Llama):
        llama.fuse_projections(model)
    if bits == 4:
        quantize_linears(model, quant, skip=["output"])
    out, emb = getattr(model, "output", None), getattr(model, "tok_embeddings", None)
    if output_bits == 4 and type(out) is nn.Linear:
        k = out.in_features
        g = gs if k % gs == 0 else max(c for c in GROUP_SIZES if k % c == 0)
        model.output = LinearQ4(out, g, affine=affine, half=True)
        if not affine and type(emb) is nn.Embedding and emb.weight is out.weight:
            # byte-identical to the head's tensors: the exporter stores the table once
            model.tok_embeddings = EmbeddingQ4(emb, g, half=True)
    quantize_linears(model, "8w")
    quantize_embeddings(model, bits=8)
    return model
