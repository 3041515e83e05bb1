"""Broadcasting expands and the exact powers in EmberCpuBackend: ``expand`` of an activation or a
constant (grouped-query attention's repeated K / V heads, a broadcast bias) runs as the binary
op's broadcast of ``x * 1`` (exact for every value), and ``pow(x, 2)``, ``pow(x, 0.5)``,
``pow(x, 1)``, ``pow(x, 3)`` (Llama's RMSNorm squares, GPT-2's tanh GELU cubes) as ``x * x``,
``sqrt``, a copy, ``(x * x) * x`` (EMC_ACT_CUBE), as ATen computes them; other exponents stay
portable. Values equal eager's bit for bit (within an ulp for sqrt, which
eager computes with its own vector code), nothing left outside, at 1 and 2 threads.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_pow_expand.py
"""

from __future__ import annotations

import pytest
import torch
from backend_cpu_common import _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram


def _run(prog: ember.Program, x: list[torch.Tensor], threads: int) -> torch.Tensor:
    return RuntimeProgram(prog.buffer, threads=threads).run("forward", x)[0]


@pytest.mark.parametrize("const", [False, True])
@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 4, 5), (1, 4, 7)])
def test_expand_is_exact_and_inside(shape: tuple[int, ...], const: bool) -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Parameter(torch.randn(1, 4, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            src = self.c if const else torch.relu(x) - 0.5
            return src.expand(*shape).contiguous()

    m = M().eval()
    x = torch.randn(1, 4, 1)
    prog = ember.export(m, (x,))
    if not const:
        assert not _outside(prog), _outside(prog)
    x2 = torch.randn(1, 4, 1)
    x2[0, 1, 0] = float("nan")
    x2[0, 2, 0] = -0.0
    for t in (1, 2):
        got = _run(prog, [x2], t)
        want = m(x2)
        assert torch.equal(torch.nan_to_num(got, 7.0), torch.nan_to_num(want, 7.0)), (got, want)
        assert torch.equal(torch.signbit(got), torch.signbit(want))


class _GQA(nn.Module):
    """Hugging Face's repeat_kv: K / V heads expanded to the query heads, then attention."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, h, s, d = k.shape
        k = k[:, :, None].expand(b, h, 3, s, d).reshape(b, h * 3, s, d)
        v = v[:, :, None].expand(b, h, 3, s, d).reshape(b, h * 3, s, d)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_grouped_query_attention_inside() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 6, 9, 16, generator=g),
        torch.randn(1, 2, 9, 16, generator=g),
        torch.randn(1, 2, 9, 16, generator=g),
    )
    m = _GQA().eval()
    prog = ember.export(m, (q, k, v))
    assert not _outside(prog), _outside(prog)
    for t in (1, 2):
        torch.testing.assert_close(_run(prog, [q, k, v], t), m(q, k, v), rtol=1e-5, atol=1e-6)


class _RMSNorm(nn.Module):
    """Llama's RMSNorm as Hugging Face writes it."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.w * (x * torch.rsqrt(var + 1e-6))


def test_rmsnorm_inside() -> None:
    m = _RMSNorm(64).eval()
    x = torch.randn(2, 5, 64)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    for t in (1, 2):
        torch.testing.assert_close(_run(prog, [x * 3], t), m(x * 3), rtol=1e-5, atol=1e-6)


class _Pow(nn.Module):
    def __init__(self, e: float) -> None:
        super().__init__()
        self.e = e

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 1.5).pow(self.e)


@pytest.mark.parametrize("e", [2.0, 0.5, 1.0, 3.0, 4.0])
def test_powers(e: float) -> None:
    m = _Pow(e).eval()
    x = torch.randn(4, 33).abs() if e == 0.5 else torch.randn(4, 33)
    x[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")])
    prog = ember.export(m, (x,))
    outside = _outside(prog)
    assert outside == (["aten::pow.Tensor_Scalar_out"] if e == 4.0 else []), outside
    got, want = _run(prog, [x], 2), m(x)
    # x * x, (x * x) * x and copies exactly; sqrt is correctly rounded here, within an ulp in
    # eager (its own vector sqrt); the portable pow(x, 4) in double, eager's in f32
    tol = 0.0 if e in (1.0, 2.0, 3.0) else 3e-7
    torch.testing.assert_close(got, want, rtol=tol, atol=0, equal_nan=True)
