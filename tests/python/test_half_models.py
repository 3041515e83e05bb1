"""float16 / bfloat16 models on the CPU backend (``ember.passes.half``): computed in f32 inside
EmberCpuBackend with the caller's dtypes kept, against the model computed in f32 by eager PyTorch
and rounded once; ``half="keep"`` and the portable path keep the half kernels."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from backend_cpu_common import _outside, _runtime
from torch import nn
from torch.utils import _pytree as pytree

import ember

HALVES = [torch.float16, torch.bfloat16]
ULP = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
CAST = "aten::_to_copy.out"


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.c2 = nn.Conv2d(16, 24, 1)
        self.fc = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.max_pool2d(F.relu(self.bn(self.c1(x))), 2)
        y = F.hardswish(self.c2(F.relu6(self.dw(y)))) + 0.5
        return self.fc(y.mean((2, 3))).softmax(-1)


class Block(nn.Module):
    """A pre-norm transformer block as Hugging Face writes it: RMSNorm in f32 with casts back to
    the input's dtype, SDPA, a gated MLP; also returns an f32 sum and a constant of the dtype."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.rand(d) + 0.5)
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(d, d)

    def norm(self, h: torch.Tensor) -> torch.Tensor:
        v = h.to(torch.float32)
        v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.w * v.to(h.dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, 4, d // 4).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        g, u = self.up(self.norm(h)).chunk(2, -1)
        h = h + self.down(F.silu(g) * u)
        return h, h.sum(-1, dtype=torch.float32), torch.full((2,), 3.0, dtype=x.dtype)


class Embed(nn.Module):
    """Integer tokens into a half table; the logits through a tied projection."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.ln = nn.LayerNorm(16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.ln(self.emb(ids)) @ self.emb.weight.t()


def _run(prog: ember.Program, inputs: tuple, threads: int) -> list[torch.Tensor]:
    return list(_runtime()(prog.buffer, threads=threads).run("forward", list(inputs)))


def _f32_reference(m: nn.Module, inputs: tuple) -> object:
    """``m`` (half) computed in f32 by eager PyTorch: the same weights, exactly widened."""
    mf = copy.deepcopy(m).float()
    xs = tuple(x.float() if x.is_floating_point() else x for x in inputs)
    with torch.inference_mode():
        return mf(*xs)


def _check_once_rounded(got: object, m: nn.Module, inputs: tuple, dtype: torch.dtype) -> None:
    """``got`` has eager's dtypes and is the f32 result rounded once (within one rounding)."""
    with torch.inference_mode():
        eager = m(*inputs)
    ref = _f32_reference(m, inputs)
    got, eager, ref = (pytree.tree_leaves(v) for v in (got, eager, ref))
    assert len(got) == len(eager)
    for g, e, r in zip(got, eager, ref, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        want = r.to(g.dtype).float()
        tol = ULP[dtype] if g.dtype == dtype else 1e-5
        torch.testing.assert_close(
            g.float(), want, rtol=tol, atol=tol * float(want.abs().max()) * 1e-2
        )


def _half(m: nn.Module, dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return m.eval().to(dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize(
    "make,inputs,n_io",
    [
        (Cnn, lambda: (torch.randn(2, 3, 16, 16),), 2),
        (Block, lambda: (torch.randn(2, 8, 32),), 2),  # the f32 sum needs no cast back
        (Embed, lambda: (torch.randint(0, 50, (3, 5)),), 1),
    ],
    ids=["cnn", "block", "embed"],
)
def test_half_model_inside_backend(make, inputs, n_io: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    m = _half(make(), dtype)
    xs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs())
    prog = ember.export(m, xs)
    # Everything but the casts at the method's edges runs in the backend.
    outside = _outside(prog)
    assert set(outside) <= {CAST} and len(outside) <= n_io, outside
    for threads in (1, 2):
        _check_once_rounded(_run(prog, xs, threads), m, xs, dtype)
    # the model itself is untouched
    assert all(p.dtype == dtype for p in m.parameters())


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_keep_and_portable_stay_half(dtype: torch.dtype) -> None:
    m = _half(Cnn(), dtype)
    x = torch.randn(1, 3, 16, 16, dtype=dtype)
    with torch.inference_mode():
        eager = m(x)
    for kw in ({"half": "keep"}, {"backend": None}):
        prog = ember.export(m, (x,), **kw)
        assert "aten::convolution.out" in _outside(prog)
        got = prog.run(x)
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), eager.float(), rtol=4 * ULP[dtype], atol=1e-3)


def test_half_dynamic_batch() -> None:
    """Dynamic shapes keep the portable kernels (the CPU backend's geometry is fixed at export);
    the graph is still re-typed, and every batch size gets the once-rounded f32 result."""
    m = _half(Cnn(), torch.float16)
    x = torch.randn(2, 3, 16, 16, dtype=torch.float16)
    n = torch.export.Dim("n", max=8)
    prog = ember.export(m, (x,), dynamic_shapes=({0: n},))
    for b in (1, 5, 8):
        xb = torch.randn(b, 3, 16, 16, dtype=torch.float16)
        _check_once_rounded(prog.run(xb), m, (xb,), torch.float16)


def test_half_buffer_state_and_f32_input() -> None:
    """Half buffers are widened in the file; an f32 input cast to the model's dtype by the model
    itself stays f32 at the method's edge."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.register_buffer("shift", torch.linspace(-1, 1, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.lin(x.to(self.shift.dtype)) + self.shift)

    m = _half(M(), torch.bfloat16)
    x = torch.randn(4, 8)
    prog = ember.export(m, (x,))
    assert set(_outside(prog)) <= {CAST}
    got = prog.run(x)
    assert got.dtype == torch.bfloat16
    with torch.inference_mode():
        ref = torch.tanh(
            copy.deepcopy(m.lin).float()(x.to(torch.bfloat16).float()) + m.shift.float()
        )
    torch.testing.assert_close(got.float(), ref.to(torch.bfloat16).float(), rtol=2**-7, atol=1e-3)


def test_half_bad_mode() -> None:
    with pytest.raises(ValueError, match="half="):
        ember.export(nn.Linear(2, 2), (torch.randn(1, 2),), half="f16")


def test_half_bitcast_graph_kept() -> None:
    """A graph reading a half tensor's bits (``view(dtype)``) is left in its own dtypes."""
    from ember.passes.half import half_as_f32

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, dtype=torch.float16))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * self.w).view(torch.int16) + 1

    ep = torch.export.export(M(), (torch.randn(4, 8, dtype=torch.float16),))
    before = [str(n.meta.get("val")) for n in ep.graph.nodes]
    half_as_f32(ep)
    assert [str(n.meta.get("val")) for n in ep.graph.nodes] == before
    assert all(t.dtype == torch.float16 for t in ep.state_dict.values())


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_weights_stored_as_halves(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """A half model's weights that the backend keeps as they are (linears) are stored as 16-bit
    halves in the blob (version 19) and widened at init: the file about half an f32 model's,
    the results bit for bit those of f32 storage. Subnormal, signed-zero and extreme halves
    survive the trip; an f32 model whose weights happen to be halves is stored so too."""
    from ember.backends.cpu import blob

    def make() -> nn.Module:
        return nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 64)).eval()

    torch.manual_seed(0)
    m = make()
    with torch.no_grad():
        w = m[0].weight.view(-1)
        tiny = 1e-6 if dtype == torch.float16 else 1e-39  # subnormal in the dtype
        w[:6] = torch.tensor([tiny, -tiny, -0.0, 0.0, 60000.0, -3.0e-5])
    m = m.to(dtype)
    x = torch.randn(3, 128, dtype=dtype) * 0.01
    f32_size = len(ember.export(make(), (x.float(),)).buffer)  # random f32 weights: no halves
    prog = ember.export(m, (x,))
    assert set(_outside(prog)) <= {CAST}
    assert len(prog.buffer) < 0.6 * f32_size, (len(prog.buffer), f32_size)
    mf = copy.deepcopy(m).float()
    assert len(ember.export(mf, (x.float(),)).buffer) < 0.6 * f32_size
    monkeypatch.setattr(blob, "HALF_MIN_ELEMS", 1 << 62)  # the same export, f32 storage
    prog_f32 = ember.export(m, (x,))
    assert len(prog_f32.buffer) > 0.9 * f32_size
    got, want = prog.run(x), prog_f32.run(x)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    _check_once_rounded([got], m, (x,), dtype)
