"""The repository stands alone: a `git clone` of the committed HEAD, in a temporary directory with
nothing beside it (no sibling ``shared`` directory), builds, makes its stock-ExecuTorch
fixtures, passes the C tests that read them, and exports + runs a model from Python.

To stay cheap (about a minute on 2 cores) it builds a Debug library, the CLI and two C tests
only, reuses this venv's packages (torch, executorch) with the clone's own ``python/`` first on
``PYTHONPATH`` and ``EMBER_LIB`` pointing at the clone's ``libember.so``, and runs the fuzz-style
test with fewer rounds. A full ``make test`` in such a clone is the issue's manual check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = [
    "add.pte",
    "add_constant.pte",
    "multi_method.pte",
    "xnnpack_linear.pte",
    "bundled_program.bpte",
    "module_linear_legacy_constant_buffer.pte",
]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or shutil.which("cmake") is None:
        pytest.skip("git and cmake are needed")
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    top = tmp_path_factory.mktemp("standalone")
    dst = top / "ember"
    _run(["git", "clone", "-q", str(ROOT), str(dst)], top)
    assert not (top / "shared").exists()
    return dst


def test_no_tracked_file_refers_to_shared(clone: Path) -> None:
    r = subprocess.run(
        ["git", "grep", "-nE", r"\.\./shared|shared/(fixtures|reference|design)"],
        cwd=clone,
        capture_output=True,
        text=True,
    )
    assert r.stdout == "", f"files that read outside the repository:\n{r.stdout}"
    cited = subprocess.run(
        ["git", "grep", "-ohE", r"docs/[A-Za-z_-]+\.md"], cwd=clone, capture_output=True, text=True
    ).stdout.split()
    assert "docs/pte-format.md" in cited
    missing = sorted({c for c in cited if not (clone / c).is_file()})
    assert not missing, f"cited but not in the tree: {missing}"


def test_clone_builds_tests_and_runs(clone: Path) -> None:
    build = clone / "build"
    fixtures = build / "fixtures" / "executorch"
    _run(
        ["cmake", "-S", ".", "-B", str(build), "-DCMAKE_BUILD_TYPE=Debug",
         f"-DEMBER_ET_FIXTURES={fixtures}"],
        clone,
    )  # fmt: skip
    _run(
        ["cmake", "--build", str(build), "-j", "2", "--target", "ember_shared", "ember",
         "test_corrupt", "test_no_alloc"],
        clone,
    )  # fmt: skip
    # The stock-ExecuTorch fixtures, made in the clone by the installed executorch.
    gen = "tests/fixtures/make_executorch_fixtures.py"
    _run([sys.executable, gen, "--out", str(fixtures)], clone)
    for name in FIXTURES:
        assert (fixtures / name).is_file(), name
    env = dict(os.environ, EMBER_CORRUPT_ROUNDS="150")
    out = _run(["ctest", "--output-on-failure", "-R", "^(test_corrupt|test_no_alloc)$"], build, env)
    assert "100% tests passed" in out
    info = _run([str(build / "ember"), "info", str(fixtures / "multi_method.pte")], clone)
    assert "methods: 3" in info and "missing kernels in this build: 0" in info

    # Export + run from Python, outside the checkout, with the clone's package and library.
    script = textwrap.dedent(
        """
        import sys, torch, ember
        assert ember.__file__.startswith(sys.argv[1]), ember.__file__
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        x = torch.randn(3, 8)
        prog = ember.export(m.eval(), (x,))
        prog.save("model.pte")
        out = prog.run(x)
        out = out[0] if isinstance(out, (list, tuple)) else out
        torch.testing.assert_close(out, m(x).detach(), rtol=1e-5, atol=1e-5)
        print("ok", ember.__file__)
        """
    )
    work = clone.parent / "elsewhere"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(clone / "python"), EMBER_LIB=str(build / "libember.so"))
    out = _run([sys.executable, "-c", script, str(clone / "python")], work, env)
    assert out.startswith("ok")
    assert (work / "model.pte").is_file()
