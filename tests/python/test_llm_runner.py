"""The C LLM runner (extension/llm.c, tools/ember-llm) on a tiny exported program.

The program is a "counter": its logits at the last position put all mass on (last token + 1)
mod V, so greedy generation is predictable and every stop rule can be checked: EOS, max new
tokens, and the context limit (max_seq_len from the metadata method). The prompt (59 tokens) is
longer than the forward input's bound (32), so prefill runs in chunks.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

import ember
from ember import _lib
from ember.llm import generate
from ember.llm import tokenizer as T

V = 260
EOS = 257


class _Counter(torch.nn.Module):
    def forward(self, tokens: torch.Tensor, start_pos: torch.Tensor) -> torch.Tensor:
        nxt = torch.remainder(tokens[:, -1:] + 1 + start_pos * 0, V)
        return torch.nn.functional.one_hot(nxt, V).to(torch.float32) * 10.0  # [1, 1, V]


class _Const(torch.nn.Module):
    def __init__(self, v: list[int]) -> None:
        super().__init__()
        self.v = v

    def forward(self) -> torch.Tensor:
        return torch.tensor(self.v, dtype=torch.int64)


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("llm")
    S = torch.export.Dim("S", min=1, max=32)
    methods = {
        "forward": (_Counter(), (torch.tensor([[1, 2]]), torch.tensor([0]))),
        "get_max_seq_len": (_Const([64]), ()),
        "get_vocab_size": (_Const([V]), ()),
        "get_bos_id": (_Const([-1]), ()),
        "get_eos_ids": (_Const([EOS]), ()),
        "use_kv_cache": (_Const([1]), ()),
    }
    ember.export(methods, dynamic_shapes={"forward": ({1: S}, None)}).save(d / "counter.pte")
    toks = [bytes([b]) for b in range(256)] + [b"<|im_start|>", b"<|im_end|>", b"<x>", b"<y>"]
    types = [T.TOKEN_NORMAL] * 256 + [T.TOKEN_CONTROL] * 4
    T.write_compact(
        d / "bytes.emtk",
        model=T.MODEL_BPE_BYTELEVEL,
        pretok=T.PRETOK_GPT2,
        tokens=toks,
        types=types,
        eos_ids=[EOS],
    )
    return d / "counter.pte", d / "bytes.emtk"


def test_generate_greedy_and_stops(counter: tuple[Path, Path]) -> None:
    pte, tok = counter
    text, st = generate(pte, tok, "a", max_new_tokens=10)
    assert text == "bcdefghijk" and st.n_generated == 10 and st.stop == "max_new_tokens"
    # none asked for: the prompt runs, nothing is generated (one token was, before)
    text, st = generate(pte, tok, "a", max_new_tokens=0)
    assert text == "" and st.n_generated == 0 and st.stop == "max_new_tokens"
    # <|im_start|> is 256 (parsed as a special token): the next token, 257, is EOS.
    text, st = generate(pte, tok, "<|im_start|>", max_new_tokens=100)
    assert st.stop == "eos" and st.n_generated == 0 and text == ""
    text, st = generate(pte, tok, "\u00ff", max_new_tokens=20)  # bytes c3 bf: from 0xc0
    assert st.n_generated == 20 and st.stop == "max_new_tokens"
    long_prompt = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvw"  # 59 tokens > 32
    text, st = generate(pte, tok, long_prompt, max_new_tokens=100)
    assert st.n_prompt_tokens == 59 and st.stop == "context_limit" and text == "xyz{|}"
    assert st.peak_rss_kb > 0 and st.prefill_tok_per_s > 0


def test_generate_chat_template_and_sampling(counter: tuple[Path, Path]) -> None:
    pte, tok = counter
    # The template ends with "assistant\n": the counter continues from '\n' (10).
    text, st = generate(pte, tok, "hi", chat=True, max_new_tokens=3)
    assert text == "\x0b\x0c\r"
    assert st.n_prompt_tokens == 3 + len("user\nhi\nassistant\n")  # 3 special tokens
    # The counter's logits are one-hot*10: sampling at T=1 still picks the max with p ~ 1 - 1e-2.
    a, _ = generate(pte, tok, "a", max_new_tokens=20, temperature=0.7, top_p=0.9, seed=7)
    b, _ = generate(pte, tok, "a", max_new_tokens=20, temperature=0.7, top_p=0.9, seed=7)
    assert a == b == "bcdefghijklmnopqrstu"


def test_ember_llm_cli(counter: tuple[Path, Path]) -> None:
    pte, tok = counter
    exe = _lib.repo_root() / "build" / "ember-llm"
    if not exe.exists():
        pytest.skip("build/ember-llm not built (cmake --build build)")
    r = subprocess.run(
        [
            str(exe),
            "--model",
            str(pte),
            "--tokenizer",
            str(tok),
            "--prompt",
            "xy",
            "--max-new-tokens",
            "100",
            "--threads",
            "2",
        ],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("z{|}~")
    assert "context limit reached" in r.stderr and "max_seq_len 64" in r.stderr
    for word in ("prefill", "tok/s", "time to first token", "decode", "peak RSS"):
        assert word in r.stderr
    # --mmap maps the file instead of reading it into (huge-page) memory: same tokens
    mapped = subprocess.run(
        [str(exe), "--model", str(pte), "--tokenizer", str(tok), "--prompt", "xy", "--mmap"]
        + ["--max-new-tokens", "100"],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
    )
    assert mapped.returncode == 0 and mapped.stdout == r.stdout, mapped.stderr
    bad = subprocess.run(
        [str(exe), "--model", str(tok), "--tokenizer", str(tok), "--prompt", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "cannot load" in bad.stderr
