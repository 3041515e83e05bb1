"""Inputs read in place (em_method_bind_input_tensor, what ``RuntimeProgram.run`` uses): a planned
input that the method only reads is read from the caller's tensor instead of a copy in planned
memory, and pointed back at that memory when the execute ends; an input the method returns,
reads twice in one kernel, or that a view planned onto the same bytes reads, is copied as
before. Every run is compared with eager PyTorch, and the caller's tensors must come back
unchanged."""

from __future__ import annotations

import ctypes

import pytest
import torch
from conftest import DynMLP, SmallCNN, randomize_bn

import ember
from ember._lib import ValueBuilder
from ember.runtime import RuntimeProgram


class _Alias(torch.nn.Module):  # the input is an output
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x + 1


class _View(torch.nn.Module):  # the output is planned onto the input's bytes, no instruction
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(-1)


class _ViewUse(torch.nn.Module):  # a planned view of the input read by a kernel
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(-1, 4).relu() * 2


class _Square(torch.nn.Module):  # one kernel reads the input twice
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


def _data(rt: RuntimeProgram, i: int = 0) -> int:
    m = rt._method("forward")
    return int(rt._L.em_method_input(m, i).contents.u.tensor.contents.data or 0)


def _bind(rt: RuntimeProgram, x: torch.Tensor, keep: list) -> int:
    """Binds input 0 to x; returns the input's data pointer after the call."""
    vb = ValueBuilder()
    keep.append(vb)
    et = vb.tensor(x)
    assert rt._L.em_method_bind_input_tensor(rt._method("forward"), 0, ctypes.byref(et)) == 0
    return _data(rt)


def _check_runs(rt: RuntimeProgram, model: torch.nn.Module, shapes: list[tuple[int, ...]]) -> None:
    """Runs several inputs (a fresh tensor, the same tensor changed in place, another shape):
    each output equals eager's and every input comes back unchanged."""
    gen = torch.Generator().manual_seed(0)
    prev: list = []
    x = torch.randn(shapes[0], generator=gen)
    for k, shape in enumerate(shapes * 2):
        if k % 3 == 1 and tuple(x.shape) == shape:
            x.mul_(-1.5).add_(0.25)  # the same tensor, new values
        else:
            x = torch.randn(shape, generator=gen)
        before = x.clone()
        got = rt.run("forward", [x])
        want = model(before.clone())
        want = list(want) if isinstance(want, tuple) else [want]
        assert torch.equal(x, before), "the run changed its input"
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        for g, w in prev:  # earlier outputs are copies: later runs leave them alone
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        prev.append((got[0], want[0]))


@pytest.mark.parametrize("backend", ["auto", None])
def test_read_only_input_is_read_in_place(backend: str | None) -> None:
    torch.manual_seed(0)
    model = randomize_bn(SmallCNN()).eval()
    prog = ember.export(model, (torch.randn(1, 3, 8, 8),), backend=backend)
    rt = RuntimeProgram(prog.buffer)
    home = _data(rt)
    keep: list = []
    x = torch.randn(1, 3, 8, 8)
    assert _bind(rt, x, keep) == x.data_ptr()  # read in place, not copied
    assert rt._L.em_method_execute(rt._method("forward")) == 0
    assert _data(rt) == home  # back at its planned memory once the execute ended
    with torch.no_grad():
        _check_runs(rt, model, [(1, 3, 8, 8)])
    # a bound input that is then set (copied) before any execute: the copy goes to the planned
    # memory, never into the tensor bound before
    x1, x2 = torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8)
    x1_before = x1.clone()
    _bind(rt, x1, keep)
    et = ValueBuilder().tensor(x2)
    m = rt._method("forward")
    assert rt._L.em_method_set_input_tensor(m, 0, ctypes.byref(et)) == 0
    assert _data(rt) == home
    assert rt._L.em_method_execute(m) == 0
    assert torch.equal(x1, x1_before)
    with torch.no_grad():
        torch.testing.assert_close(rt._outputs(m)[0], model(x2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", [_Alias(), _View(), _ViewUse(), _Square()], ids=type)
@pytest.mark.parametrize("backend", ["auto", None])
def test_inputs_the_method_may_write_or_alias_are_copied(
    model: torch.nn.Module, backend: str | None
) -> None:
    prog = ember.export(model, (torch.randn(3, 4),), backend=backend)
    rt = RuntimeProgram(prog.buffer)
    home = _data(rt)
    x = torch.randn(3, 4)
    bound = _bind(rt, x, [])
    if isinstance(model, (_Alias, _View)) or backend is None:
        assert bound == home  # copied into planned memory
    else:  # the CPU backend's blob takes the view and the product: it only reads its argument
        assert bound in (home, x.data_ptr())
    _check_runs(rt, model, [(3, 4)])


def test_dynamic_shapes_and_strided_inputs() -> None:
    torch.manual_seed(0)
    model = DynMLP().eval()
    n = torch.export.Dim("n", max=16)
    prog = ember.export(model, (torch.randn(4, 8),), dynamic_shapes=({0: n},))
    rt = RuntimeProgram(prog.buffer)
    with torch.no_grad():
        _check_runs(rt, model, [(4, 8), (16, 8), (1, 8), (4, 8)])
        # a transposed (non-contiguous) tensor: laid out densely first, then read
        xt = torch.randn(8, 5).t()
        torch.testing.assert_close(rt.run("forward", [xt])[0], model(xt), rtol=1e-5, atol=1e-5)


class _TwoIn(torch.nn.Module):  # two inputs of different shapes and dtypes
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * 2 + 1)[idx], x.sum(0)


def test_repeated_calls_take_the_planned_path() -> None:
    """A call whose inputs have the layouts of the call before is bound, executed and copied
    out from a plan (RuntimeProgram._run_planned): every input goes to its own index, outputs
    are fresh copies, and anything that differs (shape, dtype, a non-contiguous tensor, a
    tensor needing grad, a wrong count) takes the checked path with its errors."""
    model = _TwoIn().eval()
    x0, i0 = torch.randn(6, 3), torch.tensor([5, 0, 2])
    prog = ember.export(model, (x0, i0))
    rt = RuntimeProgram(prog.buffer)
    assert "forward" not in rt._fast
    first = rt.run("forward", [x0, i0])
    assert rt._fast["forward"] is not None  # planned after the first call
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, i = torch.randn(6, 3, generator=gen), torch.randint(0, 6, (3,), generator=gen)
        got = rt.run("forward", [x, i])
        fresh = RuntimeProgram(prog.buffer).run("forward", [x, i])  # a first call: checked
        for g, f, w in zip(got, fresh, model(x, i), strict=True):
            assert torch.equal(g, f)
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    again = rt.run("forward", [x0, i0])
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(first, again, strict=True))
    again[0].fill_(7)  # a copy: the next call is not changed by it
    assert torch.equal(rt.run("forward", [x0, i0])[0], first[0])
    xt = torch.randn(3, 6).t()  # the same shape, other strides: laid out densely first
    torch.testing.assert_close(rt.run("forward", [xt, i0])[0], model(xt, i0)[0])
    xg = torch.randn(6, 3, requires_grad=True)
    torch.testing.assert_close(rt.run("forward", [xg, i0])[1], model(xg, i0)[1].detach())
    with pytest.raises(Exception, match="int64|dtype|Long"):
        rt.run("forward", [x0, i0.int()])
    with pytest.raises(Exception, match="2 inputs"):
        rt.run("forward", [x0])
    assert torch.equal(rt.run("forward", [x0, i0])[0], first[0])
    rt.close()
    with pytest.raises(Exception, match="closed"):
        rt.run("forward", [x0, i0])
