"""Where an int8 CNN's time goes in EmberCpuBackend (issue 31): per kind of backend operator.

Runs ``ember run`` with the CPU backend's per-operator profile (``EMBER_CPU_PROFILE=1``: each
operator's CPU time on one thread, its wall time on a pool) on the Ember int8 files
``bench/int8.py`` exported (``out/bench/int8/<model>/ember_int8/ember.pte``), takes each
operator's median over the iterations and sums them by kind: the int8 1x1 / im2col convs
(pixel-major tile), int8 depthwise convs, f32 convs, u8 adds (``EMC_BINARY_Q8``), f32 binary ops,
pools, unary ops (fake-quant, hardswish), means, pads.

    .venv/bin/python bench/int8_profile.py --models resnet18 resnet50 --threads 1 --iters 20
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("bench.int8_profile")
_LINE = re.compile(
    r"emc op\s+(\d+) kind\s+(\d+) act\s+(\d+) ip\[([^\]]*)\] out (\d+): ([\d.]+) ms(.*)"
)
_KINDS = {3: "binary", 4: "unary", 5: "max pool", 6: "avg pool", 7: "mean", 17: "pad"}


def category(kind: int, ip: list[int], tag: str) -> str:
    """The row an operator's time goes to, from its blob kind, first ip slots and path tag."""
    if kind == 1:
        if "pixel-major" in tag:
            return "int8 1x1 / im2col convs"
        return "int8 depthwise convs" if tag == "(int8)" else "f32 convs"
    if kind == 3:
        return "u8 adds" if ip[1] else "f32 binary"
    return _KINDS.get(kind, f"kind {kind}")


def profile(exe: Path, pte: Path, threads: int, iters: int) -> Counter[str]:
    """Milliseconds per inference by category (each operator's median over ``iters`` runs)."""
    env = dict(os.environ, EMBER_CPU_PROFILE="1")
    cmd = [str(exe), "run", str(pte), "--iters", str(iters), "--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    times: dict[int, list[float]] = defaultdict(list)
    meta: dict[int, str] = {}
    for line in r.stderr.splitlines():
        m = _LINE.search(line)
        if m:
            op = int(m[1])
            times[op].append(float(m[6]))
            meta[op] = category(int(m[2]), [int(v) for v in m[4].split()], m[7].strip())
    out: Counter[str] = Counter()
    for op, v in times.items():
        out[meta[op]] += sorted(v)[len(v) // 2]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--exe", type=Path, default=ROOT / "build" / "ember")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log.info("| model | threads | total ms | by kind: ms (share) |")
    log.info("|---|---:|---:|---|")
    for model in args.models:
        pte = ROOT / "out" / "bench" / "int8" / model / "ember_int8" / "ember.pte"
        if not pte.exists():
            log.warning("%s: no %s (run bench/int8.py first)", model, pte)
            continue
        for t in args.threads:
            cats = profile(args.exe, pte, t, args.iters)
            total = sum(cats.values())
            parts = "; ".join(
                f"{name} {ms:.2f} ({100 * ms / total:.0f} %)" for name, ms in cats.most_common()
            )
            log.info("| %s | %d | %.2f | %s |", model, t, total, parts)


if __name__ == "__main__":
    main()
