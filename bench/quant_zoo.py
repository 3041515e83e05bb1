"""``ember.quant.quantize_exported`` on every zoo model (issue 31): no model rewrite, how many
residual adds are quantized, and how far the int8 program on Ember's runtime is from fp32.

For each model of ``bench/models.py``: static int8 (CNNs; ``--calib`` random batches of the
model's input shape, min/max observer) or dynamic int8 linears (transformers), then
``ember.export`` (default backend) and one run on Ember's runtime against the quantized graph in
eager and against fp32 on a fresh random input. Random inputs and seeded weights: this checks
that the quantizer takes the graph and that the arithmetic is the quantized graph's, not
accuracy on real data.

    .venv/bin/python bench/quant_zoo.py --md out.md
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

from models import ZOO  # noqa: E402  (bench/models.py)
from report import emit  # noqa: E402  (bench/report.py)

import ember  # noqa: E402
from ember.quant.pt2e import quantize_exported, summarize  # noqa: E402

log = logging.getLogger("bench.quant_zoo")
DYNAMIC = {"vit_b16", "minilm_l6"}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    ap.add_argument("--calib", type=int, default=4)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = []
    for name in args.models:
        model, inputs = ZOO[name]()
        dyn = name in DYNAMIC
        t0 = time.time()
        try:
            g = torch.Generator().manual_seed(1)
            calib = (
                None
                if dyn
                else [
                    tuple(torch.randn(x.shape, generator=g) for x in inputs)
                    for _ in range(args.calib)
                ]
            )
            qep = quantize_exported(model, inputs, calib, dynamic=dyn, progress=False)
            s = summarize(qep)
            prog = ember.export(qep, inputs)
            x = tuple(
                torch.randn(t.shape, generator=g) if t.is_floating_point() else t for t in inputs
            )
            got = prog.run(*x)
            got = got[0] if isinstance(got, (list, tuple)) else got
            want_q = qep.module()(*x)
            want_f = model(*x)
            want_q = want_q[0] if isinstance(want_q, (list, tuple)) else want_q
            want_f = want_f[0] if isinstance(want_f, (list, tuple)) else want_f
            rows.append(
                (name, "dynamic" if dyn else "static", f"{s.adds_quantized}/{s.adds}", s.weights,
                 s.quantize, f"{_rel(got, want_q):.1e}", f"{_rel(got, want_f):.1e}",
                 f"{time.time() - t0:.0f}", "")
            )  # fmt: skip
        except Exception as e:  # a model the quantizer refuses is a row of the table
            rows.append((name, "dynamic" if dyn else "static", "-", "-", "-", "-", "-",
                         f"{time.time() - t0:.0f}", f"{type(e).__name__}: {e}"[:120]))  # fmt: skip
        log.info("%s", rows[-1])
    head = (
        "| model | int8 | residual adds quantized | int8 weights | activation Q/DQ "
        "| Ember vs quantized graph | Ember vs fp32 | s | error |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    emit(lines, args.md)


if __name__ == "__main__":
    main()
