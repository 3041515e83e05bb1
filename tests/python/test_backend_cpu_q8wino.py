"""Int8 3x3 convs with a Winograd alternative (EmberCpuBackend blob EMC_CONV_Q8_WINO, version 10).

Where the f32 path would be a Winograd F(4x4) conv, an int8 conv's file carries both forms: the
int8 panels it runs by default, and what the runtime needs to run it as that Winograd conv
instead when the backend's ``q8_winograd`` option asks — the weights' own scales, slots and
scratch. The runtime then transforms the int8 weights (q * s_w in f32, as the program's dequantize
computes them) at init. Checked here, with the choice forced through the backend's options:

- as Winograd, the program gives the same bits as the same graph exported with f32 convs (the
  int8 conv fusion switched off: dequantized f32 weights, Winograd filters at load);
- in int8, it stays within one output step of the portable kernels, like every int8 conv;
- the default is int8 (faster on every CPU measured, Zen 4 and Zen 5);
- corrupted fields of the alternative are refused at load, naming what was wrong.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_q8wino.py
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
from backend_cpu_common import (
    _assert_same_on_every_isa,
    _assert_within_one_step,
    _blob_span,
    _load_and_run,
    _op_table,
    _out_step,
    _run,
)
from torch import nn

import ember
import ember.backends.cpu.blob as B
import ember.backends.cpu.fusion_q8 as fusion_q8
import ember.backends.cpu.partition as partition
from ember._lib import configure_cpu_backend
from ember.quant.pt2e import quantize_exported

IP = 32  # byte offset of ip[] in an operator record (kind, act, in[4], out[2])


class _Net(nn.Module):
    """Two 3x3 convs on a 28x28 map (F(4x4) Winograd in f32; channels not multiples of 4 or 6),
    a residual add and a strided 3x3 conv (no alternative: int8 only)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 18, 3, padding=1)
        self.b = nn.Conv2d(18, 21, 3, padding=1)
        self.c = nn.Conv2d(21, 21, 3, padding=1)
        self.d = nn.Conv2d(21, 16, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b(torch.relu(self.a(x))))
        return self.d(torch.relu(self.c(y) + y))


def _calibrated(
    m: nn.Module, shape: tuple[int, ...], seed: int, gain: float = 1.0
) -> tuple[torch.export.ExportedProgram, tuple]:
    """m quantized by ``quantize_exported`` on 4 seeded batches of ``shape``, and a test input."""
    torch.manual_seed(0)
    for mod in m.modules():  # seeded weights: whether a conv's output becomes a u8 link
        if hasattr(mod, "reset_parameters"):  # depends on its calibrated ranges
            mod.reset_parameters()
    m = m.eval()
    g = torch.Generator().manual_seed(seed)
    cal = [(torch.randn(*shape, generator=g) * gain,) for _ in range(4)]
    ep = quantize_exported(m, cal[0], cal, progress=False)
    return ep, (torch.randn(*shape, generator=g) * gain,)


@pytest.fixture(scope="module")
def programs() -> tuple[ember.Program, ember.Program, ember.Program, tuple]:
    ep, inputs = _calibrated(_Net(), (1, 3, 28, 28), 1)
    # (an int8 add on u8 links, EMC_BINARY_Q8, pins the convs beside it to int8: with it off
    # the residual add stays f32 and the Winograd choice applies to both 28x28 convs)
    mp = pytest.MonkeyPatch()
    mp.setattr(fusion_q8, "_add_q8_candidate", lambda a: False)
    try:
        prog = ember.export(ep, inputs, backend="cpu")
    finally:
        mp.undo()
    pinned = ember.export(ep, inputs, backend="cpu")
    orig = partition._conv_q8  # (the fusion passes are looked up there by name)
    partition._conv_q8 = lambda ops, u: None  # f32 convs from the dequantized weights
    try:
        f32 = ember.export(ep, inputs, backend="cpu")
    finally:
        partition._conv_q8 = orig
    assert sum(ip[B.CONV_Q8] > 0 for _, ip in _conv_ips(f32.buffer)) == 0
    plain = ember.export(ep, inputs, backend=None)
    configure_cpu_backend(q8_winograd=1)  # the u8 add keeps its convs int8: the same bits
    try:
        assert torch.equal(_run(pinned, inputs), _run(prog, inputs))
    finally:
        configure_cpu_backend(q8_winograd=0)
    return prog, f32, plain, inputs


@pytest.fixture()
def choice() -> Iterator[None]:
    yield
    configure_cpu_backend(q8_winograd=0)


def _conv_ips(buf: bytes) -> list[tuple[int, list[int]]]:
    base, recs = _op_table(buf)
    out = []
    for i, r in enumerate(recs):
        if r[0] == 1:  # EMC_OP_CONV2D
            at = base + 160 * i + IP
            out.append((at, list(struct.unpack_from("<24i", buf, at))))
    return out


def _patched(buf: bytes, at: int, val: int) -> bytes:
    bad = bytearray(buf)
    struct.pack_into("<i", bad, at, val)
    return bytes(bad)


def test_file_carries_the_alternative(programs) -> None:
    prog, _, _, _ = programs
    ips = [ip for _, ip in _conv_ips(prog.buffer)]
    # every conv int8; the 28x28 3x3 stride-1 convs with 16+ channels carry F(4x4), the RGB
    # stem and the strided one none
    assert [ip[B.CONV_Q8] > 0 for ip in ips] == [True] * 4, ips
    assert [ip[B.CONV_Q8_WINO] for ip in ips] == [0, 4, 4, 0], ips


def test_winograd_choice_is_bit_identical_to_f32_convs(programs, choice) -> None:
    prog, f32, _, inputs = programs
    configure_cpu_backend(q8_winograd=1)
    for th in (1, 2):
        assert torch.equal(_run(prog, inputs, th), _run(f32, inputs, th))


def test_int8_choice_within_one_step_of_portable(programs, choice) -> None:
    prog, f32, plain, inputs = programs
    step = _out_step(plain)
    configure_cpu_backend(q8_winograd=-1)
    want = _run(plain, inputs)
    for th in (1, 2):
        got = _run(prog, inputs, th)
        diff = (got - want).abs()
        assert diff.max().item() <= step * 1.001, (diff.max().item(), step)
        assert (diff > 0).float().mean().item() <= 0.02
    int8 = _run(prog, inputs)
    configure_cpu_backend(q8_winograd=0)
    auto = _run(prog, inputs)
    assert torch.equal(auto, int8)
    # (the Winograd choice's output may equal the int8 one: its f32 conv outputs are
    # fake-quantized again; test_choice_through_the_cli_switch checks the path each conv takes)


def test_choice_through_the_cli_switch(programs, tmp_path) -> None:
    """EMBER_CPU_Q8_WINOGRAD (the CLIs' switch onto the option) picks the path the convs with
    an alternative run, as `ember run`'s backend profile names it."""
    import os
    import subprocess

    from ember._lib import repo_root

    prog, _, _, _ = programs
    pte = tmp_path / "m.pte"
    prog.save(pte)
    paths = {}
    for v in ("1", "0"):
        env = dict(os.environ, EMBER_CPU_PROFILE="1", EMBER_CPU_Q8_WINOGRAD=v)
        cmd = [str(repo_root() / "build" / "ember"), "run", str(pte), "--iters", "1"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        paths[v] = [  # (int8 on either tile: the pixel-major one is test_backend_cpu_q8pw's)
            ln.rsplit("ms", 1)[1].strip().replace(" pixel-major", "")
            for ln in r.stderr.splitlines()
            if "kind  1" in ln
        ]
    assert paths["1"] == ["(int8)", "(winograd 4)", "(winograd 4)", "(int8)"], paths
    assert paths["0"] == ["(int8)"] * 4, paths


@pytest.mark.parametrize("force", [1, -1])
def test_corrupt_alternative_is_refused(programs, choice, force: int) -> None:
    prog, _, _, inputs = programs
    configure_cpu_backend(q8_winograd=force)
    buf = prog.buffer
    assert _load_and_run(buf, inputs[0]) == "ok"
    at, ip = next((at, ip) for at, ip in _conv_ips(buf) if ip[B.CONV_Q8_WINO])
    bad = _load_and_run(_patched(buf, at + 4 * B.CONV_Q8_WINO, 3), inputs[0])
    assert "InvalidProgram" in bad and "Winograd alternative" in bad, bad
    # a table without the weights' scales (the id of another constant: the bias)
    blob_at, _ = _blob_span(buf)
    base, recs = _op_table(buf)
    rec = recs[[a for a, _ in _conv_ips(buf)].index(at)]
    bias_id = rec[4]
    bad = _load_and_run(_patched(buf, at + 4 * B.CONV_Q8, bias_id + 1), inputs[0])
    assert "InvalidProgram" in bad and ("table" in bad or "channels" in bad), bad
    assert blob_at < base
    # the weights' id pointing at the bias: wrong size for the int8 panels
    w_at = base + 160 * recs.index(rec) + 8 + 4
    bad = _load_and_run(_patched(buf, w_at, bias_id), inputs[0])
    assert "InvalidProgram" in bad, bad


# ---- u8 activations between int8 convs (EMC_CONV_Q8_U8) -----------------------------------------
class _Chain(nn.Module):
    """Int8 convs feeding int8 convs: padded and unpadded readers, a 1x1, a strided one, a fused
    relu6 clamp before the quantization, channels not multiples of 4, a batch of 2; the last
    conv's output and a residual read in f32."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(5, 18, 3, padding=1)
        self.b = nn.Conv2d(18, 21, 1)
        self.c = nn.Conv2d(21, 21, 3, padding=1)
        self.d = nn.Conv2d(21, 13, 3, stride=2)
        self.e = nn.Conv2d(13, 13, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b(torch.nn.functional.relu6(self.a(x))))
        z = self.d(torch.relu(self.c(y)))
        return self.e(z) + z


@pytest.fixture(scope="module")
def chain() -> tuple[ember.Program, ember.Program, tuple]:
    ep, inputs = _calibrated(_Chain(), (2, 5, 30, 30), 2, gain=2.0)
    prog = ember.export(ep, inputs, backend="cpu")
    orig = partition._conv_q8_u8
    partition._conv_q8_u8 = lambda ops, u: None  # every int8 conv reads and writes f32
    try:
        f32io = ember.export(ep, inputs, backend="cpu")
    finally:
        partition._conv_q8_u8 = orig
    return prog, f32io, inputs


def test_u8_chain_marks_the_links(chain) -> None:
    prog, f32io, _ = chain
    assert [ip[B.CONV_Q8_U8] for _, ip in _conv_ips(prog.buffer)] == [2, 3, 3, 1, 0]
    assert [ip[B.CONV_Q8_U8] for _, ip in _conv_ips(f32io.buffer)] == [0] * 5


@pytest.mark.parametrize("force", [0, 1, -1])
def test_u8_chain_gives_the_same_bits(chain, choice, force: int) -> None:
    """The u8 values are exactly what each reader would have quantized from the writer's f32
    fake-quant output: the same bits as with f32 between the convs, in int8 and where a conv
    takes its Winograd alternative instead (its u8 links then fall back to f32)."""
    prog, f32io, inputs = chain
    configure_cpu_backend(q8_winograd=force)
    for th in (1, 2):
        assert torch.equal(_run(prog, inputs, th), _run(f32io, inputs, th))


def test_u8_bits_are_checked(chain) -> None:
    prog, _, inputs = chain
    buf = prog.buffer
    ats = [at for at, _ in _conv_ips(buf)]
    base, recs = _op_table(buf)
    bad = _load_and_run(_patched(buf, ats[0] + 4 * B.CONV_Q8_U8, 4), inputs[0])
    assert "InvalidProgram" in bad and "u8 activation bits" in bad, bad
    # a u8 output without its fake-quant (act field: EMC_ACT_NONE)
    op_at = ats[0] - IP
    assert recs[[base + 160 * i for i in range(len(recs))].index(op_at)][1] == 14
    bad = _load_and_run(_patched(buf, op_at + 4, 0), inputs[0])
    assert "InvalidProgram" in bad and "u8 output" in bad, bad


# ---- int8 depthwise convs between int8 convs (EMC_CONV_Q8 with EMC_CONV_DEPTHWISE) --------------
class _Inverted(nn.Module):
    """MobileNetV2-style blocks: 1x1 expansion, relu6, depthwise (3x3 stride 1 with a residual,
    5x5 stride 2, channels not multiples of 16), relu6, 1x1 projection."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 12, 3, padding=1)
        self.e1, self.d1, self.p1 = (
            nn.Conv2d(12, 36, 1),
            nn.Conv2d(36, 36, 3, padding=1, groups=36),
            nn.Conv2d(36, 12, 1),
        )
        self.e2, self.d2, self.p2 = (
            nn.Conv2d(12, 40, 1),
            nn.Conv2d(40, 40, 5, stride=2, padding=2, groups=40),
            nn.Conv2d(40, 16, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r6 = torch.nn.functional.relu6
        x = r6(self.stem(x))
        x = x + self.p1(r6(self.d1(r6(self.e1(x)))))
        return self.p2(r6(self.d2(r6(self.e2(x)))))


@pytest.fixture(scope="module")
def inverted() -> tuple[ember.Program, ember.Program, tuple]:
    ep, inputs = _calibrated(_Inverted(), (1, 3, 19, 19), 3)
    return ember.export(ep, inputs, backend="cpu"), ember.export(ep, inputs, backend=None), inputs


def test_int8_depthwise_runs_on_u8(inverted) -> None:
    prog, _, _ = inverted
    ips = [ip for _, ip in _conv_ips(prog.buffer)]
    dw = [ip for ip in ips if ip[9]]  # EMC_CONV_DEPTHWISE
    assert len(dw) == 2 and all(ip[B.CONV_Q8] > 0 and ip[B.CONV_Q8_U8] == 3 for ip in dw), ips


def test_int8_depthwise_within_one_step_of_portable(inverted) -> None:
    prog, plain, inputs = inverted
    _assert_within_one_step(prog, plain, inputs)


def test_int8_depthwise_same_bits_on_every_isa(inverted, tmp_path) -> None:
    prog, _, inputs = inverted
    _assert_same_on_every_isa(prog, inputs[0], tmp_path)
