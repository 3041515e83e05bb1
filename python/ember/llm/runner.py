"""``ember.llm.generate``: the C LLM runner (extension/llm.c) from Python, through ctypes.

text, stats = generate("model.pte", "tokenizer.gguf", "Hello", max_new_tokens=32)
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass

from ember import _lib
from ember.llm.tokenizer import TokenizerError

__all__ = ["generate", "GenerationStats"]

_STOP = {1: "eos", 2: "max_new_tokens", 3: "context_limit", 4: "callback"}


class _Opts(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int), ("use_mmap", ctypes.c_int)]


class _Gen(ctypes.Structure):
    _fields_ = [
        ("max_new_tokens", ctypes.c_int),
        ("temperature", ctypes.c_float),
        ("top_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("chat", ctypes.c_int),
        ("echo", ctypes.c_int),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("n_prompt_tokens", ctypes.c_size_t),
        ("n_generated", ctypes.c_size_t),
        ("load_s", ctypes.c_double),
        ("prefill_s", ctypes.c_double),
        ("decode_s", ctypes.c_double),
        ("ttft_s", ctypes.c_double),
        ("prefill_tok_per_s", ctypes.c_double),
        ("decode_tok_per_s", ctypes.c_double),
        ("peak_rss_kb", ctypes.c_long),
        ("stop", ctypes.c_int),
    ]


_TEXT_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t
)


@dataclass
class GenerationStats:
    n_prompt_tokens: int
    n_generated: int
    load_s: float
    prefill_s: float
    decode_s: float
    ttft_s: float
    prefill_tok_per_s: float
    decode_tok_per_s: float
    peak_rss_kb: int
    stop: str


def _c() -> ctypes.CDLL:
    L = _lib.lib()
    if not getattr(L, "_ember_llm_ready", False):
        L.em_register_cpu_backend.restype = ctypes.c_int
        L.em_register_cpu_backend()
        L.em_llm_create.restype = ctypes.c_int
        L.em_llm_create.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.POINTER(_Opts),
            ctypes.POINTER(ctypes.c_void_p),
        ]
        L.em_llm_generate.restype = ctypes.c_int
        L.em_llm_generate.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.POINTER(_Gen),
            _TEXT_FN,
            ctypes.c_void_p,
            ctypes.POINTER(_Stats),
        ]
        L.em_llm_destroy.argtypes = [ctypes.c_void_p]
        L.em_llm_destroy.restype = None
        L._ember_llm_ready = True
    return L


def _err(L: ctypes.CDLL, st: int, what: str) -> TokenizerError:
    L.em_last_error.restype = ctypes.c_char_p
    return TokenizerError(
        f"{what}: {_lib.status_message(st)} {(L.em_last_error() or b'').decode()}"
    )


def generate(
    model: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str],
    prompt: str,
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 42,
    chat: bool = False,
    threads: int = 1,
    on_text: Callable[[str], bool | None] | None = None,
) -> tuple[str, GenerationStats]:
    """Generates text with the C runner; returns (generated text, statistics). ``on_text``
    receives each streamed piece; returning True stops generation."""
    L = _c()
    h = ctypes.c_void_p()
    st = L.em_llm_create(
        os.fsencode(model), os.fsencode(tokenizer), ctypes.byref(_Opts(threads, 0)), ctypes.byref(h)
    )
    if st != 0:
        raise _err(L, st, f"loading {model}")
    chunks: list[bytes] = []

    def cb(_ctx: int, p: ctypes.Array, n: int) -> int:  # type: ignore[type-arg]
        b = ctypes.string_at(p, n)
        chunks.append(b)
        return 1 if (on_text is not None and on_text(b.decode("utf-8", errors="replace"))) else 0

    fn = _TEXT_FN(cb)
    stats = _Stats()
    try:
        g = _Gen(max_new_tokens, temperature, top_p, seed, int(chat), 0)
        st = L.em_llm_generate(h, prompt.encode(), ctypes.byref(g), fn, None, ctypes.byref(stats))
        if st != 0:
            raise _err(L, st, "generate")
    finally:
        L.em_llm_destroy(h)
    s = GenerationStats(
        stats.n_prompt_tokens,
        stats.n_generated,
        stats.load_s,
        stats.prefill_s,
        stats.decode_s,
        stats.ttft_s,
        stats.prefill_tok_per_s,
        stats.decode_tok_per_s,
        stats.peak_rss_kb,
        _STOP.get(stats.stop, "?"),
    )
    return b"".join(chunks).decode("utf-8", errors="replace"), s
