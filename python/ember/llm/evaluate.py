"""Quality of an exported LLM against its f32 original, teacher-forced on a fixed text.

    ref = eager_logits(model, ids)                      # f32 PyTorch, [T, vocab]
    got = program_logits(prog, ids, chunk=128)          # the .pte on Ember's C runtime
    q = quality(ref, got, ids)                          # top-1 agreement, perplexities

The program must return the logits of every position (``Llama(last_logits_only=False)``): the
text is fed in chunks of at most ``chunk`` tokens at increasing ``start_pos``, exactly as the
runner's prefill does, so the KV cache and attention path are the ones generation uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Quality", "eager_logits", "program_logits", "quality"]


@dataclass
class Quality:
    tokens: int  # predicted positions
    top1_agreement: float  # share of positions where argmax(got) == argmax(ref)
    ppl_ref: float  # perplexity of the text under the reference logits
    ppl: float  # ... under the evaluated logits

    @property
    def ppl_ratio(self) -> float:
        return self.ppl / self.ppl_ref


def eager_logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Logits [T, vocab] of ``model`` (forward(tokens [1, T], start_pos [1])) in one pass."""
    with torch.no_grad():
        out = model(ids[None, :], torch.zeros(1, dtype=torch.int64))
    return out[0].float()


def program_logits(program: Any, ids: torch.Tensor, chunk: int = 128) -> torch.Tensor:
    """Logits [T, vocab] of an exported program, fed ``chunk`` tokens at a time."""
    parts = []
    for s in range(0, ids.numel(), chunk):
        piece = ids[s : s + chunk]
        out = program.run(piece[None, :], torch.tensor([s], dtype=torch.int64))
        out = out[0] if isinstance(out, (list, tuple)) else out
        parts.append(torch.as_tensor(out)[0].float())
    return torch.cat(parts, dim=0)


def quality(ref: torch.Tensor, got: torch.Tensor, ids: torch.Tensor) -> Quality:
    """Compares logits for positions 0..T-2 predicting ids[1..T-1]."""
    if ref.shape != got.shape or ref.shape[0] != ids.numel():
        raise ValueError(f"shape mismatch: ref {tuple(ref.shape)}, got {tuple(got.shape)}")
    target = ids[1:]
    r, g = ref[:-1], got[:-1]
    agree = (r.argmax(-1) == g.argmax(-1)).double().mean().item()

    def ppl(lg: torch.Tensor) -> float:
        nll = torch.nn.functional.cross_entropy(lg.double(), target, reduction="mean")
        return math.exp(nll.item())

    return Quality(int(target.numel()), agree, ppl(r), ppl(g))
