"""Max and min over dims in EmberCpuBackend (EMC_OP_MEAN's max / min reductions): ``amax``,
``amin``, ``max(dim)`` / ``min(dim)`` whose indices are not used (a hand-written stable softmax's
``x - x.max(-1, keepdim=True)[0]``, a global max pool by ``amax``), over the last, a middle, several
or all dims; bit for bit equal to eager (the softmax's exp within an ulp), NaN propagating, at
1 and 2 threads. ``max(dim)`` whose
indices are used stays portable.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_extreme.py
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from backend_cpu_common import Fn, _inside_and_equal

CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "stable_softmax": lambda x: torch.exp(x - x.max(-1, keepdim=True)[0]),
    "amax_last": lambda x: x.amax(-1),
    "amin_middle": lambda x: x.amin(1, keepdim=True) + x,
    "amax_hw": lambda x: x.amax(dim=(2, 3)),
    "amax_nonadjacent": lambda x: x.amax(dim=(1, 3)),
    "amin_all": lambda x: x.amin().reshape(1) * 2,
    "min_dim": lambda x: x.min(2)[0],
}


@pytest.mark.parametrize("name", list(CASES))
def test_extreme_inside_and_equal(name: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 6, 7)
    x[1, 2, 3, 4] = float("nan")
    x[0, 1, :, 2] = -float("inf")
    fn = CASES[name]
    exact = name != "stable_softmax"  # the backend's exp: within an ulp, not bit for bit
    _inside_and_equal(Fn(lambda v: fn(v * 1.5)), x, exact=exact, rtol=1e-6, atol=1e-6)


def test_max_with_indices_used_stays_portable() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        v, i = x.max(-1)
        return v + i.to(torch.float32)

    _inside_and_equal(Fn(fn), torch.randn(3, 4, 5), inside=False, exact=True)
