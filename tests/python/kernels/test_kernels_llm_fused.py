"""Ember's fused LLM kernels (kernels/portable/llm_fused.c: ember::rms_norm, ember::rope,
ember::swiglu) against eager PyTorch and against the portable kernels of the forms they replace.

RoPE is elementwise products and a sum, each rounded as eager's kernels round them: bit-equal.
RMSNorm must give the bits of the portable chain it replaces (mul, mean, add, rsqrt, mul, mul;
the mean summed in double), SwiGLU those of sigmoid, mul, mul: run here kernel by kernel. Both
are also checked against eager within f32 tolerance. Bad arguments raise (never crash).

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_llm_fused.py
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import CaseList, seeded
from kernels_nn_common import F32, F64, Builder, Call, err, out_like, rnd, run_case

from ember._lib import call_kernel
from ember.llm import fused_ops

CASES = CaseList()
case = CASES.case
EXACT = (0.0, 0.0)

for shape in [(1, 1, 576), (2, 5, 64), (7, 3), (1, 1), (3, 130), (0, 8)]:
    for eps in [1e-5, 1e-6]:

        @case(f"rms_norm-{shape}-{eps}")
        def _(g: torch.Generator, shape: tuple[int, ...] = shape, eps: float = eps) -> Call:
            x, w = rnd(shape, F32, g, lo=-3, hi=3), rnd(shape[-1:], F32, g)
            exp = fused_ops.rms_norm_ref(x, w, eps)
            o = out_like(exp)
            return Call("ember::rms_norm.out", [x, w, eps, o, o], [(o, exp)])


# cos / sin: the LLM's [1, S, 1, D] over [B, S, H, D], a full shape, a 2-D table, one row
for xs, cs in [
    ((1, 4, 3, 8), (1, 4, 1, 8)),
    ((2, 4, 3, 64), (1, 4, 1, 64)),
    ((2, 3, 6), (2, 3, 6)),
    ((5, 2, 10), (2, 10)),
    ((3, 2), (2,)),
    ((1, 0, 2, 4), (1, 0, 1, 4)),
]:

    @case(f"rope-{xs}-{cs}")
    def _(g: torch.Generator, xs: tuple[int, ...] = xs, cs: tuple[int, ...] = cs) -> Call:
        x, c, s = rnd(xs, F32, g, lo=-4, hi=4), rnd(cs, F32, g, -1, 1), rnd(cs, F32, g, -1, 1)
        exp = fused_ops.rope_ref(x, c, s)
        o = out_like(exp)
        return Call("ember::rope.out", [x, c, s, o, o], [(o, exp)], EXACT)


# rows past the kernel's 256-element chunks, a ragged last chunk, NaN / large inputs
for shape in [(1, 1, 3072), (2, 3, 18), (4, 2 * 300), (2,), (0, 6)]:

    @case(f"swiglu-{shape}")
    def _(g: torch.Generator, shape: tuple[int, ...] = shape) -> Call:
        x = rnd(shape, F32, g, lo=-30, hi=30)
        if x.numel() > 4:
            x.view(-1)[1] = float("nan")
        exp = fused_ops.swiglu_ref(x)
        o = out_like(exp)
        return Call("ember::swiglu.out", [x, o, o], [(o, exp)])


def _err(name: str, op: str, args: list[object]) -> None:
    CASES.append((name, err(op, args)))


X, W = torch.ones(2, 8), torch.ones(8)
_err(
    "rms_norm-err-f64",
    "ember::rms_norm.out",
    [X.double(), W.double(), 1e-5, X.double(), X.double()],
)
_err("rms_norm-err-weight", "ember::rms_norm.out", [X, torch.ones(7), 1e-5, X.clone(), X.clone()])
_err("rms_norm-err-eps", "ember::rms_norm.out", [X, W, None, X.clone(), X.clone()])
_err(
    "rms_norm-err-2d-weight",
    "ember::rms_norm.out",
    [X, torch.ones(1, 8), 1e-5, X.clone(), X.clone()],
)
_err(
    "rope-err-odd",
    "ember::rope.out",
    [torch.ones(2, 7), torch.ones(7), torch.ones(7), torch.ones(2, 7), torch.ones(2, 7)],
)
_err(
    "rope-err-bcast",
    "ember::rope.out",
    [X, torch.ones(3, 8), torch.ones(3, 8), X.clone(), X.clone()],
)
_err("rope-err-last", "ember::rope.out", [X, torch.ones(4), torch.ones(4), X.clone(), X.clone()])
_err(
    "rope-err-sin-shape",
    "ember::rope.out",
    [X, torch.ones(2, 8), torch.ones(1, 8), X.clone(), X.clone()],
)
_err("rope-err-int", "ember::rope.out", [X.int(), W, W, X.int(), X.int()])
_err("swiglu-err-odd", "ember::swiglu.out", [torch.ones(2, 5), torch.ones(2, 2), torch.ones(2, 2)])
_err(
    "swiglu-err-f64",
    "ember::swiglu.out",
    [X.double(), torch.ones(2, 4, dtype=F64), torch.ones(2, 4, dtype=F64)],
)
_err(
    "swiglu-err-noncontig",
    "ember::swiglu.out",
    [torch.ones(8, 4).t(), torch.ones(4, 4), torch.ones(4, 4)],
)


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)


def _k(op: str, args: list[object]) -> None:
    call_kernel(op, args, temp_bytes=1 << 20)


def _chain_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The decomposed RMSNorm on the portable kernels, one kernel at a time."""
    sq, r, y, out = (
        torch.empty_like(x),
        torch.empty(*x.shape[:-1], 1),
        torch.empty_like(x),
        torch.empty_like(x),
    )
    m, t = torch.empty_like(r), torch.empty_like(r)
    _k("aten::mul.out", [x, x, sq, sq])
    _k("aten::mean.out", [sq, [-1], True, None, m, m])
    _k("aten::add.Scalar_out", [m, eps, 1, t, t])
    _k("aten::rsqrt.out", [t, r, r])
    _k("aten::mul.out", [x, r, y, y])
    _k("aten::mul.out", [y, w, out, out])
    return out


def _chain_swiglu(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    g, u = x[..., :h].contiguous(), x[..., h:].contiguous()
    sg, t, out = torch.empty_like(g), torch.empty_like(g), torch.empty_like(g)
    _k("aten::sigmoid.out", [g, sg, sg])
    _k("aten::mul.out", [g, sg, t, t])
    _k("aten::mul.out", [t, u, out, out])
    return out


@pytest.mark.parametrize("shape", [(1, 1, 576), (3, 131), (2, 4, 2048), (1, 5)])
def test_rms_norm_bits_of_the_chain(shape: tuple[int, ...]) -> None:
    g = seeded(f"chain-rms-{shape}")
    x, w = rnd(shape, F32, g, lo=-3, hi=3), rnd(shape[-1:], F32, g)
    o = torch.empty_like(x)
    _k("ember::rms_norm.out", [x, w, 1e-5, o, o])
    assert torch.equal(o, _chain_rms_norm(x, w, 1e-5))


@pytest.mark.parametrize("shape", [(1, 1, 3072), (2, 3, 2 * 257), (1, 2)])
def test_swiglu_bits_of_the_chain(shape: tuple[int, ...]) -> None:
    x = rnd(shape, F32, seeded(f"chain-swiglu-{shape}"), lo=-20, hi=20)
    o = torch.empty(*shape[:-1], shape[-1] // 2)
    _k("ember::swiglu.out", [x, o, o])
    assert torch.equal(o, _chain_swiglu(x))
