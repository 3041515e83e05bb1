"""pte_summary.py — the ``.pte`` reader for the build tools: ``ember.reader`` (the one Python
reader of the format, python/ember/reader.py), loaded from this checkout without torch.

Used by tools/selective_build.py (operator and dtype lists), mcu/gen_model.py (arena sizes, input
shapes of the firmware's embedded model) and ember.quant.budget. Standard library only.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ember_tree import load  # noqa: E402

_reader = load("reader")

DTYPE_NAMES = _reader.DTYPE_NAMES
DTYPE_SIZES = _reader.DTYPE_SIZES
TAG_NAMES = _reader.TAG_NAMES
TAG_TENSOR = _reader.TAG_TENSOR
KernelCall = _reader.KernelCall
Plan = _reader.Plan
PteError = _reader.PteError
TensorInfo = _reader.TensorInfo
Value = _reader.Value
read_file = _reader.read_file
read_program = _reader.read_program

__all__ = [
    "DTYPE_NAMES",
    "DTYPE_SIZES",
    "KernelCall",
    "Plan",
    "PteError",
    "TAG_NAMES",
    "TAG_TENSOR",
    "TensorInfo",
    "Value",
    "read_file",
    "read_program",
]
