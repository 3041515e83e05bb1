"""Per-tensor dynamic int8 fake-quants in EmberCpuBackend (blob version 17, EMC_OP_TENSOR_FQ):
PT2E's dynamic per-tensor form (choose_qparams.tensor, then quantize / dequantize with tensor
qparams: ExecuTorch's XNNPACKQuantizer with is_dynamic=True) before anything but an int8 linear
(a convolution, an add, the graph's output) runs inside the delegate instead of as three
portable operators between two delegates. The fake-quant's values are checked bit for bit
against the portable kernels (the graph's output is the dequantized tensor), across threads,
ISAs and hostile inputs (zeros, NaN, infinities, huge and tiny values, a narrow range, a large
or zero eps); the conv after it within f32 rounding of the portable run; ExecuTorch's stock
quantizer's graph of a conv net with nothing left outside; and the runtime refusing bad
parameters.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_tensorfq.py
"""

from __future__ import annotations

import struct

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
from backend_cpu_common import _blob_ops as _ops
from backend_cpu_common import (
    _hostile,
    _outside,
    _patched_ip_checks,
    _run_per_isa,
    _xnnpack_dynamic,
)
from torch import nn

import ember
from ember.backends.check import runtime_check
from ember.backends.delegate import DelegateInstr
from ember.runtime import RuntimeProgram

qd = torch.ops.quantized_decomposed
TENSOR_FQ, CONV2D, DQ_LINEAR = 19, 1, 18  # EMC_OP_TENSOR_FQ, EMC_OP_CONV2D, EMC_OP_DQ_LINEAR


def _fq(x: torch.Tensor, qrange: tuple[int, int], eps: float) -> torch.Tensor:
    lo, hi = qrange
    s, z = qd.choose_qparams.tensor(x, lo, hi, eps, torch.int8)
    q = qd.quantize_per_tensor.tensor(x, s, z, lo, hi, torch.int8)
    return qd.dequantize_per_tensor.tensor(q, s, z, lo, hi, torch.int8)


class _FqOut(nn.Module):
    """x * 1.5 (so the fake-quant is inside the delegate), its dynamic fake-quant as the output."""

    def __init__(self, qrange: tuple[int, int] = (-128, 127), eps: float = 2.0**-12) -> None:
        super().__init__()
        self.qrange, self.eps = qrange, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _fq(x * 1.5, self.qrange, self.eps)


class _FqConv(nn.Module):
    """A conv reading a dynamic fake-quant of its input, which a residual add also reads."""

    def __init__(self, c: int = 8, co: int = 12) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(c * 100 + co)
        self.conv = nn.Conv2d(c, co, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randn(co, c, 3, 3, generator=g) * 0.2)
        self.c = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq = _fq(torch.relu(x) - 0.25, (-128, 127), 2.0**-12)
        return self.conv(xq) + xq[:, :1]


def _portable(m: nn.Module, x: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    plain = ember.export(m, (x,), backend=None)
    return RuntimeProgram(plain.buffer).run("forward", [x2])[0]


def _kinds(prog: ember.Program) -> list[int]:
    return [o[0] for o in _ops(prog)]


@pytest.mark.parametrize("shape", [(1, 7), (3, 5, 33), (1, 8, 200, 200)])
def test_fake_quant_is_the_portable_bits(shape: tuple[int, ...]) -> None:
    """The op's output is the portable Q/DQ's, bit for bit, at 1, 2 and 3 threads (the last
    shape is split over the threads in both passes)."""
    m = _FqOut().eval()
    g = torch.Generator().manual_seed(len(shape))
    x = torch.randn(shape, generator=g) * 3
    prog = ember.export(m, (x,), backend="cpu")
    assert TENSOR_FQ in _kinds(prog) and not _outside(prog), (_kinds(prog), _outside(prog))
    x2 = torch.randn(shape, generator=g) * 2 + 0.5
    want = _portable(m, x, x2)
    for t in (1, 2, 3):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        assert torch.equal(got, want), (t, (got - want).abs().max())
    assert len(torch.unique(want)) <= 256


@pytest.mark.parametrize(
    "case",
    [
        "zeros",
        "nan",
        "inf",
        "neg_inf",
        "huge",
        "tiny",
        "one_sided",
        "narrow",
        "big_eps",
        "zero_eps",
    ],
)
def test_hostile_inputs_as_the_portable_run(case: str) -> None:
    """Hostile activations give the portable kernels' values (NaN where they give NaN): a NaN
    makes the qparams eps and qmin, an infinity an infinite scale (every finite value NaN), zeros
    give the scale eps (an eps of 0 stays portable: the exporter refuses it)."""
    qrange, eps = {
        "narrow": ((-100, 90), 2.0**-12),
        "big_eps": ((-128, 127), 0.5),
    }.get(case, ((-128, 127), 2.0**-12))
    m = _FqOut(qrange, eps).eval()
    x = torch.randn(4, 300, generator=torch.Generator().manual_seed(0)) * 3
    prog = ember.export(m, (x,), backend="cpu")
    assert TENSOR_FQ in _kinds(prog) and not _outside(prog)
    x2 = _hostile(x, case)
    want = _portable(m, x, x2)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    if case in ("inf", "neg_inf"):
        assert torch.isnan(want[torch.isfinite(x2)]).all()


def test_same_bits_on_every_isa(tmp_path) -> None:  # noqa: ANN001
    m = _FqOut().eval()
    x = torch.randn(5, 1000, generator=torch.Generator().manual_seed(3))
    prog = ember.export(m, (x,), backend="cpu")
    x[1, :9], x[2, 7] = 1e-30, float("nan")
    x[4] = torch.linspace(-1, 1, 1000)  # ties after scaling
    outs = _run_per_isa(prog, x, tmp_path, (None, "avx2", "scalar"), threads=2)
    for isa in ("avx2", "scalar"):
        torch.testing.assert_close(outs[isa], outs[None], rtol=0, atol=0, equal_nan=True)


def test_conv_reads_it_inside_the_delegate() -> None:
    m = _FqConv().eval()
    x = torch.randn(1, 8, 20, 20, generator=torch.Generator().manual_seed(1))
    prog = ember.export(m, (x,), backend="cpu")
    kinds = _kinds(prog)
    assert kinds.count(TENSOR_FQ) == 1 and CONV2D in kinds and not _outside(prog), kinds
    x2 = torch.randn(1, 8, 20, 20, generator=torch.Generator().manual_seed(2)) * 2
    want = _portable(m, x, x2)
    outs = [RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0] for t in (1, 2)]
    for got in outs:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    torch.testing.assert_close(outs[0], m(x2), rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def test_stock_xnnpack_dynamic_conv_net_runs_inside() -> None:
    """A conv net quantized by PT2E with ExecuTorch's XNNPACKQuantizer in its dynamic form (it
    quantizes the convs' inputs per tensor at run time) exports with nothing outside the
    delegate: the convs' inputs through EMC_OP_TENSOR_FQ, the linear a dq linear."""

    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2),
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 10),
    ).eval()
    x = torch.randn(1, 3, 16, 16)
    converted, ep = _xnnpack_dynamic(m, x)
    prog = ember.export(ep, (x,))
    kinds = _kinds(prog)
    assert not _outside(prog), _outside(prog)
    assert TENSOR_FQ in kinds and DQ_LINEAR in kinds, kinds
    x2 = torch.randn(1, 3, 16, 16) * 2
    plain = ember.export(ep, (x,), backend=None)
    want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x2])[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got, converted(x2), rtol=1e-3, atol=1e-3)


def test_runtime_refuses_bad_parameters() -> None:
    prog = ember.export(_FqOut().eval(), (torch.randn(3, 40),), backend="cpu")
    bad = [(0, 0), (1, -1), (1, 41), (2, -129), (3, 128), (2, 127), (3, -128)]
    for slot, value, why in _patched_ip_checks(prog, TENSOR_FQ, bad):
        assert why is not None, (slot, value)
    d = next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr))
    blob = bytes(d.processed)
    at = next(o[1] for o in _ops(prog) if o[0] == TENSOR_FQ)
    for eps in (-1.0, float("inf"), float("nan")):
        patched = bytearray(blob)
        struct.pack_into("<f", patched, at + 128 + 4 * 2, eps)  # fp[EMC_TFQ_FP_EPS]
        why = runtime_check("EmberCpuBackend", bytes(patched), 1 << 20)
        assert why is not None and "eps" in why, (eps, why)
    patched = bytearray(blob)
    struct.pack_into("<I", patched, at + 4, 1)  # an activation (clamp)
    assert runtime_check("EmberCpuBackend", bytes(patched), 1 << 20) is not None
