"""Every heap allocation of module loading, tokenizer loading and the LLM runner may fail,
cleanly (issue 30): runs build/tests/test_ext_oom (tests/c/test_ext_oom.c) on generated files —
a tiny KV-cache LLM program with a compact tokenizer, a byte-level BPE tokenizer.json, and the
SmolLM2 GGUF's tokenizer when that package is installed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from test_llm_runner import EOS, V, _Const, _Counter

import ember
from ember import _lib
from ember.llm import tokenizer as T


def _exe() -> Path:
    exe = _lib.repo_root() / "build" / "tests" / "test_ext_oom"
    if not exe.exists():
        pytest.skip("build/tests/test_ext_oom not built (make build)")
    return exe


def _bpe_json(path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models
    from tokenizers import pre_tokenizers as P

    byte_level = P.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(sorted(byte_level))}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("w", "o")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = tokenizers.Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = P.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(path))


def _small_gguf(path: Path) -> bool:
    """A GGUF holding only a small byte-level BPE tokenizer (the loader's path; SmolLM2's 49k
    vocabulary would take minutes to sweep allocation by allocation)."""
    try:
        import gguf
        from tokenizers import pre_tokenizers as P
    except ImportError:
        return False
    toks = sorted(P.ByteLevel.alphabet()) + ["he", "ll", "hell", "wo", "<|endoftext|>"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(toks)
    w.add_token_types([1] * (len(toks) - 1) + [3])
    w.add_token_merges(["h e", "l l", "he ll", "w o"])
    w.add_eos_token_id(len(toks) - 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return True


def test_every_allocation_may_fail(tmp_path: Path) -> None:
    exe = _exe()
    S = torch.export.Dim("S", min=1, max=32)
    methods = {
        "forward": (_Counter(), (torch.tensor([[1, 2]]), torch.tensor([0]))),
        "get_max_seq_len": (_Const([64]), ()),
        "get_vocab_size": (_Const([V]), ()),
        "get_bos_id": (_Const([-1]), ()),
        "get_eos_ids": (_Const([EOS]), ()),
        "use_kv_cache": (_Const([1]), ()),
    }
    ember.export(methods, dynamic_shapes={"forward": ({1: S}, None)}).save(tmp_path / "lm.pte")
    toks = [bytes([b]) for b in range(256)] + [b"<|im_start|>", b"<|im_end|>", b"<x>", b"<y>"]
    T.write_compact(
        tmp_path / "bytes.emtk",
        model=T.MODEL_BPE_BYTELEVEL,
        pretok=T.PRETOK_GPT2,
        tokens=toks,
        types=[T.TOKEN_NORMAL] * 256 + [T.TOKEN_CONTROL] * 4,
        eos_ids=[EOS],
    )
    _bpe_json(tmp_path / "tokenizer.json")
    args = [str(exe), "--llm", str(tmp_path / "lm.pte"), str(tmp_path / "bytes.emtk")]
    args += ["--tokenizer", str(tmp_path / "tokenizer.json")]
    if _small_gguf(tmp_path / "tok.gguf"):
        args += ["--tokenizer", str(tmp_path / "tok.gguf")]
    r = subprocess.run(args, cwd=_lib.repo_root(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    m = re.search(r"allocations failed one at a time: (\d+)", r.stdout)
    assert m and int(m.group(1)) > 300, r.stdout
    assert "0 failed" in r.stdout
