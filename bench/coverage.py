"""How much of each zoo model runs inside EmberCpuBackend: operators and time left outside.

For every model prepared by ``bench/run.py`` (``out/bench/<model>/ember.pte`` and ``io.pt``):

- the model's operators: call nodes of its ``torch.export`` graph after the Core ATen
  decomposition (what the exporter partitions), and which of them stay outside the delegates —
  every instruction of the ``.pte`` that is not a delegate call (``build/ember info``);
- the time outside: ``build/ember run --profile`` at 1 thread, each instruction's share of the
  execute time (delegate calls against the portable operators between them).

    .venv/bin/python bench/coverage.py [--models vit_b16 minilm_l6] [--iters 20]
                                       [--out bench/results/coverage.md]

Needs ``build/ember`` and the exports (``bench/run.py --models ...`` makes them).
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.report import write_report  # noqa: E402

OUT = ROOT / "out" / "bench"
EMBER = ROOT / "build" / "ember"
MODELS = ("mobilenet_v2", "mobilenet_v3_small", "resnet18", "resnet50", "vit_b16", "minilm_l6")
DELEGATE = "EmberCpuBackend"

log = logging.getLogger("coverage")


def aten_ops(name: str) -> int:
    """Call nodes of zoo model `name`'s exported graph after the Core ATen decomposition."""
    import torch

    sys.path.insert(0, str(ROOT))
    from bench.models import ZOO

    m, inputs = ZOO[name]()
    return count_aten_ops(torch.export.export(m, inputs))


def count_aten_ops(ep: Any) -> int:
    """Call nodes of a ``torch.export`` program after the Core ATen decomposition."""
    ep = ep.run_decompositions()
    return sum(
        1 for n in ep.graph.nodes if n.op == "call_function" and "getitem" not in str(n.target)
    )


def outside_ops(pte: Path, ember: Path = EMBER) -> dict[str, int]:
    """Operator name -> calls for every non-delegate instruction of `pte` (``ember info``)."""
    r = subprocess.run([str(ember), "info", str(pte)], check=True, capture_output=True, text=True)
    return parse_info(r.stdout)


def parse_info(text: str) -> dict[str, int]:
    """The operator table of ``ember info``'s output: name -> calls."""
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^\s+(\S+::\S+)\s+calls (\d+)", text, re.M)
    }


def profile(pte: Path, io: Path, iters: int) -> tuple[float, dict[str, float]]:
    """Median execute ms and each operator's share (%) of the operators' summed time, from
    ``ember run --profile`` at 1 thread."""
    import torch

    x, _ = torch.load(io)
    return profile_arrays(pte, [x.numpy()], iters)


def profile_arrays(
    pte: Path, inputs: list[Any], iters: int, ember: Path = EMBER
) -> tuple[float, dict[str, float]]:
    """``profile`` on the given input arrays (numpy, one per method input)."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for i, x in enumerate(inputs):
            np.save(Path(tmp) / f"x{i}.npy", x)
            args += ["--input", str(Path(tmp) / f"x{i}.npy")]
        r = subprocess.run(
            [str(ember), "run", str(pte), *args, "--iters", str(iters), "--profile"],
            check=True,
            capture_output=True,
            text=True,
        )
    return parse_profile(r.stdout + r.stderr, str(pte))


def parse_profile(text: str, what: str = "ember run") -> tuple[float, dict[str, float]]:
    """Median execute ms and each operator's share (%) of the summed operator time, from the
    output of ``ember run --profile``."""
    med = re.search(r"execute: median ([\d.]+) ms", text)
    if not med:
        raise RuntimeError(f"{what}: no execute time in ember run's output")
    totals = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(\S+)\s+\d+\s+([\d.]+)\s+[\d.]+\s+[\d.]+%", text, re.M)
    }
    whole = sum(totals.values())
    return float(med.group(1)), {op: 100 * t / whole for op, t in totals.items()} if whole else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", type=Path, help="write the markdown here (else stdout)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not EMBER.exists():
        raise SystemExit(f"{EMBER} is missing: build it first (make, or ninja -C build)")

    rows = [
        "| model | ATen ops | outside the delegates | ops outside | time outside | execute (ms) |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for i, name in enumerate(a.models, 1):
        d = OUT / name
        pte, io = d / "ember.pte", d / "io.pt"
        if not pte.exists() or not io.exists():
            raise SystemExit(f"{d}: no ember.pte / io.pt (run bench/run.py --models {name})")
        log.info("[%d/%d] %s", i, len(a.models), name)
        total = aten_ops(name)
        out = outside_ops(pte)
        ms, shares = profile(pte, io, a.iters)
        n_out = sum(out.values())
        t_out = sum(s for op, s in shares.items() if op != DELEGATE)
        names = ", ".join(f"{op.split('::')[1].split('.')[0]} x{c}" for op, c in out.items())
        rows.append(
            f"| {name} | {total} | {names or 'none'} | {n_out} ({100 * n_out / total:.1f} %) "
            f"| {t_out:.2f} % | {ms:.2f} |"
        )
    write_report(
        "What stays outside EmberCpuBackend",
        "ATen ops: call nodes of the model's `torch.export` graph after the Core ATen "
        "decomposition (what the partitioner sees). Outside: the `.pte`'s instructions that "
        "are not delegate calls (`build/ember info`), run by the portable kernels. Time "
        f"outside: their share of `build/ember run --profile` at 1 thread ({a.iters} "
        "iterations, the delegate calls being the rest).",
        rows,
        a.out,
    )


if __name__ == "__main__":
    main()
