"""Int8 residual adds and max pools on u8 links (EmberCpuBackend blob version 14:
EMC_BINARY_Q8, EMC_POOL_Q8).

In a statically quantized ResNet the residual add, its ReLU and its fake-quant, and the stem's
max pool, sit between int8 convs. On u8 links (channels last) the add dequantizes each operand to
exactly the f32 value its fake-quant stands for, adds in f32 and quantizes the sum; the pool takes
the largest level. So the program must give the very bits of the same graph with those ops on f32
links. Checked here:

- a ResNet-shaped net (stem conv, max pool, a block with an identity shortcut, a block with a
  strided 1x1 downsample, one more block) runs its adds and its pool on u8; where a block's
  output also feeds a mean (f32), its add and the pool before it stay f32, the next ones u8;
- the same bits as the export with the u8 adds and pools switched off (a mutation of either
  kernel's arithmetic fails this), at 1 and 2 threads, within one output step of the portable run;
- the same bits on every ISA (AVX-512, AVX2, scalar rows);
- bad int8 add / pool fields are refused at load, naming what was wrong.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8res.py
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
)
from torch import nn

import ember
import ember.backends.cpu.blob as B
import ember.backends.cpu.fusion_q8 as fusion_q8
from ember.quant.pt2e import quantize_exported

IP = 32  # byte offset of ip[] in an operator record (kind, act, in[4], out[2])


class _Res(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 20, 3, stride=2, padding=1)
        self.a1, self.a2 = nn.Conv2d(20, 20, 3, padding=1), nn.Conv2d(20, 20, 3, padding=1)
        self.b1, self.b2 = nn.Conv2d(20, 36, 3, stride=2, padding=1), nn.Conv2d(36, 36, 1)
        self.bd = nn.Conv2d(20, 36, 1, stride=2)
        self.c1, self.c2 = nn.Conv2d(36, 36, 3, padding=1), nn.Conv2d(36, 36, 1)
        self.head = nn.Conv2d(36, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, 1)
        x = F.relu(x + self.a2(F.relu(self.a1(x))))
        x = F.relu(self.bd(x) + self.b2(F.relu(self.b1(x))))
        x = F.relu(x + self.c2(F.relu(self.c1(x))))
        return self.head(x).mean((2, 3))


class _Side(_Res):
    """The same blocks; the first block's output also feeds a mean (an f32 reader): its add, and
    through its operands the pool, stay f32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, 1)
        x = F.relu(x + self.a2(F.relu(self.a1(x))))
        side = x.mean((2, 3))
        x = F.relu(self.bd(x) + self.b2(F.relu(self.b1(x))))
        x = F.relu(x + self.c2(F.relu(self.c1(x))))
        return self.head(x).mean((2, 3)) + side[:, :10]


def _export(u8: bool, net: type = _Res) -> tuple[ember.Program, ember.Program, tuple]:
    torch.manual_seed(0)
    m = net().eval()
    g = torch.Generator().manual_seed(1)
    cal = [(torch.randn(1, 3, 37, 37, generator=g),) for _ in range(4)]
    ep = quantize_exported(m, cal[0], cal, progress=False)
    x = (torch.randn(1, 3, 37, 37, generator=g),)
    off = [
        (fusion_q8, "_add_q8_candidate", lambda a: False),
        (fusion_q8, "_pool_q8_candidate", lambda p, u: False),
    ]
    return (*_export_patched(ep, x, [] if u8 else off), x)


@pytest.fixture(scope="module")
def progs() -> tuple[ember.Program, ember.Program, ember.Program, tuple]:
    prog, plain, x = _export(True)
    f32_links, _, _ = _export(False)
    return prog, f32_links, plain, x


def _ops(buf: bytes) -> list[tuple[int, int, list[int]]]:
    base, recs = _op_table(buf)
    return [
        (r[0], base + 160 * i + IP, list(struct.unpack_from("<24i", buf, base + 160 * i + IP)))
        for i, r in enumerate(recs)
    ]


def test_adds_and_pool_on_u8(progs) -> None:
    prog, f32_links, _, _ = progs
    adds = [ip for k, _, ip in _ops(prog.buffer) if k == B.OP["binary"]]
    pools = [ip for k, _, ip in _ops(prog.buffer) if k == B.OP["maxpool2d"]]
    assert [ip[1] for ip in adds] == [1, 1, 1], adds
    assert all(ip[2] > 0 for ip in adds), adds
    assert [ip[10] for ip in pools] == [1], pools
    assert all(ip[1] == 0 for k, _, ip in _ops(f32_links.buffer) if k == B.OP["binary"])


def test_f32_reader_keeps_its_links_f32() -> None:
    prog, plain, x = _export(True, _Side)
    ops = _ops(prog.buffer)
    assert [ip[1] for k, _, ip in ops if k == B.OP["binary"] and ip[0] == B.BIN["add"]][:3] == [
        0,
        1,
        1,
    ]
    assert [ip[10] for k, _, ip in ops if k == B.OP["maxpool2d"]] == [0]
    f32_links, _, _ = _export(False, _Side)
    assert torch.equal(_run(prog, x), _run(f32_links, x))


def test_same_bits_as_f32_links(progs) -> None:
    prog, f32_links, plain, x = progs
    for th in (1, 2):
        assert torch.equal(_run(prog, x, th), _run(f32_links, x, th)), th
    _assert_within_one_step(prog, plain, x)


def test_same_bits_on_every_isa(progs, tmp_path) -> None:
    prog, _, _, x = progs
    _assert_same_on_every_isa(prog, x[0], tmp_path)


def test_bad_fields_refused(progs) -> None:
    prog, _, _, _ = progs
    blob = _delegate_blob(prog)
    ops = _ops(blob)
    add = next(at for k, at, ip in ops if k == B.OP["binary"] and ip[1])
    pool = next(at for k, at, ip in ops if k == B.OP["maxpool2d"])
    # a bad flag, no table, a table that is not a constant of 4, a u8 multiply, a u8 pool flag 2
    edits = [
        (add, 1, 2, "int8 form"),
        (add, 2, 0, "int8 form"),
        (add, 2, 1, "table"),
        (add, 0, B.BIN["mul"], "int8 form"),
        (pool, 10, 2, "u8 pool"),
    ]
    _assert_refused(blob, [(at + 4 * slot, value, what) for at, slot, value, what in edits])
