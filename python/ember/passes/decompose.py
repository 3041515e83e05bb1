"""Stage 2: decompose to the Core ATen operator set.

Guarantees: every ``call_function`` node targets a Core ATen op (or a higher-order op such as
``cond``, ``operator.getitem``, a symbolic-int operation or a runtime assertion), using PyTorch's
own decomposition table (``torch._decomp.core_aten_decompositions``).
"""

from __future__ import annotations

import torch
from torch._decomp import core_aten_decompositions


def decompose(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Return ``ep.run_decompositions(core_aten_decompositions())``."""
    return ep.run_decompositions(core_aten_decompositions())
