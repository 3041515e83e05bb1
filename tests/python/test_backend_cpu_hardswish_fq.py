"""Hardswish in int8 Q/DQ graphs (EmberCpuBackend EMC_ACT_HARDSWISH_FQ, blob version 11).

Quantized by PT2E, a hardswish sits between two fake-quants and decomposes into x + 3 clamped to
[0, 6], a multiply by x and a division by 6 whose output is fake-quantized. The backend runs the
three as one ``hardswish_fq`` pass (the same f32 steps, then the fake-quant). Checked here:

- the file holds that one op per hardswish, no elementwise ops, and the convs that read it stay
  int8;
- the program gives the same bits as the same graph with the three ops run one by one (the
  fusion switched off), at 1 and 2 threads, and the same bits on every ISA;
- it stays within one output step of the portable kernels.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_hardswish_fq.py
"""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
from backend_cpu_common import (
    _assert_same_on_every_isa,
    _assert_within_one_step,
    _op_table,
    _run,
)
from torch import nn

import ember
import ember.backends.cpu.blob as B
import ember.backends.cpu.partition as partition
from ember.quant.pt2e import quantize_exported


class _Net(nn.Module):
    """Convs with hardswish after each (channels not multiples of 16), as MobileNetV3's blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 19, 3, stride=2, padding=1)
        self.b = nn.Conv2d(19, 24, 1)
        self.c = nn.Conv2d(24, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = nn.functional.hardswish
        return self.c(act(self.b(act(self.a(x)))))


@pytest.fixture(scope="module")
def programs() -> tuple[ember.Program, ember.Program, ember.Program, tuple]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    cal = [(torch.randn(1, 3, 23, 23, generator=g) * 2,) for _ in range(4)]
    ep = quantize_exported(_Net().eval(), cal[0], cal, progress=False)
    inputs = (torch.randn(1, 3, 23, 23, generator=g) * 2,)
    prog = ember.export(ep, inputs, backend="cpu")
    orig = partition._hard_patterns  # (the fusion passes are looked up there by name)
    partition._hard_patterns = lambda ops, u: None
    try:
        apart = ember.export(ep, inputs, backend="cpu")
    finally:
        partition._hard_patterns = orig
    return prog, apart, ember.export(ep, inputs, backend=None), inputs


def _kinds_acts(prog: ember.Program) -> list[tuple[int, int]]:
    return [(r[0], r[1]) for r in _op_table(prog.buffer)[1]]


def test_one_op_per_hardswish(programs) -> None:
    prog, apart, _, _ = programs
    ops = _kinds_acts(prog)
    assert ops.count((B.OP["unary"], B.ACT["hardswish_fq"])) == 2, ops
    assert not any(k == B.OP["binary"] for k, _ in ops), ops
    assert sum(k == B.OP["binary"] for k, _ in _kinds_acts(apart)) == 6
    base, recs = _op_table(prog.buffer)
    import struct

    convs = [
        struct.unpack_from("<24i", prog.buffer, base + 160 * i + 32)
        for i, r in enumerate(recs)
        if r[0] == B.OP["conv2d"]
    ]
    assert len(convs) == 3 and all(ip[B.CONV_Q8] > 0 for ip in convs), convs


def test_same_bits_as_the_ops_one_by_one(programs) -> None:
    prog, apart, _, inputs = programs
    for th in (1, 2):
        assert torch.equal(_run(prog, inputs, th), _run(apart, inputs, th))


def test_within_one_step_of_portable(programs) -> None:
    prog, _, plain, inputs = programs
    _assert_within_one_step(prog, plain, inputs, (1,))


def test_same_bits_on_every_isa(programs, tmp_path) -> None:
    prog, _, _, inputs = programs
    _assert_same_on_every_isa(prog, inputs[0], tmp_path)
