"""File size against the f32 weights, per zoo model (issue 33, item 3): what EmberCpuBackend's
stored forms (weights packed at export: GEMM panels, Winograd transforms, bf16 pairs) cost on
disk, with the load time and peak RSS of ``ember run`` on the file.

For each model of ``bench/models.py``: the f32 bytes of its parameters and buffers, the `.pte`
Ember exports by default, their ratio, and one ``ember run`` (1 iteration): load + prepare time
as the CLI reports it and the process's peak RSS (``ru_maxrss`` of the child).

    .venv/bin/python bench/file_size.py --md out.md
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


def _run(pte: Path, inputs: list[Path]) -> tuple[float, float]:
    """Load + prepare ms and peak RSS MiB of one `ember run` of the file (GNU time's %M: a
    child forked from this torch-sized process would start with its RSS)."""
    cmd = ["/usr/bin/time", "-f", "maxrss %M", str(ROOT / "build" / "ember"), "run", str(pte)]
    cmd += ["--iters", "1"]
    for i in inputs:
        cmd += ["--input", str(i)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = _LOAD.search(r.stdout)
    rss = re.search(r"maxrss (\d+)", r.stderr)
    return (float(m.group(1)) if m else float("nan"),
            int(rss.group(1)) / 1024 if rss else float("nan"))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models:
        model, inputs = ZOO[name]()
        f32 = sum(t.numel() * 4 for t in list(model.parameters()) + list(model.buffers()))
        pte = OUT / f"{name}.pte"
        ember.export(model, inputs).save(pte)
        files = []
        for k, t in enumerate(inputs):
            p = OUT / f"{name}.in{k}.npy"
            np.save(p, t.numpy())
            files.append(p)
        size = pte.stat().st_size
        load_ms, rss = _run(pte, files)
        rows.append((name, f32 / 2**20, size / 2**20, size / f32, load_ms, rss))
        log.info("%s: %.1f MiB f32, %.1f MiB file (%.2fx)", name, f32 / 2**20, size / 2**20,
                 size / f32)  # fmt: skip
    lines = [
        "| model | f32 weights MiB | .pte MiB | file / f32 | load + prepare ms | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {n} | {w:.1f} | {s:.1f} | {r:.2f} | {ms:.1f} | {rss:.0f} |"
        for n, w, s, r, ms, rss in rows
    ]
    emit(lines, args.md)


if __name__ == "__main__":
    main()
