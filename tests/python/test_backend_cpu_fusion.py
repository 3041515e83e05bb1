"""EmberCpuBackend (ember.export(..., backend="cpu")):
fused runs (residuals, plane means, expand-depthwise-project and
conv-pool bands, gates, Winograd) match eager and are chosen only where valid.

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
    ATOL,
    IN_SCALE,
    PAIRS,
    RTOL,
    WINO,
    WINO_SLOTS,
    SqueezeExcite,
    _assert_fused_same_as_apart,
    _blob_span,
    _check_model,
    _conv_ops,
    _load_and_run,
    _op_table,
    _run,
    _runtime,
)
from torch import nn

import ember
import ember.backends.cpu.partition as P


class ResidualZoo(nn.Module):
    """A residual add after every kind of conv and GEMM: Winograd (3x3 on 28x28), im2col (3x3
    stride 2 on a downsample branch computed after the main path), pointwise 1x1, transposed
    (7x7 map, 48 channels, K >= 256), linear over rows, linear over one row (the GEMV path); a
    depthwise conv's add stays a separate op."""

    def __init__(self) -> None:
        super().__init__()
        self.wino = nn.Conv2d(24, 24, 3, padding=1)
        self.main = nn.Conv2d(24, 40, 3, stride=2, padding=1)
        self.down = nn.Conv2d(24, 40, 1, stride=2)
        self.pw = nn.Conv2d(40, 40, 1)
        self.dw = nn.Conv2d(40, 40, 3, padding=1, groups=40)
        self.to7 = nn.Conv2d(40, 48, 2, stride=2)
        self.t = nn.Conv2d(48, 48, 3, padding=1)
        self.fc = nn.Linear(49, 49)
        self.head = nn.Linear(48, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.wino(x) + x)
        y = self.main(x)
        x = F.relu(y + self.down(x))  # the residual comes after the conv
        x = x + self.pw(x)
        x = F.relu6(self.dw(x) + x)
        x = self.to7(x)
        x = F.relu(self.t(x) + x)
        x = x.flatten(2)  # [1, 48, 49]
        x = F.gelu(x + self.fc(x))
        v = x.mean(2)
        return v + self.head(v)


@pytest.mark.parametrize("size", [40, 9])
def test_plane_means_fused(size: int) -> None:
    """The SE pooling (a mean over a depthwise conv's planes) is taken by the conv as it writes
    each plane (its out[1]; the banded split at 40 rows takes the means after the bands)."""
    torch.manual_seed(0)
    prog = _check_model(SqueezeExcite(), (torch.randn(2, 24, size, size),), threads=(1, 2, 3))
    _, recs = _op_table(prog.buffer)
    assert not any(r[0] == 7 for r in recs), recs  # no mean operator left
    assert sum(r[0] == 1 and r[7] >= 0 for r in recs) == 1  # one conv with out[1]


class SmallMapDw(nn.Module):
    """A depthwise conv (with a bias, hardswish, and its planes' means feeding a channel gate)
    whose output plane is at most 64 pixels: the CPU backend's 16-channel kernel where the ISA
    has one (AVX-512)."""

    def __init__(self, c: int, k: int, stride: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, k, stride, k // 2, groups=c)
        self.fc = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.dw(x))
        return y * torch.sigmoid(self.fc(y.mean((2, 3), keepdim=True)))


@pytest.mark.parametrize(
    "c, k, stride, size",
    [
        (40, 5, 1, 7),  # MobileNetV3's 7x7 layers: 16 + 16 + 8 channels
        (16, 3, 1, 7),  # MobileNetV2's
        (24, 5, 2, 14),  # the stride-2 layers into 7x7
        (24, 3, 2, 13),  # an odd plane
        (17, 3, 1, 5),  # 5 output columns: the 4-wide runs, one channel past a block
    ],
)
def test_small_map_depthwise(c: int, k: int, stride: int, size: int) -> None:
    """Depthwise convs with small output planes, 16 channels at a time, at 1-3 threads and batch
    2: as eager and the portable kernels compute them, the planes' means too."""
    torch.manual_seed(0)
    _check_model(SmallMapDw(c, k, stride), (torch.randn(2, c, size, size),), threads=(1, 2, 3))


class ExpandDw(nn.Module):
    """An inverted residual block: 1x1 expansion, depthwise conv, 1x1 projection (plus the input
    at stride 1); with `side`, a second reader of the wide tensor (a strided 1x1 conv added to
    the output)."""

    def __init__(self, ce: int, k: int, stride: int, side: bool = False) -> None:
        super().__init__()
        self.expand = nn.Conv2d(8, ce, 1)
        self.dw = nn.Conv2d(ce, ce, k, stride, k // 2, groups=ce)
        self.project = nn.Conv2d(ce, 8, 1)
        self.side = nn.Conv2d(ce, 8, 1, stride) if side else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = F.relu6(self.expand(x))
        y = self.project(F.relu6(self.dw(t)))
        if self.dw.stride == (1, 1):
            y = y + x  # the block's residual, as MobileNetV2's stride-1 blocks have
        return y + self.side(t) if self.side is not None else y


def _profiled_ops(prog: ember.Program, x: torch.Tensor, threads: int, tmp_path) -> int:
    """How many operator lines EMBER_CPU_PROFILE prints for one run (a fused pair prints one)."""
    pte = tmp_path / "m.pte"
    prog.save(pte)
    torch.save(x, tmp_path / "x.pt")
    code = (
        "import torch; from ember.runtime import RuntimeProgram; from ember._lib import lib;"
        "lib().em_log_set_level(ord('I'));"
        f"x = torch.load({str(tmp_path / 'x.pt')!r});"
        f"RuntimeProgram(open({str(pte)!r}, 'rb').read(), threads={threads}).run('forward', [x])"
    )
    env = dict(os.environ, EMBER_CPU_PROFILE="1")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stderr.count("emc op ")


@pytest.mark.parametrize(
    "ce, k, stride, size, lines",
    [
        (96, 3, 1, 96, 1),
        (96, 3, 2, 91, 2),
        (80, 5, 1, 100, 1),
        (128, 5, 2, 80, 2),
        (48, 3, 1, 100, 2),  # a 1.9 MB expansion runs alone, the depthwise + projection together
    ],
)
def test_expand_depthwise_project_run_in_bands(
    ce: int, k: int, stride: int, size: int, lines: int, tmp_path
) -> None:
    """A depthwise conv runs band by band with the 1x1 conv before it and the one after it when
    only it reads the first's output and only the second reads its own (the expansion's output
    3 MB and up, the depthwise conv's 1 MB; cpu_op_chain.c: emc_fuse_chain, emc_run_chain), at 1 to
    3 threads; the results match eager and the portable kernels, and the profile shows the chain
    as one operator (stride 2: the depthwise output is too small, so the projection runs on its
    own; a smaller expansion runs on its own, the pair after it together)."""
    torch.manual_seed(0)
    m = ExpandDw(ce, k, stride)
    x = torch.randn(1, 8, size, size)
    prog = _check_model(m, (x,), threads=(1, 2, 3))
    for th in (1, 2):
        assert _profiled_ops(prog, x, th, tmp_path) == lines


def test_stem_then_depthwise_and_project_in_bands(tmp_path) -> None:
    """MobileNetV2's first block: a 3x3 stem conv, then a depthwise conv and the 1x1 conv that
    alone reads its 1.3 MB output, run together (the stem stays on its own)."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1),
        nn.ReLU6(),
        nn.Conv2d(32, 32, 3, 1, 1, groups=32),
        nn.ReLU6(),
        nn.Conv2d(32, 16, 1),
    )
    x = torch.randn(1, 3, 200, 200)
    prog = _check_model(m, (x,), threads=(1, 2, 3))
    assert _profiled_ops(prog, x, 2, tmp_path) == 2


def test_expand_output_read_twice_is_not_fused(tmp_path) -> None:
    """The wide tensor is never whole when fused, so a second reader keeps the pair apart."""
    torch.manual_seed(0)
    m = ExpandDw(96, 3, 2, side=True)
    x = torch.randn(1, 8, 91, 91)
    prog = _check_model(m, (x,), threads=(1, 2))
    assert _profiled_ops(prog, x, 2, tmp_path) == 4


@pytest.mark.parametrize(
    "cin, co, k, stride, pool, size",
    [
        (3, 64, 7, 2, (3, 2, 1, False), (224, 224)),  # ResNet's stem: one conv row shared
        (8, 32, 3, 1, (2, 2, 0, False), (97, 101)),  # no conv rows shared between bands
        (4, 48, 5, 2, (3, 1, 1, False), (170, 166)),  # two rows shared
        (6, 40, 3, 2, (3, 2, 1, True), (183, 175)),  # ceil mode: the last window hangs over
    ],
)
def test_conv_then_max_pool_in_bands(
    cin: int, co: int, k: int, stride: int, pool: tuple, size: tuple, tmp_path
) -> None:
    """A conv (too deep for the few-channel direct kernel) whose 1 MB+ output only the max pool
    after it reads runs with it in bands of pooled rows (cpu_op_chain.c: cpool_run), the conv rows
    two bands share carried from one to the next; at 1 to 3 threads the results match eager and
    the portable kernels, NaN where eager's are, and the profile shows the pair as one
    operator."""
    torch.manual_seed(0)
    pk, ps, pp, ceil = pool
    m = nn.Sequential(
        nn.Conv2d(cin, co, k, stride, k // 2), nn.ReLU(), nn.MaxPool2d(pk, ps, pp, ceil_mode=ceil)
    )
    x = torch.randn(1, cin, *size)
    prog = _check_model(m, (x,), threads=(1, 2, 3))
    # Where the exporter stored the conv's weights as bf16 pairs too (a host with AMX: the
    # ResNet stem qualifies), the AMX path takes the conv and the pair stays two operators.
    pairs = any(ip[PAIRS] > 0 for ip in _conv_ops(prog.buffer))
    for th in (1, 2):
        assert _profiled_ops(prog, x, th, tmp_path) == (2 if pairs else 1)
    x[0, 1, size[0] // 2, size[1] // 3] = float("nan")
    with torch.inference_mode():
        want = m.eval()(x)
    assert want.isnan().any()
    for th in (1, 3):
        torch.testing.assert_close(_run(prog, (x,), th), want, rtol=RTOL, atol=ATOL, equal_nan=True)


def test_pool_geometry_is_checked() -> None:
    """A max pool record whose padding exceeds half its window, or whose output side does not
    follow from its input, window, stride and padding, fails at load (the conv + pool chain
    sizes its bands from them)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(8, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
    x = torch.randn(1, 8, 100, 100)
    buf = ember.export(m.eval(), (x,), backend="cpu").buffer
    _runtime()(buf).run("forward", [x])  # the unmodified blob loads and runs
    base, recs = _op_table(buf)
    i = next(j for j, r in enumerate(recs) if r[0] == 5)
    # ip slots: kh 0, kw 1, sh 2, sw 3, ph 4, pw 5
    for slot, val in [(4, 2), (5, 9), (2, 3), (0, 7)]:
        bad = bytearray(buf)
        struct.pack_into("<i", bad, base + 160 * i + 32 + 4 * slot, val)
        with pytest.raises(Exception, match="pool"):
            _runtime()(bytes(bad)).run("forward", [x])


class ConvPoolAndMean(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 32, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.relu(self.conv(x))
        return F.max_pool2d(y, 3, 2, 1), y * 0.5


def test_conv_output_read_twice_is_not_pooled_in_bands(tmp_path) -> None:
    """The conv's output is never whole when run with the pool, so a second reader keeps them
    apart (each runs on its own and both results match eager)."""
    torch.manual_seed(0)
    m = ConvPoolAndMean()
    x = torch.randn(1, 8, 100, 100)
    prog = ember.export(m.eval(), (x,), backend="cpu")
    with torch.inference_mode():
        want = m(x)
    for th in (1, 2):
        got = _runtime()(prog.buffer, threads=th).run("forward", [x])
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)
    assert _profiled_ops(prog, x, 2, tmp_path) == 3


def _ops(buf: bytes) -> list[tuple[int, int, int]]:
    """(kind, act, in[3]) of every operator in the program's first EMC blob."""
    return [(r[0], r[1], r[5]) for r in _op_table(buf)[1]]


def test_residual_fusion() -> None:
    torch.manual_seed(0)
    m = ResidualZoo()
    prog = _check_model(m, (torch.randn(1, 24, 28, 28),), threads=(1, 2, 3))
    ops = _ops(prog.buffer)
    fused = [(kind, act) for kind, act, res in ops if res >= 0]
    # 6 convs (Winograd, im2col, 1x1, transposed; the depthwise one not) and 2 GEMMs took their
    # add: relu (clamp 1), none, clamp, gelu (5), none.
    assert sorted(fused) == sorted([(1, 1), (1, 1), (1, 0), (1, 1), (2, 5), (2, 0)]), ops
    assert sum(kind == 3 for kind, _, _ in ops) == 1, ops  # the depthwise conv's add
    convs = _conv_ops(prog.buffer)
    assert any(ip[13] for ip in convs) and any(ip[12] for ip in convs)  # Winograd, transposed
    # A NaN propagates through every kernel's clamp as in eager (max / min with the NaN as the
    # operand x86 returns; the reverse order turned it into the clamp bound).
    x = torch.randn(1, 24, 28, 28)
    x[0, 3, 5, 9] = float("nan")
    with torch.inference_mode():
        want = m(x)
    assert want.isnan().any()
    for th in (1, 2):
        torch.testing.assert_close(_run(prog, (x,), th), want, rtol=RTOL, atol=ATOL, equal_nan=True)


class Permuted(nn.Module):
    def __init__(self, dims: tuple) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).permute(*self.dims).contiguous() * 2.0


@pytest.mark.parametrize(
    "dims", [(0, 1, 3, 2), (1, 0, 3, 2), (0, 2, 3, 1), (3, 2, 1, 0), (2, 0, 1, 3)]
)
def test_permute(dims: tuple) -> None:
    """Permutes, transposes of the last two dims among them, exactly as eager at 1-3 threads."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 37, 21)
    prog = _check_model(Permuted(dims), (x,), threads=(1, 2, 3))
    assert 10 in [r[0] for r in _op_table(prog.buffer)[1]]  # EMC_OP_PERMUTE
    want = Permuted(dims)(x)
    for th in (1, 2, 3):
        assert torch.equal(_run(prog, (x,), th), want)


class ClonedResidual(nn.Module):
    """A clone between a linear layer and its residual add (Hugging Face's dropout in eval), and
    one whose result is read twice (its add then stays an op of its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(24, 24), nn.Linear(24, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc1(x).clone() + x
        z = self.fc2(y).clone()
        return F.relu(z + y) * z


def test_copy_does_not_hide_a_producer() -> None:
    torch.manual_seed(0)
    prog = _check_model(ClonedResidual(), (torch.randn(1, 7, 24),))
    ops = _ops(prog.buffer)
    # fc1 took its add as a residual through the clone; fc2's output is read twice, so its add
    # and the product stay binary ops (kind 3).
    assert [(k, res >= 0) for k, _, res in ops if k == 2] == [(2, True), (2, False)], ops
    assert sum(k == 3 for k, _, _ in ops) == 2, ops


class GatedConv(nn.Module):
    """A depthwise conv, a squeeze-and-excitation gate over it, and a 1x1 conv of the gated map
    (MobileNetV3's block); ``use``: what else reads the map (``"res"``: the block input is added
    after the 1x1 conv; ``"map"`` / ``"product"``: the ungated map / the product is added)."""

    def __init__(self, c: int, co: int, use: str = "") -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.fc1, self.fc2 = nn.Conv2d(c, 8, 1), nn.Conv2d(8, c, 1)
        self.pw = nn.Conv2d(c, co, 1)
        self.use = use

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.dw(x))
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        p = y * s
        z = self.pw(p)
        extra = {"res": x, "map": y, "product": p}.get(self.use)
        return z if extra is None else z + extra


@pytest.mark.parametrize(
    ("c", "co", "size", "use"),
    [
        (40, 24, 14, ""),  # the FMA GEMM: rows scaled as they are copied
        (24, 24, 14, "res"),  # ... with a residual
        (96, 128, 16, ""),  # big enough for the AMX path (bf16-pair weights), rows scaled too
        (288, 96, 7, ""),  # transposed (7x7, K >= 256): scaled in place first
        (4, 8, 10, ""),  # the stem kernel (<= 4 channels): in place
        (16, 16, 1, ""),  # a 1x1 map (the panel GEMV): in place
        (24, 24, 9, "map"),  # the ungated map is read again: not fused
        (24, 24, 9, "product"),  # the product is read again: not fused
    ],
)
def test_gate_fused_into_next_conv(c: int, co: int, size: int, use: str) -> None:
    """An SE gate's product x * s feeding a 1x1 conv becomes the conv's input scale
    (EMC_CONV_IN_SCALE; no multiply operator left) on every conv path, batch 2, 1-3 threads;
    where the map or the product is read by anything else it stays a multiply."""
    torch.manual_seed(0)
    prog = _check_model(GatedConv(c, co, use), (torch.randn(2, c, size, size),), threads=(1, 2, 3))
    kinds = [r[0] for r in _op_table(prog.buffer)[1]]
    scaled = [ip for ip in _conv_ops(prog.buffer) if ip[IN_SCALE]]
    fused = use in ("", "res")
    assert len(scaled) == int(fused), scaled
    assert kinds.count(3) == (0 if fused else 1), kinds  # the multiply (residual adds fuse)


def test_blob_in_scale_field_is_checked() -> None:
    """An input scale naming a missing tensor or one of the wrong size, on a 3x3 conv, or with
    the conv's input outside the arena, fails at load."""
    torch.manual_seed(0)
    x = torch.randn(1, 24, 9, 9)
    buf = ember.export(GatedConv(24, 16), (x,), backend="cpu").buffer
    assert _load_and_run(buf, x) == "ok"
    at, _ = _blob_span(buf)
    n_ops = struct.unpack_from("<I", buf, at + 12)[0]
    ops_off = struct.unpack_from("<Q", buf, at + 40)[0]
    rec = next(
        at + ops_off + 160 * i
        for i in range(n_ops)
        if struct.unpack_from("<I", buf, at + ops_off + 160 * i)[0] == 1
        and struct.unpack_from("<i", buf, at + ops_off + 160 * i + 32 + 4 * IN_SCALE)[0] > 0
    )
    x_id, w_id = struct.unpack_from("<2i", buf, rec + 8)
    for field, val in [
        (32 + 4 * IN_SCALE, 9999),  # no such tensor
        (32 + 4 * IN_SCALE, -2),  # negative
        (32 + 4 * IN_SCALE, w_id + 1),  # the weights: wrong size
        (32 + 4 * IN_SCALE, x_id + 1),  # the input itself: wrong size, shares storage
        (32 + 4, 3),  # kh = 3
        (8, 0),  # the input is the delegate's first input (not arena)
    ]:
        bad = bytearray(buf)
        struct.pack_into("<i", bad, rec + field, val)
        assert _load_and_run(bytes(bad), x) != "ok", (field, val)


@pytest.mark.parametrize(
    "ci, co, h, w, pad, act, batch, m",
    [
        (16, 16, 28, 28, 1, nn.ReLU(), 1, 4),  # 49 tiles: one block
        (64, 64, 56, 56, 1, nn.ReLU6(), 1, 4),  # 4 blocks, the last of 4 tiles
        (16, 19, 92, 90, 1, nn.GELU(), 1, 4),  # 529 tiles: a range of blocks per thread
        (24, 40, 30, 17, 1, None, 2, 2),  # 40 tiles of 4x4, 135 of 2x2; batch 2
        (16, 32, 15, 15, 2, nn.ReLU(), 1, 2),  # pad 2: 17x17 out, odd edge tiles
        (20, 24, 31, 33, 0, None, 1, 4),  # no padding, 29x31 out: ragged right and bottom
        (256, 256, 14, 14, 1, None, 1, -2),  # ResNet layer3: 49 tiles, transposed
        (256, 256, 16, 16, 1, nn.ReLU(), 1, -2),  # 64 tiles: the most transposed takes
        (256, 272, 17, 17, 1, None, 1, 2),  # 81 tiles: untransposed, K over two K blocks
        (128, 160, 14, 14, 1, None, 1, 2),  # 49 tiles but under 256 channels: untransposed
        (512, 512, 7, 7, 1, nn.ReLU(), 1, -2),  # ResNet layer4: 16 tiles, transposed (-m)
        (256, 280, 10, 9, 1, None, 2, -2),  # 25 tiles, ragged Co (280 = 17.5 panels); batch 2
        (300, 260, 6, 6, 0, nn.ReLU6(), 1, -2),  # 4x4 out: 4 tiles: direct
    ],
)
def test_winograd_convs(
    ci: int, co: int, h: int, w: int, pad: int, act, batch: int, m: int, monkeypatch
) -> None:
    """3x3 stride-1 convs run as Winograd F(m x m, 3 x 3): output tiles crossing the map's edges,
    one and many blocks of 64 tiles, both thread splits, fused activations, batch > 1. F(4x4)
    loses a little accuracy, so the bound is 1e-4 of the largest output (the issue's criterion),
    against eager and against the portable kernels. The transposed F(2x2) (-m) is forced on
    (WINO_SMALL): by default the exporter uses it only in files without bf16 pairs."""
    monkeypatch.setattr(P.packing, "WINO_SMALL", True)
    torch.manual_seed(0)
    layers = [nn.Conv2d(ci, co, 3, padding=pad)] + ([act] if act is not None else [])
    mod = nn.Sequential(*layers).eval()
    x = torch.randn(batch, ci, h, w)
    with torch.inference_mode():
        want = mod(x)
    prog = ember.export(mod, (x,), backend="cpu")
    (ip,) = _conv_ops(prog.buffer)
    tiles = -(-(h + 2 * pad - 2) // 2) * -(-(w + 2 * pad - 2) // 2)
    if m < 0 and tiles < 9:
        assert ip[WINO] == 0  # too few tiles even transposed
    else:
        assert ip[WINO] == abs(m) and ip[WINO_SLOTS] >= 1
        assert ip[12] == (m < 0)  # EMC_CONV_TRANSPOSED
    plain = _run(ember.export(mod, (x,), backend=None), (x,))
    tol = 1e-4 * want.abs().max().item()
    for th in (1, 2):
        got = _run(prog, (x,), th)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=tol)
        torch.testing.assert_close(got, plain, rtol=1e-4, atol=tol)


def test_winograd_choice(monkeypatch) -> None:
    """Winograd only where it pays and is exact: 3x3, stride 1, undilated, ungrouped, >= 16
    channels; F(4x4) from 48 tiles of 4x4, F(2x2) from 48 tiles of 2x2; with 256+ channels in
    and out a transposed F(2x2) on 9 to 64 tiles of 2x2 (ResNet's 7x7 and 14x14 layers) when
    WINO_SMALL is on (by default only in files without bf16 pairs: with pairs the 7x7 layer runs
    direct on the AMX path, the 14x14 one untransposed); else direct."""
    mod = nn.Conv2d(512, 512, 3, padding=1).eval()
    x = torch.randn(1, 512, 7, 7)
    (ip,) = _conv_ops(ember.export(mod, (x,), backend="cpu", target="x86-64").buffer)
    assert ip[WINO] == 0 and ip[PAIRS] > 0
    (ip,) = _conv_ops(ember.export(mod, (x,), backend="cpu", target="aarch64").buffer)
    assert ip[WINO] == 2 and ip[12] == 1 and ip[PAIRS] == 0
    mod, x = nn.Conv2d(256, 256, 3, padding=1).eval(), torch.randn(1, 256, 14, 14)
    (ip,) = _conv_ops(ember.export(mod, (x,), backend="cpu", target="x86-64").buffer)
    assert ip[WINO] == 2 and ip[12] == 0
    (ip,) = _conv_ops(ember.export(mod, (x,), backend="cpu", target="aarch64").buffer)
    assert ip[WINO] == 2 and ip[12] == 1
    monkeypatch.setattr(P.packing, "WINO_SMALL", True)
    cases = [
        (dict(in_channels=64, out_channels=64, padding=1), 56, 4),
        (dict(in_channels=128, out_channels=128, padding=1), 28, 4),
        (dict(in_channels=256, out_channels=256, padding=1), 14, 2),
        (dict(in_channels=256, out_channels=256, padding=1), 17, 2),
        (dict(in_channels=512, out_channels=512, padding=1), 7, 2),
        (dict(in_channels=512, out_channels=512, padding=1), 5, 2),
        (dict(in_channels=512, out_channels=512, padding=1), 4, 0),
        (dict(in_channels=128, out_channels=512, padding=1), 7, 0),
        (dict(in_channels=64, out_channels=64, padding=1, stride=2), 56, 0),
        (dict(in_channels=64, out_channels=64, padding=2, dilation=2), 56, 0),
        (dict(in_channels=64, out_channels=64, padding=1, groups=2), 56, 0),
        (dict(in_channels=3, out_channels=64, padding=1), 56, 0),
    ]
    for kw, size, m in cases:
        mod = nn.Conv2d(kernel_size=3, **kw).eval()
        prog = ember.export(mod, (torch.randn(1, kw["in_channels"], size, size),), backend="cpu")
        (ip,) = _conv_ops(prog.buffer)
        assert ip[WINO] == m, (kw, size)
        if m:  # transposed: 9 to 64 tiles of 2x2 with 256+ channels in and out
            wide = min(kw["in_channels"], kw["out_channels"]) >= 256
            assert ip[12] == (m == 2 and wide and (-(-size // 2)) ** 2 <= 64), (kw, size)


class SlicedBlock(nn.Module):
    """An inverted residual block on a small map: 1x1 expansion, depthwise conv, 1x1 projection,
    the residual where the shapes allow, and an optional activation after the projection."""

    def __init__(
        self, cin: int, ce: int, co: int, k: int, stride: int, act: str, post: str | None
    ) -> None:
        super().__init__()
        self.expand = nn.Conv2d(cin, ce, 1)
        self.dw = nn.Conv2d(ce, ce, k, stride, k // 2, groups=ce)
        self.project = nn.Conv2d(ce, co, 1)
        self.act = nn.Hardswish() if act == "hardswish" else nn.ReLU6()
        self.post = {"relu": nn.ReLU(), "hardswish": nn.Hardswish(), None: nn.Identity()}[post]
        self.res = stride == 1 and cin == co

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.act(self.dw(self.act(self.expand(x)))))
        return self.post(y + x if self.res else y)


@pytest.mark.parametrize(
    "cin, ce, co, k, stride, size, act, post, sliced",
    [
        (16, 96, 16, 3, 1, 14, "relu6", None, True),  # MobileNetV2's 14x14 blocks, residual
        (32, 192, 48, 3, 2, 28, "relu6", None, True),  # stride 2: a 7x7 projection
        (16, 100, 24, 3, 1, 14, "hardswish", None, True),  # halves of 48 and 52 channels
        (24, 88, 24, 3, 1, 28, "relu6", None, True),  # MobileNetV3-Small: halves of 42 and 46
        (32, 192, 32, 5, 1, 7, "hardswish", None, True),  # 7x7: 16-plane depthwise blocks
        (32, 288, 32, 3, 1, 7, "relu6", None, True),  # 7x7, K 288: the transposed projection
        (32, 288, 48, 3, 2, 14, "hardswish", "relu", True),  # ... a clamp after its sums
        (32, 288, 48, 3, 1, 7, "relu6", "hardswish", True),  # ... an activation after them
        (16, 72, 24, 3, 2, 56, "relu6", None, False),  # a 56x56 wide plane: one by one
        (16, 96, 16, 5, 1, 12, "relu6", "relu", True),  # a clamp after the sums and residual
        (16, 96, 16, 3, 1, 14, "relu6", "hardswish", True),  # an activation after them
        (8, 40, 8, 3, 1, 14, "relu6", None, True),  # halves of 18 and 22 channels
        (8, 10, 8, 3, 1, 14, "relu6", None, False),  # too few for two halves of 6-row panels
        (16, 96, 64, 3, 1, 14, "relu6", None, False),  # the 2nd half cannot hold its part
    ],
)
def test_small_map_blocks_sum_projection_in_halves(
    cin: int,
    ce: int,
    co: int,
    k: int,
    stride: int,
    size: int,
    act: str,
    post: str | None,
    sliced: bool,
    tmp_path,
    monkeypatch,
) -> None:
    """On maps too small for the banded chain, the projection after an expansion and a depthwise
    conv sums its depth in two halves of the wide channels (cpu_op_chain.c, emc_xsl_plan); with
    1 or 2 threads the three run as one chain, a half on each thread, with more one by one. The
    results match eager and the portable kernels at 1 to 4 threads, have the same bytes at every
    thread count and with chains off, and the profile shows the chain as one operator."""
    torch.manual_seed(0)
    m = SlicedBlock(cin, ce, co, k, stride, act, post)
    x = torch.randn(1, cin, size, size)
    prog = _check_model(m, (x,), threads=(1, 2, 3, 4))
    _assert_fused_same_as_apart(prog, (x,))
    one = _run(prog, (x,), 1)
    for th in (3, 4):
        assert torch.equal(_run(prog, (x,), th), one)
    monkeypatch.setenv("EMBER_CPU_THREADS_ADAPTIVE", "0")  # 3 threads: on the pool, not alone
    for th in (1, 2):
        assert _profiled_ops(prog, x, th, tmp_path) == (1 if sliced else 3)
    assert _profiled_ops(prog, x, 3, tmp_path) == 3
