"""Int8 depthwise convs whose padded input their writer stores (EmberCpuBackend,
``emc_q8_pad_plan`` in backends/cpu/cpu_op_qpw.c).

A padded int8 depthwise conv reads a zero-point padded copy of its u8 input, which it used to
build in its scratch on every run (a pass over the image and a barrier between threads). Where a
pixel-major int8 conv (or its fused lookup) alone writes that input for it, on rows of whole
8-pixel tiles, the writer now stores its pixels straight into the padded layout inside its own
output's bytes (sized as f32, room to spare) and the depthwise conv only sets the border to its
zero point. It must give the very bytes of the copy (the backend's ``no_fuse`` turns the plan
off). Checked here on a 1x1 conv into a 3x3 depthwise conv and a 1x1 conv with its hardswish
lookup into a strided 5x5 one (24-pixel rows), against a row width that is no multiple of 8
(not planned), at 1 and 2 threads, one image and two; the profile names the planned convs.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8padlink.py
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F
from backend_cpu_common import _run
from torch import nn

import ember
from ember._lib import configure_cpu_backend, repo_root
from ember.quant.pt2e import quantize_exported


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.exp = nn.Conv2d(16, 32, 1)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.exp2 = nn.Conv2d(32, 24, 1)
        self.dw5 = nn.Conv2d(24, 24, 5, stride=2, padding=2, groups=24)
        self.proj = nn.Conv2d(24, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.stem(x))
        y = F.relu(self.dw(F.relu(self.exp(y))))  # planned: the 1x1 writes the dw's padded input
        y = F.relu(self.dw5(F.hardswish(self.exp2(y))))  # planned: the 1x1 and its lookup
        return self.proj(y)


# (batch, height, width): 24-pixel rows (planned), 20-pixel rows (not: split tiles)
SHAPES = [(1, 13, 24), (2, 9, 24), (1, 11, 20)]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "x".join(map(str, s)))
def program(request) -> tuple[ember.Program, tuple]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(11)
    n, h, w = request.param
    cal = [(torch.randn(n, 3, h, w, generator=g) * 2.0,) for _ in range(4)]
    ep = quantize_exported(_Net().eval(), cal[0], cal, progress=False)
    inputs = (torch.randn(n, 3, h, w, generator=g) * 2.0,)
    return ember.export(ep, inputs, backend="cpu"), inputs


@pytest.fixture()
def unfused() -> Iterator[None]:
    yield
    configure_cpu_backend(no_fuse=False)


def test_same_bytes_as_the_copy(program, unfused) -> None:
    prog, inputs = program
    planned = [_run(prog, inputs, th) for th in (1, 2)]
    configure_cpu_backend(no_fuse=True)
    copied = [_run(prog, inputs, th) for th in (1, 2)]
    for th in range(2):
        assert torch.equal(planned[th], copied[th]), (planned[th] - copied[th]).abs().max()
    assert torch.equal(planned[0], planned[1])


def _vnni() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    tile = os.environ.get("EMBER_CPU_ISA", "") in ("", "avx512f", "amx")
    return tile and "avx512_vnni" in flags and "avx512bw" in flags


def test_the_profile_names_the_planned_convs(program, tmp_path) -> None:
    prog, inputs = program
    pte = tmp_path / "m.pte"
    prog.save(pte)
    env = dict(os.environ, EMBER_CPU_PROFILE="1")
    env.pop("EMBER_CPU_NO_FUSE", None)
    cmd = [str(repo_root() / "build" / "ember"), "run", str(pte), "--iters", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    planned = [ln for ln in r.stderr.splitlines() if "input padded by its writer" in ln]
    # the pixel-major tile (AVX-512 VNNI) writes both depthwise convs' inputs on 24-pixel rows
    want = 2 if _vnni() and inputs[0].shape[3] % 8 == 0 else 0
    assert len(planned) == want, planned
