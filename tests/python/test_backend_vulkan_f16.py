"""EmberVulkanBackend with f16 storage (``ember.export(..., backend="vulkan",
vulkan_storage="f16")``, mixed: f16 weight matrices and activations, f32 biases / norm
parameters and the activations from a layer norm or softmax on): every operator family against
eager PyTorch, the storage each tensor gets, a small CNN and an MLP against eager and the
portable kernels, the fallback to f32 storage (``em_vulkan_allow_f16_storage(false)``, as on a
device without 16-bit storage) and the blob's storage fields refused when corrupted.

The error of an output is max |got - eager| / max |eager| (the largest magnitude of the eager
output as the scale), at most :data:`OP_TOL` per operator test: f16 keeps 11 significant bits,
so each stored value is within 2^-11 (4.9e-4) of the f32 one relative to itself, and an
operator's inputs, weights and output are each rounded once. Where the device has 16-bit
storage, every output the blob stores as f16 must also be exactly representable in f16 (it was
stored as f16 and widened), which shows the f16 shaders ran.

Runs on any Vulkan device (lavapipe in CI, `make vulkan-deps`). Skipped, with a message, only
when the library was built without Vulkan or no device exists.
"""

from __future__ import annotations

import copy
import ctypes
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from test_backend_vulkan import (
    CONVS,
    MLP,
    Fn,
    SmallCNN,
    _bn_stats,
    _delegates,
    _outside,
    _r,
    _run,
    binary_case,
    conv_case,
    mm_case,
    norms_case,
    pad_case,
    pools_case,
    scalars_case,
    select_case,
    shapes_case,
    unary_case,
)
from torch import nn
from vulkan_common import DEVICE, VK, needs_vulkan

import ember
from ember.backends.check import runtime_check
from ember.backends.vulkan.blob import HEADER_WORDS, tensor_table

pytestmark = needs_vulkan

OP_TOL = 3e-3  # max |got - eager| / max |eager| for one operator with f16 storage
MODEL_TOL = 1e-3  # the bound for whole models with f16 storage


def _lib() -> ctypes.CDLL:
    from ember._lib import lib

    L = lib()
    L.em_vulkan_has_f16_storage.restype = ctypes.c_bool
    L.em_vulkan_allow_f16_storage.argtypes = [ctypes.c_bool]
    L.em_vulkan_allow_f16_storage.restype = None
    return L


HAS_F16 = bool(_lib().em_vulkan_has_f16_storage()) if DEVICE else False


@contextmanager
def f32_storage() -> Iterator[None]:
    """Delegates initialized inside run f16 blobs with f32 storage (the fallback)."""
    L = _lib()
    L.em_vulkan_allow_f16_storage(False)
    try:
        yield
    finally:
        L.em_vulkan_allow_f16_storage(True)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))


def _f16_exact(t: torch.Tensor) -> bool:
    return bool((t.half().float() == t).all())


def _output_storage(prog: ember.Program) -> list[int]:
    """The storage code (0 f32, 1 f16) the delegates' blobs give each program output."""
    by_root: dict[int, int] = {}
    for d in _delegates(prog):
        rows, _, outs = tensor_table(d.processed)
        for arg, t in zip(d.outputs, outs, strict=True):
            by_root[id(arg.value.root())] = rows[t][3]
    return [by_root[id(a.value.root())] for a in prog._irs["forward"].outputs]


def _check16(
    m: nn.Module, *inputs: torch.Tensor, tol: float = OP_TOL, f32_out: set[int] = frozenset()
) -> ember.Program:
    """Exports ``m`` with f16 storage, runs it and compares every output with eager; the
    outputs numbered in ``f32_out`` must be stored as f32 by the mixed-storage rule, the others
    as f16 (and, where the device has 16-bit storage, be exactly representable in f16)."""
    m = m.eval()
    with torch.inference_mode():
        want = m(*inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    prog = ember.export(m, inputs, backend="vulkan", vulkan_storage="f16")
    assert _delegates(prog) and not _outside(prog), prog.explain()
    for d in _delegates(prog):
        assert struct.unpack_from("<I", d.processed, 4)[0] == 3, d.summary  # blob version 3
    stored = _output_storage(prog)
    assert stored == [0 if k in f32_out else 1 for k in range(len(want))], stored
    got = _run(prog, inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == torch.float32
        assert _rel(g, w) <= tol, (k, _rel(g, w))
        if HAS_F16 and k not in f32_out:
            assert _f16_exact(g), k
    return prog


# ---- operators (the families of test_backend_vulkan.py) ---------------------------------------

FAMILIES = {
    "mm": mm_case,
    "binary": lambda: binary_case((5, 1, 3), (1, 7, 1)),
    "scalars": scalars_case,
    "unary": unary_case,
    "pools": pools_case,
    "norms": norms_case,
    "shapes": shapes_case,
    "select": select_case,
    "pad": pad_case,
}


# outputs the mixed-storage rule keeps f32: in norms, all (softmax, log-softmax, layer norms, and
# the means of a layer norm's input)
F32_OUT = {"norms": set(range(6))}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family(family: str) -> None:
    m, xs = FAMILIES[family]()
    _check16(m, *xs, f32_out=F32_OUT.get(family, set()))


def test_mixed_storage_rule() -> None:
    """Which tensor gets which storage: conv / linear weight matrices f16, biases and norm
    parameters f32; activations f16 up to a layer norm, whose input and everything computed
    from its output (or a softmax's) are f32."""
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.fc1 = nn.Conv2d(3, 4, 3), nn.Linear(16, 16)
            self.ln, self.fc2 = nn.LayerNorm(16), nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            h = torch.relu(self.conv(x)).flatten(2)  # [1, 4, 16]
            r = self.fc1(h) + h  # a residual stream into the layer norm
            y = torch.softmax(self.fc2(self.ln(r)), -1)
            return h, y

    m, x = Block().eval(), _r(1, 3, 6, 6)
    prog = _check16(m, x, f32_out={1})
    (d,) = _delegates(prog)
    rows, ins, outs = tensor_table(d.processed)
    n_tensors, n_ops, n_in, n_out = struct.unpack_from("<4I", d.processed, 8)
    at = 4 * (HEADER_WORDS + 8 * n_tensors + n_in + n_out)
    storage = {}  # (op code, operand) -> storage of that tensor
    for k in range(n_ops):
        code, *io = struct.unpack_from("<5I", d.processed, at + 80 * k)
        for j, t in enumerate(io):
            if t != 0xFFFFFFFF:
                storage.setdefault((code, j), set()).add(rows[t][3])
    assert storage[(4, 0)] == {1} and storage[(4, 1)] == {1} and storage[(4, 2)] == {0}  # conv
    assert storage[(4, 3)] == {1}  # the conv's output (relu fused), before any layer norm
    assert storage[(7, 0)] == {0} and storage[(7, 1)] == {0} and storage[(7, 3)] == {0}  # ln
    assert storage[(3, 1)] == {1} and storage[(3, 2)] == {0}  # linear weights f16, biases f32
    assert storage[(3, 3)] == {0, 1}  # fc1's output f16 (before the add), fc2's f32
    assert storage[(6, 0)] == {0} and storage[(6, 3)] == {0}  # softmax
    assert [rows[t][3] for t in ins] == [1]


def test_linear() -> None:
    torch.manual_seed(0)
    _check16(nn.Linear(33, 9), _r(3, 5, 33))
    _check16(nn.Linear(1, 1), _r(1, 1))


@pytest.mark.parametrize("cin, cout, k, stride, pad, dil, groups, hw, bias", CONVS)
def test_conv2d(cin, cout, k, stride, pad, dil, groups, hw, bias) -> None:  # noqa: ANN001
    m, xs = conv_case(cin, cout, k, stride, pad, dil, groups, hw, bias)
    _check16(nn.Sequential(m, nn.ReLU6()), *xs)


@pytest.mark.parametrize("mode", ["nearest", "bilinear-align", "bilinear"])
def test_upsample(mode: str) -> None:
    extra = {} if mode == "nearest" else dict(align_corners=mode == "bilinear-align")
    m = mode.split("-")[0]
    _check16(
        Fn(
            lambda x: (
                F.interpolate(x + 0.5, mode=m, scale_factor=1.5, **extra),
                F.interpolate(x, mode=m, size=(7, 5), **extra),
                F.interpolate(x, mode=m, size=(2, 3), **extra),
            )
        ),
        _r(1, 2, 3, 4),
    )


# ---- models, the fallback, blobs -----------------------------------------------------------


@pytest.mark.parametrize("model, shape", [(SmallCNN, (2, 3, 32, 29)), (MLP, (5, 33))])
def test_models_against_eager_and_portable(model, shape) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    m = _bn_stats(model()).eval()
    x = _r(*shape)
    prog = _check16(m, x, tol=MODEL_TOL, f32_out={0})  # both end in a softmax: f32
    assert len(_delegates(prog)) == 1, prog.explain()
    f32 = ember.export(m, (x,), backend="vulkan")  # half the blob: weights and arena
    assert len(_delegates(prog)[0].processed) < 0.6 * len(_delegates(f32)[0].processed)
    plain = _run(ember.export(m, (x,), backend=None), (x,))[0]
    from ember.runtime import RuntimeProgram

    rt = RuntimeProgram(prog.buffer)  # one init, several executes
    for seed in (1, 2):
        x2 = _r(*shape, seed=seed)
        with torch.inference_mode():
            assert _rel(rt.run("forward", [x2])[0], m(x2)) <= MODEL_TOL
    assert _rel(rt.run("forward", [x])[0], plain) <= MODEL_TOL


def test_fallback_to_f32_storage() -> None:
    """With f16 storage turned off (as on a device without it) an f16 file runs with f32
    storage: its weights, rounded to f16 at export, are widened at init, and the result is the
    eager model with those rounded weights to f32 accuracy."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 5)
    ).eval()
    x = _r(2, 3, 6, 6)
    prog = ember.export(m, (x,), backend="vulkan", vulkan_storage="f16")
    rounded = copy.deepcopy(m)
    for p in rounded.parameters():  # the weight matrices f16, the biases f32 (mixed storage)
        if p.dim() >= 2:
            p.data = p.data.half().float()
    with torch.inference_mode():
        want = rounded(x)
    with f32_storage():
        got = _run(prog, (x,))[0]
    assert _rel(got, want) <= 1e-5, _rel(got, want)
    assert not _f16_exact(got)  # stored as f32
    got16 = _run(prog, (x,))[0]  # f16 storage again (where the device has it)
    assert _rel(got16, want) <= OP_TOL
    assert _f16_exact(got16) == HAS_F16


def test_weights_beyond_f16_stay_portable() -> None:
    """A weight matrix f16 cannot hold (|w| > 65504) keeps its operator off an f16 delegate;
    other constants are stored as f32 (mixed storage), so a large one stays on it."""
    big, wbig = torch.full((1, 4), 1e5), torch.full((4, 3), 1e5)
    m = Fn(lambda x, c, w: (torch.relu(x) / c, torch.tanh(x) @ w), big, wbig)
    x = _r(3, 4)
    prog = ember.export(m, (x,), backend="vulkan", vulkan_storage="f16")
    assert _outside(prog) == ["aten::mm.out"], prog.explain()
    with torch.inference_mode():
        want = m(x)
    for g, w in zip(_run(prog, (x,)), want, strict=True):
        assert _rel(g, w) <= OP_TOL
    with pytest.raises(ValueError, match="vulkan_storage"):
        ember.export(m, (x,), backend="vulkan", vulkan_storage="bf16")


def test_storage_field_refused_by_name() -> None:
    torch.manual_seed(0)
    m = _bn_stats(SmallCNN()).eval()
    (d,) = _delegates(ember.export(m, (_r(1, 3, 16, 16),), backend="vulkan", vulkan_storage="f16"))
    blob = bytes(d.processed)
    assert runtime_check(VK, blob) is None

    rows = tensor_table(blob)[0]
    # the f16 constant that ends the weights section
    mat = max((w, k) for k, (_, w, _, st) in enumerate(rows) if w != 0xFFFFFFFF and st == 1)[1]

    def storage(t: int, v: int) -> bytes:  # tensor t's storage field
        b = bytearray(blob)
        struct.pack_into("<I", b, 4 * (HEADER_WORDS + 8 * t) + 28, v)
        return bytes(b)

    for what, bad in {
        "tensor 0: storage type 3": storage(0, 3),
        "storage type 4294967295": storage(0, 0xFFFFFFFF),
        "weights section|multiple": storage(mat, 0),  # an f16 weight as f32: twice as long
        "version 2": blob[:4] + struct.pack("<I", 2) + blob[8:],  # a version-2 blob
    }.items():
        why = runtime_check(VK, bad)
        assert why is not None and any(w in why for w in what.split("|")), (what, why)
