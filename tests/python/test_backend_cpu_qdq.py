"""Int8 Q/DQ programs (PT2E's representation) in EmberCpuBackend: weights' dequantize folded
to f32 constants, each activation's quantize -> dequantize pair one fused fake-quant
(EMC_ACT_FAKEQUANT), checked against the portable kernels' run of the same graph.

The fake-quant repeats the portable quantize / dequantize rounding step for step, so a lone pair
is bit-exact with it (ties, NaN, infinities, values far outside the range included). Inside a
model the float convolutions and matrix products of the two paths sum in different orders, so an
activation that lands within an ulp of a rounding boundary may come out one quantization step
apart: the model checks allow one output step, on a small share of the elements.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_qdq.py
"""

from __future__ import annotations

import struct

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F
from backend_cpu_common import (
    _assert_same_on_every_isa,
    _n_delegates,
    _out_step,
    _outside,
    _run,
    _seed_bn,
)
from conftest import xnnpack_static
from torch import nn

import ember
from ember.backends.check import runtime_check
from ember.backends.cpu.blob import conv_counts
from ember.backends.delegate import DelegateInstr
from ember.quant.pt2e import quantize_exported
from ember.runtime import RuntimeProgram

qd = torch.ops.quantized_decomposed


class _Pairs(nn.Module):
    """Lone Q/DQ pairs: after a product, after a relu (so the fake-quant takes its clamp), and
    as uint8."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = qd.dequantize_per_tensor(
            qd.quantize_per_tensor(x * 2.0, 0.05, 3, -128, 127, torch.int8),
            0.05,
            3,
            -128,
            127,
            torch.int8,
        )
        r = torch.relu(x)
        b = qd.dequantize_per_tensor(
            qd.quantize_per_tensor(r, 0.1, -128, -128, 127, torch.int8),
            0.1,
            -128,
            -128,
            127,
            torch.int8,
        )
        c = qd.dequantize_per_tensor(
            qd.quantize_per_tensor(x + 1.0, 0.02, 128, 0, 255, torch.uint8),
            0.02,
            128,
            0,
            255,
            torch.uint8,
        )
        return a, b, c


def _hostile_inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, 16, generator=g) * 4
    flat = x.view(-1)
    # exact ties of every scale used (k + 0.5 steps), both signs; NaN, infinities, huge values
    ties = (torch.arange(-40, 40, dtype=torch.float32) + 0.5) * 0.05 / 2.0
    flat[: ties.numel()] = ties
    flat[100:110] = (torch.arange(-5, 5, dtype=torch.float32) + 0.5) * 0.1
    flat[200:210] = (torch.arange(-5, 5, dtype=torch.float32) + 0.5) * 0.02 - 1.0
    flat[300:306] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e38, -3e38, 1e-40])
    return x


def test_lone_pairs_bit_exact_with_portable() -> None:
    x = _hostile_inputs()
    m = _Pairs().eval()
    prog = ember.export(m, (x,), backend="cpu")
    assert _n_delegates(prog) >= 1
    assert not any(k.startswith("quantized_decomposed::") for k in _outside(prog)), _outside(prog)
    plain = ember.export(m, (x,), backend=None)
    for th in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=th).run("forward", [x])
        want = RuntimeProgram(plain.buffer).run("forward", [x])
        for g, w, e in zip(got, want, m(x), strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
            # and eager PyTorch's own quantize / dequantize (NaN aside: unspecified there)
            ok = ~torch.isnan(x)
            torch.testing.assert_close(g[ok], e[ok], rtol=0, atol=0)


class _Block(nn.Module):
    """Conv + BN + ReLU, a depthwise conv with hardswish, a squeeze-excitation gate, a
    residual add, cat, max and average pooling, mean and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.c0 = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 16, 1)
        self.se1, self.se2 = nn.Conv2d(16, 4, 1), nn.Conv2d(4, 16, 1)
        self.c1 = nn.Conv2d(32, 24, 3, padding=1)
        self.fc = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.c0(x)))
        d = F.hardswish(self.dw(h))
        s = torch.sigmoid(self.se2(torch.relu(self.se1(d.mean((2, 3), keepdim=True)))))
        p = self.pw(d * s) + h
        y = F.relu6(self.c1(torch.cat([p, h], 1)))
        y = F.avg_pool2d(F.max_pool2d(y, 2), 2)
        return self.fc(y.mean((2, 3)))


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.l1(x))
        return self.l3(torch.relu(self.l2(h)) + h)


def _quantized(m: nn.Module, shape: tuple[int, ...]) -> tuple[torch.export.ExportedProgram, tuple]:
    torch.manual_seed(0)
    m = m.eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(*shape, generator=g),) for _ in range(4)]
    return quantize_exported(m, cal[0], cal, progress=False), (torch.randn(*shape, generator=g),)


def _out_scale(prog: ember.Program) -> float:
    """The scale of the last dequantize before the output (one quantization step there)."""
    return _out_step(prog)


@pytest.mark.parametrize(
    ("model", "shape"), [(_Block, (1, 3, 32, 32)), (_Mlp, (4, 32))], ids=["cnn", "mlp"]
)
def test_models_match_portable(model: type[nn.Module], shape: tuple[int, ...]) -> None:
    ep, inputs = _quantized(model(), shape)
    prog = ember.export(ep, inputs)  # the default: the CPU backend takes Q/DQ graphs
    plain = ember.export(ep, inputs, backend=None)
    outside = _outside(prog)
    assert _n_delegates(prog) >= 1
    assert not any(k.startswith("quantized_decomposed::") for k in outside), outside
    step = _out_scale(plain)
    want = _run(plain, inputs)
    for th in (1, 2):
        got = _run(prog, inputs, th)
        diff = (got - want).abs()
        assert diff.max().item() <= step * 1.001, (diff.max().item(), step)
        assert (diff > 0).float().mean().item() <= 0.05
    # the weights went in as f32 constants of the delegate: no dequantize left to run
    assert not any("dequantize_per_channel" in k for k in outside)


class _Boundary(nn.Module):
    """A Q/DQ pair split by an operator the backend does not take (cumsum): the pair must stay
    on one side of the delegate's boundary."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = qd.quantize_per_tensor(self.a(x), 0.05, 0, -128, 127, torch.int8)
        c = torch.cumsum(x, 1)
        d = qd.dequantize_per_tensor(q, 0.05, 0, -128, 127, torch.int8)
        return self.b(d + c)


def test_pair_split_by_portable_op() -> None:
    x = torch.randn(3, 16)
    m = _Boundary().eval()
    prog = ember.export(m, (x,), backend="cpu")
    plain = ember.export(m, (x,), backend=None)
    assert "aten::cumsum.out" in _outside(prog)
    torch.testing.assert_close(_run(prog, (x,)), _run(plain, (x,)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_run(prog, (x,)), m(x), rtol=1e-5, atol=1e-5)


def _fakequant_op_offsets(blob: bytes) -> list[int]:
    """Byte offsets of the operator records whose activation is EMC_ACT_FAKEQUANT (14)."""
    n_ops = struct.unpack_from("<I", blob, 12)[0]
    ops_off = struct.unpack_from("<Q", blob, 40)[0]
    return [
        ops_off + 160 * i
        for i in range(n_ops)
        if struct.unpack_from("<I", blob, ops_off + 160 * i + 4)[0] == 14
    ]


@pytest.mark.parametrize(
    ("slot", "value", "match"),
    [
        (4, float("nan"), "scale"),
        (3, 0.0, "scale"),
        (4, -1.0, "scale"),
        (5, 0.5, "zero point"),
        (6, -1e6, "range"),
        (7, float("inf"), "range"),
        (0, float("nan"), "bounds"),
    ],
)
def test_runtime_refuses_bad_fakequant(slot: int, value: float, match: str) -> None:
    x = torch.randn(2, 8, 16)
    prog = ember.export(_Pairs().eval(), (x,), backend="cpu")
    d = next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr))
    blob = bytearray(d.processed)
    offs = _fakequant_op_offsets(blob)
    assert offs, "no fake-quant operator in the blob"
    assert runtime_check("EmberCpuBackend", bytes(blob), 1 << 20) is None
    struct.pack_into("<f", blob, offs[0] + 128 + 4 * slot, value)
    why = runtime_check("EmberCpuBackend", bytes(blob), 1 << 20)
    assert why is not None and "fake-quant" in why and match in why, why


# ---- int8 convs (EMC_CONV_Q8) ----------------------------------------------------------------
def _q8_convs(prog: ember.Program) -> tuple[int, int]:
    """(convs, int8 convs) in the program's delegates (blob conv ip slot EMC_CONV_Q8)."""
    counts = [
        conv_counts(ins.processed)
        for ins in prog._irs["forward"].instrs
        if isinstance(ins, DelegateInstr)
    ]
    return sum(c for c, _ in counts), sum(q for _, q in counts)


# (in channels, out channels, kernel, stride, padding, dilation, map): channels that are not
# multiples of 4 (the channels-last padding) or 6 (the row panels), maps whose pixels are not
# multiples of 16 (the column panels), strides, padding, dilation, 1x1 (wide and narrow), a 7x7
# stem.
_GEOMS = [
    (8, 16, 3, 1, 1, 1, 9),
    (9, 10, 3, 2, 1, 1, 13),
    (256, 260, 1, 1, 0, 1, 7),
    (5, 7, 1, 1, 0, 1, 9),
    (16, 32, 3, 1, 2, 2, 11),
    (3, 24, 7, 2, 3, 1, 32),
    (64, 64, 3, 1, 1, 1, 8),
    (12, 13, 5, 1, 0, 1, 6),
]


@pytest.mark.parametrize("geom", _GEOMS, ids=[f"{g[0]}-{g[1]}-k{g[2]}s{g[3]}" for g in _GEOMS])
def test_int8_conv_geometries(geom: tuple[int, ...]) -> None:
    ci, co, k, s, p, d, hw = geom
    m = nn.Sequential(nn.Conv2d(ci, co, k, stride=s, padding=p, dilation=d), nn.ReLU6())
    ep, inputs = _quantized(m, (2, ci, hw, hw))
    prog = ember.export(ep, inputs, backend="cpu")
    assert _q8_convs(prog) == (1, 1)
    _within_a_step_of_portable(ep, inputs, prog, (1, 2))


def _within_a_step_of_portable(ep, inputs, prog, threads) -> None:  # noqa: ANN001
    """``prog`` at each thread count within one output quantization step of the portable
    program, at most 2 % of the outputs off at all."""
    plain = ember.export(ep, inputs, backend=None)
    step = _out_scale(plain)
    want = _run(plain, inputs)
    for th in threads:
        diff = (_run(prog, inputs, th) - want).abs()
        assert diff.max().item() <= step * 1.001, (th, diff.max().item(), step)
        assert (diff > 0).float().mean().item() <= 0.02


# Depthwise (channels, kernel, stride, padding, dilation, map): the zero-point padded image built
# in row bands on the pool, rows split the same way; channels past and below the 16-lane blocks.
_DW_GEOMS = [
    (24, 3, 1, 1, 1, 14),
    (40, 3, 2, 1, 1, 15),
    (17, 5, 1, 2, 1, 9),
    (32, 3, 1, 2, 2, 7),
    (48, 3, 1, 0, 1, 10),
]


@pytest.mark.parametrize(
    "geom", _DW_GEOMS, ids=[f"dw{g[0]}-k{g[1]}s{g[2]}p{g[3]}" for g in _DW_GEOMS]
)
def test_int8_depthwise_geometries(geom: tuple[int, ...]) -> None:
    c, k, s, p, d, hw = geom
    m = nn.Sequential(  # between two 1x1 convs (u8 in and out), its zero point far from 0
        nn.Conv2d(c, c, 1),
        nn.Conv2d(c, c, k, stride=s, padding=p, dilation=d, groups=c),
        nn.ReLU6(),
        nn.Conv2d(c, c, 1),
    )
    ep, inputs = _quantized(m, (2, c, hw, hw))
    prog = ember.export(ep, inputs, backend="cpu")
    assert _q8_convs(prog) == (3, 3)
    _within_a_step_of_portable(ep, inputs, prog, (1, 2, 3))


class _Head(nn.Module):
    """MobileNetV3's classifier: conv, global pooling, linear, hardswish, linear. Widths that are
    not multiples of 4 (the u8 rows' padding), 16 or 32 (the tile's channel blocks), and an odd
    number of 4-depth groups (the one-pixel loop's tail)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 50, 3, padding=1)
        self.l1, self.l2 = nn.Linear(50, 100), nn.Linear(100, 37)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).mean((2, 3))
        return self.l2(F.hardswish(self.l1(y)))


def test_int8_linear_layers(tmp_path) -> None:  # noqa: ANN001
    """A one-row linear layer with int8 weights and a fake-quantized input runs as an int8 1x1
    conv over a 1x1 image: within a step of the portable run at 1-3 threads, the same bits on
    every ISA; with two rows it stays an f32 product (the int8 conv would read the weights once
    a row)."""
    ep, inputs = _quantized(_Head(), (1, 8, 9, 9))
    prog = ember.export(ep, inputs, backend="cpu")
    assert _q8_convs(prog) == (3, 3)
    _within_a_step_of_portable(ep, inputs, prog, (1, 2, 3))
    _assert_same_on_every_isa(prog, inputs[0], tmp_path)
    ep2, inputs2 = _quantized(_Head(), (2, 8, 9, 9))
    prog2 = ember.export(ep2, inputs2, backend="cpu")
    assert _q8_convs(prog2) == (1, 1)
    _within_a_step_of_portable(ep2, inputs2, prog2, (1, 2))


def test_int8_convs_same_bits_on_every_isa(tmp_path) -> None:
    """The int8 tiles of every ISA (AVX-512 VNNI, AVX2, scalar) give the same bits."""
    m = nn.Sequential(
        nn.Conv2d(8, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 30, 3, stride=2),
        nn.ReLU6(),
        nn.Conv2d(30, 16, 5, padding=2),
    )
    ep, inputs = _quantized(m, (1, 8, 21, 21))
    prog = ember.export(ep, inputs, backend="cpu")
    assert _q8_convs(prog) == (3, 3)
    _assert_same_on_every_isa(prog, inputs[0], tmp_path)


def test_int8_conv_file_is_smaller() -> None:
    """The int8 convs store int8 weights only: the file is a fraction of the f32 one."""
    m = nn.Sequential(nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.Conv2d(128, 128, 3))
    ep, inputs = _quantized(m, (1, 64, 12, 12))
    q8 = ember.export(ep, inputs, backend="cpu")
    f32 = ember.export(m.eval(), inputs, backend="cpu")
    assert _q8_convs(q8) == (2, 2)
    assert len(q8.buffer) < 0.35 * len(f32.buffer), (len(q8.buffer), len(f32.buffer))


def test_stock_xnnpack_quantizer_graph_takes_int8_convs() -> None:
    """A graph quantized by PyTorch's PT2E flow with ExecuTorch's XNNPACKQuantizer (the user's
    code, not Ember's quantizer) gets the fake-quants and int8 convs too, within one output
    step of the portable run."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(8, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 24, 3, stride=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(24 * 7 * 7, 10),
    ).eval()
    x = torch.randn(1, 8, 16, 16)
    converted = xnnpack_static(model, x, 4)
    prog = ember.export(converted, (x,))
    # both convs and the linear layer (its [n, k] weight read through a transpose)
    assert _q8_convs(prog) == (3, 3), _q8_convs(prog)
    assert not any(k.startswith("quantized_decomposed::") for k in _outside(prog)), _outside(prog)
    plain = ember.export(converted, (x,), backend=None)
    got, want = _run(prog, (x,)), _run(plain, (x,))
    step = _out_scale(plain)
    assert (got - want).abs().max().item() <= step * 1.001


class _InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depthwise, 1x1 projection (BN, ReLU6), residual."""

    def __init__(self, c: int = 16, e: int = 48) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c, e, 1, bias=False),
            nn.BatchNorm2d(e),
            nn.ReLU6(),
            nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False),
            nn.BatchNorm2d(e),
            nn.ReLU6(),
            nn.Conv2d(e, c, 1, bias=False),
            nn.BatchNorm2d(c),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def test_stock_xnnpack_quantizer_relu6_block_runs_int8_depthwise() -> None:
    """XNNPACKQuantizer puts a Q/DQ after each conv and another of the same qparams after its
    ReLU6 (hardtanh shares them): the second folds into the first (fusion_q8._merge_fake_quants),
    so the depthwise conv between two int8 convs runs in int8 too (without the fold it stays
    f32), within one output step of the portable run."""
    torch.manual_seed(0)
    model = _seed_bn(_InvertedResidual()).eval()
    x = torch.randn(1, 16, 14, 14)
    converted = xnnpack_static(model, x, 4)
    prog = ember.export(converted, (x,))
    assert _q8_convs(prog) == (3, 3), _q8_convs(prog)
    plain = ember.export(converted, (x,), backend=None)
    step = _out_scale(plain)
    for t in (1, 2):
        x2 = torch.randn(1, 16, 14, 14, generator=torch.Generator().manual_seed(t))
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
        assert (got - want).abs().max().item() <= step * 1.001
