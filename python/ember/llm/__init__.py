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
]


def export(
    model: Any,
    out_path: str | os.PathLike[str] | None = None,
    *,
    max_seq_len: int = 512,
    max_prefill: int = 128,
    **kwargs: Any,
) -> Any:
    """Exports a Llama-architecture model for the LLM runner: ``model`` is a GGUF path (weights
    dequantized to f32) or an :class:`ember.llm.llama.Llama`. Returns the ``ember.Program``
    (saved to ``out_path`` when given); extra keyword arguments go to ``ember.export``."""
    from ember.llm import llama

    if isinstance(model, (str, os.PathLike)):
        model = llama.load_gguf(model, max_seq_len=max_seq_len, last_logits_only=True)
    prog = llama.export(model, max_prefill=max_prefill, **kwargs)
    if out_path is not None:
        prog.save(out_path)
    return prog
