"""Pointwise int8 convs on the pixel-major tile (backends/cpu/cpu_op_qpw.c, em_q8_pw_fn).

A 1x1, stride-1 int8 conv whose output is u8 channels last (EMC_Q8_U8_OUT) runs on a tile of
pixels by output channels that reads the input's channels where they are (u8 channels last, or
f32 planes quantized into channels last first) and stores each pixel's channels where they go,
instead of packing column panels and transposing the result. It must give the same bytes as the
panel path. Checked here with the backend's ``q8_pixel_major`` option forcing each path, on a
graph with both input kinds, output channels below, at and past the tile's 16 / 32 (tails of
the channel blocks and masks), 99-pixel maps (a tail of the 8-pixel tile) and a batch of 2, at 1
and 2 threads; and the backend profile names the path each conv took.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8pw.py
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
from backend_cpu_common import _run
from torch import nn

import ember
from ember._lib import configure_cpu_backend, repo_root
from ember.quant.pt2e import quantize_exported


class _Net(nn.Module):
    """Int8 convs with u8 outputs of every kind the pixel-major tile takes: a strided, padded 3x3
    on the f32 input (3 channels, padded to 4), 1x1s from an f32 residual sum (70 channels: two
    32-channel blocks and a 6-channel tail) and between u8 links (40: a block and an 8-channel
    tail; 33; 13: one partial block), a strided padded 3x3 and a dilated one on u8 inputs; and
    the convs it leaves to the panel path (an f32 output, a depthwise one); and a 1x1 conv on
    the pooled f32 head (a classifier's one pixel: quantized first, then split by channel blocks
    at 2 threads)."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Conv2d(3, 5, 3, stride=2, padding=1)
        self.stem = nn.Conv2d(5, 18, 3, padding=1)
        self.expand = nn.Conv2d(18, 40, 1)
        self.dw = nn.Conv2d(40, 40, 3, padding=1, groups=40)
        self.project = nn.Conv2d(40, 18, 1)
        self.wide = nn.Conv2d(18, 70, 1)
        self.narrow = nn.Conv2d(70, 33, 1)
        self.few = nn.Conv2d(33, 13, 1)
        self.strided = nn.Conv2d(13, 24, 3, stride=2, padding=1)
        self.dilated = nn.Conv2d(24, 20, 3, padding=2, dilation=2)
        self.head = nn.Conv2d(20, 7, 3)
        self.fc = nn.Conv2d(7, 40, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        relu = torch.relu
        s = torch.nn.functional.relu6(self.stem(relu(self.pre(x))))
        y = self.project(relu(self.dw(relu(self.expand(s))))) + s
        z = relu(self.few(relu(self.narrow(relu(self.wide(y))))))
        h = self.head(relu(self.dilated(relu(self.strided(z)))))
        return torch.cat([h.flatten(1), self.fc(h.mean((2, 3), keepdim=True)).flatten(1)], 1)


@pytest.fixture(scope="module")
def program() -> tuple[ember.Program, tuple]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    shape = (2, 3, 17, 21)
    cal = [(torch.randn(*shape, generator=g) * 2.0,) for _ in range(4)]
    ep = quantize_exported(_Net().eval(), cal[0], cal, progress=False)
    inputs = (torch.randn(*shape, generator=g) * 2.0,)
    return ember.export(ep, inputs, backend="cpu"), inputs


@pytest.fixture()
def choice() -> Iterator[None]:
    yield
    configure_cpu_backend(q8_pixel_major=0)


def _has_tile() -> bool:
    """Whether `ember run` here has the pixel-major tile: AVX-512 VNNI, not capped below it by
    EMBER_CPU_ISA (which the CLI maps onto the backend as the bindings do)."""
    return _vnni() and os.environ.get("EMBER_CPU_ISA", "") in ("", "avx512f", "amx")


def _vnni() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_vnni" in flags and "avx512bw" in flags


def _paths(pte: str, pointwise: str) -> list[str]:
    env = dict(os.environ, EMBER_CPU_PROFILE="1", EMBER_CPU_Q8_PIXEL_MAJOR=pointwise)
    cmd = [str(repo_root() / "build" / "ember"), "run", pte, "--iters", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return [ln.rsplit("ms", 1)[1].strip() for ln in r.stderr.splitlines() if "kind  1" in ln]


def _same_bytes_both_paths(prog: ember.Program, inputs: tuple) -> torch.Tensor:
    """The program's output with the panel path forced and with the pixel-major tile allowed, at
    1 and 2 threads: all the same bytes (returned)."""
    outs = {}
    for force in (-1, 0):
        configure_cpu_backend(q8_pixel_major=force)
        outs[force] = [_run(prog, inputs, th) for th in (1, 2)]
    for th in range(2):
        assert torch.equal(outs[-1][th], outs[0][th]), (outs[-1][th] - outs[0][th]).abs().max()
    assert torch.equal(outs[0][0], outs[0][1])
    return outs[0][0]


def test_both_paths_give_the_same_bytes(program, choice) -> None:
    _same_bytes_both_paths(*program)


def test_the_profile_names_the_path(program, tmp_path) -> None:
    prog, _ = program
    pte = tmp_path / "m.pte"
    prog.save(pte)
    off = _paths(str(pte), "0")
    assert off and all(p == "(int8)" for p in off), off
    on = _paths(str(pte), "")
    if not _has_tile():  # no pixel-major tile on this ISA: the panel path runs every int8 conv
        assert on == off
        return
    pm, padded = "(int8 pixel-major)", "(int8, input padded by its writer)"
    # pre, stem (f32 out), expand, dw (depthwise: its input in the padded layout expand writes),
    # project (f32 out), wide, narrow, few, strided, dilated, head (f32 out), fc (f32 out, one
    # pixel)
    assert on == [pm, pm, pm, padded, pm, pm, pm, pm, pm, pm, pm, pm], on


class _Stem(nn.Module):
    """A network's first int8 conv on its f32 input (channels not a multiple of 4), then a 1x1 so
    the stem's output is a u8 link (its own output f32 planes in the second variant)."""

    def __init__(self, cin: int, k: int, stride: int, dilation: int, u8_out: bool) -> None:
        super().__init__()
        self.stem = nn.Conv2d(
            cin, 20, k, stride=stride, padding=k // 2 * dilation, dilation=dilation
        )
        self.next = nn.Conv2d(20, 9, 1)
        self.u8_out = u8_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        return self.next(y) if self.u8_out else y


@pytest.mark.parametrize(
    "cin,k,stride,dilation,u8_out",
    [
        (3, 7, 2, 1, True),  # ResNet's stem: rows of 7 taps x 3 channels in 6 groups, not 7
        (3, 7, 2, 1, False),
        (3, 5, 1, 1, True),  # 15 bytes a row: 4 groups, not 5
        (5, 3, 1, 1, True),  # 15 bytes a row: 4 groups, not 6
        (6, 3, 2, 1, True),  # 18 bytes: 5 groups, not 6
        (3, 3, 2, 1, True),  # 9 bytes: 3 groups either way (the padded taps kept)
        (3, 7, 2, 2, True),  # dilated along x: the padded taps kept
    ],
)
def test_stems_same_bytes_both_paths(cin, k, stride, dilation, u8_out, choice) -> None:
    """A stem whose window rows go in compact groups (the channels unpadded in its u8 image)
    gives the panel path's bytes, at 1 and 2 threads, on maps whose rows end at every group
    offset (odd widths, a batch of 2)."""
    torch.manual_seed(cin * 100 + k)
    g = torch.Generator().manual_seed(k)
    shape = (2, cin, 19, 23)
    cal = [(torch.randn(*shape, generator=g) * 2.0,) for _ in range(3)]
    m = _Stem(cin, k, stride, dilation, u8_out).eval()
    ep = quantize_exported(m, cal[0], cal, progress=False)
    inputs = (torch.randn(*shape, generator=g) * 2.0,)
    got = _same_bytes_both_paths(ember.export(ep, inputs, backend="cpu"), inputs)
    with torch.no_grad():
        want = m(*inputs)
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
    assert cos > 0.995, cos  # int8 against eager: close, not equal
