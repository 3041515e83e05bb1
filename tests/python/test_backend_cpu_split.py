"""Splits and selects in EmberCpuBackend: ``split`` / ``chunk`` (``split_with_sizes_copy``: several
outputs), ``unbind`` and ``select`` run as the backend's slices (an LSTM's gates, GPT-2's fused
QKV, a classifier's CLS token), so they no longer cut a run in two. Values are copies: equal to
eager's bit for bit, NaN and -0.0 included, at 1 and 2 threads; nothing left outside.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_split.py
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
import torch
from backend_cpu_common import _blob_ops, _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram


class _Parts(nn.Module):
    """``fn`` of ``relu(x) - 0.5`` (so every piece is cut from a tensor the run produces); each
    piece then gets its own affine, so the pieces stay distinct tensors."""

    def __init__(self, fn: Callable[[torch.Tensor], tuple[torch.Tensor, ...]]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        parts = self.fn(torch.relu(x) - 0.5)
        return tuple(p * (i + 2.0) for i, p in enumerate(parts))


def _hostile(x: torch.Tensor) -> torch.Tensor:
    x = x.clone().reshape(-1)
    x[0], x[-1] = float("nan"), -0.0
    return x.reshape_as(x)


def _check(m: nn.Module, x: torch.Tensor, inside: bool = True) -> ember.Program:
    prog = ember.export(m, (x,))
    if inside:
        assert not _outside(prog), _outside(prog)
    x2 = torch.randn(x.shape)
    x2.view(-1)[0] = float("nan")
    want = m(x2)
    want = want if isinstance(want, tuple) else (want,)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape, (g.shape, w.shape)
            assert torch.equal(torch.nan_to_num(g, 7.0), torch.nan_to_num(w, 7.0)), (g, w)
    return prog


_SHAPE = (2, 5, 6, 7)
GATHER = 22


@pytest.mark.parametrize("dim", [0, 1, 2, 3, -1])
def test_split_uneven_sizes_every_dim(dim: int) -> None:
    n = _SHAPE[dim]
    sizes = [1, n - 1] if n < 4 else [2, 1, n - 3]
    _check(_Parts(lambda y: torch.split(y, sizes, dim=dim)), torch.randn(_SHAPE))


@pytest.mark.parametrize(("chunks", "dim"), [(3, 3), (2, 2), (5, 1), (4, -1)])
def test_chunk_with_a_short_last_piece(chunks: int, dim: int) -> None:
    _check(_Parts(lambda y: y.chunk(chunks, dim=dim)), torch.randn(_SHAPE))


@pytest.mark.parametrize("dim", [0, 1, 3])
def test_unbind(dim: int) -> None:
    _check(_Parts(lambda y: y.unbind(dim)), torch.randn(_SHAPE))


@pytest.mark.parametrize(("dim", "index"), [(0, 1), (1, -1), (2, 0), (3, -7), (-1, 3)])
def test_select(dim: int, index: int) -> None:
    _check(_Parts(lambda y: (y.select(dim, index),)), torch.randn(_SHAPE))


def test_only_some_pieces_read() -> None:
    """A split whose middle piece nothing reads, the last piece a method output as it is."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a, _, c = torch.split(torch.relu(x), [2, 3, 2], dim=-1)
            return a * 3.0, c

    _check(M(), torch.randn(3, 4, 7))


def test_split_of_a_method_input() -> None:
    """The split is the run's first operator: its input comes from outside the delegate."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = x.chunk(2, dim=1)
            return a * b  # a GLU without its sigmoid (whose vector code is not eager's)

    _check(M(), torch.randn(2, 8, 5))


def test_gpt2_style_fused_qkv_attention() -> None:
    """GPT-2's one linear for Q, K and V, split, then attention: one delegate, close to eager."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(32, 96), nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).split(32, dim=2)
            q, k, v = (t.view(1, 6, 4, 8).transpose(1, 2) for t in (q, k, v))
            a = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, dim=-1) @ v
            return self.o(a.transpose(1, 2).reshape(1, 6, 32))

    torch.manual_seed(0)
    m = M().eval()
    x = torch.randn(1, 6, 32)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0]
        torch.testing.assert_close(got, m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_recurrent_gates_inside(cell: str) -> None:
    """An unrolled LSTM / GRU: each step's gates are a split of one product; nothing of it is
    left on the portable kernels, and the output matches eager."""
    torch.manual_seed(0)
    rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(12, 64, num_layers=2, batch_first=True).eval()

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = rnn

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0]

    m = M().eval()
    x = torch.randn(1, 5, 12)
    prog = ember.export(m, (x,))
    assert not [k for k in _outside(prog) if "split" in k or "select" in k], _outside(prog)
    # each step transposes the same weights: the blob holds each packed form once, so 5 more
    # steps add their operators, not 5 more copies of the weights
    weights = sum(p.numel() * 4 for p in m.parameters())
    longer = ember.export(m, (torch.randn(1, 10, 12),))
    assert len(longer.buffer) - len(prog.buffer) < weights, (len(longer.buffer), weights)
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0]
        torch.testing.assert_close(got, m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [5, 8, 9, 17, 40])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_of_many_inputs(n: int, dim: int) -> None:
    """A cat of more than EMC_OP_CAT's 4 inputs (an RNN's time steps, DenseNet's features) runs
    as cats of up to 4, exactly, with pieces of different lengths and a constant among them."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Parameter(torch.randn(2, 3, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pieces = []
            for i in range(n):
                p = x * float(i + 1)
                if i % 3 == 2:  # a longer piece
                    p = torch.cat([p, p - 1.0], dim=dim)
                pieces.append(p if i != n // 2 else self.c)
            return torch.cat(pieces, dim=dim)

    _check(M(), torch.randn(2, 3, 4))


@pytest.mark.parametrize(
    ("size", "stride", "copy"),
    [
        ((2, 12), (12, 1), True),
        ((2, 1, 12), (12, 99, 1), True),  # a size-1 dim's stride does not matter
        ((2, 6), (12, 2), False),  # every other element: a gather
        ((2, 12), (1, 2), False),  # a transpose
        ((5, 4), (4, 1), False),  # overlapping windows
    ],
)
def test_as_strided(size: tuple[int, ...], stride: tuple[int, ...], copy: bool) -> None:
    """``as_strided`` that views all of a contiguous tensor in order (adaptive_avg_pool1d's
    decomposition in Swin's and FocalNet's poolers) is a copy in the backend, any other view a
    gather (EMC_OP_GATHER); both equal eager."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).as_strided(size, stride) * 2.0

    x = torch.randn(4, 6)
    prog = ember.export(M(), (x,))
    assert not _outside(prog), _outside(prog)
    assert any(o[0] == GATHER for o in _blob_ops(prog)) != copy
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x])[0]
        assert torch.equal(got, M()(x))


def test_cat_skips_a_legacy_empty_operand() -> None:
    """``cat([tensor([]), k])`` (a legacy empty KV cache) is ``k``: ATen skips 1-d empty
    operands, and so does the backend's cat."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("empty", torch.zeros(0))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            k = torch.relu(x)
            return torch.cat([self.empty, k], dim=-2), torch.cat([self.empty, k, k * 2], dim=1)

    _check(M(), torch.randn(2, 3, 4))


class _Index(nn.Module):
    """Advanced indexing and gathers by constant indices (an unfold's patches, ConvBERT's
    span gather): negative and broadcast indices."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.register_buffer("i", torch.tensor([[2, -1, 0], [1, 1, -4]]))
        self.register_buffer("j", torch.tensor([[0], [3]]))
        self.register_buffer("g", torch.randint(0, 6, (2, 5, 6)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x) - 0.5
        if self.kind == "index":
            z = y[:, self.i]
        elif self.kind == "index2":
            z = y[:, self.i, self.j]  # two index tensors, broadcast together
        else:
            z = torch.gather(y, 2, self.g)
        return z * 2.0


@pytest.mark.parametrize("kind", ["index", "index2", "gather"])
def test_gather_by_constant_indices(kind: str) -> None:
    m = _Index(kind).eval()
    x = torch.randn(2, 5, 6)
    prog = _check(m, x)
    assert any(o[0] == GATHER for o in _blob_ops(prog))


def test_gather_offsets_checked_at_load() -> None:
    """A gather whose offsets are not a constant (patched to the input) is refused at load."""
    from backend_cpu_common import _delegate_blob

    from ember.backends.check import runtime_check

    prog = ember.export(_Index("index").eval(), (torch.randn(2, 5, 6),))
    blob = bytes(_delegate_blob(prog))
    at = next(o[1] for o in _blob_ops(prog) if o[0] == GATHER)
    assert runtime_check("EmberCpuBackend", blob, 1 << 20) is None
    x_id = struct.unpack_from("<i", blob, at + 8)[0]
    bad = bytearray(blob)
    struct.pack_into("<i", bad, at + 12, x_id)  # in[1] := in[0]
    why = runtime_check("EmberCpuBackend", bytes(bad), 1 << 20)
    assert why and "offsets are not a constant" in why, why
