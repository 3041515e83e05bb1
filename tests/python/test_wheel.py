"""Ember installs like a library: the wheel (setup.py's CMake hook) installed into a fresh venv
works from any directory, away from the checkout.

The wheel is built with ``pip wheel --no-build-isolation`` (the same hook ``python -m build``
runs; its CMake directory ``build-wheel/`` is kept, so later runs only relink). The fresh venv
sees this venv's packages (torch, numpy...) through a ``.pth`` path line to a folder of links to
them that leaves out this venv's own (editable) ember, so ``import ember`` and pip can only find
the installed wheel. From a
directory outside the checkout, with ``EMBER_LIB`` and ``PYTHONPATH`` unset, it exports a model,
runs it on the packaged ``libember.so``, checks the packaged operator lists (quantized included)
and runs the ``ember`` console script on the saved file. First run ~1 min on 2 cores (the C
build), later ones ~15 s.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("EMBER_LIB", "PYTHONPATH")}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is needed to build the wheel")
    top = tmp_path_factory.mktemp("wheel")
    env = dict(_clean_env(), CMAKE_BUILD_PARALLEL_LEVEL="2")
    _run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(top / "dist")],
        ROOT,
        env,
    )  # fmt: skip
    (whl,) = (top / "dist").glob("ember-*.whl")
    v = top / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(v)], top)
    (vsite,) = v.glob("lib/python3*/site-packages")
    # This venv's packages, less its own ember (editable install metadata): links in one folder.
    host = top / "host-packages"
    host.mkdir()
    for sp in site.getsitepackages():
        for entry in Path(sp).iterdir() if Path(sp).is_dir() else []:
            skip = entry.name.startswith(("ember", "__editable__")) or entry.suffix == ".pth"
            if not skip and not (host / entry.name).exists():
                (host / entry.name).symlink_to(entry)
    (vsite / "_host_packages.pth").write_text(f"{host}\n")
    _run(
        [sys.executable, "-m", "pip", "--python", str(v / "bin" / "python"), "install", "-q",
         "--no-deps", "--no-index", str(whl)],
        top,
        _clean_env(),
    )  # fmt: skip
    return v


def test_installed_wheel_exports_and_runs(venv: Path) -> None:
    work = venv.parent / "elsewhere"
    work.mkdir()
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        import torch, ember
        from ember import _lib, oplist
        pkg = Path(ember.__file__).parent
        assert pkg.is_relative_to(Path(sys.prefix)), pkg
        assert _lib.library_path() == pkg / "libember.so", _lib.library_path()
        ops = oplist.load_oplist()
        assert not getattr(ops, "is_fallback", False)
        for name in ("aten::add.out", "aten::sym_size.int", "ember::quantized_linear.out"):
            assert name in ops, name
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 5)).eval()
        x = torch.randn(2, 3, 8, 8)
        for backend in ("cpu", None):
            prog = ember.export(m, (x,), backend=backend)
            out = prog.run(x)
            out = out[0] if isinstance(out, (list, tuple)) else out
            torch.testing.assert_close(out, m(x).detach(), rtol=1e-4, atol=1e-5)
        prog.save("model.pte")
        print("ok", pkg)
        """
    )
    out = _run([str(venv / "bin" / "python"), "-c", script], work, _clean_env())
    assert out.startswith("ok")
    info = _run([str(venv / "bin" / "ember"), "info", "model.pte"], work, _clean_env())
    assert "missing kernels in this build: 0" in info
    r = subprocess.run(
        [str(venv / "bin" / "ember-llm"), "--help"], cwd=work, capture_output=True, text=True
    )
    assert "usage" in (r.stdout + r.stderr).lower()
    assert (venv / "bin" / "ember-py").is_file()
