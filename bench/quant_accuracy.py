"""Int8 accuracy on real weights and real inputs (issue 31 item 4): prints the figures that
``tests/python/test_quant_accuracy.py`` checks, as a markdown table (fp32 eager PyTorch against
the int8 program of ``ember.quant.quantize_exported`` on Ember's C runtime, default backend,
one thread). Data and calibration: see ``tests/python/quant_accuracy_common.py``.

    .venv/bin/python bench/quant_accuracy.py [--md out.md]
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "python"))

import quant_accuracy_common as qa  # noqa: E402  (tests/python/quant_accuracy_common.py)
from report import cpu_name, emit  # noqa: E402  (bench/report.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    lines = [f"CPU: {cpu_name()}; code at {commit}.", ""]

    t = time.time()
    e = qa.efficientnet_figures()
    lines += [
        f"EfficientNet-Lite0, static int8 ({e.q_pairs} activation Q/DQ pairs), {e.n} views of "
        f"{e.n // 4} scikit-image photographs ({time.time() - t:.0f} s):",
        "",
        "| top-1 agreement | top-5 overlap | mean logit SQNR | cat fp32 / int8 | coffee int8 |",
        "|---:|---:|---:|---:|---:|",
        f"| {100 * e.top1_agree:.1f} % ({round(e.top1_agree * e.n)}/{e.n}) "
        f"| {e.top5_overlap:.3f} | {e.sqnr_db:.2f} dB | {e.cat_fp32} / {e.cat_int8} "
        f"| {e.coffee_int8} |",
        "",
        "Top-1 flips (view: fp32 class (fp32 probability) -> int8 class): "
        + ("; ".join(e.disagree) or "none"),
        "",
    ]
    t = time.time()
    m = qa.minilm_figures()
    lines += [
        f"all-MiniLM-L6-v2, dynamic int8 linears ({m.q_nodes} per-token quantize nodes), "
        f"examples/demo.py's {m.n} sentences ({time.time() - t:.0f} s):",
        "",
        "| min cosine int8 vs fp32 | query ranking | pair-order swaps | largest fp32 gap swapped "
        "| max similarity diff |",
        "|---:|---|---:|---:|---:|",
        f"| {m.min_cos:.5f} | {'same' if m.same_query_ranking else 'DIFFERENT'} "
        f"| {m.swapped} of {m.pairs * (m.pairs - 1) // 2} | {m.max_swapped_gap:.4f} "
        f"| {m.max_sim_diff:.4f} |",
        "",
    ]
    t = time.time()
    f = qa.fashion_figures()
    lines += [
        f"Fashion-MNIST CNN (mcu/models/cnn.py), static int8 ({f.q_pairs} activation Q/DQ pairs),"
        f" first {f.n} test images ({time.time() - t:.0f} s):",
        "",
        "| accuracy fp32 | accuracy int8 | int8 - fp32 | same prediction | logit SQNR |",
        "|---:|---:|---:|---:|---:|",
        f"| {100 * f.acc_fp32:.2f} % | {100 * f.acc_int8:.2f} % "
        f"| {100 * (f.acc_int8 - f.acc_fp32):+.2f} pp | {100 * f.agree:.2f} % "
        f"| {f.sqnr_db:.2f} dB |",
    ]
    emit(lines, args.md)


if __name__ == "__main__":
    main()
