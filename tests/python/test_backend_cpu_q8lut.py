"""Int8 table lookups on u8 links (EmberCpuBackend blob version 16: EMC_UNARY_Q8).

In a statically quantized MobileNetV3 a hardswish (with its fake-quant) sits between an int8
conv and the next op: its input has at most 256 values, the levels of the conv's u8 output. The
CPU backend then runs it as a table built with the f32 path's own row: into u8 levels where only
int8 ops read it (form 1: an expansion's hardswish before an int8 depthwise conv, a projection's
before a 1x1 conv, the stem's before an int8 depthwise conv), into f32 planes where an f32 op
does (form 2: a squeeze-and-excitation block's mean and multiply, a global mean). An int8
depthwise conv whose output a float op reads (a mean) writes levels for a fake-quant lookup of
its own into f32 (fusion_q8's ``_dw_f32_out``). So the program must give the
very bits of the same graph with the lookups off (f32 hardswish rows). Checked here:

- an MobileNetV3-shaped net (hardswish after the stem, an expansion, a strided 5x5 depthwise conv
  with squeeze-and-excitation, a projection and a head; 20 and 35 channels: a channel group of 4
  past 16, channels padded to a multiple of 4; odd maps) runs its five hardswishes as lookups of
  the expected forms, and both depthwise convs in int8 (the first through a lookup into f32 for
  the mean and the expansion that read it);
- the same bits as the export with the lookups off (a mutation of either form fails this), at 1
  and 2 threads, within one output step of the portable run;
- the same bits on every ISA (AVX-512 VBMI, AVX2 and scalar rows);
- bad lookup fields are refused at load, naming what was wrong;
- sigmoid, GELU, tanh and PT2E's decomposed SiLU (x * sigmoid(x)) before a fake-quant run as one
  op with the activation first (EMC_UNARY_PRE), a table where their input is a u8 link, the f32
  op where it is not: the bits of the separate ops on every ISA.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8lut.py
"""

from __future__ import annotations

import struct

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F
from backend_cpu_common import (
    _assert_refused,
    _assert_same_on_every_isa,
    _assert_within_one_step,
    _delegate_blob,
    _export_patched,
    _op_table,
    _run,
    _run_per_isa,
    _runtime,
)
from torch import nn

import ember
import ember.backends.cpu.blob as B
import ember.backends.cpu.fusion_q8 as fusion_q8
from ember.quant.pt2e import quantize_exported

IP = 32  # byte offset of ip[] in an operator record (kind, act, in[4], out[2])
ACT = 4  # byte offset of act


class _Hs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 20, 3, stride=2, padding=1)
        self.dw0 = nn.Conv2d(20, 20, 3, padding=1, groups=20)
        self.exp = nn.Conv2d(20, 35, 1)
        self.dw = nn.Conv2d(35, 35, 5, stride=2, padding=2, groups=35)
        self.se1, self.se2 = nn.Conv2d(35, 8, 1), nn.Conv2d(8, 35, 1)
        self.proj = nn.Conv2d(35, 24, 1)
        self.head = nn.Conv2d(24, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.hardswish(self.stem(x))  # form 1: an int8 depthwise conv reads it
        y = F.relu(self.dw0(x))
        side = y.mean((2, 3))
        y = F.hardswish(self.exp(y))  # form 1: the int8 depthwise conv reads it
        y = F.hardswish(self.dw(y))  # form 2: the block's mean and multiply
        s = F.hardsigmoid(self.se2(F.relu(self.se1(y.mean((2, 3), keepdim=True)))))
        y = self.proj(y * s)
        y = self.head(F.hardswish(y))  # form 1: a 1x1 conv reads it
        return F.hardswish(y).mean((2, 3)) + side[:, :10]  # form 2: a mean


def _export(lut: bool, batch: int = 1) -> tuple[ember.Program, ember.Program, tuple]:
    torch.manual_seed(0)
    m = _Hs().eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(batch, 3, 37, 37, generator=g) * 2,) for _ in range(4)]
    ep = quantize_exported(m, cal[0], cal, progress=False)
    x = (torch.randn(batch, 3, 37, 37, generator=g) * 2,)
    off = [] if lut else [(fusion_q8, "_lut_candidate", lambda op: False)]
    return (*_export_patched(ep, x, off), x)


@pytest.fixture(scope="module")
def progs() -> tuple[ember.Program, ember.Program, ember.Program, tuple]:
    prog, plain, x = _export(True)
    f32_rows, _, _ = _export(False)
    return prog, f32_rows, plain, x


def _ops(buf: bytes) -> list[tuple[int, int, int, list[int]]]:
    base, recs = _op_table(buf)
    out = []
    for i, r in enumerate(recs):
        at = base + 160 * i
        out.append(
            (
                r[0],
                struct.unpack_from("<I", buf, at + ACT)[0],
                at,
                list(struct.unpack_from("<24i", buf, at + IP)),
            )
        )
    return out


def _luts(buf: bytes) -> list[int]:
    hs = B.ACT["hardswish_fq"]
    return [ip[0] for k, act, _, ip in _ops(buf) if k == B.OP["unary"] and act == hs]


def test_hardswish_as_lookups(progs) -> None:
    prog, f32_rows, _, _ = progs
    assert _luts(prog.buffer) == [1, 1, 2, 1, 2]
    assert _luts(f32_rows.buffer) == [0, 0, 0, 0, 0]
    assert all(ip[1] > 0 for k, _, _, ip in _ops(prog.buffer) if k == B.OP["unary"] and ip[0])

    # the depthwise convs read the stem's and the expansion's levels: int8 with the lookups, f32
    # without
    def dw_q8(buf: bytes) -> list[int]:
        return [
            ip[B.CONV_Q8]
            for k, _, _, ip in _ops(buf)
            if k == B.OP["conv2d"] and ip[B.CONV_DEPTHWISE]
        ]

    assert sum(v > 0 for v in dw_q8(prog.buffer)) == 2
    assert sum(v > 0 for v in dw_q8(f32_rows.buffer)) == 0


def test_same_bits_as_f32_rows(progs) -> None:
    prog, f32_rows, plain, x = progs
    for th in (1, 2):
        assert torch.equal(_run(prog, x, th), _run(f32_rows, x, th)), th
    _assert_within_one_step(prog, plain, x)


def test_batch_of_two() -> None:
    prog, plain, x = _export(True, batch=2)
    f32_rows, _, _ = _export(False, batch=2)
    assert _luts(prog.buffer) == [1, 1, 2, 1, 2]
    for th in (1, 2):
        assert torch.equal(_run(prog, x, th), _run(f32_rows, x, th)), th


def test_same_bits_on_every_isa(progs, tmp_path) -> None:
    prog, _, _, x = progs
    _assert_same_on_every_isa(prog, x[0], tmp_path)


def test_bad_fields_refused(progs) -> None:
    prog, _, _, _ = progs
    blob = _delegate_blob(prog)
    lut = next(at for k, _, at, ip in _ops(blob) if k == B.OP["unary"] and ip[0] == 1)
    # a bad form, no table, a table that is not a constant of 2, a second input, a clamp act
    edits = [
        (IP, 3, "int8 form"),
        (IP + 4, 0, "int8 form"),
        (IP + 4, 1, "table"),
        (12, 0, "reads one tensor"),
        (ACT, B.ACT["clamp"], "fake-quant"),
    ]
    _assert_refused(blob, [(lut + off, value, what) for off, value, what in edits])


class _Ramp(nn.Module):
    """A 1x1 conv over a ramp whose levels cover all 256, then hardswish twice: into the
    program's output (form 2 into a graph output) and into a 1x1 conv (form 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.c = nn.Conv2d(1, 6, 1), nn.Conv2d(1, 6, 1)
        self.b = nn.Conv2d(6, 4, 1)
        with torch.no_grad():
            self.a.weight.copy_(torch.linspace(-1.0, 1.5, 6).reshape(6, 1, 1, 1))
            self.a.bias.copy_(torch.linspace(-0.5, 0.5, 6))
            self.c.weight.copy_(torch.linspace(0.5, -0.7, 6).reshape(6, 1, 1, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.hardswish(self.a(x)), self.b(F.hardswish(self.c(x)))


def test_every_level_looked_up(tmp_path) -> None:
    torch.manual_seed(0)
    m = _Ramp().eval()
    x = (torch.linspace(-7.0, 7.0, 41 * 43).reshape(1, 1, 41, 43),)
    ep = quantize_exported(m, x, [x], progress=False)
    on, _ = _export_patched(ep, x)
    off, _ = _export_patched(ep, x, [(fusion_q8, "_lut_candidate", lambda op: False)])
    assert sorted(_luts(on.buffer)) == [1, 2] and _luts(off.buffer) == [0, 0]
    for th in (1, 2):
        a = _runtime()(on.buffer, threads=th).run("forward", list(x))
        b = _runtime()(off.buffer, threads=th).run("forward", list(x))
        assert len(a) == 2 and all(torch.equal(u, v) for u, v in zip(a, b, strict=True)), th
        assert torch.unique(a[0]).numel() > 100  # hardswish folds the negative levels together
    for which in (0, 1):  # the VBMI rows against the scalar ones
        outs = _run_per_isa(on, x[0], tmp_path, (None, "avx2", "scalar"), which=which)
        assert torch.equal(outs[None], outs["avx2"]) and torch.equal(outs[None], outs["scalar"])


class _Acts(nn.Module):
    """SiLU (PT2E's x * sigmoid(x)), sigmoid, GELU and tanh between int8 convs (on u8 links: one
    table each, the activation first), and a sigmoid of the fake-quantized input (no u8 link:
    the f32 op with the activation first)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 12, 3, padding=1)
        self.dw = nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.b, self.c = nn.Conv2d(12, 20, 1), nn.Conv2d(20, 20, 1)
        self.d = nn.Conv2d(20, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.silu(self.a(torch.sigmoid(x)))  # silu form 1: the depthwise conv reads it
        y = torch.sigmoid(self.dw(y))  # form 1 into a 1x1 conv
        y = F.gelu(self.b(y))  # form 1
        y = torch.tanh(self.c(y))  # form 2: the mean and the conv
        return self.d(y) + y.mean((2, 3), keepdim=True)[:, :6]


def _export_acts(on: bool) -> tuple[ember.Program, ember.Program, tuple]:
    import ember.backends.cpu.partition as partition

    torch.manual_seed(0)
    m = _Acts().eval()
    g = torch.Generator().manual_seed(2)
    cal = [(torch.randn(1, 3, 19, 21, generator=g) * 2,) for _ in range(4)]
    ep = quantize_exported(m, cal[0], cal, progress=False)
    x = (torch.randn(1, 3, 19, 21, generator=g) * 2,)
    # (the passes are looked up by name in partition)
    off = [] if on else [(partition, "_act_then_fq", lambda ops, u: None)]
    return (*_export_patched(ep, x, off), x)


def test_activation_then_fake_quant(tmp_path) -> None:
    on, plain, x = _export_acts(True)
    off, _, _ = _export_acts(False)
    fq = B.ACT["fakequant"]
    unary = [ip[:4] for k, act, _, ip in _ops(on.buffer) if k == B.OP["unary"] and act == fq]
    pre = [(ip[0], ip[2] - 1, ip[3]) for ip in unary if ip[2]]
    sig, silu = B.ACT["sigmoid"], (B.ACT["sigmoid"], 1)
    assert pre == [
        (0, sig, 0),  # the input's sigmoid: f32
        (1, *silu),
        (1, sig, 0),
        (1, B.ACT["gelu"], 0),
        (2, B.ACT["tanh"], 0),
    ], pre
    assert not any(ip[2] for k, _, _, ip in _ops(off.buffer) if k == B.OP["unary"])
    for th in (1, 2):
        assert torch.equal(_run(on, x, th), _run(off, x, th)), th
    _assert_within_one_step(on, plain, x)
    outs = _run_per_isa(on, x[0], tmp_path, (None, "avx2", "scalar"))
    offs = _run_per_isa(off, x[0], tmp_path, (None, "avx2", "scalar"))
    for isa in outs:  # on each ISA, the bits of that ISA's f32 rows
        assert torch.equal(outs[isa], offs[isa]), isa
    blob = _delegate_blob(on)
    at = next(a for k, act, a, ip in _ops(blob) if k == B.OP["unary"] and ip[2] and ip[3])
    _assert_refused(
        blob,
        [
            (at + IP + 8, B.ACT["fakequant"] + 1, "first activation"),
            (at + IP + 8, B.ACT["clamp"] + 1, "first activation"),
            (at + IP + 12, 2, "times-x"),
        ],
    )


def test_int8_depthwise_into_f32_through_a_lookup(progs) -> None:
    """The first depthwise conv runs int8 and a fake-quant lookup of its levels (form 2) writes
    the f32 values the mean and the expansion read; with the lookups off it stays f32 and takes
    the mean into itself again (plane means: one mean op fewer)."""
    prog, f32_rows, _, _ = progs
    fq = B.ACT["fakequant"]
    forms = [ip[0] for k, act, _, ip in _ops(prog.buffer) if k == B.OP["unary"] and act == fq]
    assert forms.count(2) == 1, forms
    means = [sum(k == B.OP["mean"] for k, _, _, _ in _ops(p.buffer)) for p in (prog, f32_rows)]
    assert means[0] == means[1] + 1, means
