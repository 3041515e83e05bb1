"""Variance and standard deviation in EmberCpuBackend (``aten::var.correction``: ``x.var()``,
``x.std()``, a hand-written layer norm, AdaIN's feature statistics) as two passes of backend means:
any dims, keepdim or not, corrections 0, 1 and 2; within f32 rounding of eager at 1 and 2 threads.
A correction that leaves no degrees of freedom stays portable (ATen's inf / NaN).

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_var.py
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from backend_cpu_common import Fn, _inside_and_equal


def _adain_stats(x: torch.Tensor) -> torch.Tensor:
    n, c = x.shape[:2]
    var = x.view(n, c, -1).var(dim=2) + 1e-5
    return (x - x.view(n, c, -1).mean(2).view(n, c, 1, 1)) / var.sqrt().view(n, c, 1, 1)


CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "var_last": lambda x: x.var(-1),
    "var_last_keep_biased": lambda x: x.var(-1, keepdim=True, unbiased=False),
    "std_hw": lambda x: x.std(dim=(2, 3), keepdim=True),
    "var_all": lambda x: x.var().expand(3),
    "var_c_correction2": lambda x: torch.var(x, dim=1, correction=2),
    "var_n_w": lambda x: torch.var(x, dim=(0, 3)),
    "layer_norm_by_hand": lambda x: (
        (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)
    ),
    "adain": _adain_stats,
}


@pytest.mark.parametrize("name", list(CASES))
def test_var_inside_and_equal(name: str) -> None:
    torch.manual_seed(0)
    fn = CASES[name]
    m = Fn(lambda x: fn(x * 2.0 + 1.0))
    _inside_and_equal(m, torch.randn(2, 5, 6, 7), rtol=2e-5, atol=2e-5)


def test_no_degrees_of_freedom_stays_portable() -> None:
    m = Fn(lambda x: torch.var(x, dim=1, correction=3))  # 3 values, correction 3
    _inside_and_equal(m, torch.randn(2, 3, 4), inside=False)
