"""File size against the f32 weights, per zoo model (issue 33, item 3): what EmberCpuBackend's
stored forms cost on disk, for both packing choices of ``ember.export(..., pack=)`` —
``"load"`` (the default: Winograd filters transformed by the runtime at init, each weight
stored once) and ``"export"`` (the transformed filters stored) — with the load time, peak RSS
and inference time of ``ember run`` on each file.

For each model of ``bench/models.py``: the f32 bytes of its parameters and buffers, the `.pte`
Ember exports with each choice, their ratio, and ``--runs`` separate ``ember run --iters
--iters`` processes per file, interleaved: the median load + prepare time as the CLI reports
it, the median of the runs' median execute times and the largest peak RSS (GNU time's %M).

    .venv/bin/python bench/file_size.py [--models resnet18 ...] [--runs 5] [--iters 20] --md out.md
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench" / "file_size"
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

from models import ZOO  # noqa: E402  (bench/models.py)
from report import emit  # noqa: E402  (bench/report.py)

import ember  # noqa: E402

log = logging.getLogger("bench.file_size")
_LOAD = re.compile(r"load\+prepare: ([0-9.]+) ms")
_EXEC = re.compile(r"execute: median ([0-9.]+) ms")
MODES = ("load", "export")


def _run(pte: Path, inputs: list[Path], iters: int) -> tuple[float, float, float]:
    """Load + prepare ms, median execute ms and peak RSS MiB of one `ember run` of the file
    (GNU time's %M: a child forked from this torch-sized process would start with its RSS)."""
    cmd = ["/usr/bin/time", "-f", "maxrss %M", str(ROOT / "build" / "ember"), "run", str(pte)]
    cmd += ["--iters", str(iters), "--threads", "1"]
    for i in inputs:
        cmd += ["--input", str(i)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m, e = _LOAD.search(r.stdout), _EXEC.search(r.stdout)
    rss = re.search(r"maxrss (\d+)", r.stderr)
    nan = float("nan")
    return (float(m.group(1)) if m else nan, float(e.group(1)) if e else nan,
            int(rss.group(1)) / 1024 if rss else nan)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    ap.add_argument("--runs", type=int, default=5, help="ember run processes per file")
    ap.add_argument("--iters", type=int, default=20, help="inferences per process")
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models:
        model, inputs = ZOO[name]()
        f32 = sum(t.numel() * 4 for t in list(model.parameters()) + list(model.buffers()))
        files = []
        for k, t in enumerate(inputs):
            p = OUT / f"{name}.in{k}.npy"
            np.save(p, t.numpy())
            files.append(p)
        ptes = {}
        for mode in MODES:
            ptes[mode] = OUT / f"{name}.{mode}.pte"
            ember.export(model, inputs, pack=mode).save(ptes[mode])
        runs: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in MODES}
        for _ in range(args.runs):  # interleaved
            for mode in MODES:
                runs[mode].append(_run(ptes[mode], files, args.iters))
        for mode in MODES:
            size = ptes[mode].stat().st_size
            load_ms = float(np.median([r[0] for r in runs[mode]]))
            exec_ms = float(np.median([r[1] for r in runs[mode]]))
            rss = max(r[2] for r in runs[mode])
            rows.append((name, mode, f32 / 2**20, size / 2**20, size / f32, load_ms, exec_ms, rss))
            log.info("%s pack=%s: %.2fx, load %.1f ms, run %.2f ms", name, mode, size / f32,
                     load_ms, exec_ms)  # fmt: skip
    lines = [
        "| model | pack | f32 weights MiB | .pte MiB | file / f32 | load + prepare ms "
        "| execute ms (1 thread) | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {n} | {mode} | {w:.1f} | {s:.1f} | {r:.2f} | {ms:.1f} | {ex:.2f} | {rss:.0f} |"
        for n, mode, w, s, r, ms, ex, rss in rows
    ]
    emit(lines, args.md)


if __name__ == "__main__":
    main()
