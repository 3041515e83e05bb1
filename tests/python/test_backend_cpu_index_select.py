"""``index_select`` by a constant index in EmberCpuBackend: ``torch.roll`` (Swin's shifted
windows: index_select by a rotation, two slices and a cat), a channel reorder of a few runs,
a contiguous run (one slice), and a shuffled index of many runs (a gather); nothing outside the
backend, bit for bit equal to eager at 1 and 2 threads.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_index_select.py
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from backend_cpu_common import Fn, _inside_and_equal

_PERM = torch.randperm(24, generator=torch.Generator().manual_seed(0))

CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "swin_roll": lambda x: torch.roll(x, shifts=(-3, -3), dims=(1, 2)),
    "roll_back": lambda x: torch.roll(x, shifts=(3, 3), dims=(1, 2)) * 2,
    "roll_flat": lambda x: torch.roll(x, 5),
    "reorder_runs": lambda x: x.index_select(3, torch.tensor([4, 5, 6, 0, 1, 2, 3, 20, 21])),
    "one_run": lambda x: x.index_select(1, torch.tensor([2, 3, 4])),
    "shuffled": lambda x: x.index_select(3, _PERM),
    "repeated": lambda x: x.index_select(2, torch.tensor([0, 0, 1, 1, 7])),
}


@pytest.mark.parametrize("name", list(CASES))
def test_index_select_inside_and_equal(name: str) -> None:
    torch.manual_seed(0)
    fn = CASES[name]
    _inside_and_equal(Fn(lambda x: fn(x + 1.0)), torch.randn(2, 8, 8, 24), exact=True)
