"""The benchmark tools' own logic: bench/roofline.py (reading a bench/run.py table, placing a bar
against the roofline) and bench/coverage.py (reading `ember info` and `ember run --profile`)."""

from __future__ import annotations

import importlib.util
import subprocess
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMBER = ROOT / "build" / "ember"


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


roofline = _load("roofline")
coverage = _load("coverage")

TABLE = """# Benchmark

| model | threads | runtime | median | p90 | vs best | load | RSS | ΔRSS | size | err | notes |
|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|
| vit_b16 | 1 | ember | 330.00 | 340.0 | 1.10 | 1.8 | 341 | 341 | 346.4 | 9.9e-07 | n=15 |
| vit_b16 | 1 | et_xnnpack | 300.00 | 310.0 | 1.00 | 327 | 709 | 352 | 345.9 | 2.2e-06 | n=15 |
| vit_b16 | 1 | ort | 310.00 | 320.0 | 1.03 | 400 | 700 | 300 | 345.9 | 2.2e-06 | n=15 |
| vit_b16 | 1 | et_portable | failed | - | - | - | - | - | - | - | timeout |
| vit_b16 | 2 | ember | 150.00 | 160.0 | 0.75 | 1.8 | 341 | 341 | 346.4 | 9.9e-07 | n=15 |
| vit_b16 | 2 | eager | 200.00 | 210.0 | 1.00 | 400 | 700 | 300 | 345.9 | 0.0e+00 | n=15 |
"""


def test_read_zoo_keys_medians_and_skips_failed_rows(tmp_path: Path) -> None:
    p = tmp_path / "zoo.md"
    p.write_text(TABLE)
    rows = roofline.read_zoo(p)
    assert rows[("vit_b16", 1, "et_xnnpack")] == 300.0
    assert rows[("vit_b16", 2, "ember")] == 150.0
    assert ("vit_b16", 1, "et_portable") not in rows
    assert len(rows) == 5


def test_read_zoo_refuses_a_file_without_rows(tmp_path: Path) -> None:
    p = tmp_path / "notes.md"
    p.write_text("# nothing here\n\n| a | b |\n|---|---|\n")
    with pytest.raises(ValueError, match="no result rows"):
        roofline.read_zoo(p)
    with pytest.raises(ValueError, match="no such results table"):
        roofline.read_zoo(tmp_path / "missing.md")


def test_table_floor_bar_and_shares(tmp_path: Path) -> None:
    p = tmp_path / "zoo.md"
    p.write_text(TABLE)
    rows = roofline.table({"vit_b16": 30.0}, {1: 100.0, 2: 200.0}, roofline.read_zoo(p), 0.8)
    one = next(r for r in rows if r.startswith("| vit_b16 | 1 |"))
    two = next(r for r in rows if r.startswith("| vit_b16 | 2 |"))
    # 1 thread: floor 30 / 100 GFLOP/s = 300 ms; best peer XNNPACK 300 -> bar 240, 0.80 of floor
    assert "| 300.00 | 300.00 (et_xnnpack) | 240.00 | **0.80** | 330.00 | 91 % | 100 % |" in one
    # 2 threads: floor 150 ms; only eager as a peer (200) -> bar 160 -> 1.07; Ember at 100 %
    assert "| 150.00 | 200.00 (eager) | 160.00 | **1.07** | 150.00 | 100 % | 75 % |" in two


PROFILE = """output 0: f32 [1, 128, 384] min -4.20154 max 4.30573
load+prepare: 1.019 ms; execute: median 30.9064 ms over 20 iterations (min 30.1105 ms)
operator                                            calls     total ms      mean us       %
EmberCpuBackend                                         3       30.000     10000.00   97.0%
aten::where.self_out                                    1        0.600       600.00    2.0%
aten::embedding.out                                     3        0.300        24.76    1.0%
"""


def test_parse_profile_shares_of_summed_time() -> None:
    ms, shares = coverage.parse_profile(PROFILE)
    assert ms == 30.9064
    assert shares == pytest.approx(
        {"EmberCpuBackend": 97.087, "aten::where.self_out": 1.942, "aten::embedding.out": 0.971},
        abs=1e-3,
    )
    with pytest.raises(RuntimeError, match="no execute time"):
        coverage.parse_profile("operator calls\n")


def test_parse_info_on_a_stock_executorch_file() -> None:
    from et_fixtures import et_fixture

    ADD_PTE = et_fixture("add.pte")  # noqa: N806 - made by the installed executorch
    text = subprocess.run(
        [str(EMBER), "info", str(ADD_PTE)], capture_output=True, text=True, check=True
    ).stdout
    assert coverage.parse_info(text) == {"aten::add.out": 1}
    text = subprocess.run(
        [str(EMBER), "run", str(ADD_PTE), "--iters", "3", "--profile"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ms, _ = coverage.parse_profile(text)
    assert ms >= 0
