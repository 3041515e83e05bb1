"""Where the int8 latency bar lies against this machine's int8 roofline, model by model.

For each model of an int8 results table (``bench/int8.py``) it counts the model's multiply-adds
with PyTorch's ``FlopCounterMode`` and splits them into those every int8 runtime compared runs
in int8 (convolutions and the linear layers' products with a weight: ``convolution``, ``addmm``,
``mm``) and those every one runs in f32 (attention's products: ``bmm``, SDPA). The *floor* is
the time a perfect kernel would take on them alone: int8 MACs / the VNNI peak + f32 FLOPs / the
FMA peak, both measured on this machine (``bench/gemm/q8_tile_bench.c``: 12 independent
``vpdpbusd`` chains; ``bench/gemm/gemm_bench.c``: independent FMA chains; no memory traffic),
the 2-thread peaks measured with two copies at once. Depthwise convolutions count at the VNNI
peak too, which no depthwise kernel reaches: the floor is a lower bound, generous to the bar.
Against it:

- ``bar``: ``--factor`` (0.8) x the best int8 peer's median (ExecuTorch+XNNPACK, ONNX Runtime);
- ``bar / floor`` near or under 1: the bar asks for the peak over the whole model — no int8
  runtime doing the model's multiply-adds with these instructions can meet it on this machine;
- the share of the floor Ember int8 and the best peer reach (floor / median).

    .venv/bin/python bench/int8_roofline.py --table bench/results/int8_zen4_2026-12-03i.md \
        [--peaks V1 V2 F1 F2] [--factor 0.8] [--out bench/results/int8_roofline_....md]

Without ``--peaks`` it builds both benches against build/libember.a and measures the peaks.
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
PEERS = ("ET+XNNPACK int8", "ORT int8 S8S8", "ORT int8 U8S8", "ORT int8 dynamic")
INT8_OPS = ("convolution", "addmm", "mm")  # the ops every int8 runtime compared runs in int8

log = logging.getLogger("int8_roofline")


def model_macs(name: str) -> tuple[float, float]:
    """(GMAC every int8 runtime runs in int8, GFLOP every one runs in f32) of one forward pass."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from bench.models import ZOO

    m, inputs = ZOO[name]()
    with torch.inference_mode(), FlopCounterMode(display=False) as fc:
        m(*inputs)
    int8 = f32 = 0.0
    for op, flops in fc.get_flop_counts().get("Global", {}).items():
        base = str(op).split(".")[1] if str(op).startswith("aten.") else str(op)
        if base in INT8_OPS:
            int8 += flops / 2
        else:
            f32 += flops
    return int8 / 1e9, f32 / 1e9


def _run_copies(cmd: list[str], copies: int) -> list[str]:
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(copies)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode:
            raise RuntimeError(f"{cmd[0]} failed: {err.strip()[:200]}")
        outs.append(out)
    return outs


def measure_vnni_peak(threads: int) -> float:
    """The vpdpbusd peak in GMAC/s with `threads` copies of q8_tile_bench at once (summed)."""
    exe = OUT / "q8_tile_bench"
    if not exe.exists():
        build_c_bench(
            ROOT / "bench" / "gemm" / "q8_tile_bench.c",
            exe,
            flags=(
                "-mavx512f",
                "-mavx512bw",
                "-mavx512vnni",
                "-O2",
                f"-I{ROOT / 'backends' / 'cpu'}",
            ),
        )
    total = 0.0
    for out in _run_copies([str(exe), "256", "64", "1024", "20"], threads):
        m = re.search(r"VNNI peak ([\d.]+) GMAC/s", out)
        if not m:
            raise RuntimeError(f"q8_tile_bench printed no VNNI peak: {out.strip()[:200]}")
        total += float(m.group(1))
    return total


def measure_fma_peak(threads: int) -> float:
    """The FMA peak in GFLOP/s at `threads` threads, as gemm_bench measures it."""
    from bench.roofline import measure_peak

    return measure_peak(threads)


def read_int8_table(path: Path) -> dict[tuple[str, int], dict[str, float]]:
    """Medians (ms) of a bench/int8.py table, keyed by (model, threads), then by column."""
    if not path.is_file():
        raise ValueError(f"{path}: no such results table")
    rows: dict[tuple[str, int], dict[str, float]] = {}
    header: list[str] = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "model" and "threads" in cells:
            header = cells
            continue
        if not header or len(cells) != len(header) or not cells[header.index("threads")].isdigit():
            continue
        key = (cells[0], int(cells[header.index("threads")]))
        vals: dict[str, float] = {}
        for h, c in zip(header, cells, strict=True):
            try:
                vals[h] = float(c)
            except ValueError:
                continue
        rows[key] = vals
    if not rows:
        raise ValueError(f"{path}: no result rows (is it a bench/int8.py table?)")
    return rows


def table(
    macs: dict[str, tuple[float, float]],
    vnni: dict[int, float],
    fma: dict[int, float],
    res: dict[tuple[str, int], dict[str, float]],
    factor: float,
) -> list[str]:
    """The markdown rows: per model and thread count, floor, bar and each runtime's share."""
    out = [
        "| model | threads | int8 GMAC | f32 GFLOP | floor (ms) | best int8 peer (ms) | bar (ms) "
        "| bar / floor | Ember int8 (ms) | Ember % of floor | best peer % of floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (name, t), vals in sorted(res.items()):
        if name not in macs or t not in vnni:
            continue
        g8, g32 = macs[name]
        floor = (g8 / vnni[t] + g32 / fma[t]) * 1e3
        peers = {p: vals[p] for p in PEERS if p in vals}
        ember = vals.get("Ember int8")
        if not peers or ember is None:
            log.warning("%s at %d threads: no peer or no Ember int8 median, skipped", name, t)
            continue
        out.append(
            f"| {name} | {t} | {g8:.2f} | {g32:.2f} | {floor:.2f} | "
            + bar_cells(floor, peers, factor, ember)
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, nargs="+", required=True, help="bench/int8.py tables")
    ap.add_argument(
        "--peaks",
        nargs=4,
        type=float,
        metavar=("V1", "V2", "F1", "F2"),
        help="VNNI peak GMAC/s and FMA peak GFLOP/s at 1 / 2 threads",
    )
    ap.add_argument("--factor", type=float, default=0.8, help="the bar as a share of the best peer")
    ap.add_argument("--out", type=Path, help="write the markdown here (else stdout)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    res: dict[tuple[str, int], dict[str, float]] = {}
    try:
        for t in a.table:
            res.update(read_int8_table(t))
    except ValueError as e:
        raise SystemExit(f"int8_roofline: {e}") from None
    if a.peaks:
        vnni, fma = {1: a.peaks[0], 2: a.peaks[1]}, {1: a.peaks[2], 2: a.peaks[3]}
        how = "given on the command line"
    else:
        vnni = {t: measure_vnni_peak(t) for t in (1, 2)}
        fma = {t: measure_fma_peak(t) for t in (1, 2)}
        how = (
            "measured now (best of 20 / 30 rounds; 2 threads: two copies of q8_tile_bench at once)"
        )
    log.info(
        "VNNI peak %.1f / %.1f GMAC/s, FMA peak %.1f / %.1f GFLOP/s", *vnni.values(), *fma.values()
    )
    names = sorted({name for name, _ in res})
    macs: dict[str, tuple[float, float]] = {}
    for i, name in enumerate(names, 1):
        log.info("[%d/%d] counting multiply-adds of %s", i, len(names), name)
        macs[name] = model_macs(name)
    tables = ", ".join(f"`{p.relative_to(ROOT) if p.is_absolute() else p}`" for p in a.table)
    explanation = (
        f"Latencies from {tables}. VNNI peak {vnni[1]:.1f} GMAC/s at 1 thread, {vnni[2]:.1f} at "
        f"2; FMA peak {fma[1]:.1f} GFLOP/s at 1 thread, {fma[2]:.1f} at 2; {how}. int8 GMAC: "
        "convolutions and weight products (`FlopCounterMode`, halved); f32 GFLOP: the rest "
        "(attention's products). floor = int8 GMAC / VNNI peak + f32 GFLOP / FMA peak. bar = "
        f"{a.factor} x the best int8 peer's median. **bar / floor near or under 1: the bar asks "
        "for the peak over the whole model.** % of floor = floor / median."
    )
    write_report(
        f"The {a.factor}x int8 bar against the int8 roofline",
        explanation,
        table(macs, vnni, fma, res, a.factor),
        a.out,
    )


if __name__ == "__main__":
    main()
