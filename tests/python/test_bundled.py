"""BundledProgram (``.bpte``, BP08) both ways with stock ExecuTorch (issue 32 item 5).

Ember writes a ``.bpte`` (``Program.save_bundled``) that ``ember run --bundled`` passes and stock
ExecuTorch reads back (its deserializer gives the same test cases; its runtime runs and verifies
them); a ``.bpte`` written by stock ExecuTorch passes ``ember run --bundled``; a corrupted expected
value fails with exit 1 and the numbers; truncated or mangled files are refused by name, never a
crash. Drives build/ember (or $EMBER_CLI); about 20 s.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember.dtypes import code_of

ROOT = Path(__file__).resolve().parents[2]
EMBER = Path(os.environ.get("EMBER_CLI", ROOT / "build" / "ember"))

pytestmark = pytest.mark.skipif(not EMBER.exists(), reason=f"{EMBER} not built")


def run_bundled(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EMBER), "run", "--bundled", str(path), *args],
        capture_output=True,
        text=True,
        errors="replace",  # a mangled method name may not be UTF-8
        timeout=60,
    )


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv2(torch.relu(self.conv(x))))
        return self.fc(y.mean((2, 3)))


def _cnn() -> tuple[SmallCNN, torch.Tensor]:
    torch.manual_seed(0)
    return SmallCNN().eval(), torch.randn(1, 3, 16, 16)


def _cases(m: torch.nn.Module, n: int) -> list[tuple[Any, Any]]:
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(1, 3, 16, 16, generator=gen) for _ in range(n)]
    # Expected outputs: computed by eager for all but the last case, given for the last.
    with torch.no_grad():
        return [((x,), None) for x in xs[:-1]] + [((xs[-1],), m(xs[-1]))]


@pytest.fixture(scope="module")
def cnn_bpte(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ember.Program]:
    m, x = _cnn()
    prog = ember.export(m, (x,))  # the default: CPU backend delegates on this host
    path = prog.save_bundled(tmp_path_factory.mktemp("bundled") / "cnn.bpte", _cases(m, 4))
    return path, prog


def test_ember_bpte_passes_ember_run(cnn_bpte: tuple[Path, ember.Program]) -> None:
    path, _ = cnn_bpte
    assert path.read_bytes()[4:8] == b"BP08"
    r = run_bundled(path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("forward")]
    assert len(lines) == 4 and all(ln.endswith("PASS") for ln in lines), r.stdout
    assert all(re.search(r"case \d+\s+max abs err \S+", ln) for ln in lines)
    assert "4 test cases, 4 passed, 0 failed" in r.stdout


def test_corrupted_expected_value_fails_with_numbers(
    cnn_bpte: tuple[Path, ember.Program], tmp_path: Path
) -> None:
    path, _ = cnn_bpte
    m, _ = _cnn()
    data = bytearray(path.read_bytes())
    x = _cases(m, 4)[2][0][0]
    with torch.no_grad():
        want = m(x).reshape(-1)
    raw = want.numpy().tobytes()
    at = data.find(raw)
    assert at > 0, "case 2's expected output is stored contiguously"
    struct.pack_into("<f", data, at + 4 * 3, 1234.5)  # element 3 of case 2's expected output
    bad = tmp_path / "bad.bpte"
    bad.write_bytes(bytes(data))
    r = run_bundled(bad)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"forward\s+case 2\s+max abs err \S+\s+FAIL", r.stdout), r.stdout
    assert "3 passed, 1 failed" in r.stdout
    assert "case 2 output 0 element 3" in r.stderr and "expected 1234.5" in r.stderr, r.stderr
    got = float(re.search(r"got (\S+),", r.stderr).group(1))  # type: ignore[union-attr]
    assert abs(got - float(want[3])) < 1e-4
    # A looser tolerance does not hide it; a huge one does (the tolerances are applied).
    assert run_bundled(bad, "--atol", "1").returncode == 1
    assert run_bundled(bad, "--atol", "2000").returncode == 0


def test_stock_executorch_reads_embers_bpte(cnn_bpte: tuple[Path, ember.Program]) -> None:
    pytest.importorskip("executorch")
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program,
    )

    path, prog = cnn_bpte
    m, _ = _cnn()
    bp = deserialize_from_flatbuffer_to_bundled_program(path.read_bytes())
    assert bp.version == 2
    assert bytes(bp.program) == prog.buffer
    (suite,) = bp.method_test_suites
    assert suite.method_name == "forward" and len(suite.test_cases) == 4
    for (inputs, _), case in zip(_cases(m, 4), suite.test_cases, strict=True):
        (x,) = inputs
        (tin,) = [v.val for v in case.inputs]
        (tout,) = [v.val for v in case.expected_outputs]
        assert tin.scalar_type == code_of(torch.float32) and list(tin.sizes) == [1, 3, 16, 16]
        assert bytes(tin.data) == x.numpy().tobytes() and list(tin.dim_order) == [0, 1, 2, 3]
        with torch.no_grad():
            y = m(x)
        assert list(tout.sizes) == [1, 5]
        got = torch.frombuffer(bytearray(bytes(tout.data)), dtype=torch.float32).reshape(1, 5)
        torch.testing.assert_close(got, y, rtol=1e-5, atol=1e-6)


def test_stock_runtime_verifies_embers_bpte() -> None:
    """Stock ExecuTorch's BundledModule loads Ember's .bpte, runs each case on its portable
    kernels and checks the outputs; a wrong expected output makes it raise."""
    pl = pytest.importorskip("executorch.extension.pybindings.portable_lib")
    m, x = _cnn()
    prog = ember.export(m, (x,), backend=None)  # portable kernels: what stock has
    b = pl._load_bundled_program_from_buffer(prog.bundled_buffer(_cases(m, 3)))
    for i in range(3):
        (out,) = b.verify_result_with_bundled_expected_output("forward", i)
        assert tuple(out.shape) == (1, 5)
    with torch.no_grad():
        wrong = m(x) + 0.5
    b2 = pl._load_bundled_program_from_buffer(prog.bundled_buffer([((x,), wrong)]))
    with pytest.raises(RuntimeError):
        b2.verify_result_with_bundled_expected_output("forward", 0)


class TwoInTwoOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.conv(x))
        return h * y, h.sum(1)


def test_ember_runs_stock_bpte(tmp_path: Path) -> None:
    pytest.importorskip("executorch")
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import (
        serialize_from_bundled_program_to_flatbuffer,
    )
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    m = TwoInTwoOut().eval()
    ex = (torch.randn(1, 2, 8, 8), torch.randn(1, 4, 8, 8))
    et = to_edge_transform_and_lower(torch.export.export(m, ex, strict=True)).to_executorch()
    gen = torch.Generator().manual_seed(2)
    cases = []
    for _ in range(3):
        xs = [torch.randn(1, 2, 8, 8, generator=gen), torch.randn(1, 4, 8, 8, generator=gen)]
        with torch.no_grad():
            cases.append(MethodTestCase(inputs=xs, expected_outputs=list(m(*xs))))
    bp = BundledProgram(et, [MethodTestSuite(method_name="forward", test_cases=cases)])
    path = tmp_path / "stock.bpte"
    path.write_bytes(serialize_from_bundled_program_to_flatbuffer(bp))
    r = run_bundled(path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 test cases, 3 passed, 0 failed" in r.stdout


def test_ember_runs_stock_fixture() -> None:
    from et_fixtures import et_fixture

    path = et_fixture("bundled_program.bpte")  # make test installs executorch: no skip
    r = run_bundled(path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 test cases, 3 passed, 0 failed" in r.stdout
    r = run_bundled(path, "--method", "nope")
    assert r.returncode == 1 and "no test suite for method 'nope'" in r.stderr


# -- malformed files ---------------------------------------------------------------------------
def _refused(path: Path) -> subprocess.CompletedProcess[str]:
    r = run_bundled(path)
    assert r.returncode in (1, 2), (r.returncode, r.stdout, r.stderr)  # never a signal
    return r


def test_truncated_and_mangled_bundles_are_refused(
    cnn_bpte: tuple[Path, ember.Program], tmp_path: Path
) -> None:
    path, _ = cnn_bpte
    data = path.read_bytes()
    bad = tmp_path / "bad.bpte"
    for n in (0, 7, 12, 64, len(data) // 2, len(data) - 1):
        bad.write_bytes(data[:n])
        r = _refused(bad)
        assert r.returncode == 1 and "bundled program" in r.stderr, (n, r.stderr)
    bad.write_bytes(data[:4] + b"XX08" + data[8:])
    assert "not a bundled program" in _refused(bad).stderr
    bad.write_bytes(struct.pack("<I", len(data) + 100) + data[4:])  # root offset past the end
    r = _refused(bad)
    assert "malformed bundled program" in r.stderr and "BundledProgram" in r.stderr, r.stderr
    # A tensor whose byte count disagrees with its sizes: the field is named.
    m, _ = _cnn()
    x = _cases(m, 4)[0][0][0]
    at = data.find(x.numpy().tobytes())
    mangled = bytearray(data)
    struct.pack_into("<I", mangled, at - 4, x.numel() * 4 - 4)  # the data vector's length
    bad.write_bytes(bytes(mangled))
    r = _refused(bad)
    assert "test case 0 inputs[0]: Tensor.data" in r.stderr, r.stderr
    struct.pack_into("<I", mangled, at - 4, 0xFFFFFFF0)  # a length past the end of the file
    bad.write_bytes(bytes(mangled))
    assert "Tensor.data" in _refused(bad).stderr


def test_random_corruption_never_crashes(tmp_path: Path) -> None:
    """Random bytes changed in the tables of a small bundle (outside the embedded program):
    every run ends with exit 0 or 1, never a signal."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3).eval()
    prog = ember.export(m, (torch.randn(1, 4),), backend=None)
    data = prog.bundled_buffer([((torch.randn(1, 4),), None), ((torch.randn(2, 4)[:1],), None)])
    p0 = data.find(prog.buffer)
    assert p0 > 0
    where = [i for i in range(8, len(data)) if not p0 <= i < p0 + len(prog.buffer)]
    gen = torch.Generator().manual_seed(3)
    bad = tmp_path / "fuzz.bpte"
    for _ in range(60):
        mangled = bytearray(data)
        for _ in range(3):
            i = where[int(torch.randint(0, len(where), (1,), generator=gen))]
            mangled[i] = int(torch.randint(0, 256, (1,), generator=gen))
        bad.write_bytes(bytes(mangled))
        r = run_bundled(bad)
        assert r.returncode in (0, 1), (r.returncode, r.stderr)


def test_wrong_number_of_inputs_is_named(tmp_path: Path) -> None:
    from ember.serialize import BundledTensor, serialize_bundled

    m, x = _cnn()
    prog = ember.export(m, (x,), backend=None)
    t = BundledTensor(code_of(torch.float32), [1, 3, 16, 16], x.numpy().tobytes())
    path = tmp_path / "two.bpte"
    path.write_bytes(serialize_bundled(prog.buffer, [("forward", [([t, t], [t])])]))
    r = run_bundled(path)
    assert r.returncode == 1
    assert "has 2 inputs and 1 expected outputs; the method takes 1 inputs" in r.stderr, r.stderr
    wrong = BundledTensor(code_of(torch.float32), [1, 3, 8, 8], bytes(3 * 8 * 8 * 4))
    path.write_bytes(serialize_bundled(prog.buffer, [("forward", [([wrong], [t])])]))
    r = run_bundled(path)
    assert r.returncode == 1 and "method 'forward' test case 0 input 0" in r.stderr, r.stderr
    path.write_bytes(serialize_bundled(prog.buffer, [("nope", [([t], [t])])]))
    r = run_bundled(path)
    assert r.returncode == 1 and "test suite 0 names method 'nope'" in r.stderr, r.stderr


def test_export_bundle_argument_with_two_methods(tmp_path: Path) -> None:
    """``ember.export(..., bundle=...)`` keeps the cases (eager outputs filled in at export);
    ``save_bundled`` writes one suite per method and ``ember run --bundled`` runs both."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3).eval()
    sq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).eval()
    x = torch.randn(2, 4)
    prog = ember.export(
        {"forward": (lin, (x,)), "other": (sq, (x,))},
        bundle={
            "forward": [((torch.randn(2, 4),), None), ((x,), None)],
            "other": [((torch.randn(2, 4),), None)],
        },
    )
    assert prog.bundle is not None and prog.bundle["forward"][1][1].shape == (2, 3)
    path = prog.save_bundled(tmp_path / "two.bpte")
    r = run_bundled(path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 method test suites" in r.stdout and "3 test cases, 3 passed" in r.stdout
    assert len([ln for ln in r.stdout.splitlines() if ln.startswith("other")]) == 1
    r = run_bundled(path, "--method", "other")
    assert r.returncode == 0 and "1 test case, 1 passed" in r.stdout, r.stdout
    with pytest.raises(ValueError, match="no method 'nope'"):
        ember.export(lin, (x,), bundle={"nope": [((x,), None)]})
