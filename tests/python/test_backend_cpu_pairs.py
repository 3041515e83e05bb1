"""EmberCpuBackend (ember.export(..., backend="cpu")):
the AMX path and bf16 pairs (per ISA, their blob layout and checks).

Shared helpers are in backend_cpu_common.py; kernel-level tests are in
tests/c/test_cpu_ukernels_*.c.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import (
    PAIRS,
    _blob_span,
    _conv_ops,
    _load_and_run,
    _n_delegates,
    _run,
    _run_per_isa,
)
from torch import nn

import ember
import ember.backends.cpu.partition as P


def _has_amx() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return all(f" {x}" in flags for x in ("amx_bf16", "amx_tile", "avx512_bf16"))


class AmxZoo(nn.Module):
    """GEMMs big enough for the AMX path: a 1x1 conv (packed weights as A, activations as a
    row-major B), a 3x3 conv (im2col strips), linears on 96 tokens (activations as A, packed
    weights as B) with a residual and GELU."""

    def __init__(self) -> None:
        super().__init__()
        self.pw = nn.Conv2d(96, 160, 1)
        self.c3 = nn.Conv2d(160, 96, 3, stride=2, padding=1)
        self.fc1 = nn.Linear(96, 384)
        self.fc2 = nn.Linear(384, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c3(F.relu(self.pw(x)))  # [1, 96, 10, 10]
        t = y.flatten(2).transpose(1, 2)  # [1, 100, 96]
        return t + self.fc2(F.gelu(self.fc1(t)))


@pytest.mark.skipif(not _has_amx(), reason="no AMX-BF16 on this CPU")
def test_amx_path_matches_eager(tmp_path) -> None:
    """Where the CPU has AMX, "amx" is the ISA chosen by default and its bf16x3 GEMMs match eager
    within 1e-4 of the largest output; EMBER_CPU_ISA=avx512f keeps every product in f32 FMAs
    (closer still). The two runs differ, so the AMX path did run (kernel-level bounds:
    tests/c/test_cpu_ukernels.c test_gemm_amx)."""
    torch.manual_seed(0)
    m = AmxZoo().eval()
    x = torch.randn(1, 96, 20, 20)
    prog = ember.export(m, (x,), backend="cpu")
    assert _n_delegates(prog) >= 1
    with torch.inference_mode():
        want = m(x)
    outs = _run_per_isa(prog, x, tmp_path, ("amx", "avx512f", None), threads=2)
    scale = want.abs().max().item()
    torch.testing.assert_close(outs["amx"], want, rtol=0, atol=1e-4 * scale)
    torch.testing.assert_close(outs["avx512f"], want, rtol=0, atol=1e-5 * scale)
    assert torch.equal(outs[None], outs["amx"])  # the default is AMX
    assert not torch.equal(outs["amx"], outs["avx512f"])


class SmallMaps(nn.Module):
    """Convs on maps of fewer than 64 pixels that store bf16-pair weights (EMC_CONV_PAIRS): a
    stride-2 3x3 into 7x7 (im2col from the padded input), a 1x1 with a residual and ReLU (B read
    in place), a 3x3 on a 5x9 map with ragged rows (200 = 6.25 x 32), pixels (45) and depth
    (252, not a multiple of 16); and one that does not qualify (too little work)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(64, 512, 3, stride=2, padding=1)
        self.proj = nn.Conv2d(512, 520, 1)
        self.skip = nn.Conv2d(512, 520, 1, bias=False)
        self.head = nn.Conv2d(520, 28, 1)
        self.wide = nn.Conv2d(28, 200, 3, padding=1)
        self.tiny = nn.Conv2d(200, 8, 1)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.down(x))
        y = F.relu(self.proj(y) + self.skip(y))
        u = self.wide(F.interpolate(self.head(y), size=(5, 9)) + z)
        return self.tiny(F.relu(u))


def test_conv_pairs_match_eager(tmp_path) -> None:
    """Convs on small maps carry their weights a second time as bf16 pairs; the AMX path runs
    them from the pairs (four bf16 products each: the whole product but for the pairs' own
    rounding, ~2^-17), every other configuration from the f32 panels. Both match eager within
    1e-4 of the largest output at 1, 2 and 3 threads; the two differ where AMX ran (kernel-level
    bounds: tests/c/test_cpu_ukernels.c test_gemm_amx)."""
    torch.manual_seed(0)
    m = SmallMaps().eval()
    inputs = (torch.randn(1, 64, 14, 14), torch.randn(1, 28, 5, 9))
    prog = ember.export(m, inputs, backend="cpu", target="x86-64")
    ips = _conv_ops(prog.buffer, every_blob=True)
    with_pairs = [ip for ip in ips if ip[PAIRS] > 0]
    assert len(with_pairs) == 4, ips  # down, proj, skip, wide
    assert any(ip[PAIRS] == 0 for ip in ips)
    with torch.inference_mode():
        want = m(*inputs)
    scale = want.abs().max().item()
    for th in (1, 2, 3):
        got = _run(prog, inputs, th)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4 * scale)
    if not _has_amx():
        return
    outs = {isa: _run_with_isa(tmp_path, prog, inputs, isa) for isa in ("amx", "avx512f")}
    torch.testing.assert_close(outs["amx"], want, rtol=0, atol=1e-4 * scale)
    torch.testing.assert_close(outs["avx512f"], want, rtol=0, atol=1e-5 * scale)
    assert not torch.equal(outs["amx"], outs["avx512f"])


def _run_with_isa(tmp_path, prog: ember.Program, inputs: tuple, isa: str) -> torch.Tensor:
    """prog's output at 2 threads in a fresh process whose runtime runs `isa`
    (EMBER_CPU_ISA: the ISA is chosen once a process)."""
    pte, xs, out = tmp_path / "m.pte", tmp_path / "x.pt", tmp_path / f"{isa}.pt"
    prog.save(pte)
    torch.save(inputs, xs)
    code = (
        "import torch; from ember.runtime import RuntimeProgram;"
        f"x = torch.load({str(xs)!r});"
        f"p = RuntimeProgram(open({str(pte)!r}, 'rb').read(), threads=2);"
        f"torch.save(p.run('forward', list(x))[0], {str(out)!r})"
    )
    env = dict(os.environ, EMBER_CPU_ISA=isa)
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return torch.load(out)


def _check_amx_and_fma(tmp_path, m: nn.Module, prog: ember.Program, inputs: tuple) -> None:
    """prog matches eager within 1e-4 of the largest output at 1-3 threads; where the CPU has
    AMX, its AMX and FMA-only runs both do (FMA within 1e-5) and differ (the AMX path ran)."""
    with torch.inference_mode():
        want = m(*inputs)
    scale = want.abs().max().item()
    for th in (1, 2, 3):
        torch.testing.assert_close(_run(prog, inputs, th), want, rtol=0, atol=1e-4 * scale)
    if not _has_amx():
        return
    outs = {isa: _run_with_isa(tmp_path, prog, inputs, isa) for isa in ("amx", "avx512f")}
    torch.testing.assert_close(outs["amx"], want, rtol=0, atol=1e-4 * scale)
    torch.testing.assert_close(outs["avx512f"], want, rtol=0, atol=1e-5 * scale)
    assert not torch.equal(outs["amx"], outs["avx512f"])


class TransposedPairs(nn.Module):
    """Convs on a 7x7 map stored transposed (deep K, few pixels) and with bf16 pairs: a 1x1
    read in place and a 3x3 through an im2col (depth 864, 100 channels: ragged panels); on the
    AMX path all split K over the threads, and the last (64 rows: two tiles, fewer than 3
    threads) sums the partials by blocks, the others by tiles."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(520, 96, 1)
        self.c2 = nn.Conv2d(96, 100, 3, padding=1)
        self.c3 = nn.Conv2d(100, 64, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c3(F.relu(self.c2(F.relu6(self.c1(x)))))


def test_transposed_convs_with_pairs(tmp_path) -> None:
    """Transposed convs that also store bf16 pairs run untransposed from the pairs on the AMX
    path and transposed from the f32 panels elsewhere: both match eager at 1-3 threads, batch
    2, and differ from each other (the AMX path ran)."""
    torch.manual_seed(0)
    m = TransposedPairs().eval()
    inputs = (torch.randn(2, 520, 7, 7),)
    prog = ember.export(m, inputs, backend="cpu", target="x86-64")
    ips = _conv_ops(prog.buffer)
    assert len(ips) == 3 and all(ip[12] == 1 and ip[PAIRS] > 0 for ip in ips), ips
    _check_amx_and_fma(tmp_path, m, prog, inputs)


class ShallowExpand(nn.Module):
    """MobileNetV2-like expansions: 16 -> 96 on 56x56 (depth 16, 4.8M multiply-adds: pairs),
    a stride-2 depthwise conv, 96 -> 192 on 28x28 (25 strips of 32: groups of unequal count
    before they were balanced), 192 -> 32 (too few rows: no pairs) and 16 -> 72 on 14x14 (too
    little work: no pairs)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(16, 96, 1)
        self.dw = nn.Conv2d(96, 96, 3, stride=2, padding=1, groups=96)
        self.c2 = nn.Conv2d(96, 192, 1)
        self.c3 = nn.Conv2d(192, 32, 1)
        self.c4 = nn.Conv2d(16, 72, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c3(F.relu6(self.c2(F.relu6(self.dw(F.relu6(self.c1(x)))))))
        return y.mean((2, 3)) + self.c4(x[:, :, :14, :14]).mean((2, 3))[:, :32]


def test_shallow_convs_with_pairs(tmp_path) -> None:
    """Convs of depth 16-63 store bf16 pairs from 4M multiply-adds; strips split into equal
    groups per thread. AMX and FMA runs both match eager at 1-3 threads and differ (AMX ran)."""
    torch.manual_seed(0)
    m = ShallowExpand().eval()
    inputs = (torch.randn(1, 16, 56, 56),)
    prog = ember.export(m, inputs, backend="cpu", target="x86-64")
    pairs = [ip[PAIRS] > 0 for ip in _conv_ops(prog.buffer) if not ip[9]]  # not depthwise
    assert pairs == [True, True, False, False], pairs
    _check_amx_and_fma(tmp_path, m, prog, inputs)


def test_pairs_follow_the_target() -> None:
    """bf16 pairs are stored for x86-64 (and for this host when it has AMX), never for aarch64:
    the portable panels alone run there."""
    mod = nn.Conv2d(128, 128, 1).eval()
    x = torch.randn(1, 128, 14, 14)
    with_pairs = {}
    for target in ("x86-64", "aarch64", None):
        (ip,) = _conv_ops(ember.export(mod, (x,), backend="cpu", target=target).buffer)
        with_pairs[target] = ip[PAIRS] > 0
    assert with_pairs == {"x86-64": True, "aarch64": False, None: _has_amx()}


def test_bf16_pairs_layout() -> None:
    """The exporter's pairs: hi the nearest bf16 (ties to even), lo the nearest bf16 of the rest,
    tiles of [16 rows][16 k], zero padding to 32 rows and 16 k."""
    import numpy as np

    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 20)).astype(np.float32)
    words = P._bf16_pairs(w).view(np.uint32)
    assert words.size == 64 * 32
    tiles = words.reshape(4, 2, 16, 16).transpose(0, 2, 1, 3).reshape(64, 32)
    hi = (tiles & 0xFFFF) << 16
    lo = tiles & 0xFFFF0000
    back = hi.view(np.float32).astype(np.float64) + lo.view(np.float32)
    assert np.all(tiles[40:] == 0) and np.all(tiles[:, 20:] == 0)
    err = np.abs(back[:40, :20] - w) / np.abs(w)
    assert err.max() < 2.0**-16, err.max()
    ref_hi = torch.from_numpy(w).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(hi[:40, :20].view(np.float32), ref_hi)


def test_blob_pairs_field_is_checked() -> None:
    """A conv whose bf16-pair slot names a missing tensor, a non-constant or one of the wrong
    size, or that claims to be transposed (its weights are then the wrong size), fails at load."""
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Conv2d(64, 512, 1)).eval()
    x = torch.randn(1, 64, 14, 14)  # untransposed (a 7x7 map would run transposed)
    buf = ember.export(mod, (x,), backend="cpu", target="x86-64").buffer
    assert _load_and_run(buf, x) == "ok"
    at, _ = _blob_span(buf)
    ops_off = struct.unpack_from("<Q", buf, at + 40)[0]
    ip_at = at + ops_off + 32
    pairs = struct.unpack_from("<i", buf, ip_at + 4 * PAIRS)[0]
    assert pairs > 0
    x_id, _, bias_id = struct.unpack_from("<3i", buf, at + ops_off + 8)
    for slot, val in [(PAIRS, x_id + 1), (PAIRS, 9999), (PAIRS, -3), (PAIRS, bias_id + 1), (12, 1)]:
        bad = bytearray(buf)
        struct.pack_into("<i", bad, ip_at + 4 * slot, val)
        assert _load_and_run(bytes(bad), x) != "ok", (slot, val)
