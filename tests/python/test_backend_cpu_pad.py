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
  int8 links too), within one output step of the portable run.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_pad.py
"""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F
from backend_cpu_common import _n_delegates, _op_table, _outside, _run
from torch import nn

import ember
import ember.backends.cpu.blob as B
from ember.backends.cpu.blob import conv_counts
from ember.backends.delegate import DelegateInstr
from ember.quant.pt2e import quantize_exported


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


def test_int8_convs_behind_pads() -> None:
    torch.manual_seed(0)
    m = _SameConvs().eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(1, 3, 17, 17, generator=g),) for _ in range(4)]
    ep = quantize_exported(m, cal[0], cal, progress=False)
    x = (torch.randn(1, 3, 17, 17, generator=g),)
    prog = ember.export(ep, x, backend="cpu")
    plain = ember.export(ep, x, backend=None)
    assert _n_delegates(prog) == 1 and not _outside(prog), _outside(prog)
    assert _pad_ops(prog) == 1
    blobs = [i.processed for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr)]
    # every conv int8 but the stride-2 depthwise behind the asymmetric pad (int8 depthwise convs
    # read u8 links only)
    assert conv_counts(blobs[0]) == (5, 4), conv_counts(blobs[0])
    scales = [
        float(i.args[1].value)
        for i in plain._irs["forward"].instrs
        if getattr(i, "kernel", "").startswith("quantized_decomposed::dequantize_per_tensor")
    ]
    want = _run(plain, x)
    for th in (1, 2):
        diff = (_run(prog, x, th) - want).abs()
        assert diff.max().item() <= scales[-1] * 1.001, (th, diff.max().item())
        assert (diff > 0).float().mean().item() <= 0.02
