"""LLM support: tokenizers and the generation runner (C, through ctypes)."""

from ember.llm.runner import GenerationStats, generate
from ember.llm.tokenizer import Tokenizer, TokenizerError, compact_from_gguf, write_compact

__all__ = [
    "Tokenizer",
    "TokenizerError",
    "compact_from_gguf",
    "write_compact",
    "generate",
    "GenerationStats",
]
