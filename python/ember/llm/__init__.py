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
    "Tokenizer",
    "TokenizerError",
    "compact_from_gguf",
    "write_compact",
    "generate",
    "GenerationStats",
    "export",
    "quantize_llm",
]


def export(
    model: Any,
    out_path: str | os.PathLike[str] | None = None,
    *,
    max_seq_len: int = 512,
    max_prefill: int = 128,
    quant: str | None = None,
    seed: int = 0,
    last_logits_only: bool = True,
    **kwargs: Any,
) -> Any:
    """Exports a Llama-architecture model for the LLM runner: ``model`` is a GGUF path (weights
    dequantized to f32), an :class:`ember.llm.llama.Llama`, a transformers
    ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (converted to f32), or a transformers
    ``PretrainedConfig`` of those architectures (random weights after ``torch.manual_seed(seed)``,
    for size studies). ``last_logits_only`` applies to the models built here (GGUF,
    transformers). ``quant`` quantizes the weights first, in place (:func:`quantize_llm`);
    ``None`` keeps f32. Returns the ``ember.Program`` (saved to ``out_path`` when given); extra
    keyword arguments go to ``ember.export`` (``backend`` defaults to ``None``, the portable and
    quantized kernels the LLM operators run on)."""
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
    if quant is not None:
        quantize_llm(model, quant)
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


def quantize_llm(model: Any, quant: str) -> Any:
    """Quantizes a Llama's weights in place for export.

    ``"4w32"`` / ``"4w64"`` / ``"4w128"``: every matrix of the transformer blocks 4-bit, affine
    groups of that size (``ember::linear_q4`` with offsets; a Q4_1-style grid); the token
    embedding and the output projection (one tied table in SmolLM2) 8-bit per row
    (``quantized_decomposed::embedding_byte`` / ``ember::linear_q8``), as llama.cpp keeps that
    table at higher precision. ``"4w32s"``...: the same with symmetric 4-bit groups (Q4_0-style).
    ``"8w"``: everything int8 per output channel / per row.
    An :class:`ember.llm.llama.Llama` first gets its q/k/v and gate/up projections fused
    (:func:`ember.llm.llama.fuse_projections`).
    """
    from ember.llm import llama
    from ember.quant.llm import SCHEMES, quantize_embeddings, quantize_linears

    if quant not in SCHEMES:
        raise ValueError(f"unknown quant scheme {quant!r}; use one of {sorted(SCHEMES)}")
    bits = SCHEMES[quant][0]
    if isinstance(model, llama.Llama):
        llama.fuse_projections(model)
    if bits == 4:
        quantize_linears(model, quant, skip=["output"])
    quantize_linears(model, "8w")
    quantize_embeddings(model, bits=8)
    return model
