"""The `ember` CLI under misuse (issue 30): every subcommand answers --help / -h, unknown options
and bad values are refused by name, `run --max-memory` refuses a method before allocating and
names the arena and its size, `info` counts missing backends like missing kernels and exits 1,
and a file asking for more planned memory than the budget is refused with the arena named.
Drives build/ember (or $EMBER_CLI) with subprocess; about 1 s."""

from __future__ import annotations

import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMBER = Path(os.environ.get("EMBER_CLI", ROOT / "build" / "ember"))
MLP = ROOT / "tests" / "fixtures" / "mlp.pte"
DELEGATED = ROOT / "tests" / "fixtures" / "delegated.pte"

pytestmark = pytest.mark.skipif(not EMBER.exists(), reason=f"{EMBER} not built")


def ember(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EMBER), *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("cmd", ["info", "run", "ops"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_subcommand_answers_help(cmd: str, flag: str) -> None:
    r = ember(cmd, flag)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:") and f"ember {cmd}" in r.stdout
    assert "AccessFailed" not in r.stdout + r.stderr


def test_top_level_help_and_unknown_command() -> None:
    r = ember("--help")
    assert r.returncode == 0 and all(f"ember {c}" in r.stdout for c in ("info", "run", "ops"))
    r = ember("frobnicate", MLP)
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr


@pytest.mark.parametrize("cmd", ["info", "run", "ops"])
def test_unknown_options_are_refused_by_name(cmd: str) -> None:
    r = ember(cmd, MLP, "--bogus-flag") if cmd != "ops" else ember(cmd, "--bogus-flag")
    assert r.returncode == 2
    assert "unknown option '--bogus-flag'" in r.stderr


def test_run_only_options_are_unknown_to_info() -> None:
    r = ember("info", MLP, "--iters", "3")
    assert r.returncode == 2 and "unknown option '--iters'" in r.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--iters"], "option '--iters' needs a value"),
        (["--iters", "abc"], "--iters wants a positive integer, not 'abc'"),
        (["--threads", "0"], "--threads wants a positive integer"),
        (["--threads", "-3"], "--threads wants a positive integer"),
        (["--max-memory", "12Q"], "--max-memory wants a positive byte count"),
        (["--max-memory", "99999999999999999999"], "--max-memory wants a positive byte count"),
    ],
)
def test_bad_values_are_refused(args: list[str], needle: str) -> None:
    r = ember("run", MLP, *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr


def test_missing_model_and_extra_argument() -> None:
    assert "no model file given" in ember("run").stderr
    r = ember("run", MLP, MLP)
    assert r.returncode == 2 and "unexpected argument" in r.stderr


def _arena_bytes(path: Path) -> int:
    out = ember("info", path).stdout
    return int(re.search(r"planned arenas: 1 \((\d+) bytes", out).group(1))


def test_max_memory_refuses_before_allocating_and_names_the_arena() -> None:
    n = _arena_bytes(MLP)
    r = ember("run", MLP, "--max-memory", "1K")
    assert r.returncode == 1
    assert "MemoryAllocationFailed" in r.stderr
    assert f"planned arena 1 of {n} bytes exceeds the memory budget (1024 bytes" in r.stderr
    ok = ember("run", MLP, "--max-memory", "8M")
    assert ok.returncode == 0 and "output 0: f32 [2, 4]" in ok.stdout


def test_file_asking_for_a_huge_arena_is_refused_with_its_size(tmp_path: Path) -> None:
    """non_const_buffer_sizes[1] rewritten to 2^50: refused by the budget (the machine's memory
    by default), naming arena 1 and the size, before anything is allocated."""
    data = bytearray(MLP.read_bytes())
    n = _arena_bytes(MLP)
    sites = [i for i in range(0, len(data) - 7, 8) if struct.unpack_from("<q", data, i)[0] == n]
    assert sites, "arena size not found in the file"
    for i in sites:
        struct.pack_into("<q", data, i, 1 << 50)
    bad = tmp_path / "huge.pte"
    bad.write_bytes(bytes(data))
    r = ember("run", bad)
    assert r.returncode == 1
    assert f"planned arena 1 of {1 << 50} bytes" in r.stderr, r.stderr


def test_info_counts_missing_backends_and_exits_nonzero(tmp_path: Path) -> None:
    good = ember("info", DELEGATED)
    assert good.returncode == 0
    assert "missing kernels in this build: 0" in good.stdout
    assert "missing backends in this build: 0" in good.stdout
    data = DELEGATED.read_bytes()
    assert b"EmberCpuBackend" in data
    other = tmp_path / "other_backend.pte"
    other.write_bytes(data.replace(b"EmberCpuBackend", b"EmberXpuBackend"))
    r = ember("info", other)
    assert r.returncode == 1
    assert "EmberXpuBackend  MISSING backend in this build" in r.stdout
    assert "missing kernels in this build: 0" in r.stdout
    assert re.search(r"missing backends in this build: [1-9]", r.stdout)


REGRESSIONS = sorted((ROOT / "tests" / "corrupt_regressions").glob("*.pte"))


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.name for p in REGRESSIONS])
def test_corrupt_regressions_are_refused_or_run(path: Path) -> None:
    """Mutants that once crashed or hung (tools/mutation_sweep.py; the .txt next to each says
    what happened): now a clean refusal or a run, within seconds."""
    r = ember("run", path)
    assert r.returncode in (0, 1), r.stderr
    assert r.returncode == 0 or r.stderr.startswith("ember")
