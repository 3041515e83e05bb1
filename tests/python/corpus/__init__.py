"""The architecture corpus (issue 27): small models of many architectures, built offline from
`transformers` config classes (random seeded weights, no download) or plain `torch.nn`.

Every case is a ``Case``: a name, a family, and a builder returning ``(module, inputs)`` where the
module takes ONE input tensor (pixels, a waveform, features or token ids) and returns ONE tensor
(logits or the last hidden state), so the same case drives the tests (``test_corpus.py``) and the
speed table (``bench/corpus.py``, whose peers take one input). ``fast=True`` marks the subset that
``make test`` runs; ``EMBER_CORPUS=full`` runs them all.
"""

from __future__ import annotations

from .registry import CASES, Case

# Importing the families registers their cases.
from . import audio, lm, recurrent, text, vision  # noqa: E402,F401  isort: skip

__all__ = ["CASES", "Case"]
