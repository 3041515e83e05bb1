"""Dynamic per-token int8 quantization (``quantize_exported(..., dynamic=True)``: each linear's
input through choose_qparams_per_token_asymmetric -> quantize_per_token -> dequantize_per_token)
in EmberCpuBackend: the three operators become one float ``tokenfq`` op (EMC_OP_TOKEN_FQ) that
repeats the portable kernels' arithmetic, so a lone one is bit-exact with the portable run and
with eager PyTorch's own operators (constant rows, ties, huge and tiny values, infinities, NaN
included), and a quantized MLP runs wholly in the backend (its linears as dynamic int8 linears,
EMC_OP_DQ_LINEAR, which quantize their rows themselves).

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_dynq.py
"""

from __future__ import annotations

import struct

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
from backend_cpu_common import _blob_ops, _n_delegates, _outside
from torch import nn

import ember
from ember.backends.check import runtime_check
from ember.backends.delegate import DelegateInstr
from ember.quant.pt2e import quantize_exported
from ember.runtime import RuntimeProgram

qd = torch.ops.quantized_decomposed
TOKEN_FQ = 16  # EMC_OP_TOKEN_FQ
DQ_LINEAR = 18  # EMC_OP_DQ_LINEAR


class _TokenFq(nn.Module):
    """One per-token fake-quant after a product (so the delegate has work around it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.5
        s, z = qd.choose_qparams_per_token_asymmetric(y, torch.int8)
        q = qd.quantize_per_token(y, s, z, -128, 127, torch.int8)
        return qd.dequantize_per_token(q, s, z, -128, 127, torch.int8, torch.float32) + 1.0


def _hostile() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 40, generator=g) * 3
    x[1] = 0.0  # all zeros: the eps scale
    x[2] = 2.5  # constant row
    x[3, :20] = 1e-30  # denormal-sized values
    x[4] = torch.linspace(-1, 1, 40)  # many ties after scaling
    x[5, 3] = 2e38  # a huge value: the rest round to zero
    x[6] = torch.arange(40, dtype=torch.float32) * 1e6
    x[7, 0], x[8, 5] = float("inf"), -float("inf")
    x[9, 7] = float("nan")
    x[10] = -torch.rand(40, generator=g)  # negative only
    x[11] = torch.rand(40, generator=g) + 5  # positive only, away from zero
    return x


def _op_kinds(prog: ember.Program) -> list[int]:
    return [o[0] for o in _blob_ops(prog)]


def test_token_fake_quant_bit_exact() -> None:
    x = _hostile()
    m = _TokenFq().eval()
    prog = ember.export(m, (x,), backend="cpu")
    assert not any(k.startswith("quantized_decomposed::") for k in _outside(prog)), _outside(prog)
    assert _op_kinds(prog).count(TOKEN_FQ) == 1
    plain = ember.export(m, (x,), backend=None)
    want = RuntimeProgram(plain.buffer).run("forward", [x])[0]
    for th in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=th).run("forward", [x])[0]
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    # and eager PyTorch's own operators, rows without NaN / infinities
    ok = torch.isfinite(x * 1.5).all(dim=1)
    torch.testing.assert_close(got[ok], m(x)[ok], rtol=0, atol=0)


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 96)
        self.b = nn.Linear(96, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.nn.functional.gelu(self.a(x)))


def test_dynamic_int8_mlp_runs_in_the_backend() -> None:
    torch.manual_seed(0)
    m = _Mlp().eval()
    x = torch.randn(2, 7, 64)
    q = quantize_exported(m, (x,), None, dynamic=True, progress=False)
    prog = ember.export(q, (x,))  # backend="auto": the CPU backend takes Q/DQ graphs
    assert _n_delegates(prog) == 1 and not _outside(prog), _outside(prog)
    # each linear a dynamic int8 linear that quantizes its rows itself (test_backend_cpu_dqlinear)
    assert _op_kinds(prog).count(DQ_LINEAR) == 2 and TOKEN_FQ not in _op_kinds(prog)
    plain = ember.export(q, (x,), backend=None)
    x2 = torch.randn(2, 7, 64) * 2
    want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x2])[0]
    # the linears sum in other orders than the portable GEMM: an input within an ulp of a
    # rounding boundary may land one step apart, so compare as the int8 model checks do
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(got, m(x2), rtol=0.05, atol=0.05)


def test_runtime_refuses_bad_token_fq_shape() -> None:
    prog = ember.export(_TokenFq().eval(), (_hostile(),), backend="cpu")
    d = next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr))
    blob = bytearray(d.processed)
    n_ops = struct.unpack_from("<I", blob, 12)[0]
    ops_off = struct.unpack_from("<Q", blob, 40)[0]
    at = next(
        ops_off + 160 * i
        for i in range(n_ops)
        if struct.unpack_from("<I", blob, ops_off + 160 * i)[0] == TOKEN_FQ
    )
    assert runtime_check("EmberCpuBackend", bytes(blob), 1 << 20) is None
    for slot, value in ((0, 13), (1, 41), (1, 0), (0, -1)):
        bad = bytearray(blob)
        struct.pack_into("<i", bad, at + 32 + 4 * slot, value)
        why = runtime_check("EmberCpuBackend", bytes(bad), 1 << 20)
        assert why is not None and ("token fake-quant" in why or "elements" in why), why


@pytest.mark.parametrize("qrange", [(-127, 127), (0, 255)])
def test_other_ranges_stay_portable(qrange) -> None:
    """Only int8's full range is what the backend op repeats; others keep the portable kernels."""
    lo, hi = qrange

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s, z = qd.choose_qparams_per_token_asymmetric(x, torch.int8)
            dt = torch.uint8 if lo == 0 else torch.int8
            q = qd.quantize_per_token(x, s, z, lo, hi, dt)
            return qd.dequantize_per_token(q, s, z, lo, hi, dt, torch.float32) * 2.0

    x = torch.randn(3, 16)
    prog = ember.export(M().eval(), (x,), backend="cpu")
    assert "quantized_decomposed::quantize_per_token.out" in _outside(prog)
    plain = ember.export(M().eval(), (x,), backend=None)
    torch.testing.assert_close(
        RuntimeProgram(prog.buffer).run("forward", [x])[0],
        RuntimeProgram(plain.buffer).run("forward", [x])[0],
        rtol=0,
        atol=0,
    )
