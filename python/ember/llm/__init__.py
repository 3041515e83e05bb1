"""LLM support: tokenizers (C, through ctypes) and, as they land, the Llama export recipe and the
generation runner."""

from ember.llm.tokenizer import Tokenizer, TokenizerError, compact_from_gguf, write_compact

__all__ = ["Tokenizer", "TokenizerError", "compact_from_gguf", "write_compact"]
