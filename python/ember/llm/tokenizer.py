"""ctypes wrapper over Ember's C tokenizers (extension/tokenizer*.c in libember.so), and the
writer of the compact ``EMTK`` tokenizer file (format in extension/ember_ext/tokenizer.h).

    tok = Tokenizer.load("SmolLM2.gguf")          # GGUF, tokenizer.json, EMTK or tiktoken ranks
    ids = tok.encode("Hello world", special=True)
    assert tok.decode(ids) == "Hello world"
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ember import _lib

__all__ = [
    "Tokenizer",
    "TokenizerError",
    "write_compact",
    "compact_from_gguf",
    "pretokenize",
    "MODEL_BPE_BYTELEVEL",
    "MODEL_SPM_BPE",
    "MODEL_TIKTOKEN",
    "PRETOK_NONE",
    "PRETOK_GPT2",
    "PRETOK_LLAMA3",
    "PRETOK_DIGITS_GPT2",
]

MODEL_BPE_BYTELEVEL, MODEL_SPM_BPE, MODEL_TIKTOKEN = 1, 2, 3
PRETOK_NONE, PRETOK_GPT2, PRETOK_LLAMA3, PRETOK_DIGITS_GPT2 = 0, 1, 2, 3
_ADD_BOS, _PARSE_SPECIAL, _DEFAULT_BOS = 1, 2, 4
_FLAG_ADD_BOS, _FLAG_IGNORE_MERGES, _FLAG_SPM_PREFIX = 1, 2, 4
# GGUF token types (tokenizer.ggml.token_type).
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = range(
    1, 7
)


class TokenizerError(RuntimeError):
    """A C tokenizer call failed; the message is the runtime's last error."""


_P = ctypes.c_void_p
_I32P = ctypes.POINTER(ctypes.c_int32)
_SZP = ctypes.POINTER(ctypes.c_size_t)
_SIGS: dict[str, tuple[object, list[object]]] = {
    "em_tokenizer_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "em_tokenizer_load_json": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "em_tokenizer_load_gguf": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "em_tokenizer_load_compact": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "em_tokenizer_load_tiktoken": (
        ctypes.c_int,
        [
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_size_t,
            ctypes.POINTER(_P),
        ],
    ),
    "em_tokenizer_save_compact": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "em_tokenizer_destroy": (None, [_P]),
    "em_tokenizer_encode": (
        ctypes.c_int,
        [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, _I32P, ctypes.c_size_t, _SZP],
    ),
    "em_tokenizer_decode": (
        ctypes.c_int,
        [_P, _I32P, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, _SZP],
    ),
    "em_tokenizer_vocab_size": (ctypes.c_size_t, [_P]),
    "em_tokenizer_bos_id": (ctypes.c_int32, [_P]),
    "em_tokenizer_eos_ids": (ctypes.c_size_t, [_P, ctypes.POINTER(_I32P)]),
    "em_tokenizer_token_id": (ctypes.c_int32, [_P, ctypes.c_char_p]),
    "em_tokenizer_model_kind": (ctypes.c_int, [_P]),
    "em_tokenizer_pretok": (ctypes.c_int, [_P]),
    "em_tokenizer_pretokenize": (
        ctypes.c_int,
        [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, _SZP, ctypes.c_size_t, _SZP],
    ),
}


def _c() -> ctypes.CDLL:
    L = _lib.lib()
    if not getattr(L, "_ember_tokenizer_ready", False):
        for name, (res, args) in _SIGS.items():
            f = getattr(L, name)
            f.restype = res
            f.argtypes = args
        L._ember_tokenizer_ready = True
    return L


def _check(st: int, what: str) -> None:
    if st != 0:
        L = _lib.lib()
        L.em_last_error.restype = ctypes.c_char_p
        msg = (L.em_last_error() or b"").decode(errors="replace")
        raise TokenizerError(f"{what}: {_lib.status_message(st)} {msg}".strip())


class Tokenizer:
    """A tokenizer loaded by the C library. Encoding and decoding run in C."""

    def __init__(self, handle: int) -> None:
        self._h = ctypes.c_void_p(handle)
        self._L = _c()

    @classmethod
    def load(cls, path: str | os.PathLike[str], kind: str = "auto") -> Tokenizer:
        """Loads ``path``; ``kind`` is auto (by content), json, gguf, compact or tiktoken."""
        L = _c()
        h = ctypes.c_void_p()
        fn = {
            "auto": L.em_tokenizer_load,
            "json": L.em_tokenizer_load_json,
            "gguf": L.em_tokenizer_load_gguf,
            "compact": L.em_tokenizer_load_compact,
        }.get(kind)
        if kind == "tiktoken":
            return cls.load_tiktoken(path)
        if fn is None:
            raise ValueError(f"unknown tokenizer kind {kind!r}")
        _check(fn(os.fsencode(path), ctypes.byref(h)), f"loading {path}")
        return cls(h.value)

    @classmethod
    def load_tiktoken(
        cls,
        path: str | os.PathLike[str],
        pretok: int = PRETOK_GPT2,
        specials: Sequence[str] = ("<|endoftext|>",),
    ) -> Tokenizer:
        """Loads a tiktoken rank file; ``specials`` get ids after the highest rank."""
        L = _c()
        arr = (ctypes.c_char_p * max(1, len(specials)))(*[s.encode() for s in specials])
        h = ctypes.c_void_p()
        _check(
            L.em_tokenizer_load_tiktoken(
                os.fsencode(path), pretok, arr, len(specials), ctypes.byref(h)
            ),
            f"loading {path}",
        )
        return cls(h.value)

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            self._L.em_tokenizer_destroy(h)
            self._h = ctypes.c_void_p()

    def encode(
        self, text: str | bytes, *, special: bool = False, bos: bool | None = False
    ) -> list[int]:
        """Token ids of ``text`` (str, or raw bytes that need not be valid UTF-8). ``special``
        matches special tokens' text; ``bos`` True adds BOS, None adds it when the tokenizer's
        metadata asks for it."""
        b = text if isinstance(text, bytes) else text.encode("utf-8")
        flags = (_PARSE_SPECIAL if special else 0) | (
            _DEFAULT_BOS if bos is None else (_ADD_BOS if bos else 0)
        )
        cap = len(b) + 8
        for _ in range(2):
            buf = (ctypes.c_int32 * cap)()
            n = ctypes.c_size_t()
            _check(
                self._L.em_tokenizer_encode(self._h, b, len(b), flags, buf, cap, ctypes.byref(n)),
                "encode",
            )
            if n.value <= cap:
                return list(buf[: n.value])
            cap = n.value
        raise TokenizerError("encode: output size changed between calls")

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        cap = 16 * len(ids) + 16
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            n = ctypes.c_size_t()
            _check(
                self._L.em_tokenizer_decode(self._h, arr, len(ids), buf, cap, ctypes.byref(n)),
                "decode",
            )
            if n.value <= cap:
                return buf.raw[: n.value]
            cap = n.value
        raise TokenizerError("decode: output size changed between calls")

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (invalid UTF-8 replaced by U+FFFD, as the reference does)."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def save_compact(self, path: str | os.PathLike[str]) -> None:
        _check(self._L.em_tokenizer_save_compact(self._h, os.fsencode(path)), f"writing {path}")

    @property
    def vocab_size(self) -> int:
        return int(self._L.em_tokenizer_vocab_size(self._h))

    @property
    def bos_id(self) -> int:
        return int(self._L.em_tokenizer_bos_id(self._h))

    @property
    def eos_ids(self) -> list[int]:
        p = _I32P()
        n = self._L.em_tokenizer_eos_ids(self._h, ctypes.byref(p))
        return [p[i] for i in range(n)]

    @property
    def model(self) -> int:
        return int(self._L.em_tokenizer_model_kind(self._h))

    @property
    def pretok(self) -> int:
        return int(self._L.em_tokenizer_pretok(self._h))

    def token_id(self, token: str | bytes) -> int:
        """Id of the token whose raw bytes are ``token``, or -1."""
        b = token.encode() if isinstance(token, str) else token
        return int(self._L.em_tokenizer_token_id(self._h, b))


def pretokenize(text: str, pretok: int = PRETOK_GPT2) -> list[str]:
    """The pieces the C pre-tokenizer splits ``text`` into (byte spans decoded back to str)."""
    L = _c()
    b = text.encode("utf-8")
    cap = len(b) + 1
    spans = (ctypes.c_size_t * (2 * cap))()
    n = ctypes.c_size_t()
    _check(
        L.em_tokenizer_pretokenize(pretok, b, len(b), spans, cap, ctypes.byref(n)), "pretokenize"
    )
    return [
        b[spans[2 * i] : spans[2 * i + 1]].decode("utf-8", errors="replace") for i in range(n.value)
    ]


# ---------------------------------------------------------------- compact file (Python writer)


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


_U2B = {v: k for k, v in _bytes_to_unicode().items()}


def _unmap(s: str) -> bytes | None:
    try:
        return bytes(_U2B[c] for c in s)
    except KeyError:
        return None


def write_compact(
    path: str | os.PathLike[str],
    *,
    model: int,
    pretok: int,
    tokens: Sequence[bytes],
    scores: Sequence[float] | None = None,
    types: Sequence[int] | None = None,
    merges: Sequence[tuple[int, int]] = (),
    bos_id: int = -1,
    eos_ids: Sequence[int] = (),
    add_bos: bool = False,
    ignore_merges: bool = False,
    spm_prefix: bool = False,
) -> None:
    """Writes the compact ``EMTK`` tokenizer file. ``tokens`` are raw bytes (byte-level tokens
    already un-mapped), ``merges`` pairs of ids in rank order."""
    flags = (
        (_FLAG_ADD_BOS if add_bos else 0)
        | (_FLAG_IGNORE_MERGES if ignore_merges else 0)
        | (_FLAG_SPM_PREFIX if spm_prefix else 0)
    )
    out = bytearray(b"EMTK")
    out += struct.pack("<IIIIiI", 1, model, pretok, flags, bos_id, len(eos_ids))
    out += struct.pack(f"<{len(eos_ids)}i", *eos_ids)
    out += struct.pack("<I", len(tokens))
    for i, t in enumerate(tokens):
        out += struct.pack("<I", len(t)) + t
        out += struct.pack("<fB", scores[i] if scores else 0.0, types[i] if types else TOKEN_NORMAL)
    out += struct.pack("<I", len(merges))
    for a, b in merges:
        out += struct.pack("<ii", a, b)
    Path(path).write_bytes(bytes(out))


_GGUF_PRETOK = {
    "smollm": PRETOK_DIGITS_GPT2,
    "llama-bpe": PRETOK_LLAMA3,
    "llama3": PRETOK_LLAMA3,
    "gpt-2": PRETOK_GPT2,
    "default": PRETOK_GPT2,
}


def compact_from_gguf(
    gguf_path: str | os.PathLike[str] | Any, out_path: str | os.PathLike[str]
) -> None:
    """Writes the compact tokenizer file from a GGUF's tokenizer metadata (read with ``gguf``;
    ``gguf_path`` may also be an open ``gguf.GGUFReader``)."""
    from gguf import GGUFReader  # test/export-time dependency only

    r = gguf_path if isinstance(gguf_path, GGUFReader) else GGUFReader(str(gguf_path))

    def field(name: str, default=None):  # type: ignore[no-untyped-def]
        f = r.fields.get(name)
        if f is None:
            return default
        if len(f.data) == 1 and f.types[0].name not in ("ARRAY",):
            v = f.parts[f.data[0]]
            return bytes(v).decode() if f.types[0].name == "STRING" else v.tolist()[0]
        return [
            bytes(f.parts[i]) if f.types[-1].name == "STRING" else f.parts[i].tolist()[0]
            for i in f.data
        ]

    model_name = field("tokenizer.ggml.model")
    spm = model_name == "llama"
    raw_tokens: list[bytes] = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(raw_tokens)
    scores = field("tokenizer.ggml.scores")
    tokens: list[bytes] = []
    for t, ty in zip(raw_tokens, types, strict=True):
        u = None if spm or ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED) else _unmap(t.decode())
        tokens.append(u if u is not None else t)
    index = {t: i for i, t in reversed(list(enumerate(tokens)))}
    merges = []
    for m in field("tokenizer.ggml.merges") or []:
        a, b = m.decode().split(" ", 1)
        merges.append((index[_unmap(a)], index[_unmap(b)]))
    eos = [field("tokenizer.ggml.eos_token_id")]
    eot = field("tokenizer.ggml.eot_token_id")
    if eot is not None and eot not in eos:
        eos.append(eot)
    write_compact(
        out_path,
        model=MODEL_SPM_BPE if spm else MODEL_BPE_BYTELEVEL,
        pretok=PRETOK_NONE
        if spm
        else _GGUF_PRETOK.get(field("tokenizer.ggml.pre", "default"), PRETOK_GPT2),
        tokens=tokens,
        scores=scores,
        types=types,
        merges=merges,
        bos_id=field("tokenizer.ggml.bos_token_id", -1),
        eos_ids=[e for e in eos if e is not None],
        add_bos=bool(field("tokenizer.ggml.add_bos_token", False)),
        spm_prefix=spm and bool(field("tokenizer.ggml.add_space_prefix", True)),
    )
