"""Where a latency bar lies against this machine's f32 roofline, model by model.

For each zoo model (bench/models.py) it counts the model's FLOPs with PyTorch's
``FlopCounterMode`` (2 per multiply-add) and divides them by the FMA peak measured on this
machine (``bench/gemm/gemm_bench.c``'s peak loop: independent FMA chains, no memory traffic) at
1 and 2 threads. That quotient is the *floor*: the time of a perfect f32 kernel that does the
model's own FLOPs and waits for nothing. Against it, from a results table of ``bench/run.py``:

- ``bar``: ``--factor`` (0.8) x the best peer's median (ExecuTorch+XNNPACK, ONNX Runtime, eager);
- ``bar / floor``: under 1, the bar asks for more FLOP/s than the FMA units deliver — no f32
  runtime doing the model's FLOPs can meet it on this machine;
- the share of the peak each runtime reaches over the whole model (floor / median).

    .venv/bin/python bench/roofline.py --zoo bench/results/zoo_2026-12-01l.md \
        [--peak 117.3 234.9] [--factor 0.8] [--out bench/results/roofline_2026-12-01.md]

Without ``--peak`` it builds gemm_bench against build/libember.a and measures the peak at 1 and
2 threads (best of its rounds). Needs torch and the zoo's model definitions (offline).
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.report import bar_cells, build_c_bench, write_report  # noqa: E402

OUT = ROOT / "out" / "bench"
PEERS = ("et_xnnpack", "ort", "eager")
MODELS = ("mobilenet_v2", "mobilenet_v3_small", "resnet18", "resnet50", "vit_b16", "minilm_l6")

log = logging.getLogger("roofline")


def model_gflop(name: str) -> float:
    """FLOPs of one forward pass of zoo model `name` (2 per multiply-add), in GFLOP."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    sys.path.insert(0, str(ROOT))
    from bench.models import ZOO

    m, inputs = ZOO[name]()
    with torch.inference_mode(), FlopCounterMode(display=False) as fc:
        m(*inputs)
    return fc.get_total_flops() / 1e9


def measure_peak(threads: int) -> float:
    """The FMA peak in GFLOP/s at `threads` threads, as gemm_bench measures it."""
    exe = OUT / "gemm_bench"
    if not exe.exists():
        build_c_bench(
            ROOT / "bench" / "gemm" / "gemm_bench.c",
            exe,
            flags=("-D_POSIX_C_SOURCE=200809L", f"-I{ROOT / 'backends' / 'cpu'}"),
        )
    r = subprocess.run(
        [str(exe), "256", "256", "256", "30", str(threads)],
        check=True,
        capture_output=True,
        text=True,
    )
    m = re.search(r"FMA peak ([\d.]+) GFLOP/s", r.stdout)
    if not m:
        raise RuntimeError(f"gemm_bench printed no FMA peak: {r.stdout.strip()[:200]}")
    return float(m.group(1))


def read_zoo(path: Path) -> dict[tuple[str, int, str], float]:
    """Medians (ms) of a bench/run.py table, keyed by (model, threads, runtime)."""
    if not path.is_file():
        raise ValueError(f"{path}: no such results table")
    rows: dict[tuple[str, int, str], float] = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[1].isdigit():
            continue
        try:
            rows[(cells[0], int(cells[1]), cells[2])] = float(cells[3])
        except ValueError:
            continue  # a runtime that failed on this model has no median
    if not rows:
        raise ValueError(f"{path}: no result rows (is it a bench/run.py table?)")
    return rows


def table(
    gflop: dict[str, float],
    peak: dict[int, float],
    zoo: dict[tuple[str, int, str], float],
    factor: float,
) -> list[str]:
    """The markdown rows: per model and thread count, floor, bar and each runtime's share."""
    out = [
        "| model | threads | GFLOP | floor (ms) | best peer (ms) | bar (ms) | bar / floor "
        "| Ember (ms) | Ember % of peak | best peer % of peak |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, g in gflop.items():
        for t, pk in sorted(peak.items()):
            floor = g / pk * 1e3
            peers = {p: zoo[(name, t, p)] for p in PEERS if (name, t, p) in zoo}
            if not peers:
                log.warning("%s at %d threads: no peer in the table, skipped", name, t)
                continue
            ember = zoo.get((name, t, "ember"))
            out.append(
                f"| {name} | {t} | {g:.2f} | {floor:.2f} | "
                + bar_cells(floor, peers, factor, ember)
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", type=Path, required=True, help="a bench/run.py results table")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument(
        "--peak", nargs=2, type=float, metavar=("P1", "P2"), help="FMA peak GFLOP/s, 1 / 2 threads"
    )
    ap.add_argument("--factor", type=float, default=0.8, help="the bar as a share of the best peer")
    ap.add_argument("--out", type=Path, help="write the markdown here (else stdout)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    try:
        zoo = read_zoo(a.zoo)
    except ValueError as e:
        raise SystemExit(f"roofline: {e}") from None
    if a.peak:
        peak = {1: a.peak[0], 2: a.peak[1]}
        how = f"given on the command line (`--peak {a.peak[0]} {a.peak[1]}`)"
    else:
        peak = {t: measure_peak(t) for t in (1, 2)}
        how = "measured now by gemm_bench's peak loop (best of 30 rounds)"
    log.info("FMA peak: %.1f GFLOP/s (1 thread), %.1f (2 threads)", peak[1], peak[2])
    gflop: dict[str, float] = {}
    for i, name in enumerate(a.models, 1):
        log.info("[%d/%d] counting FLOPs of %s", i, len(a.models), name)
        gflop[name] = model_gflop(name)

    explanation = (
        f"Latencies from `{a.zoo.relative_to(ROOT) if a.zoo.is_absolute() else a.zoo}`. "
        f"FMA peak {peak[1]:.1f} GFLOP/s at 1 thread, {peak[2]:.1f} at 2, {how}. "
        "GFLOP: `torch.utils.flop_counter.FlopCounterMode`, 2 per multiply-add. floor = GFLOP / "
        f"peak: a perfect f32 kernel doing the model's own FLOPs. bar = {a.factor} x the best "
        "peer's median. **bar / floor under 1: the bar asks for more than the FMA units "
        "deliver** (only an algorithm with fewer multiplies, e.g. Winograd for 3x3 convs, can "
        "get under it). % of peak = floor / median, over the whole model."
    )
    write_report(
        f"The {a.factor}x bar against the f32 roofline",
        explanation,
        table(gflop, peak, zoo, a.factor),
        a.out,
    )


if __name__ == "__main__":
    main()
