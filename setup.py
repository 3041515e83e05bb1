"""setup.py — the build hook of Ember's Python package: compiles the C runtime into the wheel.

``pip install .`` and ``python -m build --wheel`` run CMake (Release, no tests) on this checkout
and put ``libember.so`` and the ``ember`` / ``ember-llm`` command-line programs inside the
package (``ember/libember.so``, ``ember/bin/``), where ``ember._lib`` and ``ember._bin`` find
them. The wheel is platform-specific (it carries native code). An editable install
(``pip install -e .``, what ``make venv`` does) builds nothing: the checkout's ``build/`` is used.
Metadata lives in pyproject.toml. Needs cmake and a C11 compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
CLIS = ("ember", "ember-llm")


class BinaryDistribution(Distribution):
    """Native code inside: a platform wheel, installed into platlib."""

    def has_ext_modules(self) -> bool:
        return True


class BuildPyWithRuntime(build_py):
    """build_py, then the C runtime with CMake into the package's build directory."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        tmp = Path(self.get_finalized_command("build").build_temp) / "cmake"
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        self.spawn(
            ["cmake", "-S", str(ROOT), "-B", str(tmp), *gen, "-DCMAKE_BUILD_TYPE=Release",
             "-DEMBER_TESTS=OFF"]
        )  # fmt: skip
        self.spawn(["cmake", "--build", str(tmp), "-j", jobs, "--target", "ember_shared", *CLIS])
        pkg = Path(self.build_lib) / "ember"
        shutil.copy2(tmp / "libember.so", pkg / "libember.so")
        (pkg / "bin").mkdir(exist_ok=True)
        for exe in CLIS:
            shutil.copy2(tmp / exe, pkg / "bin" / exe)
        for f in (pkg / "libember.so", *(pkg / "bin" / exe for exe in CLIS)):
            subprocess.run(["strip", "--strip-unneeded", str(f)], check=False)


# Build directories go to build-wheel/, not build/ (the checkout's CMake build).
setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithRuntime},
    options={"build": {"build_base": str(ROOT / "build-wheel")}},
)
