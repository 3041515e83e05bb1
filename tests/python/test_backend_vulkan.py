"""EmberVulkanBackend (ember.export(..., backend="vulkan")): every operator against eager PyTorch
at edge shapes, a small CNN and an MLP end to end (also against the portable kernels), the
ordered backend list, and corrupted blobs refused cleanly by init.

Runs on any Vulkan device; in CI that is lavapipe (Mesa's CPU device, `make vulkan-deps`).
Skipped, with a message, only when the library was built without Vulkan or no device exists.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from vulkan_common import VK, needs_vulkan

import ember
from ember.backends.check import runtime_check
from ember.backends.delegate import DelegateInstr
from ember.backends.vulkan.blob import arena_bytes, tensor_table
from ember.passes.ir import KernelInstr

RTOL, ATOL = 1e-4, 1e-5
HEAD = 32  # bytes of the blob header (emv_format.h emv_header, version 3)


pytestmark = needs_vulkan


def _run(prog: ember.Program, inputs: tuple) -> list[torch.Tensor]:
    from ember.runtime import RuntimeProgram

    return list(RuntimeProgram(prog.buffer).run("forward", list(inputs)))


def _outside(prog: ember.Program) -> list[str]:
    return [
        i.kernel
        for i in prog._irs["forward"].instrs
        if isinstance(i, KernelInstr) and not isinstance(i, DelegateInstr)
    ]


def _delegates(prog: ember.Program, backend: str = VK) -> list[DelegateInstr]:
    return [
        i
        for i in prog._irs["forward"].instrs
        if isinstance(i, DelegateInstr) and i.backend_id == backend
    ]


def _check(m: nn.Module, *inputs: torch.Tensor, outside: int = 0) -> ember.Program:
    """Exports ``m`` to the Vulkan backend, runs it and compares every output with eager."""
    m = m.eval()
    with torch.inference_mode():
        want = m(*inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    prog = ember.export(m, inputs, backend="vulkan")
    assert _delegates(prog), prog.explain()
    assert len(_outside(prog)) <= outside, (_outside(prog), prog.explain())
    got = _run(prog, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)
    return prog


class Fn(nn.Module):
    def __init__(self, f, *params: torch.Tensor) -> None:  # noqa: ANN001
        super().__init__()
        self.f = f
        self.p = nn.ParameterList([nn.Parameter(p, requires_grad=False) for p in params])

    def forward(self, *xs: torch.Tensor):  # noqa: ANN201
        return self.f(*xs, *self.p)


def _r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape)))


# ---- operators ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, n, bias",
    [((1, 1), 1, True), ((3, 7), 5, True), ((2, 3, 17), 9, False), ((1, 64), 33, True)],
)
def test_linear(x: tuple, n: int, bias: bool) -> None:
    torch.manual_seed(0)
    _check(nn.Linear(x[-1], n, bias=bias), _r(*x))


# ---- operator families, shared with test_backend_vulkan_f16.py: (model, inputs) ----------


def mm_case() -> tuple[nn.Module, tuple]:
    # both operands activations: [K, N] read in place, and batched
    m = Fn(lambda a, b, c, d: (a @ b, torch.bmm(c, d)))
    return m, (_r(3, 5), _r(5, 4), _r(2, 3, 7), _r(2, 7, 1))


def binary_case(a: tuple, b: tuple) -> tuple[nn.Module, tuple]:
    x, y = _r(*a), _r(*b, seed=1).abs() + 0.5
    return Fn(lambda x, y: (x + y, x - y, x * y, x / y)), (x, y)


def scalars_case() -> tuple[nn.Module, tuple]:
    c = _r(1, 3, 1, 1, seed=3)
    return Fn(lambda x, c: (x + 2.5, 3.0 - x, x / 1.5, x * c, c - x), c), (_r(2, 3, 4, 5),)


UNARY = (
    torch.relu,
    F.gelu,
    lambda t: F.gelu(t, approximate="tanh"),
    torch.sigmoid,
    torch.tanh,
    lambda t: F.hardtanh(t, -0.5, 0.7),
    F.silu,
    lambda t: torch.clamp(t, min=-1.0),
    F.hardswish,
    F.hardsigmoid,
    torch.exp,
    lambda t: torch.sqrt(t.abs()),
    lambda t: torch.rsqrt(t.abs() + 0.25),
    torch.neg,
    torch.abs,
)


def unary_case() -> tuple[nn.Module, tuple]:
    x = torch.linspace(-8, 8, 3 * 5 * 7).reshape(3, 5, 7)
    return Fn(lambda t: tuple(f(t) for f in UNARY)), (x,)


# cin, cout, k, stride, pad, dil, groups, hw, bias
CONVS = [
    (3, 8, 3, 1, 1, 1, 1, (9, 7), True),
    (4, 6, 3, 2, 0, 1, 2, (11, 10), False),
    (8, 8, 3, 1, 1, 1, 8, (5, 5), True),  # depthwise
    (5, 5, 5, 2, 2, 1, 5, (13, 9), False),  # depthwise, stride 2
    (6, 3, 1, 1, 0, 1, 1, (1, 1), True),  # pointwise on a 1x1 map
    (2, 4, 3, 1, 2, 2, 1, (8, 6), True),  # dilation
    (3, 2, (3, 1), (2, 1), (1, 0), 1, 1, (7, 5), True),  # rectangular
]


def conv_case(cin, cout, k, stride, pad, dil, groups, hw, bias) -> tuple[nn.Module, tuple]:  # noqa: ANN001
    torch.manual_seed(1)
    m = nn.Conv2d(cin, cout, k, stride=stride, padding=pad, dilation=dil, groups=groups, bias=bias)
    return m, (_r(2, cin, *hw),)


def pools_case() -> tuple[nn.Module, tuple]:
    return Fn(
        lambda t: (
            F.max_pool2d(t, 3, 2, 1),
            F.max_pool2d(t, 2, ceil_mode=True),
            F.avg_pool2d(t, 3, 2, 1),
            F.avg_pool2d(t, 3, 2, 1, count_include_pad=False),
            F.avg_pool2d(t, 2, ceil_mode=True),
            F.avg_pool2d(t, 3, 1, 1, divisor_override=5),
            F.adaptive_avg_pool2d(t, 1),
            F.adaptive_avg_pool2d(t, (3, 4)),
        )
    ), (_r(2, 3, 9, 8),)


def norms_case() -> tuple[nn.Module, tuple]:
    w, b = _r(7, seed=5), _r(7, seed=6)
    m = Fn(
        lambda t, w, b: (
            torch.softmax(t, -1),
            torch.log_softmax(t, -1),
            F.layer_norm(t, (7,), w, b, 1e-5),
            F.layer_norm(t, (7,)),
            t.mean(-1),
            t.mean((1, 2), keepdim=True),
        ),
        w,
        b,
    )
    return m, (_r(2, 3, 7) * 4,)


def shapes_case() -> tuple[nn.Module, tuple]:
    m = Fn(
        lambda a, b: (
            a.reshape(6, 20).relu(),
            a.permute(0, 3, 1, 2) * 2.0,
            torch.cat([a, b], 1),
            torch.cat([a, a.relu(), b], -1),
            a[:, 1:, ::2, 1:4] + 1.0,
            a.flatten(1) + 0.5,
            a.transpose(1, 2) - 1.0,
        )
    )
    return m, (_r(2, 3, 4, 5), _r(2, 3, 4, 5, seed=2))


def select_case() -> tuple[nn.Module, tuple]:
    m = Fn(
        lambda t, v: (
            t[:, 0] * 2.0,
            t[1, :, -1] + 1.0,
            t.select(3, 2) - 1.0,
            v.expand(2, 3, 4, 5) * 1.5,
            v[0].expand(3, 4, 5) + 0.5,
            t.sum(-1),
            t.sum((1, 2), keepdim=True),
        )
    )
    return m, (_r(2, 3, 4, 5), _r(1, 3, 1, 5, seed=4))


def pad_case() -> tuple[nn.Module, tuple]:
    m = Fn(
        lambda t: (
            F.pad(t, (1, 2, 0, 3)),
            F.pad(t, (1, 1), value=-2.5),
            F.pad(t, (0, 0, 1, 0, 2, 1)) * 2.0,
        )
    )
    return m, (_r(2, 3, 4, 5),)


# ---- operators ------------------------------------------------------------------------------


def test_mm_bmm_activations() -> None:
    m, xs = mm_case()
    _check(m, *xs)


@pytest.mark.parametrize(
    "a, b",
    [
        ((2, 3, 4, 5), (1, 3, 1, 5)),
        ((4,), (3, 1)),
        ((1,), (2, 3)),
        ((5, 1, 3), (1, 7, 1)),
        ((1,), (1,)),
    ],
)
def test_binary_broadcast(a: tuple, b: tuple) -> None:
    m, xs = binary_case(a, b)
    _check(m, *xs)


def test_binary_scalars_and_constants() -> None:
    m, xs = scalars_case()
    _check(m, *xs)


def test_unary() -> None:
    m, xs = unary_case()
    _check(m, *xs)


def test_unary_one_element() -> None:
    _check(Fn(lambda t: (torch.relu(t), torch.tanh(t), F.gelu(t))), torch.tensor([-0.3]))


@pytest.mark.parametrize("cin, cout, k, stride, pad, dil, groups, hw, bias", CONVS)
def test_conv2d(cin, cout, k, stride, pad, dil, groups, hw, bias) -> None:  # noqa: ANN001
    m, xs = conv_case(cin, cout, k, stride, pad, dil, groups, hw, bias)
    _check(m, *xs)


def test_pools() -> None:
    m, xs = pools_case()
    _check(m, *xs)


def test_softmax_layernorm_mean() -> None:
    m, xs = norms_case()
    _check(m, *xs)
    _check(Fn(lambda t: torch.softmax(t, -1)), torch.tensor([[1.5]]))


def test_shape_ops() -> None:
    m, xs = shapes_case()
    _check(m, *xs)


def test_select_expand_sum() -> None:
    m, xs = select_case()
    _check(m, *xs)


def test_two_dimensional_grid() -> None:
    """More than 65535 workgroups of 64 (4.2 M outputs): the dispatch becomes a 2-d grid."""
    _check(Fn(lambda t: (torch.relu(t), t * 0.5 + 1.0)), _r(5, 1000, 1001))


def test_constant_pad() -> None:
    m, xs = pad_case()
    _check(m, *xs)
    _check(Fn(lambda t: F.pad(t, (2, 1), value=1.5)), torch.tensor([0.25]))


@pytest.mark.parametrize(
    "shape, kw",
    [
        ((1, 1, 1, 1), dict(scale_factor=3)),
        ((2, 3, 3, 4), dict(scale_factor=2)),  # exact doubling (ATen's shortcut)
        ((1, 2, 5, 3), dict(scale_factor=1.5)),
        ((1, 2, 3, 4), dict(size=(7, 5))),
        ((1, 2, 3, 4), dict(size=(6, 4))),  # doubling and identity from the sizes
        ((1, 3, 9, 7), dict(size=(4, 3))),  # downsampling
    ],
)
@pytest.mark.parametrize("mode", ["nearest", "bilinear-align", "bilinear"])
def test_upsample(shape: tuple, kw: dict, mode: str) -> None:
    extra = {} if mode == "nearest" else dict(align_corners=mode == "bilinear-align")
    m = mode.split("-")[0]
    prog = _check(Fn(lambda x: F.interpolate(x + 0.5, mode=m, **kw, **extra)), _r(*shape))
    assert any("upsample" in d.summary for d in _delegates(prog)), prog.explain()


def test_upsample_to_one_pixel_and_in_a_cnn() -> None:
    # align_corners onto a 1x1 output (scale 0), then a decoder-like conv -> upsample -> conv
    _check(
        Fn(lambda x: F.interpolate(x, size=(1, 1), mode="bilinear", align_corners=True)),
        _r(1, 2, 4, 5),
    )
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="bilinear"),
        nn.Conv2d(8, 4, 3, padding=1),
        nn.Upsample(size=(13, 11), mode="nearest"),
    )
    prog = _check(m, _r(1, 3, 6, 5))
    assert len(_delegates(prog)) == 1, prog.explain()


# ---- models ---------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6()
        )
        self.dw = nn.Sequential(
            nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.BatchNorm2d(16), nn.SiLU()
        )
        self.pw = nn.Conv2d(16, 16, 1)
        self.down = nn.Sequential(nn.Conv2d(16, 24, 3, 2, 1), nn.Hardswish(), nn.MaxPool2d(2, 2))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        y = y + self.pw(self.dw(y))
        return torch.softmax(self.head(self.down(y)), -1)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(33, 64), nn.Linear(64, 64), nn.Linear(64, 7)
        self.ln = nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.a(x))
        h = self.ln(h + torch.tanh(self.b(h)))
        return torch.log_softmax(self.c(h), -1)


def _bn_stats(m: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) * 0.2 - 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
    return m


@pytest.mark.parametrize("model, shape", [(SmallCNN, (2, 3, 32, 29)), (MLP, (5, 33))])
def test_models_against_eager_and_portable(model, shape) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    m = _bn_stats(model()).eval()
    x = _r(*shape)
    prog = _check(m, x)
    assert len(_delegates(prog)) == 1, prog.explain()
    # batch norm folded, activations fused into the conv / linear before them
    n_ops = struct.unpack_from("<I", _delegates(prog)[0].processed, 12)[0]
    n_instr = sum(d.delegated for d in prog._irs["forward"].partition_report)
    assert n_ops <= n_instr - (4 if model is SmallCNN else 2), (n_ops, n_instr)
    # the arena reuses the space of tensors no operator uses together
    blob = _delegates(prog)[0].processed
    arena = arena_bytes(blob)
    rows = tensor_table(blob)[0]  # (byte offset, weight, elements, storage)
    assert all(st == 0 for *_, st in rows)  # f32 storage: every tensor f32, 4 bytes each
    consts = sum(4 * n for _, w, n, _ in rows if w != 0xFFFFFFFF)
    acts = sum(4 * n for _, w, n, _ in rows if w == 0xFFFFFFFF)
    assert arena - consts < 0.8 * acts, (arena, consts, acts)
    plain = _run(ember.export(m, (x,), backend=None), (x,))[0]
    from ember.runtime import RuntimeProgram

    rt = RuntimeProgram(prog.buffer)  # one init, several executes with different inputs
    for seed in (1, 2):
        x2 = _r(*shape, seed=seed)
        with torch.inference_mode():
            torch.testing.assert_close(rt.run("forward", [x2])[0], m(x2), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(rt.run("forward", [x])[0], plain, rtol=RTOL, atol=ATOL)


def test_large_arena_is_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose arena is above the limit every device supports is split into delegates that
    fit (here with the limit lowered), and the results do not change."""
    import ember.backends.vulkan.partition as P

    monkeypatch.setattr(P, "MAX_ARENA_BYTES", 12288 * 4)
    torch.manual_seed(0)
    prog = _check(_bn_stats(SmallCNN()).eval(), _r(1, 3, 32, 32))
    assert len(_delegates(prog)) >= 2, prog.explain()
    for d in _delegates(prog):
        assert arena_bytes(d.processed) <= 12288 * 4


class Five(nn.Module):
    """A 5-d multiply between 4-d layers: the Vulkan backend takes up to 4-d, the CPU one 6."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.c(x))
        z = y.reshape(1, 2, 2, 6, 6) * 2.0
        return z.reshape(1, 4, 6, 6) + y


def test_unsupported_stays_portable_and_backend_list() -> None:
    """What the Vulkan backend cannot take stays portable with backend="vulkan"; with
    ["vulkan", "cpu"] the CPU backend takes it and Vulkan the rest."""
    torch.manual_seed(0)
    m = Five().eval()
    x = _r(1, 3, 8, 8)
    prog = _check(m, x, outside=1)
    assert _outside(prog) == ["aten::mul.Scalar_out"], prog.explain()
    both = ember.export(m, (x,), backend=["vulkan", "cpu"])
    assert not _outside(both), both.explain()
    assert len(_delegates(both)) == 2 and len(_delegates(both, "EmberCpuBackend")) == 1
    with torch.inference_mode():
        torch.testing.assert_close(_run(both, (x,))[0], m(x), rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="unknown backend"):
        ember.export(m, (x,), backend=["vulkan", "gpu"])


def test_batch_norm_alone() -> None:
    """A batch norm after no conv runs as a per-channel multiply and add (4-d and 2-d)."""
    torch.manual_seed(0)
    m = _bn_stats(nn.Sequential(nn.BatchNorm2d(3), nn.Conv2d(3, 4, 3), nn.ReLU()))
    _check(m, _r(2, 3, 8, 8))
    bn1 = nn.BatchNorm1d(5)
    bn1.running_mean.uniform_(-0.1, 0.1)
    bn1.running_var.uniform_(0.5, 1.5)
    _check(nn.Sequential(nn.Linear(7, 5), bn1), _r(3, 7))


def test_cli_runs_it_and_names_vulkan_without_a_device(tmp_path: Path) -> None:
    """build/ember registers the backend: the file runs there; with no Vulkan driver (an ICD
    list that names none) prepare fails with a message naming Vulkan."""
    cli = Path(os.environ.get("EMBER_CLI", Path(__file__).resolve().parents[2] / "build/ember"))
    if not cli.exists():
        pytest.skip(f"{cli} not built")
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 5 * 5, 3)).eval()
    x = _r(1, 3, 7, 7)
    ember.export(m, (x,), backend="vulkan").save(tmp_path / "m.pte")
    np.save(tmp_path / "x.npy", x.numpy())
    (tmp_path / "out").mkdir()
    args = [str(cli), "run", "m.pte", "--input", "x.npy", "--output-dir", "out"]
    r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with torch.inference_mode():
        want = m(x).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "out/output_0.npy"), want, rtol=RTOL, atol=ATOL)
    env = {**os.environ, "VK_ICD_FILENAMES": str(tmp_path / "none.json")}
    env.pop("VK_DRIVER_FILES", None)
    r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0 and "Vulkan" in r.stderr and VK in r.stderr, r.stderr


# ---- corrupted blobs --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def blob() -> bytes:
    torch.manual_seed(0)
    m = _bn_stats(SmallCNN()).eval()
    (d,) = _delegates(ember.export(m, (_r(1, 3, 16, 16),), backend="vulkan"))
    return bytes(d.processed)


def test_blob_fields_refused_by_name(blob: bytes) -> None:
    assert runtime_check(VK, blob) is None
    n_tensors = struct.unpack_from("<I", blob, 8)[0]

    def put(off: int, v: int) -> bytes:
        b = bytearray(blob)
        struct.pack_into("<I", b, off, v)
        return bytes(b)

    cases = {
        "magic": put(0, 0x12345678),
        "version": put(4, 9),
        "arena": put(24, struct.unpack_from("<I", blob, 24)[0] + 1),
        "describes": blob[:-4],
        "storage type 2": put(HEAD + 28, 2),  # tensor 0's storage
        "not a multiple": put(HEAD, 2),  # tensor 0's offset, not 4-byte aligned for f32
        "outside": put(HEAD, 0x7FFFFFF0),  # tensor 0's offset
        "rank": put(HEAD + 8, 5),
        "unknown code": put(HEAD + 32 * n_tensors + 4 * 2, 77),  # first op (1 input, 1 output)
    }
    for what, bad in cases.items():
        why = runtime_check(VK, bad)
        assert why is not None and what in why, (what, why)


def test_upsample_fields_refused_by_name() -> None:
    m = Fn(lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"))
    (d,) = _delegates(ember.export(m, (_r(1, 2, 4, 4),), backend="vulkan"))
    blob = bytes(d.processed)
    assert runtime_check(VK, blob) is None
    n_tensors, n_ops, n_in, n_out = struct.unpack_from("<4I", blob, 8)
    assert n_ops == 1
    op = HEAD + 32 * n_tensors + 4 * (n_in + n_out)
    assert struct.unpack_from("<I", blob, op)[0] == 15  # EMV_OP_UPSAMPLE

    def put(off: int, fmt: str, v: float) -> bytes:
        b = bytearray(blob)
        struct.pack_into(fmt, b, off, v)
        return bytes(b)

    cases = {
        "mode 2": put(op + 20, "<i", 2),
        "align_corners 1": put(op + 24, "<i", 1),  # align_corners on nearest
        "unused ip[2]": put(op + 28, "<i", 1),
        "scale fp[0]": put(op + 64, "<f", float("nan")),
        "scale fp[1]": put(op + 68, "<f", -1.0),
    }
    for what, bad in cases.items():
        why = runtime_check(VK, bad)
        assert why is not None and what in why, (what, why)


def test_blob_mutation_sweep(blob: bytes) -> None:
    """Byte flips over the header, tables and operators, and truncations: every mutant is
    refused with a message or accepted (then it is within bounds by construction); none
    crashes the process."""
    rng = random.Random(34)
    n_tensors, n_ops, n_in, n_out = struct.unpack_from("<4I", blob, 8)
    meta = HEAD + 32 * n_tensors + 4 * (n_in + n_out) + 80 * n_ops
    refused = accepted = 0
    for k in range(300):
        b = bytearray(blob)
        if k % 10 == 9:
            b = b[: rng.randrange(len(b))]
        else:
            for _ in range(rng.choice((1, 1, 2, 4))):
                b[rng.randrange(meta)] ^= 1 << rng.randrange(8)
        why = runtime_check(VK, bytes(b))
        if why is None:
            accepted += 1
        else:
            assert VK in why or "INVALID" in why.upper(), why
            refused += 1
    assert refused >= 250 and refused + accepted == 300, (refused, accepted)
