"""Embeddings, sums, flips and vector norms in EmberCpuBackend (blob version 18).

- ``embedding`` (EMC_OP_EMBEDDING): the table's rows named by an int64 / int32 index input the
  delegate takes as its only integer argument; equal to eager bit for bit; an index outside the
  table fails the execute with an error naming it (nothing crashes, the next run still works).
- ``sum`` over adjacent dims (the mean op's EMC_MEAN_SUM), ``flip`` (EMC_SLICE_REVERSE, exact),
  ``linalg_vector_norm`` of order 1 and 2 (|x| or x * x, their sum, a square root): within f32
  rounding of eager.
- The blob's integer tensors are checked: only an input may be one, and only an embedding may
  read it.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_embedding_reduce.py
"""

from __future__ import annotations

import struct

import pytest
import torch
from backend_cpu_common import _blob_ops, _delegate_blob, _outside
from torch import nn

import ember
from ember.runtime import RuntimeProgram

EMBEDDING, MEAN, SLICE = 20, 7, 13


def _run(prog: ember.Program, xs: list[torch.Tensor], threads: int = 1) -> list[torch.Tensor]:
    return RuntimeProgram(prog.buffer, threads=threads).run("forward", xs)


class _Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e, self.l = nn.Embedding(50, 24), nn.Linear(24, 8)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.e(ids)
        return h, self.l(h)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shape", [(7,), (2, 5), (2, 3, 4)])
def test_embedding_exact_and_inside(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    m = _Embed().eval()
    ids = torch.randint(0, 50, shape, dtype=dtype)
    prog = ember.export(m, (ids,))
    assert not _outside(prog), _outside(prog)
    assert any(o[0] == EMBEDDING for o in _blob_ops(prog))
    ids2 = torch.randint(0, 50, shape, dtype=dtype)
    ids2.view(-1)[0], ids2.view(-1)[-1] = 0, 49  # the table's first and last rows
    for t in (1, 2):
        h, y = _run(prog, [ids2], t)
        assert torch.equal(h, m(ids2)[0])
        torch.testing.assert_close(y, m(ids2)[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [50, -1, 1 << 40])
def test_embedding_index_outside_the_table_is_an_error(bad: int) -> None:
    m = _Embed().eval()
    ids = torch.randint(0, 50, (2, 5))
    prog = ember.export(m, (ids,))
    rt = RuntimeProgram(prog.buffer)
    wrong = ids.clone()
    wrong[1, 2] = bad
    with pytest.raises(Exception, match=f"embedding index {bad} .*outside the table of 50 rows"):
        rt.run("forward", [wrong])
    assert torch.equal(rt.run("forward", [ids])[0], m(ids)[0])  # the program still runs


def test_embedding_indices_of_the_wrong_dtype_are_an_error() -> None:
    m = _Embed().eval()
    ids = torch.randint(0, 50, (2, 5))
    prog = ember.export(m, (ids,))
    with pytest.raises(Exception, match="dtype|int64"):
        _run(prog, [ids.to(torch.int32)])


def test_integer_tensors_are_checked_in_the_blob() -> None:
    """A constant or arena tensor may not be an integer, an integer input may be read by the
    embedding only, and an embedding's indices must be an integer input."""
    from ember.backends.check import runtime_check

    m = _Embed().eval()
    prog = ember.export(m, (torch.randint(0, 50, (2, 5)),))
    blob = bytes(_delegate_blob(prog))
    assert runtime_check("EmberCpuBackend", blob, 1 << 20) is None
    n_tensors = struct.unpack_from("<I", blob, 8)[0]
    t_off = struct.unpack_from("<Q", blob, 32)[0]
    recs = [struct.unpack_from("<IIQI6iI", blob, t_off + 48 * i) for i in range(n_tensors)]
    emb = next(o for o in _blob_ops(prog) if o[0] == EMBEDDING)
    table, idx = struct.unpack_from("<2i", blob, emb[1] + 8)
    assert recs[idx][0] == 0 and recs[idx][-1] == 1  # an input of dtype int64

    def refusal(edit: tuple[int, int]) -> str | None:
        bad = bytearray(blob)
        struct.pack_into("<I", bad, *edit)
        return runtime_check("EmberCpuBackend", bytes(bad), 1 << 20)

    why = refusal((t_off + 48 * table + 44, 1))  # the constant table made an int64
    assert why and "integers only as inputs" in why, why
    why = refusal((t_off + 48 * idx + 44, 0))  # the indices made f32
    assert why and "not an integer input" in why, why
    why = refusal((t_off + 48 * idx + 44, 7))
    assert why and "dtype 7" in why, why
    gemm = next(o for o in _blob_ops(prog) if o[0] != EMBEDDING)
    why = refusal((gemm[1] + 8, idx))  # another op reading the int64 input
    assert why and "integer tensor" in why, why


class _Reduce(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.relu(x) - 0.25
        return (
            y.sum(),
            y.sum(dim=(1, 2)),
            y.sum(-1, keepdim=True),
            torch.sum(y, 0, dtype=torch.float32),
            torch.linalg.vector_norm(y, dim=-1),
            torch.linalg.vector_norm(y, 1, dim=(2, 3), keepdim=True),
            torch.linalg.vector_norm(y),
        )


def test_sums_and_norms_close_to_eager() -> None:
    torch.manual_seed(0)
    m = _Reduce().eval()
    x = torch.randn(2, 3, 5, 7)
    prog = ember.export(m, (x,))
    assert not _outside(prog), _outside(prog)
    sums = [o for o in _blob_ops(prog) if o[0] == MEAN]
    assert sums and all(o[2][3] == 1 for o in sums)  # EMC_MEAN_SUM
    x2 = torch.randn(2, 3, 5, 7) * 10
    for t in (1, 2):
        for g, w in zip(_run(prog, [x2], t), m(x2), strict=True):
            assert g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=2e-6, atol=2e-5)


def test_mean_is_still_a_mean() -> None:
    """The sum flag is per op: a mean next to a sum of the same tensor divides."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x.mean(-1) * 1.5, x.sum(-1) * 1.5

    x = torch.randn(3, 40)
    prog = ember.export(M(), (x,))
    for g, w in zip(_run(prog, [x]), M()(x), strict=True):
        torch.testing.assert_close(g, w, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("dims", [(0,), (1,), (-1,), (1, 2), (0, 1, 2, 3)])
def test_flip_exact(dims: tuple[int, ...]) -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (torch.relu(x) - 0.5).flip(dims) * 2.0

    x = torch.randn(2, 3, 4, 5)
    prog = ember.export(M(), (x,))
    assert not _outside(prog), _outside(prog)
    assert any(o[0] == SLICE and o[2][6] == 1 for o in _blob_ops(prog))  # EMC_SLICE_REVERSE
    x2 = torch.randn(2, 3, 4, 5)
    for t in (1, 2):
        assert torch.equal(_run(prog, [x2], t)[0], M()(x2))


def test_slice_reverse_flag_checked() -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).flip(1)

    prog = ember.export(M(), (torch.randn(2, 6),))
    blob = bytes(_delegate_blob(prog))
    from ember.backends.check import runtime_check

    at = next(o[1] for o in _blob_ops(prog) if o[0] == SLICE)
    bad = bytearray(blob)
    struct.pack_into("<i", bad, at + 32 + 4 * 6, 2)
    why = runtime_check("EmberCpuBackend", bytes(bad), 1 << 20)
    assert why and "reverse flag" in why, why


@pytest.mark.parametrize("dims", [(0, 2), (1, 3), (0, 1, 3), (0, 3)])
@pytest.mark.parametrize("op", ["mean", "sum"])
def test_mean_and_sum_over_non_adjacent_dims(op: str, dims: tuple[int, ...]) -> None:
    """Means / sums over dims that are not adjacent: one backend op per run of adjacent dims, the
    innermost first; within f32 rounding of eager's single reduction."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(x) - 0.25
            return y.mean(dims, keepdim=True) if op == "mean" else y.sum(dims)

    x = torch.randn(2, 3, 5, 7)
    prog = ember.export(M(), (x,))
    assert not _outside(prog), _outside(prog)
    assert len([o for o in _blob_ops(prog) if o[0] == MEAN]) == 1 + sum(
        b - a > 1 for a, b in zip(dims, dims[1:], strict=False)
    )
    x2 = torch.randn(2, 3, 5, 7) * 4
    for t in (1, 2):
        torch.testing.assert_close(_run(prog, [x2], t)[0], M()(x2), rtol=2e-6, atol=2e-5)
