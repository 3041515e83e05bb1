"""Dynamic int8 linears whose rows share one set of qparams (EmberCpuBackend blob version 15,
EMC_DQL_ROWQ): PT2E's dynamic per-tensor form (choose_qparams.tensor, then quantize / dequantize
with tensor qparams: ExecuTorch's XNNPACKQuantizer with is_dynamic=True) and a static int8
fake-quant before a linear of several rows (ember.quantize's static int8 on a transformer) run
as int8 products instead of portable Q/DQ and f32 products. Each is checked against the portable
run of the same graph (the same int8 values, so within f32 rounding of the sums), across threads
and ISAs (the same bits), with hostile inputs (zeros, NaN, infinities, huge values, a large eps,
a narrow range), and against the runtime refusing bad row modes and qparams.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_dqrowq.py
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
from backend_cpu_common import _blob_ops as _ops
from backend_cpu_common import (
    _Block,
    _hostile,
    _n_delegates,
    _outside,
    _patched_ip_checks,
    _run_per_isa,
    _xnnpack_dynamic,
)
from torch import nn

import ember
from ember.quant.pt2e import quantize_exported
from ember.runtime import RuntimeProgram

qd = torch.ops.quantized_decomposed
DQ_LINEAR, GEMM = 18, 2  # EMC_OP_DQ_LINEAR, EMC_OP_GEMM
ROWQ = 7  # EMC_DQL_ROWQ
PER_TENSOR, STATIC = 1, 2


class _TensorDq(nn.Module):
    """x -> choose_qparams.tensor -> quantize / dequantize with those tensors -> a linear with
    dequantized int8 weights (+ a residual, an activation)."""

    def __init__(
        self,
        k: int,
        n: int,
        qrange: tuple[int, int] = (-128, 127),
        eps: float = 2.0**-12,
        act: str = "none",
        residual: bool = False,
    ) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(k * 1000 + n)
        self.register_buffer("wq", torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8))
        self.register_buffer("ws", torch.rand(n, generator=g) * 0.02 + 1e-3)
        self.register_buffer("zp", torch.zeros(n, dtype=torch.int64))
        self.register_buffer("b", torch.randn(n, generator=g))
        self.qrange, self.eps, self.act, self.residual = qrange, eps, act, residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lo, hi = self.qrange
        s, z = qd.choose_qparams.tensor(x, lo, hi, self.eps, torch.int8)
        q = qd.quantize_per_tensor.tensor(x, s, z, lo, hi, torch.int8)
        xq = qd.dequantize_per_tensor.tensor(q, s, z, lo, hi, torch.int8)
        w = qd.dequantize_per_channel(self.wq, self.ws, self.zp, 0, -127, 127, torch.int8)
        y = nn.functional.linear(xq, w, self.b)
        if self.residual:
            y = y + x[..., : y.shape[-1]] * 0.5
        if self.act == "relu":
            y = torch.relu(y)
        return y


def _rowq_slots(prog: ember.Program) -> list[int]:
    return [o[2][ROWQ] for o in _ops(prog) if o[0] == DQ_LINEAR]


def _portable(m: nn.Module, x: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    plain = ember.export(m, (x,), backend=None)
    return RuntimeProgram(plain.buffer).run("forward", [x2])[0]


SHAPES = [(1, 5, 3), (9, 37, 19), (13, 64, 50), (67, 130, 70)]


@pytest.mark.parametrize("rows,k,n", SHAPES)
def test_per_tensor_rows_are_the_int8_product(rows: int, k: int, n: int) -> None:
    m = _TensorDq(k, n).eval()
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
    prog = ember.export(m, (x,), backend="cpu")
    kinds = [o[0] for o in _ops(prog)]
    assert kinds.count(DQ_LINEAR) == 1 and GEMM not in kinds, kinds
    assert not _outside(prog) and _rowq_slots(prog) == [PER_TENSOR], _outside(prog)
    x2 = torch.randn(rows, k, generator=torch.Generator().manual_seed(7)) * 2
    outs = [RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0] for t in (1, 2, 3)]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    want = _portable(m, x, x2)
    torch.testing.assert_close(outs[0], want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


@pytest.mark.parametrize(
    "case", ["zeros", "nan", "inf", "huge", "tiny", "one_sided", "narrow", "big_eps"]
)
def test_per_tensor_hostile_inputs_as_the_portable_run(case: str) -> None:
    """Hostile activations give what the portable Q/DQ and f32 product give: a NaN anywhere
    makes the qparams eps and qmin (finite outputs), an infinity every output NaN."""
    qrange, eps = {"narrow": ((-100, 90), 2.0**-12), "big_eps": ((-128, 127), 0.5)}.get(
        case, ((-128, 127), 2.0**-12)
    )
    m = _TensorDq(40, 24, qrange=qrange, eps=eps, act="relu", residual=True).eval()
    x = torch.randn(12, 40, generator=torch.Generator().manual_seed(0)) * 3
    prog = ember.export(m, (x,), backend="cpu")
    assert _rowq_slots(prog) == [PER_TENSOR]
    x2 = _hostile(x, case)
    want = _portable(m, x, x2)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        tol = 1e-5 * float(want[torch.isfinite(want)].abs().max()) if case != "inf" else 0.0
        torch.testing.assert_close(got, want, rtol=1e-5, atol=tol, equal_nan=True)
    if case == "inf":
        assert torch.isnan(got).all()


@pytest.mark.parametrize("mode", ["per_tensor", "static"])
def test_shared_rows_same_bits_on_every_isa(mode: str, tmp_path) -> None:  # noqa: ANN001
    x = torch.randn(67, 130, generator=torch.Generator().manual_seed(3))
    if mode == "per_tensor":
        m: nn.Module = _TensorDq(130, 70, act="relu").eval()
        prog = ember.export(m, (x,), backend="cpu")
    else:
        m = nn.Sequential(nn.Linear(130, 70), nn.ReLU(), nn.Linear(70, 33)).eval()
        q = quantize_exported(m, (x,), [(x,)], progress=False)
        prog = ember.export(q, (x,), backend="cpu")
    assert PER_TENSOR if mode == "per_tensor" else STATIC in _rowq_slots(prog), _rowq_slots(prog)
    x[1], x[2, :9] = 0.0, 1e-30
    x[4, 7], x[6, 100] = 1e30, -1e30
    x[7] = torch.linspace(-1, 1, 130)  # ties after scaling
    outs = _run_per_isa(prog, x, tmp_path, (None, "avx2", "scalar"), threads=2)
    for isa in ("avx2", "scalar"):
        torch.testing.assert_close(outs[isa], outs[None], rtol=0, atol=0, equal_nan=True)


def test_static_int8_block_runs_dq_linears() -> None:
    """ember.quantize's static int8 on a block of 20 rows: every linear reads a static
    fake-quant, so each becomes a dq linear with those qparams (its rows get the fake-quant's
    int8 values back), within a quantization step of the portable run."""
    torch.manual_seed(0)
    m = _Block().eval()
    x = torch.randn(1, 20, 48)
    calib = [(torch.randn(1, 20, 48),) for _ in range(4)]
    q = quantize_exported(m, (x,), calib, progress=False)
    prog = ember.export(q, (x,))
    assert _rowq_slots(prog).count(STATIC) == 6, _rowq_slots(prog)
    assert not _outside(prog) and _n_delegates(prog) == 1, _outside(prog)
    plain = ember.export(q, (x,), backend=None)
    x2 = torch.randn(1, 20, 48)
    want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(got, m(x2), rtol=0.1, atol=0.1)


class _StaticFq(nn.Module):
    """A static fake-quant of one range (uint8's or a narrow int8 one) before an int8 linear."""

    def __init__(self, qrange: tuple[int, int], zp: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.inner = _TensorDq(37, 19)
        self.qrange, self.zp, self.dtype = qrange, zp, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lo, hi = self.qrange
        q = qd.quantize_per_tensor(x * 1.5, 0.04, self.zp, lo, hi, self.dtype)
        xq = qd.dequantize_per_tensor(q, 0.04, self.zp, lo, hi, self.dtype)
        i = self.inner
        w = qd.dequantize_per_channel(i.wq, i.ws, i.zp, 0, -127, 127, torch.int8)
        return nn.functional.linear(xq, w, i.b)


@pytest.mark.parametrize(
    "qrange,zp,dtype",
    [((0, 255), 128, torch.uint8), ((0, 255), 3, torch.uint8), ((-100, 90), -7, torch.int8)],
)
def test_static_fake_quant_ranges(qrange: tuple[int, int], zp: int, dtype: torch.dtype) -> None:
    m = _StaticFq(qrange, zp, dtype).eval()
    x = torch.randn(9, 37, generator=torch.Generator().manual_seed(1)) * 3
    prog = ember.export(m, (x,), backend="cpu")
    assert _rowq_slots(prog) == [STATIC] and not _outside(prog)
    x2 = torch.randn(9, 37, generator=torch.Generator().manual_seed(2)) * 4
    x2[0, 0], x2[1, 1], x2[2, 2] = float("nan"), float("inf"), -float("inf")
    want = _portable(m, x, x2)
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x2])[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def test_stock_xnnpack_dynamic_quantizer_graph_runs_int8() -> None:
    """A graph quantized by PT2E with ExecuTorch's XNNPACKQuantizer in its dynamic form exports
    as it is, its linears dq linears with per-tensor rows (the Q/DQ inside them), within
    quantization steps of eager."""

    torch.manual_seed(0)
    m = _Block().eval()
    x = torch.randn(1, 20, 48)
    converted, ep = _xnnpack_dynamic(m, x)
    prog = ember.export(ep, (x,))
    assert not _outside(prog), _outside(prog)
    assert _rowq_slots(prog) == [PER_TENSOR] * 6, _rowq_slots(prog)
    x2 = torch.randn(1, 20, 48) * 2
    plain = ember.export(ep, (x,), backend=None)
    want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x2])[0]
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got, converted(x2), rtol=2e-2, atol=2e-2)


def test_runtime_refuses_bad_row_modes() -> None:
    prog = ember.export(_TensorDq(37, 19).eval(), (torch.randn(9, 37),), backend="cpu")
    for slot, value, why in _patched_ip_checks(prog, DQ_LINEAR, [(ROWQ, 3), (ROWQ, 7), (ROWQ, -1)]):
        assert why is not None and ("dq linear" in why or "parameter 7" in why), (slot, value, why)


@pytest.mark.parametrize(
    "slot,value",
    [(0, 127), (0, -129), (1, 128), (2, 0.0), (2, float("inf")), (3, 100), (4, -1.0)],
)
def test_runtime_refuses_bad_row_qparams(monkeypatch, caplog, slot: int, value: float) -> None:  # noqa: ANN001
    """A table tail out of range (qmin not below qmax, past int8's range, a zero or infinite
    eps or scale, a zero point outside the range, a negative 1 / scale): the runtime refuses
    the blob, so the exporter leaves the linear portable."""
    import ember.backends.cpu.fusion_q8 as fq

    real = fq._rowq

    def bad_tail(p, x):  # noqa: ANN001, ANN202
        r = real(p, x)
        if r is None or r[0] == 0:
            return r
        words = r[1].copy()
        if slot in (0, 1, 3):
            words.view("int32")[slot] = int(value)
        else:
            words[slot] = value
        return r[0], words

    monkeypatch.setattr(fq, "_rowq", bad_tail)
    caplog.set_level(logging.INFO)
    m = _StaticFq((-100, 90), -7, torch.int8) if slot >= 3 else _TensorDq(37, 19)
    prog = ember.export(m.eval(), (torch.randn(9, 37),), backend="cpu")
    assert DQ_LINEAR not in [o[0] for o in _ops(prog)]
    assert "per-tensor qparams out of range" in caplog.text


class _Mixed(nn.Module):
    """Two per-tensor dynamic Q/DQ of one activation: one read by a product of two activations
    (not an int8 linear), one by an int8 linear. ``eps`` of the first: 0 makes the exporter
    refuse its choose_qparams."""

    def __init__(self, eps: float = 2.0**-12) -> None:
        super().__init__()
        self.lin = _TensorDq(24, 16)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x * 2.0)
        s, z = qd.choose_qparams.tensor(y, -128, 127, self.eps, torch.int8)
        q = qd.quantize_per_tensor.tensor(y, s, z, -128, 127, torch.int8)
        a = qd.dequantize_per_tensor.tensor(q, s, z, -128, 127, torch.int8) @ y.t()
        return self.lin(y) + a.mean(-1, keepdim=True)


def test_per_tensor_qdq_not_read_by_int8_linears_runs_inside() -> None:
    """The chain read by a product of activations is an op of its own (EMC_OP_TENSOR_FQ, blob
    version 17); the other chain is inside the dq linear."""
    m = _Mixed().eval()
    x = torch.randn(10, 24, generator=torch.Generator().manual_seed(5))
    prog = ember.export(m, (x,), backend="cpu")
    assert not _outside(prog), _outside(prog)
    assert [o[0] for o in _ops(prog)].count(19) == 1 and _rowq_slots(prog) == [PER_TENSOR]
    x2 = torch.randn(10, 24, generator=torch.Generator().manual_seed(6))
    want = _portable(m, x, x2)
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x2])[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def test_per_tensor_qdq_with_a_portable_part_stays_portable(caplog) -> None:  # noqa: ANN001
    """A chain whose choose_qparams the exporter refuses (eps 0) stays portable from the start
    (its three parts and nothing else), so no run is split around it (a split may cut other
    chains from their linears) and the other chain's linear is still a dq linear."""
    m = _Mixed(eps=0.0).eval()
    x = torch.randn(10, 24, generator=torch.Generator().manual_seed(5))
    caplog.set_level(logging.INFO)
    prog = ember.export(m, (x,), backend="cpu")
    assert "split in two" not in caplog.text
    assert sorted(_outside(prog)) == sorted(
        [
            "quantized_decomposed::choose_qparams.Tensor_out",
            "quantized_decomposed::quantize_per_tensor.Tensor_out",
            "quantized_decomposed::dequantize_per_tensor.Tensor_out",
        ]
    ), _outside(prog)
    assert _rowq_slots(prog) == [PER_TENSOR]
    x2 = torch.randn(10, 24, generator=torch.Generator().manual_seed(6))
    want = _portable(m, x, x2)
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x2])[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
