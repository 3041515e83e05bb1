"""Constant pads in EmberCpuBackend (EMC_OP_PAD, blob version 12) and their folding into convs.

TensorFlow-style "same" padding (EfficientNet-Lite0's model code) writes an explicit
``F.pad`` before each conv; the portable pad between 17 delegates was 80 % of that model's time.
Checked here:

- a pad of the last one or two dims (asymmetric, a nonzero value, 3-d and 5-d tensors) runs in
  the backend, bit for bit with eager, at 1 and 2 threads; crops and pads of a third dim stay
  portable and still give eager's values;
- a symmetric zero pad before a conv that pads nothing becomes the conv's padding (no pad op
  left), an asymmetric one stays a pad op; both match eager;
- int8 (Ember's quantizer shares a pad's qparams with its input): the fake-quant after a pad
  goes, symmetric pads fold, and the convs behind pads stay int8 (the depthwise ones between
  int8 links too), within one output step of the portable run; an asymmetric pad before an
  int8 depthwise conv between u8 links becomes that conv's own padding (blob version 14: more
  zero rows / columns after than before), the same bits on every ISA; where the conv does not
  stay int8 the pad op stays; the extra refused on any other conv.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_pad.py
"""

from __future__ import annotations

import struct

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F
from backend_cpu_common import (
    _assert_same_on_every_isa,
    _assert_within_one_step,
    _n_delegates,
    _op_table,
    _outside,
    _run,
)
from torch import nn

import ember
import ember.backends.cpu.blob as B
from ember.backends.check import runtime_check
from ember.backends.cpu.blob import conv_counts
from ember.backends.delegate import DelegateInstr
from ember.quant.pt2e import quantize_exported
from ember.runtime import RuntimeProgram

_IP = 32  # byte offset of ip[] in an operator record (kind, act, in[4], out[2])


class _Pads(nn.Module):
    def __init__(self, pad: list[int], value: float) -> None:
        super().__init__()
        self.pad, self.value = pad, value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x * 2.0, self.pad, value=self.value) + 1.0


_CASES = [
    ((1, 3, 7, 9), [0, 1, 0, 1], 0.0),
    ((2, 5, 6, 4), [2, 1, 3, 0], -1.5),
    ((3, 8, 5), [1, 2, 2, 1], 0.25),
    ((2, 3, 4, 5, 6), [3, 0], 7.0),
    ((4, 33), [0, 0, 2, 2], 0.0),
]


@pytest.mark.parametrize(("shape", "pad", "value"), _CASES, ids=[str(c[1]) for c in _CASES])
def test_pad_in_backend(shape: tuple[int, ...], pad: list[int], value: float) -> None:
    m = _Pads(pad, value).eval()
    x = torch.randn(*shape)
    prog = ember.export(m, (x,), backend="cpu")
    assert _n_delegates(prog) == 1 and not _outside(prog), _outside(prog)
    kinds = [r[0] for r in _op_table(prog.buffer)[1]]
    assert B.OP["pad"] in kinds, kinds
    for th in (1, 2):
        assert torch.equal(_run(prog, (x,), th), m(x))


@pytest.mark.parametrize(("pad", "why"), [([1, -1, 0, 0], "crop"), ([1, 1, 1, 1, 1, 1], "3 dims")])
def test_pad_declined_stays_portable(pad: list[int], why: str) -> None:
    m = _Pads(pad, 0.5).eval()
    x = torch.randn(2, 3, 4, 5)
    prog = ember.export(m, (x,), backend="cpu")
    assert "aten::constant_pad_nd.out" in _outside(prog), why
    assert torch.equal(_run(prog, (x,)), m(x))


class _SameConvs(nn.Module):
    """EfficientNet's pattern: a conv, then "same" pads before a depthwise conv (symmetric at
    stride 1, asymmetric at stride 2) and a 1x1 projection."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 24, 1)
        self.dw1 = nn.Conv2d(24, 24, 3, groups=24)
        self.b = nn.Conv2d(24, 24, 1)
        self.dw2 = nn.Conv2d(24, 24, 5, stride=2, groups=24)
        self.c = nn.Conv2d(24, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self.a(x))
        y = F.relu6(self.dw1(F.pad(y, [1, 1, 1, 1])))
        y = F.relu6(self.b(y))
        y = F.relu6(self.dw2(F.pad(y, [1, 2, 1, 2])))
        return self.c(y)


def _pad_ops(prog: ember.Program) -> int:
    return sum(r[0] == B.OP["pad"] for r in _op_table(prog.buffer)[1])


def test_symmetric_pad_folds_into_conv() -> None:
    torch.manual_seed(0)
    m = _SameConvs().eval()
    x = torch.randn(1, 3, 17, 17)
    prog = ember.export(m, (x,), backend="cpu")
    assert _n_delegates(prog) == 1 and not _outside(prog), _outside(prog)
    assert _pad_ops(prog) == 1  # the asymmetric one
    for th in (1, 2):
        torch.testing.assert_close(_run(prog, (x,), th), m(x), rtol=1e-5, atol=1e-5)


def _calibrated(m: nn.Module, shape: tuple[int, ...]) -> tuple[ember.Program, ember.Program, tuple]:
    torch.manual_seed(0)
    m = m.eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(*shape, generator=g),) for _ in range(4)]
    ep = quantize_exported(m, cal[0], cal, progress=False)
    x = (torch.randn(*shape, generator=g),)
    return ember.export(ep, x, backend="cpu"), ember.export(ep, x, backend=None), x


def _dw_pads(prog: ember.Program) -> list[tuple[int, int]]:
    """The (EMC_CONV_PH, EMC_CONV_PW) slots of the program's int8 depthwise convs."""
    base, recs = _op_table(prog.buffer)
    out = []
    for i, r in enumerate(recs):
        ip = struct.unpack_from("<24i", prog.buffer, base + 160 * i + _IP)
        if r[0] == 1 and ip[9] and ip[B.CONV_Q8]:  # EMC_OP_CONV2D, EMC_CONV_DEPTHWISE, int8
            out.append((ip[5], ip[6]))
    return out


def test_int8_convs_behind_pads() -> None:
    """Both pads go: the symmetric one into its conv, the asymmetric one (1 before, 2 after) into
    the int8 depthwise conv between u8 links (blob version 14: 1 + (1 << 16) in each pad slot);
    every conv int8, within one output step of the portable run."""
    prog, plain, x = _calibrated(_SameConvs(), (1, 3, 17, 17))
    assert _n_delegates(prog) == 1 and not _outside(prog), _outside(prog)
    assert _pad_ops(prog) == 0
    blobs = [i.processed for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr)]
    assert conv_counts(blobs[0]) == (5, 5), conv_counts(blobs[0])
    assert sorted(_dw_pads(prog)) == [(1, 1), (1 + (1 << 16), 1 + (1 << 16))], _dw_pads(prog)
    _assert_within_one_step(prog, plain, x)


class _StridedSame(nn.Module):
    """EfficientNet-Lite0's stride-2 stages: 1x1 expansion, "same" pad (0 before and 1 after at
    3x3, 1 and 2 at 5x5; odd and even maps), depthwise, 1x1 projection; channels not multiples
    of 16 (80 on a 5-row map: rows split by channel blocks of 64); a third block whose
    depthwise output is the program's (not a u8 link: its pad op comes back and the conv runs in
    f32; a float op reading it would read a fake-quant lookup of its levels, fusion_q8's
    _dw_f32_out)."""

    def __init__(self) -> None:
        super().__init__()
        self.e1, self.d1 = nn.Conv2d(3, 20, 1), nn.Conv2d(20, 20, 3, stride=2, groups=20)
        self.p1, self.e2 = nn.Conv2d(20, 12, 1), nn.Conv2d(12, 80, 1)
        self.d2, self.p2 = nn.Conv2d(80, 80, 5, stride=2, groups=80), nn.Conv2d(80, 16, 1)
        self.d3 = nn.Conv2d(16, 16, 3, stride=2, groups=16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r6 = F.relu6
        y = self.p1(r6(self.d1(F.pad(r6(self.e1(x)), [0, 1, 0, 1]))))
        y = self.p2(r6(self.d2(F.pad(r6(self.e2(y)), [1, 2, 1, 2]))))
        return self.d3(F.pad(y, [0, 1, 0, 1]))


@pytest.mark.parametrize("hw", [(23, 23), (20, 26)], ids=["odd", "even"])
def test_strided_same_pads_into_int8_depthwise(hw: tuple[int, int], tmp_path) -> None:
    prog, plain, x = _calibrated(_StridedSame(), (1, 3, *hw))
    assert _n_delegates(prog) == 1 and not _outside(prog), _outside(prog)
    assert _pad_ops(prog) == 1  # the third block's: its conv stays f32
    assert sorted(_dw_pads(prog)) == [(1 << 16, 1 << 16), (1 + (1 << 16), 1 + (1 << 16))]
    _assert_within_one_step(prog, plain, x)
    _assert_same_on_every_isa(prog, x[0], tmp_path)


def test_asymmetric_pad_refused_outside_int8_depthwise() -> None:
    """Extra padding after on an f32 conv (or beyond what the map allows) is refused by name."""
    prog, _, _ = _calibrated(_StridedSame(), (1, 3, 23, 23))
    blob = next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr)).processed
    base, recs = _op_table(blob)
    f32 = next(
        i
        for i, r in enumerate(recs)
        if r[0] == 1 and struct.unpack_from("<24i", blob, base + 160 * i + _IP)[B.CONV_Q8] == 0
    )
    bad = bytearray(blob)
    at = base + 160 * f32 + _IP + 4 * 5  # EMC_CONV_PH
    struct.pack_into("<i", bad, at, struct.unpack_from("<i", blob, at)[0] + (1 << 16))
    assert runtime_check("EmberCpuBackend", blob, 1 << 24) is None
    why = runtime_check("EmberCpuBackend", bytes(bad), 1 << 24)
    assert why and "only int8 depthwise convs pad asymmetrically" in why, why


@pytest.mark.parametrize(
    ("shape", "pad", "inside"),
    [
        ((2, 5, 6, 3), (0, 0, 1, 2, 3, 0), True),  # Swin: H and W of [B, H, W, C]
        ((2, 5, 6, 3), (0, 0, 0, 0, 1, 1), True),  # one dim before an unpadded one
        ((2, 5, 1, 6, 3), (0, 0, 1, 2, 0, 0, 3, 1), True),  # a size-1 dim between the two
        ((2, 5, 6, 3), (0, 0, 0, 0, 0, 0, 1, 1), True),  # the outermost dim
        ((2, 5, 6, 3), (1, 0, 1, 0, 1, 0), False),  # three dims: stays portable
    ],
)
def test_pad_of_inner_dims_before_unpadded_ones(
    shape: tuple[int, ...], pad: tuple[int, ...], inside: bool
) -> None:
    """A pad of one or two adjacent dims followed by unpadded ones runs as EMC_OP_PAD over whole
    rows (never folded into a conv's padding), equal to eager at 1 and 2 threads."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.pad(torch.relu(x) - 0.5, pad, value=0.25) * 2.0

    x = torch.randn(shape)
    prog = ember.export(M(), (x,))
    assert (not _outside(prog)) == inside, _outside(prog)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0]
        assert torch.equal(got, M()(x))


def test_pad_of_channels_and_rows_before_a_conv_is_not_folded() -> None:
    """A pad of [1, 1, 1, W]'s dims 1 and 2 (channels and rows) merges into [outer 1, h 1, w W]
    padded by 1 row and W columns: by its sizes a map's H / W pad, yet it must stay a pad, not
    become the following conv's padding."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Conv2d(3, 2, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(F.pad(torch.relu(x), (0, 0, 1, 1, 1, 1)))  # [1, 3, 3, 5]

    x = torch.randn(1, 1, 1, 5)
    m = M().eval()
    prog = ember.export(m, (x,))
    x2 = torch.randn(1, 1, 1, 5).abs() + 0.5
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        torch.testing.assert_close(got, m(x2), rtol=1e-5, atol=1e-6)
