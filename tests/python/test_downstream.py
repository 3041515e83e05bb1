"""Ember as an installed C library: `cmake --install` of the checkout's build into a temporary
prefix, then the downstream project tests/downstream/ built against it twice — with
``find_package(Ember)`` (``Ember::runtime``, ``Ember::portable_kernels``, ``Ember::cpu_backend``)
and with ``pkg-config --cflags --libs ember`` — runs an exported model (EmberCpuBackend and
portable kernels) and prints what eager PyTorch computes. About 10 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import ember

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cmake") is None or not (BUILD / "CMakeCache.txt").is_file():
        pytest.skip("needs cmake and the release build (make build)")
    # Up to date (reconfigures if CMakeLists changed, so the install rules are current).
    _run(["cmake", "--build", str(BUILD), "--target", "ember_static", "ember_shared"], ROOT)
    pfx = tmp_path_factory.mktemp("prefix")
    _run(["cmake", "--install", str(BUILD), "--prefix", str(pfx)], ROOT)
    for f in ("lib/cmake/Ember/EmberConfig.cmake", "lib/pkgconfig/ember.pc",
              "include/ember/ember.h", "include/ember_ext/module.h", "lib/libember.a"):  # fmt: skip
        assert (pfx / f).is_file(), f
    return pfx


def _model_and_expected(tmp: Path) -> tuple[Path, torch.Tensor]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3), torch.nn.Sigmoid()
    ).eval()
    x = ((torch.arange(12) % 7) * 0.25 - 0.5).reshape(2, 6).float()  # run_pte.c's inputs
    pte = tmp / "model.pte"
    ember.export(m, (torch.zeros(2, 6),), backend="cpu").save(pte)
    return pte, m(x).detach().reshape(-1)


def _outputs(text: str) -> torch.Tensor:
    return torch.tensor([float(v) for v in text.split()])


def test_find_package_project_runs_a_pte(prefix: Path, tmp_path: Path) -> None:
    pte, want = _model_and_expected(tmp_path)
    out = tmp_path / "build"
    _run(
        ["cmake", "-S", str(ROOT / "tests" / "downstream"), "-B", str(out),
         f"-DCMAKE_PREFIX_PATH={prefix}"],
        tmp_path,
    )  # fmt: skip
    _run(["cmake", "--build", str(out)], tmp_path)
    got = _outputs(_run([str(out / "run_pte"), str(pte)], tmp_path))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_pkg_config_build_runs_a_pte(prefix: Path, tmp_path: Path) -> None:
    if shutil.which("pkg-config") is None or shutil.which("cc") is None:
        pytest.skip("pkg-config and cc are needed")
    pte, want = _model_and_expected(tmp_path)
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = _run(["pkg-config", "--cflags", "--libs", "ember"], tmp_path, env).split()
    exe = tmp_path / "run_pte_pc"
    src = ROOT / "tests" / "downstream" / "run_pte.c"
    _run(["cc", "-std=c11", "-Wall", "-Werror", str(src), *flags, "-o", str(exe)], tmp_path)
    env["LD_LIBRARY_PATH"] = str(prefix / "lib")  # linked against the installed libember.so
    got = _outputs(_run([str(exe), str(pte)], tmp_path, env))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
