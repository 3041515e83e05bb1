"""Stock-ExecuTorch files load and run on Ember's runtime.

The files are made on this machine by the installed ExecuTorch (or, for the legacy
``constant_buffer`` layouts that ExecuTorch 1.5 no longer writes, by tests/fixtures/legacy_pte.py):
see tests/fixtures/make_executorch_fixtures.py. Their constants are known (the generator's
module-level values), so outputs are compared exactly with eager PyTorch on the same computation.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from et_fixtures import ROOT, et_fixture

from ember.runtime import RuntimeProgram

EMBER = ROOT / "build" / "ember"

sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import legacy_pte  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "make_executorch_fixtures", ROOT / "tests" / "fixtures" / "make_executorch_fixtures.py"
)
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _info(path: Path) -> str:
    return subprocess.run(
        [str(EMBER), "info", str(path)], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize(
    "name",
    [
        "add.pte",
        "add_constant.pte",
        "multi_method.pte",
        "module_linear_legacy_constant_buffer.pte",
        "bundled_program.bpte",
    ],
)
def test_info_loads_every_program(name: str) -> None:
    out = _info(et_fixture(name))
    assert "method 'forward'" in out
    assert "missing kernels in this build: 0" in out


def test_info_shows_each_layout() -> None:
    """The files have the structure features they are meant to exercise."""
    add = _info(et_fixture("add.pte"))
    assert "extended header: none" in add and "segments: 1 (base 0, 0 bytes)" in add
    const = _info(et_fixture("add_constant.pte"))
    assert "extended header: eh00" in const and "constants: 1 tensors, 4 bytes" in const
    legacy = _info(et_fixture("module_linear_legacy_constant_buffer.pte"))
    assert "extended header: none" in legacy
    assert "2 tensors, 32 bytes (legacy constant_buffer)" in legacy
    multi = _info(et_fixture("multi_method.pte"))
    assert "methods: 3" in multi
    assert "method 'get_answer': 0 inputs, 1 outputs, 0 instructions" in multi
    r = subprocess.run(
        [str(EMBER), "info", str(et_fixture("xnnpack_linear.pte"))], capture_output=True, text=True
    )
    assert r.returncode == 1, "a backend missing from this build makes `ember info` exit 1"
    xnn = r.stdout
    assert "delegate 0: XnnpackBackend" in xnn and "named data:" in xnn
    assert "missing backends in this build: 1" in xnn


def test_info_rejects_etdump_with_a_clear_error() -> None:
    path = et_fixture("etdump.etdp")
    data = path.read_bytes()
    assert data[8:12] == b"ED00", "a size-prefixed ETDump flatbuffer"
    r = subprocess.run([str(EMBER), "info", str(path)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "not an ExecuTorch program" in r.stderr


def test_add_pte() -> None:
    prog = RuntimeProgram(et_fixture("add.pte"))
    x, y = torch.tensor([1.5]), torch.tensor([-4.25])
    (out,) = prog.run("forward", [x, y])
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_add_constant_0dim() -> None:
    prog = RuntimeProgram(et_fixture("add_constant.pte"))
    consts = [v for v in prog.values("forward") if isinstance(v, torch.Tensor) and v.dim() == 0]
    assert [c.item() for c in consts] == [gen.ADD_CONSTANT]
    x = torch.tensor([1.0, -2.0, 3.5])
    (out,) = prog.run("forward", [x])
    torch.testing.assert_close(out, x + gen.ADD_CONSTANT, rtol=0, atol=0)


def test_multi_method() -> None:
    prog = RuntimeProgram(et_fixture("multi_method.pte"))
    assert sorted(prog.method_names()) == ["forward", "get_answer", "scale"]
    x = torch.linspace(-2, 2, 5)
    (out,) = prog.run("scale", [x])
    torch.testing.assert_close(out, x * 3.0, rtol=0, atol=0)
    assert prog.run("get_answer", []) == [gen.ANSWER]
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)  # the generator's weights (same seed)
    x = torch.randn(2, 4)
    (out,) = prog.run("forward", [x])
    torch.testing.assert_close(out, lin(x).detach(), rtol=1e-6, atol=1e-6)


def test_xnnpack_delegate_is_refused_by_name() -> None:
    """Ember has no XnnpackBackend: the program loads, the method names the missing backend."""
    prog = RuntimeProgram(et_fixture("xnnpack_linear.pte"))
    with pytest.raises(RuntimeError, match="XnnpackBackend"):
        prog.run("forward", [torch.ones(2, 4)])


def test_module_linear_legacy_constant_buffer() -> None:
    prog = RuntimeProgram(et_fixture("module_linear_legacy_constant_buffer.pte"))
    a, b = torch.tensor(legacy_pte.MUL_A), torch.tensor(legacy_pte.ADD_B)
    consts = [v for v in prog.values("forward") if isinstance(v, torch.Tensor)][:2]
    torch.testing.assert_close(consts, [a, b], rtol=0, atol=0)
    x = torch.tensor([[1.0, 2.0], [3.0, -4.0]])
    (out,) = prog.run("forward", [x])
    torch.testing.assert_close(out, x * a + b, rtol=0, atol=0)


def test_legacy_file_reads_back_in_executorch() -> None:
    """ExecuTorch's own Python reader sees what legacy_pte.py meant to write. (The pip build of
    ExecuTorch's runtime refuses legacy ``constant_buffer`` programs, the stock file included.)"""
    ser = pytest.importorskip("executorch.exir._serialize._program")
    data = et_fixture("module_linear_legacy_constant_buffer.pte").read_bytes()
    prog = ser.deserialize_pte_binary(data).program
    assert prog.segments == [] and prog.constant_segment.offsets == []
    storage = [bytes(b.storage) for b in prog.constant_buffer]
    want = [torch.tensor(legacy_pte.MUL_A), torch.tensor(legacy_pte.ADD_B)]
    assert storage == [b""] + [t.numpy().tobytes() for t in want]
    (plan,) = prog.execution_plan
    assert [(o.name, o.overload) for o in plan.operators] == [
        ("aten::mul", "out"),
        ("aten::add", "out"),
    ]
    assert plan.non_const_buffer_sizes == [0, 48]


def test_bundled_program_test_cases() -> None:
    """The BundledProgram's embedded program runs each bundled input to its expected output."""
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program,
    )

    data = et_fixture("bundled_program.bpte").read_bytes()
    assert data[4:8] == b"BP08"
    bp = deserialize_from_flatbuffer_to_bundled_program(data)
    prog = RuntimeProgram(bytes(bp.program))
    (suite,) = bp.method_test_suites
    assert len(suite.test_cases) == 3
    for case in suite.test_cases:
        (t,) = case.inputs
        x = torch.frombuffer(bytearray(t.val.data), dtype=torch.float32).reshape(t.val.sizes)
        (e,) = case.expected_outputs
        want = torch.frombuffer(bytearray(e.val.data), dtype=torch.float32).reshape(e.val.sizes)
        (out,) = prog.run("forward", [x])
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        a, b = torch.tensor(gen.BUNDLED_A), torch.tensor(gen.BUNDLED_B)
        torch.testing.assert_close(out, x * a + b, rtol=0, atol=0)
