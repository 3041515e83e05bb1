"""What the CPU backend's blob-version-18 lowerings buy on the corpus models they concern: each
model exported by ``ember.export`` (default path) as it is now and with those lowerings declined
(the instructions they take left on the portable kernels, as before them: splits / chunks /
unbinds, selects, cats of more than 4 inputs, sums, vector norms, flips, embeddings, nearest /
bilinear upsampling), run by ``ember.runtime.RuntimeProgram`` at 1 thread, interleaved rounds,
medians in ms. The models are the corpus's test sizes (tests/python/corpus): small, so per-operator
and per-delegate overhead weighs as much as arithmetic.

    .venv/bin/python bench/generality_speed.py [--rounds 5] [--runs 40] [--models ...]
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import ember
import ember.backends.cpu.partition as part
from ember.runtime import RuntimeProgram

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from corpus import CASES  # noqa: E402

log = logging.getLogger("generality_speed")

# The kernels lowered since blob version 18 (and the cats of more than 4 inputs).
NEW = {
    "aten::split_with_sizes_copy.out",
    "aten::split_copy.Tensor_out",
    "aten::unbind_copy.int_out",
    "aten::select_copy.int_out",
    "aten::sum.IntList_out",
    "aten::linalg_vector_norm.out",
    "aten::embedding.out",
    "aten::flip.out",
    "aten::upsample_nearest2d.vec_out",
    "aten::upsample_bilinear2d.vec_out",
}
MODELS = [
    "lstm_bidir_2l",
    "gru_3l",
    "lstm_text",
    "gpt2",
    "bloom",
    "phi3",
    "bert",
    "t5_encoder",
    "wavlm",
    "convnextv2",
    "segformer",
    "upernet_convnext",
    "glpn",
    "dpt",
]


def _declining(real: Any) -> Any:
    def lower(ins: Any, only_here: Any) -> Any:
        if ins.kernel in NEW or (
            ins.kernel == "aten::cat.out"
            and ins.args[0].kind == "tensorlist"
            and len(ins.args[0].value) > 4
        ):
            raise part.Unsupported(f"{ins.kernel} (declined for the comparison)")
        return real(ins, only_here)

    return lower


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        name = next(
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        )
    except (OSError, subprocess.CalledProcessError, StopIteration):
        name = platform.processor() or "unknown"
    return name


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ember").setLevel(logging.WARNING)
    rows = []
    real = part.lower
    for name in args.models:
        m, inputs = CASES[name].build()
        progs: dict[str, Any] = {}
        for arm in ("before", "after"):
            part.lower = _declining(real) if arm == "before" else real
            try:
                progs[arm] = ember.export(m, inputs)
            finally:
                part.lower = real
        outside = {
            arm: sum(not d.delegated for d in p._irs["forward"].partition_report)
            for arm, p in progs.items()
        }
        rts = {arm: RuntimeProgram(p.buffer, threads=1) for arm, p in progs.items()}
        xs = list(inputs)
        with torch.no_grad():
            want = m(*inputs)
        want = want[0] if isinstance(want, (tuple, list)) else want
        err = {}
        for arm, rt in rts.items():
            got = rt.run("forward", xs)[0]
            err[arm] = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
            for _ in range(3):
                rt.run("forward", xs)
        times: dict[str, list[float]] = {arm: [] for arm in rts}
        for _ in range(args.rounds):
            for arm, rt in rts.items():
                ts = []
                for _ in range(args.runs):
                    t0 = time.perf_counter()
                    rt.run("forward", xs)
                    ts.append(time.perf_counter() - t0)
                times[arm].append(statistics.median(ts) * 1e3)
        med = {arm: statistics.median(v) for arm, v in times.items()}
        rows.append(
            (name, outside["before"], outside["after"], med["before"], med["after"], err["after"])
        )
        log.info("%s: %.3f -> %.3f ms", name, med["before"], med["after"])
    lines = [
        f"CPU: {_cpu()}, 1 thread; {args.rounds} interleaved rounds of {args.runs} runs, "
        "medians of the rounds' medians (ms, RuntimeProgram.run from Python: its call cost of "
        "~10-20 us is in both).",
        "",
        "| model | outside before | outside after | before ms | after ms | after / before "
        "| rel. err after |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, ob, oa, b, a, e in rows:
        lines.append(f"| {n} | {ob} | {oa} | {b:.3f} | {a:.3f} | {a / b:.2f} | {e:.1e} |")
    text = "\n".join(lines)
    log.info("\n%s", text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
