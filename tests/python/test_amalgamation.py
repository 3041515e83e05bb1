"""The single-file build: tools/amalgamate.py writes ember.c + ember.h, which compile alone (gcc,
the project's warning flags) and run the fixtures like the regular build.

tests/amalgamation/run_fixture.c is compiled against the two generated files only (no include
path into the tree) and runs every tests/fixtures .pte that needs only the prim ops and the
portable kernels, with inputs generated as ``ember run`` makes them, twice (its own memory through
em_method_prepare, then em_module); each output must equal, byte for byte, what the regular
build's ``build/ember run --output-dir`` writes. Programs that need the
CPU backend or the quantized kernels must be refused by name (exit 3), not run wrongly.

Cost: about 25 s on one core (the -O1 compile of ember.c is most of it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
EMBER = ROOT / "build" / "ember"
FIXTURES = ROOT / "tests" / "fixtures"
# Programs of only prim + portable operators (the amalgamation's kernels): each must run.
PORTABLE = [
    "cnn.pte",
    "cond.pte",
    "counter.pte",
    "dynamic.pte",
    "mlp.pte",
    "alias/inplace.pte",
    "alias/int8.pte",
    "alias/kvcache.pte",
    "alias/shapes.pte",
]
# Programs needing what the amalgamation leaves out: refused with exit status 3.
REFUSED = {"delegated.pte": "EmberCpuBackend", "alias/llm_q4.pte": "ember::linear_q4.out"}
CC = shutil.which("gcc") or shutil.which("cc")


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generates the amalgamation (with its compile check) and builds run_fixture against it."""
    if CC is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("amalgamation")
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "amalgamate.py"), "-o", str(out), "--cc", CC],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    text = (out / "ember.c").read_text()
    # Every project include was inlined: only system headers are left.
    assert not re.search(r'^\s*#\s*include\s+"', text, re.M)
    assert '#line 1 "src/method.c"' in text
    # The test program sees ember.h only; ember.c is compiled with -std=c11 and no -I.
    shutil.copy(ROOT / "tests" / "amalgamation" / "run_fixture.c", out / "run_fixture.c")
    flags = ["-std=c11", "-O1", "-Wall", "-Wextra", "-Wpedantic", "-Werror"]
    exe = out / "run_fixture"
    cmd = [CC, *flags, "run_fixture.c", "ember.c", "-o", str(exe), "-lm", "-lpthread"]
    r = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def _ember_run(pte: Path, out: Path) -> list[str]:
    """The regular build's outputs (summary lines) for the same generated inputs."""
    out.mkdir()
    # The amalgamation has no optimized layer (kernels/optimized): compare with the plain loops.
    env = dict(os.environ, EMBER_CPU_ISA="scalar")
    r = subprocess.run(
        [str(EMBER), "run", str(pte), "--output-dir", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if line.startswith("output ")]


@pytest.mark.parametrize("name", PORTABLE)
def test_fixture_matches_regular_build(runner: Path, name: str, tmp_path: Path) -> None:
    if not EMBER.exists():
        pytest.skip("build/ember not built (make build)")
    pte = FIXTURES / name
    regular = _ember_run(pte, tmp_path / "regular")
    for mode in ([], ["--module"]):  # caller-owned memory, then em_module (extension/module.c)
        single = tmp_path / f"single{len(mode)}"
        single.mkdir()
        r = subprocess.run(
            [str(runner), str(pte), str(single), *mode], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert len(lines) == len(regular) > 0
        for line, ref in zip(lines, regular, strict=True):
            m = re.match(r"output (\d+): tensor (\w+) ([\dx]*)$", line)
            if not m:  # a scalar output: same value as ember run prints
                assert line.split()[2:] == ref.split()[2:], (line, ref)
                continue
            i = int(m.group(1))
            want = np.load(tmp_path / "regular" / f"output_{i}.npy")
            shape = tuple(int(d) for d in m.group(3).split("x")) if m.group(3) else ()
            assert shape == want.shape, (name, mode, i)
            got = np.frombuffer((single / f"output_{i}.bin").read_bytes(), dtype=want.dtype)
            assert got.tobytes() == np.ascontiguousarray(want).tobytes(), (name, mode, i)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_program_needing_more_is_refused_by_name(runner: Path, name: str, tmp_path: Path) -> None:
    r = subprocess.run(
        [str(runner), str(FIXTURES / name), str(tmp_path)], capture_output=True, text=True
    )
    assert r.returncode == 3, r.stdout + r.stderr
    assert REFUSED[name] in r.stderr
