"""Exported programs agree with eager PyTorch (f32 relative error <= 1e-5) on stock ExecuTorch
and on Ember's runtime."""

from __future__ import annotations

import functools

import pytest
import torch
from conftest import (
    MLP,
    RUNTIMES,
    Accumulator,
    Block,
    CondModel,
    DynMLP,
    SmallCNN,
    assert_close,
    export_for_tests,
    make_runner,
    randomize_bn,
)


@functools.cache
def _exported(name: str) -> tuple[torch.nn.Module, object]:
    """Model and program, exported once for both runtimes (programs are immutable)."""
    torch.manual_seed(0)
    make, shape = {
        "mlp": (lambda: MLP().eval(), (3, 16)),
        "cnn": (lambda: randomize_bn(SmallCNN()), (2, 3, 8, 8)),
        "block": (lambda: Block().eval(), (2, 8, 32)),
        "cond": (CondModel, (2, 4)),
    }[name]
    m = make()
    return m, export_for_tests(m, (torch.randn(*shape),))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_mlp(rt: str) -> None:
    m, prog = _exported("mlp")
    run = make_runner(rt, prog)
    for _ in range(2):
        x = torch.randn(3, 16)
        (out,) = run(x)
        assert_close(out, m(x).detach())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_cnn_batchnorm_pool_residual(rt: str) -> None:
    m, prog = _exported("cnn")
    run = make_runner(rt, prog)
    x = torch.randn(2, 3, 8, 8)
    (out,) = run(x)
    assert_close(out, m(x).detach())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_transformer_block(rt: str) -> None:
    m, prog = _exported("block")
    run = make_runner(rt, prog)
    x = torch.randn(2, 8, 32)
    (out,) = run(x)
    assert_close(out, m(x).detach())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_cond_both_branches(rt: str) -> None:
    m, prog = _exported("cond")
    run = make_runner(rt, prog)
    for x in (torch.rand(2, 4) + 0.1, -torch.rand(2, 4) - 0.1, torch.rand(2, 4) + 0.1):
        (out,) = run(x)
        assert_close(out, m(x).detach())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_mutable_buffer_persists(rt: str) -> None:
    export_model = Accumulator()
    prog = export_for_tests(export_model, (torch.ones(4),))
    # Export must not have touched the module's state.
    assert torch.equal(export_model.total, torch.full((4,), 5.0))
    run = make_runner(rt, prog)
    eager = Accumulator()
    for i in range(3):
        x = torch.arange(4, dtype=torch.float32) * (i + 1)
        total2, calls = run(x)
        want_total2, want_calls = eager(x)
        assert_close(total2, want_total2)
        assert torch.equal(calls, want_calls), (calls, want_calls)
    assert int(calls) == 3


@pytest.mark.parametrize("rt", RUNTIMES)
def test_bounded_dynamic_dim(rt: str) -> None:
    m = DynMLP()
    n = torch.export.Dim("n", min=1, max=16)
    prog = export_for_tests(m, (torch.randn(4, 8),), dynamic_shapes=({0: n},))
    run = make_runner(rt, prog)
    for rows in (1, 7, 16):
        x = torch.randn(rows, 8)
        (out,) = run(x)
        assert_close(out, m(x).detach())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_two_methods_share_weights(rt: str) -> None:
    lin = torch.nn.Linear(64, 64)
    head = torch.nn.Linear(64, 4)

    class Enc(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = lin

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.lin(x))

    class Cls(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.head = lin, head

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.tanh(self.lin(x)))

    x = torch.randn(2, 64)
    prog = export_for_tests({"encode": (Enc(), (x,)), "classify": (Cls(), (x,))})
    assert sorted(prog.methods) == ["classify", "encode"]
    one = export_for_tests({"encode": (Enc(), (x,))})
    # lin.weight (16 KiB) is stored once: the second method adds head's constants and its
    # plan's metadata only.
    assert len(prog.buffer) - len(one.buffer) < lin.weight.numel() * 4 // 2
    x = torch.randn(2, 64)
    (e,) = make_runner(rt, prog, "encode")(x)
    (c,) = make_runner(rt, prog, "classify")(x)
    assert_close(e, Enc()(x).detach())
    assert_close(c, Cls()(x).detach())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_pte_ptd_pair(rt: str, tmp_path) -> None:  # noqa: ANN001
    m = randomize_bn(SmallCNN())
    x = torch.randn(2, 3, 8, 8)
    prog = export_for_tests(m, (x,), external_constants=True)
    assert prog.ptd_buffer is not None
    inline = export_for_tests(m, (x,))
    weight_bytes = sum(p.numel() * 4 for p in m.parameters())
    assert len(prog.buffer) < len(inline.buffer) - weight_bytes // 2
    run = make_runner(rt, prog)
    (out,) = run(x)
    assert_close(out, m(x).detach())


@pytest.mark.parametrize("rt", RUNTIMES)
def test_pytree_outputs_and_inputs(rt: str) -> None:
    class M(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> dict:
            return {"sum": a + b, "pair": (a * b, a - b)}

    a, b = torch.randn(3), torch.randn(3)
    prog = export_for_tests(M(), (a, b))
    if rt == "ember":
        make_runner(rt, prog)  # skips if unavailable
        out = prog.run(a, b)
        assert set(out) == {"sum", "pair"}
        assert_close(out["pair"][1], a - b)
    else:
        flat = make_runner(rt, prog)(a, b)
        assert len(flat) == 3
        out = prog.unflatten_outputs(flat)
        assert_close(out["sum"], a + b)
        assert_close(out["pair"][0], a * b)
        assert_close(out["pair"][1], a - b)


class BufferViews(torch.nn.Module):
    """Views and snapshots of a buffer that is updated in place."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2, 3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        old = self.b.clone()
        flat = self.b.view(-1)
        self.b.add_(x)
        return flat, old, self.b.sum()


@pytest.mark.parametrize("rt", RUNTIMES)
def test_buffer_views_and_snapshots(rt: str) -> None:
    prog = export_for_tests(BufferViews(), (torch.ones(2, 3),))
    run = make_runner(rt, prog)
    eager = BufferViews()
    for _ in range(3):
        x = torch.randn(2, 3)
        for got, want in zip(run(x), eager(x), strict=True):
            assert_close(got, want.clone())


class SymShapes(torch.nn.Module):
    """Symbolic sizes flow into view sizes, arange and slices (prim ops on SymInts)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = x.shape[0]
        y = x.reshape(n, 2, 4).sum(1)
        z = torch.arange(n, dtype=torch.float32).unsqueeze(1)
        w = x.view(n * 2, 4)[:n]
        return y + z, w * 2, torch.cat([x, x], 0)


class ShapeCond(torch.nn.Module):
    """torch.cond on a symbolic predicate (a SymBool computed by prim ops)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x - 1, (x,))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_symbolic_shapes_and_shape_cond(rt: str) -> None:
    n = torch.export.Dim("n", min=2, max=10)
    sym = make_runner(
        rt, export_for_tests(SymShapes(), (torch.randn(4, 8),), dynamic_shapes=({0: n},))
    )
    cond = make_runner(
        rt, export_for_tests(ShapeCond(), (torch.randn(5, 3),), dynamic_shapes=({0: n},))
    )
    for rows in (2, 5, 10):
        x = torch.randn(rows, 8)
        for got, want in zip(sym(x), SymShapes()(x), strict=True):
            assert_close(got, want)
        x = torch.randn(rows, 3)
        (got,) = cond(x)
        assert_close(got, ShapeCond()(x))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_saved_pair_loads_and_runs(rt: str, tmp_path) -> None:  # noqa: ANN001
    import ember

    m = randomize_bn(SmallCNN())
    x = torch.randn(1, 3, 8, 8)
    path = export_for_tests(m, (x,), external_constants=True).save(tmp_path / "cnn.pte")
    loaded = ember.load(path)  # picks up cnn.ptd beside it
    assert loaded.ptd_buffer is not None
    (out,) = make_runner(rt, loaded)(x)
    assert_close(out, m(x).detach())


class NestedCond(torch.nn.Module):
    """A cond inside a cond branch, two outputs each, a parameter used inside."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def inner_t(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + self.w, y.clone()

        def inner_f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, y * 3

        def t(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a, b = torch.cond(y.sum() > 0, inner_t, inner_f, (x, y))
            return a + 1, b

        def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x.clone(), y - 1

        a, b = torch.cond(x.sum() > 0, t, f, (x, y))
        return a * b, b


@pytest.mark.parametrize("rt", RUNTIMES)
def test_nested_cond(rt: str) -> None:
    m = NestedCond()
    run = make_runner(rt, export_for_tests(m, (torch.randn(3), torch.randn(3))))
    for sx in (1, -1):
        for sy in (1, -1):
            x, y = torch.rand(3) * sx, torch.rand(3) * sy
            for got, want in zip(run(x, y), m(x, y), strict=True):
                assert_close(got, want.detach())
