"""The Python bindings under misuse (issue 30): each wrong call is a clear exception or a correct
result, never a crash — wrong input count, dtype, shape, device, non-contiguous and zero-size
inputs, calls after close, and one program run from several Python threads at once."""

from __future__ import annotations

import threading

import pytest
import torch

import ember
from ember.runtime import EmberRuntimeError, RuntimeProgram


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * y.sum()


@pytest.fixture(scope="module", params=["auto", None])
def program(request: pytest.FixtureRequest) -> tuple[ember.Program, torch.nn.Module]:
    torch.manual_seed(0)
    m = _Net().eval()
    return ember.export(m, (torch.randn(3, 6), torch.randn(2)), backend=request.param), m


def _rt(program: tuple[ember.Program, torch.nn.Module]) -> RuntimeProgram:
    return RuntimeProgram(program[0].buffer)


def test_wrong_input_count(program: tuple[ember.Program, torch.nn.Module]) -> None:
    rt = _rt(program)
    with pytest.raises(EmberRuntimeError, match="takes 2 inputs, got 1"):
        rt.run("forward", [torch.randn(3, 6)])
    with pytest.raises(EmberRuntimeError, match="takes 2 inputs, got 3"):
        rt.run("forward", [torch.randn(3, 6), torch.randn(2), torch.randn(2)])
    with pytest.raises(TypeError, match="list or tuple"):
        rt.run("forward", torch.randn(3, 6))  # type: ignore[arg-type]


def test_wrong_dtype_shape_and_device(program: tuple[ember.Program, torch.nn.Module]) -> None:
    rt = _rt(program)
    y = torch.randn(2)
    with pytest.raises(EmberRuntimeError, match=r"input 0 is torch.float64.*torch.float32"):
        rt.run("forward", [torch.randn(3, 6, dtype=torch.float64), y])
    with pytest.raises(EmberRuntimeError, match=r"input 0 is torch.int64"):
        rt.run("forward", [torch.ones(3, 6, dtype=torch.int64), y])
    with pytest.raises(EmberRuntimeError, match=r"input 0 has shape \[18\]; .* 2 dims"):
        rt.run("forward", [torch.randn(18), y])
    with pytest.raises(EmberRuntimeError, match="input 0"):
        rt.run("forward", [torch.randn(4, 6), y])  # a static dim of another size
    with pytest.raises(EmberRuntimeError, match="on meta"):
        rt.run("forward", [torch.empty(3, 6, device="meta"), y])
    with pytest.raises(EmberRuntimeError, match="input 0 has shape"):
        rt.run("forward", [torch.randn(3, 6, 1), y])
    with pytest.raises((EmberRuntimeError, TypeError)):
        rt.run("forward", ["not a tensor", y])
    with pytest.raises((EmberRuntimeError, TypeError)):
        rt.run("forward", [None, y])
    with pytest.raises(EmberRuntimeError, match="no-such-method"):
        rt.run("no-such-method", [])
    with pytest.raises(TypeError):
        rt.run(3, [])  # type: ignore[arg-type]
    # After all that, the program still runs correctly.
    x = torch.randn(3, 6)
    (got,) = rt.run("forward", [x, y])
    with torch.no_grad():
        assert torch.allclose(got, program[1](x, y), atol=1e-5)


def test_noncontiguous_grad_and_zero_size_inputs(
    program: tuple[ember.Program, torch.nn.Module],
) -> None:
    rt = _rt(program)
    base = torch.randn(6, 3)
    x = base.t()  # not contiguous
    y = torch.randn(4)[::2]  # strided
    w = torch.randn(3, 6, requires_grad=True)
    with torch.no_grad():
        (got,) = rt.run("forward", [x, y])
        assert torch.allclose(got, program[1](x, y), atol=1e-5)
        (got,) = rt.run("forward", [w, y])
        assert torch.allclose(got, program[1](w, y), atol=1e-5)
    with pytest.raises(EmberRuntimeError, match="input 0"):
        rt.run("forward", [torch.randn(0, 6), y])

    class Empty(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 + 1

    prog = ember.export(Empty(), (torch.randn(0, 5),))
    out = prog.run(torch.randn(0, 5))
    assert out.shape == (0, 5)


def test_calls_after_close(program: tuple[ember.Program, torch.nn.Module]) -> None:
    rt = _rt(program)
    x, y = torch.randn(3, 6), torch.randn(2)
    rt.run("forward", [x, y])
    rt.close()
    rt.close()  # twice is harmless
    for call in (
        lambda: rt.run("forward", [x, y]),
        lambda: rt.values("forward"),
        rt.method_names,
        lambda: rt.run_debug("forward", [x, y], {0: [0]}),
    ):
        with pytest.raises(EmberRuntimeError, match="closed"):
            call()
    with RuntimeProgram(program[0].buffer) as rt2:
        rt2.run("forward", [x, y])
    with pytest.raises(EmberRuntimeError, match="closed"):
        rt2.run("forward", [x, y])


def test_bad_program_bytes() -> None:
    for bad in (b"", b"\x00" * 7, b"garbage" * 100):
        with pytest.raises(EmberRuntimeError, match="loading program"):
            RuntimeProgram(bad)
    with pytest.raises((EmberRuntimeError, OSError)):
        RuntimeProgram("/no/such/file.pte")


def test_one_program_from_several_threads(program: tuple[ember.Program, torch.nn.Module]) -> None:
    rt = _rt(program)
    torch.manual_seed(1)
    cases = [(torch.randn(3, 6), torch.randn(2)) for _ in range(8)]
    with torch.no_grad():
        want = [program[1](x, y) for x, y in cases]
    errors: list[str] = []

    def worker(k: int) -> None:
        for r in range(40):
            i = (k + r) % len(cases)
            (got,) = rt.run("forward", list(cases[i]))
            if not torch.allclose(got, want[i], atol=1e-5):
                errors.append(f"thread {k} round {r}: case {i} differs")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
