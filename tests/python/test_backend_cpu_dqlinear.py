"""Dynamic int8 linear layers in EmberCpuBackend (blob EMC_OP_DQ_LINEAR): a linear with int8
per-channel weights whose input PT2E's dynamic quantization fake-quantizes per token runs as an
int8 product — each row quantized into u8 with its own qparams, exact int32 sums, then one scale
per row and channel. Checked against the same int8 values summed in float64 (a few f32 roundings
apart), against the portable run, across threads and ISAs (the same bits), on shapes with tails
(K not a multiple of 4, N not of 16 or 32, rows not of 8), with residuals and activations, with
rows holding infinities or NaN (their outputs NaN), and the runtime refusing a bad blob.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_dqlinear.py
"""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
from backend_cpu_common import _blob_ops as _ops
from backend_cpu_common import _Block, _n_delegates, _outside, _patched_ip_checks, _run_per_isa
from torch import nn

import ember
from ember.quant.pt2e import quantize_exported
from ember.runtime import RuntimeProgram

qd = torch.ops.quantized_decomposed
# EMC_OP_DQ_LINEAR, EMC_OP_TOKEN_FQ, EMC_OP_GEMM, EMC_OP_PERMUTE
DQ_LINEAR, TOKEN_FQ, GEMM, PERMUTE = 18, 16, 2, 10


class _DqLinear(nn.Module):
    """x -> per-token Q/DQ -> linear with dequantized int8 weights (+ residual, activation)."""

    def __init__(self, k: int, n: int, act: str = "none", residual: bool = False) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(k * 1000 + n)
        self.register_buffer("wq", torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8))
        self.register_buffer("ws", torch.rand(n, generator=g) * 0.02 + 1e-3)
        self.register_buffer("zp", torch.zeros(n, dtype=torch.int64))
        self.register_buffer("b", torch.randn(n, generator=g))
        self.act, self.residual = act, residual

    def quantized_input(self, x: torch.Tensor) -> torch.Tensor:
        s, z = qd.choose_qparams_per_token_asymmetric(x, torch.int8)
        q = qd.quantize_per_token(x, s, z, -128, 127, torch.int8)
        return qd.dequantize_per_token(q, s, z, -128, 127, torch.int8, torch.float32)

    def weight(self) -> torch.Tensor:
        return qd.dequantize_per_channel(self.wq, self.ws, self.zp, 0, -127, 127, torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.linear(self.quantized_input(x), self.weight(), self.b)
        if self.residual:
            y = y + x[..., : y.shape[-1]] * 0.5
        if self.act == "gelu":
            y = nn.functional.gelu(y)
        elif self.act == "relu":
            y = torch.relu(y)
        return y

    def exact(self, x: torch.Tensor) -> torch.Tensor:
        """The product of the same int8 values in float64 (no bias, residual or activation)."""
        s, z = qd.choose_qparams_per_token_asymmetric(x, torch.int8)
        q = qd.quantize_per_token(x, s, z, -128, 127, torch.int8)
        xd = (q.double() - z.double()) * s.double()
        return xd @ (self.wq.double() * self.ws.double()[:, None]).T


SHAPES = [(1, 5, 3), (9, 37, 19), (13, 64, 50), (16, 100, 32), (3, 8, 1), (67, 130, 70)]


@pytest.mark.parametrize("rows,k,n", SHAPES)
def test_dq_linear_is_the_int8_product(rows: int, k: int, n: int) -> None:
    m = _DqLinear(k, n).eval()
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
    prog = ember.export(m, (x,), backend="cpu")
    kinds = [o[0] for o in _ops(prog)]
    assert kinds.count(DQ_LINEAR) == 1 and TOKEN_FQ not in kinds and GEMM not in kinds, kinds
    assert not _outside(prog), _outside(prog)
    x2 = torch.randn(rows, k, generator=torch.Generator().manual_seed(7)) * 2
    outs = [RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0] for t in (1, 2, 3)]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    exact = m.exact(x2)
    got = outs[0].double() - m.b.double()  # the bias add: one more rounding of the sum
    bound = 4 * 2.0**-24 * (exact.abs() + m.b.double().abs()) + 1e-30
    assert ((got - exact).abs() <= bound).all(), ((got - exact).abs() / bound).max()
    plain = ember.export(m, (x,), backend=None)
    want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
    torch.testing.assert_close(outs[0], want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))


@pytest.mark.parametrize("rows,k,n", [(130, 40, 70), (64, 16, 32), (7, 24, 100)])
def test_dq_linear_gelu_after_the_sums(rows: int, k: int, n: int) -> None:
    """GELU after a dq linear without a residual runs once over each job's rows (64 rows by 32
    channels, the last of each ragged here): every row and channel gets it, as eager, and the
    same bytes at 1 to 3 threads."""
    m = _DqLinear(k, n, act="gelu").eval()
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
    prog = ember.export(m, (x,), backend="cpu")
    assert [o[0] for o in _ops(prog)].count(DQ_LINEAR) == 1 and not _outside(prog)
    outs = [RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0] for t in (1, 2, 3)]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    want = m(x)
    assert (want < -0.01).any()  # GELU skipped anywhere would leave such values
    torch.testing.assert_close(outs[0], want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def test_dq_linear_residual_activation_and_hostile_rows() -> None:
    m = _DqLinear(40, 24, act="gelu", residual=True).eval()
    x = torch.randn(12, 40, generator=torch.Generator().manual_seed(0)) * 3
    x[1] = 0.0  # all zeros: the eps scale
    x[2] = 2.5  # a constant row
    x[3, :20] = 1e-30
    x[4] = torch.linspace(-1, 1, 40)  # ties after scaling
    x[5, 3] = 2e30  # a huge value: the rest round to the zero point
    x[6] = -torch.rand(40)  # negative only
    x[7] = torch.rand(40) + 5  # positive only
    x[8, 0], x[9, 5], x[10, 7] = float("inf"), -float("inf"), float("nan")
    prog = ember.export(m, (x,), backend="cpu")
    assert [o[0] for o in _ops(prog)].count(DQ_LINEAR) == 1
    plain = ember.export(m, (x,), backend=None)
    want = RuntimeProgram(plain.buffer).run("forward", [x])[0]
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x])[0]
    fin = torch.tensor([i not in (8, 9, 10) for i in range(12)])
    torch.testing.assert_close(got[fin], want[fin], rtol=1e-4, atol=1e-4, equal_nan=True)
    torch.testing.assert_close(got[fin], m(x)[fin], rtol=1e-4, atol=1e-4, equal_nan=True)
    assert torch.isnan(got[~fin]).all()


def test_dq_linear_same_bits_on_every_isa(tmp_path) -> None:  # noqa: ANN001
    m = _DqLinear(130, 70, act="relu").eval()
    x = torch.randn(67, 130, generator=torch.Generator().manual_seed(3))
    prog = ember.export(m, (x,), backend="cpu")
    x[1], x[2], x[3, :9] = 0.0, 2.5, 1e-30  # zeros, a constant row, tiny values
    x[4, 7], x[5, 0], x[6, 100] = float("inf"), float("nan"), 1e30
    x[7] = torch.linspace(-1, 1, 130)  # ties after scaling: the f32 quantizer's f64 fallback
    # min -1, max 1: scale 2 / 255, zero point 0, so these land on (or an ulp off) half-integers
    x[8] = torch.cat([torch.tensor([-1.0, 1.0]), (torch.arange(128) - 63.5) * (2.0 / 255)])
    x[9] = x[8] * 0.999  # and just past them
    outs = _run_per_isa(prog, x, tmp_path, (None, "avx2", "scalar"), threads=2)
    for isa in ("avx2", "scalar"):
        torch.testing.assert_close(outs[isa], outs[None], rtol=0, atol=0, equal_nan=True)


def test_dynamic_quantizer_block_runs_dq_linears() -> None:
    """ember.quantize's dynamic int8 (and its file: int8 weights, not f32) on a transformer-ish
    block: every linear a dq linear in one delegate, K and V reading the rows Q quantized, within
    the quantization's tolerance of the portable run."""
    torch.manual_seed(0)
    m = _Block().eval()
    x = torch.randn(1, 20, 48)
    q = quantize_exported(m, (x,), None, dynamic=True, progress=False)
    prog = ember.export(q, (x,))
    kinds = [o[0] for o in _ops(prog)]
    assert kinds.count(DQ_LINEAR) == 6 and GEMM in kinds, kinds  # attention's products stay f32
    assert not _outside(prog) and _n_delegates(prog) == 1, _outside(prog)
    shared = [o[2][4] for o in _ops(prog) if o[0] == DQ_LINEAR]  # EMC_DQL_QUANTIZED
    assert shared == [0, 1, 1, 0, 0, 0], shared
    f32 = ember.export(m, (x,))
    assert len(prog.buffer) < 0.4 * len(f32.buffer), (len(prog.buffer), len(f32.buffer))
    plain = ember.export(q, (x,), backend=None)
    x2 = torch.randn(1, 20, 48) * 2
    want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x2])[0]
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(got, m(x2), rtol=0.05, atol=0.05)


class _Heads(nn.Module):
    """Multi-head attention as Hugging Face writes it: each projection viewed as [1, T, H, D] and
    permuted to [1, H, T, D]."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.h = heads

    def split(self, y: torch.Tensor) -> torch.Tensor:
        return y.view(1, y.shape[1], self.h, -1).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        a = torch.softmax(q @ k.transpose(-1, -2) * 0.125, dim=-1) @ v
        return self.o(a.permute(0, 2, 1, 3).reshape(x.shape)) + x


@pytest.mark.parametrize("d,heads,fused", [(128, 2, True), (96, 3, True), (64, 4, False)])
def test_dq_linears_write_heads_apart(d: int, heads: int, fused: bool) -> None:
    """Q, K and V projections whose outputs are permuted into heads of a multiple of 32 write them
    head-major (EMC_DQL_HEAD_DIM) and the permutes go; heads of 16 keep their permutes."""
    torch.manual_seed(0)
    m = _Heads(d, heads).eval()
    x = torch.randn(1, 21, d)
    q = quantize_exported(m, (x,), None, dynamic=True, progress=False)
    prog = ember.export(q, (x,))
    dq = [o[2] for o in _ops(prog) if o[0] == DQ_LINEAR]
    assert len(dq) == 4 and not _outside(prog), (dq, _outside(prog))
    assert [ip[5] for ip in dq] == ([d // heads] * 3 if fused else [0] * 3) + [0], dq
    assert [ip[6] for ip in dq] == [0, int(fused), 0, 0], dq  # K^T: K's heads transposed
    assert (PERMUTE in [o[0] for o in _ops(prog)]) != fused
    # softmax x V writes its heads' rows interleaved (EMC_GEMM_C_HEADS) for the output linear
    assert [o[2][8] for o in _ops(prog) if o[0] == GEMM] == [0, 1]
    plain = ember.export(q, (x,), backend=None)
    x2 = torch.randn(1, 21, d)
    want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("t", [1, 2])
def test_f32_attention_heads_interleaved(t: int) -> None:
    """The f32 attention of _Heads: softmax x V (12 products) writes its rows interleaved, [T, H,
    D], instead of a permute after it; the same values as eager."""
    torch.manual_seed(1)
    m = _Heads(96, 12).eval()
    x = torch.randn(1, 37, 96)
    prog = ember.export(m, (x,), backend="cpu")
    gemms = [o[2] for o in _ops(prog) if o[0] == GEMM]
    assert [ip[8] for ip in gemms if ip[0] == 12] == [0, 1], gemms
    got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0]
    torch.testing.assert_close(got, m(x), rtol=1e-5, atol=1e-5)


def test_runtime_refuses_bad_dq_linear() -> None:
    m = _DqLinear(37, 19).eval()
    prog = ember.export(m, (torch.randn(9, 37),), backend="cpu")
    # M, K, N that do not match the tensors, a K past 65536, no table, an f32 input read as
    # quantized rows, a bad flag, head dims not a multiple of 32 or not dividing N, transposed
    # heads without a head dim
    bad_slots = [
        (0, 10), (1, 36), (2, 20), (1, 70000), (3, 0), (4, 1), (4, 2), (5, 16), (5, 32), (6, 1)
    ]  # fmt: skip
    for slot, value, why in _patched_ip_checks(prog, DQ_LINEAR, bad_slots):
        assert why is not None and "dq linear" in why, (slot, value, why)
