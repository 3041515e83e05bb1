"""EmberCpuBackend (ember.export(..., backend="cpu")):
whole models (MLP, transformer blocks, attention softmax, BERT), what
stays outside, and the default backend.

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
    RTOL,
    ConvZoo,
    _check_model,
    _n_delegates,
    _op_table,
    _outside,
    _run,
    _runtime,
    _seed_bn,
)
from torch import nn

import ember


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


class _ConstMaskAttention(nn.Module):
    """ScaledMaskedAttention("both") with its mask a constant of the model (a Hugging Face encoder
    fed no attention mask: its all-ones mask becomes zeros folded at export)."""

    def __init__(self, mask: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-1, -2) * 0.125 + self.mask, -1) @ v


@pytest.mark.parametrize("mask_shape,rows", [((1, 1, 9, 9), 9), ((1, 1, 1, 9), 1)])
def test_softmax_takes_a_constant_mask(
    mask_shape: tuple, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A constant mask goes into the softmax as an input mask does (it had left the scale and the
    add as two passes over the scores: MiniLM-L6 int8 7 % slower), the same bits as unfused."""
    torch.manual_seed(0)
    mask = torch.randn(mask_shape)
    mask[..., 2] = float("-inf")
    inputs = tuple(torch.randn(1, 3, 9, 8) for _ in range(3))
    m = _ConstMaskAttention(mask).eval()
    prog = _check_model(m, inputs)
    kinds = [r[0] for r in _op_table(prog.buffer)[1]]
    sms = _softmax_ops(prog.buffer)
    assert len(sms) == 1 and 3 not in kinds, (sms, kinds)
    has_mask, log, scaled, mask_rows, scale = sms[0]
    assert (has_mask >= 0, log, scaled, mask_rows) == (True, 0, 1, rows)
    assert scale == pytest.approx(0.125)
    from ember.backends.cpu import partition

    monkeypatch.setattr(partition, "_fuse_softmax_input", lambda ops, u: None)
    unfused = ember.export(m, inputs, backend="cpu")
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


class _SoftmaxDim(torch.nn.Module):
    def __init__(self, dim: int, log: bool) -> None:
        super().__init__()
        self.dim, self.log = dim, log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.log_softmax if self.log else torch.softmax)(x * 1.5, self.dim)


@pytest.mark.parametrize(
    ("shape", "dim"),
    [((1, 19, 6, 12), 1), ((2, 3, 70), 1), ((5, 7, 3, 9), 0), ((4, 130, 3), -2), ((2, 5), 0)],
)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_over_a_non_last_dim(shape: tuple, dim: int, log: bool) -> None:
    """softmax / log-softmax over a non-last dim (a segmentation head's channels) runs in the
    backend as [rows, cols, inner] blocks, 64 columns at a time (more than 64 inner columns, and
    fewer), against eager: with -inf entries and a column holding a NaN."""
    torch.manual_seed(0)
    x = torch.randn(*shape)
    flat = x.view(-1)
    flat[1], flat[-2] = float("-inf"), float("nan")
    m = _SoftmaxDim(dim, log).eval()
    prog = ember.export(m, (x,), backend="cpu")
    assert not _outside(prog) and _n_delegates(prog) == 1
    base, recs = _op_table(prog.buffer)
    i = next(j for j, r in enumerate(recs) if r[0] == 8)
    inner = struct.unpack_from("<24i", prog.buffer, base + 160 * i + 32)[2]
    assert inner == (x[(0,) * (dim % x.dim() + 1)].numel() if dim % x.dim() < x.dim() - 1 else 1)
    for th in (1, 2):
        torch.testing.assert_close(_run(prog, (x,), th), m(x), rtol=1e-5, atol=1e-6, equal_nan=True)
    bad = bytearray(prog.buffer)  # a scale on such a softmax fails at load
    struct.pack_into("<i", bad, base + 160 * i + 32 + 4 * 4, 1)
    with pytest.raises(Exception, match="softmax"):
        _runtime()(bytes(bad)).run("forward", [x])


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
    # fed no attention mask, its (constant) mask and the scores' scale go into each softmax
    sms = _softmax_ops(prog.buffer)
    assert sms and all(h >= 0 and sc == 1 for h, _, sc, _, _ in sms), sms


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


def test_default_backend_for_quantized_graphs() -> None:
    """The default ("auto") on a host gives int8 Q/DQ graphs (quantized_decomposed::*) to the
    CPU backend, with the portable kernels' results; weight-only 4-bit linears (the LLM path)
    stay on the portable kernels."""
    from ember.quant import quantize

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    x = torch.randn(4, 8)
    qm = quantize(m, [(x,)])
    prog = ember.export(qm, (x[:1],))
    assert _n_delegates(prog) >= 1
    portable = ember.export(qm, (x[:1],), backend=None)
    assert _n_delegates(portable) == 0
    assert any(k.startswith("quantized_decomposed::") for k in _outside(portable))
    torch.testing.assert_close(_run(prog, (x[:1],)), _run(portable, (x[:1],)), rtol=1e-5, atol=1e-6)
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
        (
            {"backend": "gpu"},
            r"unknown backend 'gpu' \(known: 'auto', 'cpu', 'vulkan', None / 'portable'",
        ),
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
