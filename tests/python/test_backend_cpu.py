"""EmberCpuBackend (ember.export(..., backend="cpu")): delegated models match eager PyTorch and
the undelegated Ember run; every supported operator is delegated; malformed blobs are rejected
with an error, never a crash. Kernel-level tests are in tests/c/test_cpu_ukernels.c.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember
import ember.backends.cpu.partition as P
from ember.backends.delegate import DelegateInstr
from ember.passes.ir import KernelInstr

RTOL, ATOL = 1e-4, 1e-5


def _runtime():
    from ember.runtime import RuntimeProgram

    return RuntimeProgram


def _run(prog: ember.Program, inputs: tuple, threads: int = 1) -> torch.Tensor:
    return _runtime()(prog.buffer, threads=threads).run("forward", list(inputs))[0]


def _outside(prog: ember.Program) -> list[str]:
    ir = prog._irs["forward"]
    return [
        i.kernel
        for i in ir.instrs
        if isinstance(i, KernelInstr) and not isinstance(i, DelegateInstr)
    ]


def _n_delegates(prog: ember.Program) -> int:
    return sum(isinstance(i, DelegateInstr) for i in prog._irs["forward"].instrs)


def _check_model(
    m: nn.Module, inputs: tuple, *, outside_ok: int = 0, threads: tuple = (1, 2)
) -> ember.Program:
    m = m.eval()
    with torch.inference_mode():
        want = m(*inputs)
    prog = ember.export(m, inputs, backend="cpu")
    assert _n_delegates(prog) >= 1
    assert len(_outside(prog)) <= outside_ok, _outside(prog)
    for th in threads:
        got = _run(prog, inputs, th)
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    plain = _run(ember.export(m, inputs, backend=None), inputs)
    torch.testing.assert_close(got, plain, rtol=RTOL, atol=ATOL)
    return prog


def _seed_bn(m: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) * 0.2 - 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.rand(mod.num_features, generator=g) * 0.2 - 0.1)
    return m


class ConvZoo(nn.Module):
    """Every conv flavour, folded batch norm, each fused activation, pooling, residual adds."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.dw5 = nn.Conv2d(16, 16, 5, stride=2, padding=2, groups=16, bias=False)
        self.pw = nn.Conv2d(16, 26, 1)
        self.grouped = nn.Conv2d(26, 26, 3, padding=2, dilation=2, groups=2)
        self.rect = nn.Conv2d(26, 13, (3, 1), stride=(1, 2), padding=(1, 0))
        self.bn2 = nn.BatchNorm2d(13)
        self.fc = nn.Linear(13, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn(self.stem(x)))
        y = y + F.relu6(self.dw(y))
        y = F.hardswish(self.dw5(y))
        y = F.silu(self.pw(y)) * torch.sigmoid(y.mean(1, keepdim=True))
        y = F.gelu(self.grouped(y)) - 0.5
        y = self.bn2(F.hardtanh(self.rect(y), -0.5, 2.0))  # unfolded batch norm (affine)
        a = F.max_pool2d(y, 3, 2, 1)
        b = F.avg_pool2d(y, 3, 2, 1)
        y = a + b
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return F.hardsigmoid(self.fc(y))


@pytest.mark.parametrize("size", [17, 32])
def test_conv_zoo_matches_eager_and_portable(size: int) -> None:
    torch.manual_seed(0)
    m = _seed_bn(ConvZoo())
    prog = _check_model(m, (torch.randn(1, 3, size, size),), outside_ok=0)
    assert len(prog.buffer) > 0


@pytest.mark.parametrize(
    "k, stride, pad, dil, size",
    [
        (3, 1, 1, 1, 40),  # MobileNet's stride-1 3x3: 2 bands of 20 rows at 2 threads, 3 at 3
        (3, 2, 1, 1, 41),  # stride 2 over an odd plane
        (5, 2, 2, 1, 48),
        (5, 1, 2, 1, 37),
        (3, 1, 0, 1, 36),  # no padding: the last band's windows end at the plane's edge
        (3, 1, 2, 2, 38),  # dilated (the padded-copy kernel)
        (3, 2, 3, 1, 40),  # padding past the kernel: top windows all padding, no band split
    ],
)
def test_depthwise_bands(k: int, stride: int, pad: int, dil: int, size: int) -> None:
    """Depthwise convs at 2+ threads split into bands of output rows (each thread the same rows
    of every channel): every band boundary, stride, padding and the fallback to a channel
    split agree with eager and the portable kernels."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(24, 24, k, stride=stride, padding=pad, dilation=dil, groups=24), nn.ReLU6()
    )
    _check_model(m, (torch.randn(2, 24, size, size - 3),), threads=(1, 2, 3))  # batch 2


@pytest.mark.parametrize(
    "cin, cout, k, stride, pad, size",
    [
        (3, 16, 7, 2, 3, 45),  # a ResNet stem on an odd plane
        (8, 24, 3, 2, 1, 30),
        (4, 8, 5, 1, 2, 23),
        (3, 8, 3, 1, 0, 20),  # unpadded, too few channels for Winograd
        (6, 10, 2, 2, 0, 17),  # even kernel, the last column unused
        (5, 7, 4, 2, 2, 21),  # padding on both sides of an even kernel
    ],
)
def test_im2col_from_padded_input(
    cin: int, cout: int, k: int, stride: int, pad: int, size: int
) -> None:
    """Strided and padded convs take their im2col strips from a zero-padded (stride 2: even /
    odd column split) copy of the input: every parity, edge and padding agrees with eager."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=pad), nn.ReLU())
    _check_model(m, (torch.randn(1, cin, size, size + 2),), threads=(1, 2))


@pytest.mark.parametrize(
    "cin, cout, k, stride, pad, size, act",
    [
        (3, 16, 3, 2, 1, 64, nn.Hardswish),  # MobileNetV3's stem: one 16-channel block
        (3, 32, 3, 2, 1, 41, nn.ReLU6),  # MobileNetV2's: two blocks, an odd plane
        (1, 7, 3, 1, 1, 19, nn.ReLU),  # one channel, a ragged block, rows of 19
        (4, 40, 3, 2, 0, 36, nn.SiLU),  # unpadded, three blocks (the last of 8)
        (2, 5, 2, 1, 3, 17, nn.Identity),  # padding past the kernel: all-padding rows
        (3, 9, (1, 7), 1, (0, 3), 23, nn.GELU),  # a 1x7 kernel over 23 columns
    ],
)
def test_stem_convs(cin: int, cout: int, k, stride: int, pad, size: int, act) -> None:
    """Convs of at most 4 input channels and depth 36 run on the direct kernel (16 pixels x 16
    channels a step, bands of 8 rows over the threads): every block, band, edge and activation
    agrees with eager, batch 2, at 1-3 threads."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=pad), act())
    _check_model(m, (torch.randn(2, cin, size, size + 3),), threads=(1, 2, 3))


class SEGate(nn.Module):
    """A squeeze-and-excitation gate: its FCs are 1x1 convs of a 1x1 map (the panel GEMV)."""

    def __init__(self, c: int, r: int, groups: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(c, r, 1, groups=groups)
        self.fc2 = nn.Conv2d(r, c, 1, bias=False)
        self.fc3 = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(x.mean((2, 3), keepdim=True)))))
        return x * s + self.fc3(s)


@pytest.mark.parametrize(
    ("c", "r", "groups"),
    [(16, 8, 1), (144, 40, 1), (7, 5, 1), (576, 144, 1), (40, 20, 2), (301, 13, 1)],
)
def test_squeeze_excite_fcs(c: int, r: int, groups: int) -> None:
    """1x1 convs on 1x1 maps run as a GEMV per 6-row weight panel: depths around the kernel's
    8- and 16-step blocks, ragged last panels, grouped, with and without bias, relu and
    hardsigmoid after, batch 2, 1-3 threads."""
    torch.manual_seed(0)
    _check_model(SEGate(c, r, groups), (torch.randn(2, c, 5, 6),), threads=(1, 2, 3))


def test_deep_k_uses_k_blocks() -> None:
    """K > 256 (the GEMM's K block): partial sums across blocks, clamp and bias once."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(40, 19, 3, padding=1),
        nn.ReLU6(),
        nn.Conv2d(19, 300, 1),
        nn.Conv2d(300, 7, 1),
        nn.Flatten(),
        nn.Linear(7 * 25, 530),
        nn.GELU(),
        nn.Linear(530, 3),
    )
    _check_model(m, (torch.randn(1, 40, 5, 5),), threads=(1, 2))


class StripZoo(nn.Module):
    """Shapes for the GEMM driver's strip-by-strip paths: im2col built per strip (7x7 stride-2
    stem, dilated 3x3, 1x1 stride 2), 1x1 convs packed from the activations, pixel counts that
    are not multiples of the 48-column strip and strips that cross output rows, M not a
    multiple of 6, K over one K block, the separable max pool with ceil_mode."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 20, 7, stride=2, padding=3)
        self.c3 = nn.Conv2d(20, 70, 3, padding=2, dilation=2)
        self.pw = nn.Conv2d(70, 131, 1)
        self.down = nn.Conv2d(131, 50, 1, stride=2)
        self.fc = nn.Linear(50, 9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.stem(x))
        y = F.max_pool2d(y, 3, 2, 1, ceil_mode=True)
        y = F.relu6(self.c3(y))
        y = self.pw(y)
        y = F.max_pool2d(F.relu(self.down(y)), 2, 2)
        return self.fc(y.mean((2, 3)))


@pytest.mark.parametrize("size", [45, 70])
def test_gemm_strip_paths(size: int) -> None:
    torch.manual_seed(0)
    _check_model(StripZoo(), (torch.randn(1, 3, size, size),), threads=(1, 2))


class SmallMapZoo(nn.Module):
    """Convs on 7x7 maps with deep K, which run transposed (EMC_CONV_TRANSPOSED: pixels as the
    6-row side, output channels as the vector side): 49 pixels (not a multiple of 6), channel
    counts not a multiple of 16, K over one K block, stride 2, 1x1 read in place, clamp and a
    non-clamp activation, batch 2; and shallow-K and grouped convs on the same maps, which stay
    untransposed."""

    def __init__(self) -> None:
        super().__init__()
        self.c3 = nn.Conv2d(24, 64, 3, padding=1)
        self.down = nn.Conv2d(64, 88, 3, stride=2, padding=1)
        self.pw = nn.Conv2d(88, 300, 1)
        self.proj = nn.Conv2d(300, 56, 1)
        self.c3b = nn.Conv2d(56, 48, 3, padding=1, bias=False)
        self.grouped = nn.Conv2d(48, 48, 3, padding=1, groups=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.c3(x))
        y = F.relu6(self.down(y))
        y = F.gelu(self.pw(y))
        y = F.gelu(self.proj(y))
        y = self.c3b(y)
        return self.grouped(y)


def test_small_maps_run_transposed() -> None:
    from ember.backends.cpu.partition import _conv_transposed

    assert _conv_transposed(88, 49, 576) and _conv_transposed(56, 49, 300)
    assert _conv_transposed(48, 49, 504) and not _conv_transposed(300, 49, 88)
    assert not _conv_transposed(64, 14 * 14, 24 * 9) and not _conv_transposed(64, 56 * 56, 576)
    assert _conv_transposed(512, 49, 4608)  # ResNet's 7x7 layers
    torch.manual_seed(0)
    _check_model(SmallMapZoo(), (torch.randn(2, 24, 14, 14),), threads=(1, 2))


def test_wide_small_map_convs() -> None:
    """Shallow convs (K < 256) on 7x7 maps stay untransposed; at 2 threads a wide one's single
    im2col strip is built once as a whole matrix (the threads split M) instead of once per M
    block. The deep conv after it runs transposed."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(24, 520, 3, padding=1), nn.ReLU(), nn.Conv2d(520, 30, 3, padding=1))
    prog = _check_model(m, (torch.randn(1, 24, 7, 7),), threads=(1, 2))
    assert [ip[12] for ip in _conv_ops(prog.buffer)] == [0, 1]  # EMC_CONV_TRANSPOSED


@pytest.mark.parametrize(
    "k,s,p,ceil",
    [(3, 1, 1, False), (2, 2, 0, False), (3, 2, 1, True), (5, 2, 2, False), (3, 3, 0, True)],
)
def test_max_pool_rows(k: int, s: int, p: int, ceil: bool) -> None:
    """The separable max pool (vertical then horizontal maxes of whole rows with the ISA's vmax;
    stride 2 from even / odd columns) against eager, NaNs included (they propagate)."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 23, 37)
    x[0, 1, 4, 7] = x[1, 3, 0, 0] = x[1, 4, 22, 36] = float("nan")
    m = nn.Sequential(nn.Conv2d(5, 5, 1), nn.MaxPool2d(k, s, p, ceil_mode=ceil)).eval()
    with torch.inference_mode():
        want = m(x)
    prog = ember.export(m, (x,), backend="cpu")
    assert not _outside(prog)
    for th in (1, 2):
        torch.testing.assert_close(_run(prog, (x,), th), want, rtol=RTOL, atol=ATOL, equal_nan=True)


def test_row_split_gemms() -> None:
    """GEMMs whose activations A are deeper than the output is wide (K >= 2N) split over the
    threads by whole rows of A (one M block each; uneven at 2 threads: 4 + 3 tiles of 6 rows, and
    3 + 3 + 1 at 3) instead of by column strips: linears on tokens, and a transposed conv, whose
    A is its im2col (pixels as rows)."""
    torch.manual_seed(0)
    lin = nn.Sequential(nn.Linear(300, 70), nn.GELU(), nn.Linear(70, 20))
    _check_model(lin, (torch.randn(1, 37, 300),), threads=(1, 2, 3))
    conv = nn.Sequential(nn.Conv2d(40, 300, 1), nn.ReLU(), nn.Conv2d(300, 48, 3, padding=1))
    prog = _check_model(conv, (torch.randn(1, 40, 7, 7),), threads=(1, 2, 3))
    assert [ip[12] for ip in _conv_ops(prog.buffer)][-1] == 1  # EMC_CONV_TRANSPOSED


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


class SqueezeExcite(nn.Module):
    """MobileNetV3's depthwise conv + squeeze-and-excitation, on a map big enough for banded
    depthwise threads (40 rows) and one that is not."""

    def __init__(self, c: int = 24) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.fc1, self.fc2 = nn.Conv2d(c, 8, 1), nn.Conv2d(8, c, 1)
        self.pw = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.dw(x))
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return self.pw(y * s)


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
    3 MB and up, the depthwise conv's 1 MB; cpu_ops.c: emc_fuse_chain, emc_run_chain), at 1 to
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
    after it reads runs with it in bands of pooled rows (cpu_ops.c: cpool_run), the conv rows
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


def _op_table(buf: bytes) -> tuple[int, list[tuple[int, ...]]]:
    """Where the first EMC blob's operator records start in buf, and each record's (kind, act,
    in[0..3], out[0..1])."""
    at, _ = _blob_span(buf)
    n_ops = struct.unpack_from("<I", buf, at + 12)[0]
    base = at + struct.unpack_from("<Q", buf, at + 40)[0]
    return base, [struct.unpack_from("<II4i2i", buf, base + 160 * i) for i in range(n_ops)]


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


def _conv_ops(buf: bytes, every_blob: bool = False) -> list[tuple[int, ...]]:
    """The ip[] slots of every conv2d operator in the program's first EMC blob (or in all)."""
    found = []
    at = buf.find(b"EMC1")
    while at >= 0:
        n_ops = struct.unpack_from("<I", buf, at + 12)[0]
        ops_off = struct.unpack_from("<Q", buf, at + 40)[0]
        ops = [struct.unpack_from("<I", buf, at + ops_off + 160 * i)[0] for i in range(n_ops)]
        found += [
            struct.unpack_from("<24i", buf, at + ops_off + 160 * i + 32)
            for i, kind in enumerate(ops)
            if kind == 1
        ]
        at = buf.find(b"EMC1", at + 4) if every_blob else -1
    return found


WINO, WINO_SLOTS, PAIRS = 13, 14, 15  # EMC_CONV_WINOGRAD, EMC_CONV_WINO_SLOTS, EMC_CONV_PAIRS
IN_SCALE = 16  # EMC_CONV_IN_SCALE


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


def test_mlp() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Linear(33, 64),
        nn.GELU(),
        nn.LayerNorm(64),
        nn.Linear(64, 48),
        nn.ReLU(),
        nn.Linear(48, 5),
        nn.Softmax(-1),
    )
    _check_model(m, (torch.randn(3, 33),))


class Block(nn.Module):
    """A pre-norm transformer block with hand-written multi-head attention."""

    def __init__(self, d: int = 48, h: int = 4) -> None:
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.reshape(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.h) ** 0.5, -1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def test_transformer_block() -> None:
    torch.manual_seed(0)
    prog = _check_model(Block(), (torch.randn(1, 19, 48),), outside_ok=2)
    assert _n_delegates(prog) >= 1


class ScaledMaskedAttention(nn.Module):
    """Scores scaled by a constant and masked before the softmax, as Hugging Face's eager
    attention writes them; `mode` picks the pattern."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor):
        s = q @ k.transpose(-1, -2)
        if self.mode == "shared":  # the scaled scores are read twice: no fusion
            t = s * 0.125
            return torch.softmax(t + mask, -1) @ v + t[..., :8]
        if self.mode != "mask":
            s = s * 0.125 if self.mode != "odd" else s * 0.3
        if self.mode != "scale":
            s = s + mask
        return torch.softmax(s, -1) @ v


def _softmax_ops(buf: bytes) -> list[tuple[int, ...]]:
    """(in[1], ip[3], ip[4], ip[5], fp[0]) of every softmax in the first EMC blob."""
    base, recs = _op_table(buf)
    got = []
    for i, r in enumerate(recs):
        if r[0] == 8:
            ip = struct.unpack_from("<24i", buf, base + 160 * i + 32)
            fp = struct.unpack_from("<8f", buf, base + 160 * i + 128)
            got.append((r[3], ip[3], ip[4], ip[5], fp[0]))
    return got


@pytest.mark.parametrize(
    "mode,mask_shape,rows",
    [
        ("both", (1, 1, 9, 9), 9),
        ("both", (1, 1, 1, 9), 1),
        ("both", (9, 9), 9),
        ("both", (1, 3, 9, 9), 27),
        ("odd", (1, 1, 9, 9), 9),
        ("mask", (1, 1, 9, 9), 9),
        ("scale", (1, 1, 9, 9), 0),
        ("shared", (1, 1, 9, 9), 9),
    ],
)
def test_softmax_takes_scale_and_mask(
    mode: str, mask_shape: tuple, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """softmax(x * c + mask) runs as one softmax op with its scale and row-repeating mask (blob
    version 7), bit for bit what the three delegate ops give unfused."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 3, 9, 8), torch.randn(1, 3, 9, 8), torch.randn(1, 3, 9, 8)
    mask = torch.randn(mask_shape)
    mask[..., 2] = float("-inf")  # a masked key in every row (no row fully masked)
    inputs = (q, k, v, mask)
    prog = _check_model(ScaledMaskedAttention(mode), inputs)
    kinds = [r[0] for r in _op_table(prog.buffer)[1]]
    sms = _softmax_ops(prog.buffer)
    assert len(sms) == 1, sms
    has_mask, log, scaled, mask_rows, scale = sms[0]
    if mode == "shared":  # the add is fused, the multiply is not (its output is read twice)
        assert (has_mask >= 0, scaled, mask_rows) == (True, 0, 9) and 3 in kinds, (sms, kinds)
        return
    assert 3 not in kinds, kinds  # no binary op left
    assert (has_mask >= 0, log, scaled, mask_rows) == (mode != "scale", 0, mode != "mask", rows)
    if scaled:
        assert scale == pytest.approx(0.3 if mode == "odd" else 0.125)
    from ember.backends.cpu import partition

    monkeypatch.setattr(partition, "_fuse_softmax_input", lambda ops, u: None)
    unfused = ember.export(ScaledMaskedAttention(mode).eval(), inputs, backend="cpu")
    assert 3 in [r[0] for r in _op_table(unfused.buffer)[1]]
    for th in (1, 2):
        assert torch.equal(_run(prog, inputs, th), _run(unfused, inputs, th))


def test_softmax_scale_and_mask_are_checked() -> None:
    """A softmax record whose mask does not tile its rows, or that scales a log-softmax, fails
    at load."""
    torch.manual_seed(0)
    x = (*(torch.randn(1, 3, 9, 8) for _ in range(3)), torch.randn(1, 1, 9, 9))
    buf = ember.export(ScaledMaskedAttention("both").eval(), x, backend="cpu").buffer
    _runtime()(buf).run("forward", list(x))  # the unmodified blob loads and runs
    base, recs = _op_table(buf)
    i = next(j for j, r in enumerate(recs) if r[0] == 8)
    for slot, val in [(5, 0), (5, 4), (5, 18), (3, 1), (4, 2)]:
        bad = bytearray(buf)
        struct.pack_into("<i", bad, base + 160 * i + 32 + 4 * slot, val)
        with pytest.raises(Exception, match="softmax"):
            _runtime()(bytes(bad)).run("forward", list(x))


def test_bert_layer_from_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        attn_implementation="eager",
    )

    class Enc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = transformers.BertModel(cfg, add_pooling_layer=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.m(ids).last_hidden_state

    ids = torch.randint(0, 100, (1, 11))
    m = Enc().eval()
    with torch.inference_mode():
        want = m(ids)
    prog = ember.export(m, (ids,), backend="cpu")
    torch.testing.assert_close(_run(prog, (ids,), 2), want, rtol=RTOL, atol=ATOL)


def test_unsupported_stays_outside_and_none_is_portable() -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumsum(F.relu(x * 2.0), 0) + 1.0

    x = torch.randn(5, 6)
    prog = ember.export(M(), (x,), backend="cpu")
    assert "aten::cumsum.out" in _outside(prog)
    torch.testing.assert_close(_run(prog, (x,)), M()(x), rtol=RTOL, atol=ATOL)
    for portable in (None, "portable"):
        plain = ember.export(M(), (x,), backend=portable)
        assert _n_delegates(plain) == 0
        assert b"EmberCpuBackend" not in plain.buffer
        assert "aten::cumsum.out" in _outside(plain) and "aten::relu.out" in _outside(plain)


# ---- the default backend ("auto") ------------------------------------------------------------
@pytest.mark.parametrize("target", [None, "host", "x86-64", "aarch64"])
def test_default_on_host_is_the_cpu_backend(target: str | None, caplog) -> None:
    """ember.export's default ("auto") delegates on a desktop / host target, says so at INFO,
    and the delegated program matches eager within the CPU backend's tolerance."""
    torch.manual_seed(0)
    m = _seed_bn(ConvZoo()).eval()
    x = torch.randn(1, 3, 17, 17)
    with torch.inference_mode():
        want = m(x)
    with caplog.at_level("INFO", logger="ember.backends"):
        prog = ember.export(m, (x,), target=target)
    assert "EmberCpuBackend" in caplog.text
    assert _n_delegates(prog) >= 1 and _outside(prog) == []
    assert b"EmberCpuBackend" in prog.buffer
    assert getattr(prog, "budget", None) is None  # budgets are for microcontrollers
    torch.testing.assert_close(_run(prog, (x,), 2), want, rtol=RTOL, atol=ATOL)


def test_default_for_a_microcontroller_is_portable(caplog) -> None:
    """A cortex-m target keeps the portable kernels (its firmware links no delegate)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    x = torch.randn(1, 8)
    with caplog.at_level("INFO", logger="ember.backends"):
        prog = ember.export(m, (x,), target="cortex-m33")
    assert "portable kernels" in caplog.text
    assert _n_delegates(prog) == 0 and b"EmberCpuBackend" not in prog.buffer
    assert "aten::addmm.out" in _outside(prog)
    assert prog.budget["forward"].target == "cortex-m33"
    torch.testing.assert_close(_run(prog, (x,)), m(x), rtol=RTOL, atol=ATOL)


def test_default_keeps_quantized_graphs_portable() -> None:
    """The default ("auto") on a host leaves int8 Q/DQ graphs (quantized_decomposed::*) on the
    portable kernels, whose arithmetic is the quantized model's."""
    from ember.quant import quantize

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    x = torch.randn(4, 8)
    qm = quantize(m, [(x,)])
    prog = ember.export(qm, (x[:1],))
    assert _n_delegates(prog) == 0
    assert any(k.startswith("quantized_decomposed::") for k in _outside(prog))
    # Weight-only 4-bit linears (the LLM path, ember::linear_q4) likewise.
    from ember.quant.llm import quantize_linears

    m4 = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    quantize_linears(m4, "4w32")
    x4 = torch.randn(2, 64)
    prog4 = ember.export(m4, (x4,))
    assert _n_delegates(prog4) == 0
    assert any(k.startswith("ember::linear_q4") for k in _outside(prog4)), _outside(prog4)
    with torch.inference_mode():
        want4 = m4(x4)
    torch.testing.assert_close(_run(prog4, (x4,)), want4, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"backend": "gpu"}, r"unknown backend 'gpu' \(known: 'auto', 'cpu', None / 'portable'"),
        ({"backend": "CPU"}, "unknown backend 'CPU'"),
        ({"target": "riscv"}, "unknown target 'riscv' .*host.*cortex-m33"),
    ],
)
def test_unknown_backend_or_target_raises(kw: dict, match: str) -> None:
    m = nn.Linear(4, 4)
    with pytest.raises(ValueError, match=match):
        ember.export(m, (torch.randn(1, 4),), **kw)


def test_lower_isa_in_subprocess(tmp_path) -> None:
    """EMBER_CPU_ISA=scalar forces the portable micro-kernels; results are the same (AVX2 is
    covered kernel by kernel in tests/c/test_cpu_ukernels.c)."""
    isa = "scalar"
    torch.manual_seed(0)
    m = _seed_bn(ConvZoo()).eval()
    x = torch.randn(1, 3, 20, 20)
    prog = ember.export(m, (x,), backend="cpu")
    pte = tmp_path / "m.pte"
    prog.save(pte)
    torch.save((x, m(x).detach()), tmp_path / "io.pt")
    code = (
        "import sys, torch; from ember.runtime import RuntimeProgram;"
        f"x, want = torch.load({str(tmp_path / 'io.pt')!r});"
        f"got = RuntimeProgram(open({str(pte)!r}, 'rb').read()).run('forward', [x])[0];"
        "torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5); print('ok')"
    )
    env = dict(os.environ, EMBER_CPU_ISA=isa)
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


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
    pte = tmp_path / "m.pte"
    prog.save(pte)
    with torch.inference_mode():
        want = m(x)
    torch.save(x, tmp_path / "x.pt")
    outs = {}
    for isa in ("amx", "avx512f", None):
        code = (
            "import torch; from ember.runtime import RuntimeProgram;"
            f"x = torch.load({str(tmp_path / 'x.pt')!r});"
            f"p = RuntimeProgram(open({str(pte)!r}, 'rb').read(), threads=2);"
            f"torch.save(p.run('forward', [x])[0], {str(tmp_path / f'{isa}.pt')!r})"
        )
        env = dict(os.environ)
        env.pop("EMBER_CPU_ISA", None)
        if isa:
            env["EMBER_CPU_ISA"] = isa
        r = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stderr[-2000:]
        outs[isa] = torch.load(tmp_path / f"{isa}.pt")
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


# ---- malformed blobs ------------------------------------------------------------------------
def _blob_span(buf: bytes) -> tuple[int, int]:
    at = buf.index(b"EMC1")
    n_tensors, n_ops = struct.unpack_from("<II", buf, at + 8)
    data_off, data_n = struct.unpack_from("<QQ", buf, at + 48)
    return at, data_off + data_n


def _load_and_run(buf: bytes, x: torch.Tensor) -> str:
    try:
        _runtime()(buf).run("forward", [x])
        return "ok"
    except Exception as e:  # the runtime's error, with its status name
        return str(e)


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
    for version in (0, 8):  # this build reads versions 1 (no transposed convs) to 7 (softmax)
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
    """A transposed Winograd conv whose flag, filters or scratch do not match fails at load."""
    monkeypatch.setattr(P.packing, "WINO_SMALL", True)
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Conv2d(256, 272, 3, padding=1)).eval()
    x = torch.randn(1, 256, 7, 7)
    buf = ember.export(mod, (x,), backend="cpu").buffer
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
