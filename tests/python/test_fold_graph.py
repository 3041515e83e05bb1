"""Constant subgraphs folded at export (python/ember/passes/fold_graph.py): what a model computes
from its weights and static shapes alone becomes a constant, so it neither runs per call nor keeps
its consumers out of the CPU backend. Each case is checked against eager PyTorch on the default
and portable paths, with what must have been folded, what must not (large results, symbolic
shapes, mutated buffers, random ops, Q/DQ), and the constants left in the program.

Run: .venv/bin/python -m pytest tests/python/test_fold_graph.py
"""

from __future__ import annotations

import torch
from backend_cpu_common import _outside
from torch import nn

import ember
from ember.passes.capture import capture
from ember.passes.decompose import decompose
from ember.passes.fold_graph import fold_constant_subgraphs
from ember.runtime import RuntimeProgram


def _folded(m: nn.Module, x: tuple, dynamic_shapes: object = None) -> torch.export.ExportedProgram:
    ep = decompose(capture(m, x, dynamic_shapes=dynamic_shapes))
    return fold_constant_subgraphs(ep)


def _ops(ep: torch.export.ExportedProgram) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def _check(m: nn.Module, x: tuple, threads: int = 2) -> ember.Program:
    prog = ember.export(m, x)
    plain = ember.export(m, x, backend=None)
    want = m(*x)
    for p in (prog, plain):
        got = RuntimeProgram(p.buffer, threads=threads).run("forward", list(x))[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    return prog


class _StdConv(nn.Module):
    """BiT's weight-standardized convolution: the weight normalized on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv.weight
        w = nn.functional.batch_norm(w.reshape(1, 16, -1), None, None, training=True, eps=1e-6)
        y = nn.functional.conv2d(x, w.reshape_as(self.conv.weight), self.conv.bias, padding=1)
        return self.conv2(torch.relu(y))


def test_weight_standardization_folds_into_the_conv() -> None:
    m = _StdConv().eval()
    x = (torch.randn(1, 8, 12, 12),)
    ep = _folded(m, x)
    assert not any("batch_norm" in o for o in _ops(ep)), _ops(ep)
    names = {s.target for s in ep.graph_signature.input_specs if s.target}
    assert "conv.weight" not in names, names  # replaced by its standardized form, not kept too
    prog = _check(m, x)
    assert not _outside(prog), _outside(prog)


class _Masks(nn.Module):
    """A causal mask and positions from static shapes, a class token expanded to the batch, a
    zeros_like of the input: all constant."""

    def __init__(self) -> None:
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 16))
        self.pos = nn.Parameter(torch.randn(1, 9, 16))
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = torch.cat([self.cls.expand(b, -1, -1), x], 1) + self.pos
        i = torch.arange(s + 1)
        mask = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))
        a = torch.softmax(self.lin(h) @ h.transpose(1, 2) + mask, -1) @ h
        return a + torch.zeros_like(a) * 2


def test_masks_positions_and_tokens_fold() -> None:
    m = _Masks().eval()
    x = (torch.randn(2, 8, 16),)
    ep = _folded(m, x)
    ops = _ops(ep)
    bad = ("arange", "where", ".le", "zeros_like", "full", "mul")
    assert not any(k in o for o in ops for k in bad), ops
    # the two matmuls' own two each, and the token's broadcast to the batch (not stored: it
    # would be the token repeated; the backend broadcasts it)
    assert sum("expand" in o for o in ops) == 5, ops
    prog = _check(m, x)
    assert not _outside(prog), _outside(prog)


class _Big(nn.Module):
    """A 1024 x 1024 f32 mask (4 MiB, from nothing) added whole: stays an operator (its 1 MiB
    boolean triangle is folded); a small slice of one is folded (the large intermediates exist
    only at export)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.full((1024, 1024), 1.5).triu() + torch.full((1024, 1024), 2.0)[:1, :1]


def test_large_results_stay_operators() -> None:
    m = _Big().eval()
    x = (torch.randn(1024, 1024),)
    ep = _folded(m, x)
    ops = _ops(ep)
    assert ops.count("aten.full.default") == 1 and "aten.where.self" in ops, ops  # triu's where
    assert all(v.numel() * v.element_size() <= 1 << 20 for v in ep.constants.values())
    _check(m, x)


class _Positions(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.arange(x.shape[1], dtype=torch.float32)


def test_symbolic_shapes_stay_operators() -> None:
    m = _Positions().eval()
    x = (torch.randn(2, 7),)
    dyn = {"x": {1: torch.export.Dim("n", min=2, max=64)}}
    ep = _folded(m, x, dyn)
    assert any("arange" in o for o in _ops(ep)), _ops(ep)
    prog = ember.export(m, x, dynamic_shapes=dyn)
    rt = RuntimeProgram(prog.buffer)
    for n in (3, 7, 20):
        x2 = torch.randn(2, n)
        torch.testing.assert_close(rt.run("forward", [x2])[0], m(x2))


class _Counter(nn.Module):
    """A buffer updated on every call: what reads it is not constant."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("n", torch.zeros(1))
        self.register_buffer("k", torch.full((1,), 3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.n.add_(1.0)
        return x * (self.n * 2.0) + self.k * 2.0


def test_mutated_buffers_are_not_folded() -> None:
    m = _Counter().eval()
    x = (torch.randn(4),)
    ep = _folded(m, x)
    ops = _ops(ep)
    assert sum("mul" in o for o in ops) == 2, ops  # n * 2 and x * (.) stay; k * 2 folded
    prog = ember.export(_Counter().eval(), x, backend=None)
    rt = RuntimeProgram(prog.buffer)
    ref = _Counter().eval()
    for _ in range(3):
        torch.testing.assert_close(rt.run("forward", [x[0]])[0], ref(x[0]))


def test_int8_weight_dequantize_is_not_folded() -> None:
    """A PT2E-quantized linear keeps its int8 weight and dequantize: the backend's int8 path
    reads them (folding the dequantize would store an f32 weight)."""
    from ember.quant.pt2e import quantize_exported

    m = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8)).eval()
    x = torch.randn(4, 32)
    q = quantize_exported(m, (x,), [(x,)], progress=False)
    ep = fold_constant_subgraphs(decompose(capture(q, (x,))))
    assert any("dequantize_per_channel" in o for o in _ops(ep)), _ops(ep)
    assert any(
        v.dtype == torch.int8 for v in list(ep.constants.values()) + list(ep.state_dict.values())
    )
