"""EmberCpuBackend (ember.export(..., backend="cpu")):
convolutions (depthwise bands, im2col, stems, strips, small maps,
max pool rows) match eager PyTorch and the undelegated Ember run.

Shared helpers are in backend_cpu_common.py; kernel-level tests are in
tests/c/test_cpu_ukernels_*.c.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import (
    ATOL,
    RTOL,
    ConvZoo,
    _check_model,
    _conv_ops,
    _outside,
    _run,
    _seed_bn,
)
from torch import nn

import ember


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
