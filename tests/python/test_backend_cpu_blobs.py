"""EmberCpuBackend (ember.export(..., backend="cpu")):
malformed blobs are rejected with an error, never a crash.

Shared helpers are in backend_cpu_common.py; kernel-level tests are in
tests/c/test_cpu_ukernels_*.c.
"""

from __future__ import annotations

import random
import struct

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import (
    WINO,
    WINO_SLOTS,
    SqueezeExcite,
    _blob_span,
    _load_and_run,
    _op_table,
)
from torch import nn

import ember
import ember.backends.cpu.blob as B
import ember.backends.cpu.partition as P

# ---- malformed blobs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_program() -> tuple[bytes, torch.Tensor]:
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, groups=8),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    ).eval()
    x = torch.randn(1, 3, 9, 9)
    return ember.export(m, (x,), backend="cpu").buffer, x


def test_blob_version_and_magic_are_checked(small_program) -> None:
    buf, x = small_program
    at, _ = _blob_span(buf)
    assert _load_and_run(buf, x) == "ok"
    bad = bytearray(buf)
    # this build reads versions 1 (no transposed convs) to 19 (constants stored as halves)
    for version in (0, B.VERSION_HALF_CONSTS + 1):
        struct.pack_into("<I", bad, at + 4, version)
        assert "DelegateInvalidCompatibility" in _load_and_run(bytes(bad), x)
    struct.pack_into("<I", bad, at + 4, 1)
    assert _load_and_run(bytes(bad), x) == "ok"
    bad = bytearray(buf)
    bad[at : at + 4] = b"XXXX"
    assert "InvalidProgram" in _load_and_run(bytes(bad), x)


def test_blob_fields_out_of_range_are_rejected(small_program) -> None:
    buf, x = small_program
    at, _ = _blob_span(buf)
    n_tensors, n_ops = struct.unpack_from("<II", buf, at + 8)
    tensors_off, ops_off = struct.unpack_from("<QQ", buf, at + 32)
    cases = {
        "huge arena": (at + 24, "<Q", 1 << 50),
        "tensors past end": (at + 32, "<Q", 1 << 40),
        "ops past end": (at + 40, "<Q", 1 << 33),
        "too many tensors": (at + 8, "<I", n_tensors + 1000),
        "too many ops": (at + 12, "<I", n_ops + 1000),
        "const offset": (at + tensors_off + 8, "<Q", 1 << 40),  # tensor 0 may be arg or const
        "tensor rank": (at + tensors_off + 16, "<I", 9),
        "tensor size": (at + tensors_off + 20, "<i", -5),
        "op kind": (at + ops_off, "<I", 99),
        "op input id": (at + ops_off + 8, "<i", 10_000),
        "op output id": (at + ops_off + 24, "<i", -1),
        "op act": (at + ops_off + 4, "<I", 77),
    }
    for name, (off, fmt, val) in cases.items():
        bad = bytearray(buf)
        struct.pack_into(fmt, bad, off, val)
        res = _load_and_run(bytes(bad), x)
        assert res != "ok" or name == "const offset", f"{name}: accepted"


def _exported_table(m: nn.Module, x: torch.Tensor) -> tuple[bytes, int, list[tuple[int, ...]]]:
    """m exported for the CPU backend (checked to load and run), with _op_table of it."""
    torch.manual_seed(0)
    buf = ember.export(m.eval(), (x,), backend="cpu").buffer
    assert _load_and_run(buf, x) == "ok"
    return (buf, *_op_table(buf))


def _patched(buf: bytes, at: int, val: int) -> bytes:
    """buf with the int32 at `at` replaced by val."""
    bad = bytearray(buf)
    struct.pack_into("<i", bad, at, val)
    return bytes(bad)


def test_blob_residual_is_checked() -> None:
    """A conv's residual (in[3]) must have the output's shape and not share its storage; a
    depthwise conv takes none. Each bad blob fails at load, naming the field."""

    class Res(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Conv2d(8, 8, 3, padding=1)
            self.d = nn.Conv2d(8, 8, 3, padding=1, groups=8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.relu(self.c(x) + x)
            return self.d(y) * 2.0

    x = torch.randn(1, 8, 6, 6)
    buf, base, recs = _exported_table(Res(), x)
    conv = next(i for i, r in enumerate(recs) if r[0] == 1 and r[5] >= 0)
    dw = next(i for i, r in enumerate(recs) if r[0] == 1 and r[5] < 0)
    w_id, res_id, out_id = recs[conv][3], recs[conv][5], recs[conv][6]
    for val in (out_id, w_id, 10_000):
        assert _load_and_run(_patched(buf, base + 160 * conv + 20, val), x) != "ok", val
    # the load error names the operator and what is wrong with it, not only the status
    err = _load_and_run(_patched(buf, base + 160 * conv + 20, out_id), x)
    assert f"operator {conv} (kind 1): residual shares the output's storage" in err, err
    # the same shape, but a depthwise conv
    assert _load_and_run(_patched(buf, base + 160 * dw + 20, res_id), x) != "ok"


def test_blob_plane_means_are_checked() -> None:
    """A conv's out[1] (plane means) must be a depthwise conv's, of N * C elements, not sharing
    the output's or input's storage."""
    x = torch.randn(1, 24, 9, 9)
    buf, base, recs = _exported_table(SqueezeExcite(), x)
    dw = next(i for i, r in enumerate(recs) if r[0] == 1 and r[7] >= 0)
    pw = next(i for i, r in enumerate(recs) if r[0] == 1 and r[7] < 0)
    means, y_id, x_id = recs[dw][7], recs[dw][6], recs[dw][2]
    for val in (y_id, x_id, recs[dw][3]):  # the output, the input, the (constant) weights
        assert _load_and_run(_patched(buf, base + 160 * dw + 28, val), x) != "ok", val
    # a conv that is not depthwise
    assert _load_and_run(_patched(buf, base + 160 * pw + 28, means), x) != "ok"


def test_blob_winograd_fields_are_checked() -> None:
    """A Winograd conv with a bad tile size, slot count, scratch or geometry fails at load."""
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()).eval()
    x = torch.randn(1, 16, 28, 28)
    buf = ember.export(mod, (x,), backend="cpu").buffer
    assert _load_and_run(buf, x) == "ok"
    at, _ = _blob_span(buf)
    ops_off = struct.unpack_from("<Q", buf, at + 40)[0]
    ip_at = at + ops_off + 32  # the conv is operator 0
    for slot, val in [
        (WINO, 3),
        (WINO, 6),
        (WINO, -1),
        (WINO_SLOTS, 0),
        (WINO_SLOTS, 65),
        (WINO_SLOTS, 1 << 20),
        (11, 64),
        (3, 2),
        (1, 5),
        (0, 2),
    ]:
        bad = bytearray(buf)
        struct.pack_into("<i", bad, ip_at + 4 * slot, val)
        assert _load_and_run(bytes(bad), x) != "ok", (slot, val)


def test_blob_transposed_winograd_fields_are_checked(monkeypatch) -> None:
    """A transposed Winograd conv whose flag, stored filters or scratch do not match fails at
    load (filters transformed at load are checked in test_backend_cpu_pack.py)."""
    monkeypatch.setattr(P.packing, "WINO_SMALL", True)
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Conv2d(256, 272, 3, padding=1)).eval()
    x = torch.randn(1, 256, 7, 7)
    buf = ember.export(mod, (x,), backend="cpu", pack="export").buffer
    assert _load_and_run(buf, x) == "ok"
    at, _ = _blob_span(buf)
    ops_off = struct.unpack_from("<Q", buf, at + 40)[0]
    ip_at = at + ops_off + 32
    assert struct.unpack_from("<i", buf, ip_at + 4 * 12)[0] == 1
    assert struct.unpack_from("<i", buf, ip_at + 4 * WINO)[0] == 2
    for slot, val in [(12, 0), (12, 2), (11, 64), (WINO, 4), (WINO_SLOTS, 2)]:
        bad = bytearray(buf)
        struct.pack_into("<i", bad, ip_at + 4 * slot, val)
        assert _load_and_run(bytes(bad), x) != "ok", (slot, val)


def test_blob_random_corruption_never_crashes(small_program) -> None:
    """Flip random bytes in the header, tensor and operator tables: load must fail cleanly or
    run (a crash fails the whole test process)."""
    buf, x = small_program
    at, _ = _blob_span(buf)
    _, n_ops = struct.unpack_from("<II", buf, at + 8)
    ops_off = struct.unpack_from("<Q", buf, at + 40)[0]
    end = at + ops_off + n_ops * 160
    rng = random.Random(7)
    for _ in range(300):
        bad = bytearray(buf)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(at, end)
            bad[pos] = rng.randrange(256)
        _load_and_run(bytes(bad), x)


def test_blob_conv_scratch_is_checked() -> None:
    """A conv's scratch (ip[EMC_CONV_SCRATCH_OFF], ip[EMC_CONV_SCRATCH_NBYTES]) may not overlap
    the arena tensors it reads or writes, nor run past the arena: each bad blob fails at load
    naming the scratch (the CI fuzzer once put an int8 conv's scratch over its u8 input)."""

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(4, 8, 3, padding=1)
            self.b = nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(F.relu(self.a(x))) * 2.0

    x = torch.randn(1, 4, 7, 7)
    buf, base, recs = _exported_table(Two(), x)
    at, _ = _blob_span(buf)
    tensors_off = at + struct.unpack_from("<Q", buf, at + 32)[0]
    conv = next(
        i
        for i, r in enumerate(recs)
        if r[0] == 1 and struct.unpack_from("<I", buf, tensors_off + 48 * r[2])[0] == B.ARENA
    )
    x_off = struct.unpack_from("<Q", buf, tensors_off + 48 * recs[conv][2] + 8)[0]
    ip_at = base + 160 * conv + 32
    nbytes = struct.unpack_from("<i", buf, ip_at + 4 * (B.CONV_SCRATCH_OFF + 1))[0]
    assert nbytes > 0
    bad = _patched(buf, ip_at + 4 * B.CONV_SCRATCH_OFF, x_off)  # over its input
    assert "scratch" in _load_and_run(bad, x)
    bad = _patched(buf, ip_at + 4 * B.CONV_SCRATCH_OFF, 1 << 30)  # past the arena
    assert "scratch" in _load_and_run(bad, x)
