"""Dispatch overhead: a program of 1,000 trivial operators on a 1-element tensor.

Exports ``x = relu(x + 1)`` style chains with Ember, runs them with the C CLI
(``build/ember run --iters N``) and reports nanoseconds per instruction
(median execute time / instruction count). Compares a 1,000-op program with a
10-op one so fixed per-execute costs are separated from per-instruction ones.

    .venv/bin/python bench/dispatch.py
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import ember

log = logging.getLogger("bench.dispatch")
ROOT = Path(__file__).resolve().parents[1]


class Chain(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.n):
            x = x + 1.0
        return x


def median_ms(pte: Path, iters: int) -> float:
    out = subprocess.run(
        [str(ROOT / "build" / "ember"), "run", str(pte), "--iters", str(iters)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    m = re.search(r"median ([0-9.]+) ms", out)
    if not m:
        raise RuntimeError(f"unexpected output: {out}")
    return float(m.group(1))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    x = torch.zeros(1)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in (10, 1000):
            p = ember.export(Chain(n), (x,), backend=None)
            path = Path(d) / f"chain{n}.pte"
            p.save(path)
            ms = min(median_ms(path, 2000) for _ in range(3))
            rows.append((n, ms))
    (n0, t0), (n1, t1) = rows
    per = (t1 - t0) * 1e6 / (n1 - n0)
    total = t1 * 1e6 / n1
    log.info("instructions  median execute")
    for n, ms in rows:
        log.info("%12d  %.4f ms", n, ms)
    log.info("per instruction: %.1f ns (marginal), %.1f ns (1000-op total / 1000)", per, total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
