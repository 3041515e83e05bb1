"""Int8 on the generality corpus (issue 31): every single-input vision model of
``tests/python/corpus`` (CNNs, vision transformers, hybrids, dense heads) quantized by
``ember.quant.pt2e.quantize_exported`` (static int8, 2 seeded random calibration batches),
exported with the default backend (EmberCpuBackend takes the Q/DQ graph) and with the portable
kernels, both run on Ember's runtime: the largest difference between the two (0: the same bits),
the output's scale, the share of instructions delegated and the int8 convs in the blobs.

    .venv/bin/python bench/quant_corpus.py [--md bench/results/quant_corpus_<date>.md]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "python"))  # first: its corpus package, not bench/corpus.py

log = logging.getLogger("quant_corpus")


def _q8_convs(prog: object) -> tuple[int, int, int, int]:
    """(instructions inside delegates, all instructions, convs, int8 convs) of ``forward``."""
    import re

    from ember.backends.cpu.blob import conv_counts
    from ember.backends.delegate import DelegateInstr

    inside = total = convs = q8 = 0
    for ins in prog._irs["forward"].instrs:  # type: ignore[attr-defined]
        if isinstance(ins, DelegateInstr):
            m = re.match(r"(\d+) instructions", ins.summary)
            n = int(m.group(1)) if m else 0
            inside, total = inside + n, total + n
            c, q = conv_counts(ins.processed)
            convs, q8 = convs + c, q8 + q
        else:
            total += 1
    return inside, total, convs, q8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("ember", "torch", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from corpus import vision  # noqa: F401  (registers the cases)
    from corpus.registry import CASES
    from report import cpu_name, emit

    import ember
    from ember.quant.pt2e import quantize_exported
    from ember.runtime import RuntimeProgram

    lines = [
        "# Int8 on the generality corpus's vision models",
        "",
        f"CPU: {cpu_name()}. Command: `.venv/bin/python bench/quant_corpus.py`.",
        "",
        "| model | family | result | max \\|backend - portable\\| | max \\|y\\| | delegated | "
        "int8 convs |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for name, c in CASES.items():
        if c.family not in ("cnn", "vit", "hybrid", "dense"):
            continue
        m, inputs = c.build()
        if len(inputs) != 1 or inputs[0].dtype != torch.float32:
            continue
        try:
            g = torch.Generator().manual_seed(1)
            cal = [(torch.randn(*inputs[0].shape, generator=g),) for _ in range(2)]
            ep = quantize_exported(m, inputs, cal, progress=False)
            pc, pp = ember.export(ep, inputs), ember.export(ep, inputs, backend=None)
            yc = RuntimeProgram(pc.buffer).run("forward", list(inputs))
            yp = RuntimeProgram(pp.buffer).run("forward", list(inputs))
            d = max((a - b).abs().max().item() for a, b in zip(yc, yp, strict=True))
            s = max(b.abs().max().item() for b in yp)
            inside, total, convs, q8 = _q8_convs(pc)
            lines.append(
                f"| {name} | {c.family} | ok | {d:.3g} | {s:.3g} | {inside} / {total} | "
                f"{q8} / {convs} |"
            )
        except Exception as e:  # a model that fails is a row, not the end of the run
            lines.append(f"| {name} | {c.family} | {type(e).__name__}: {str(e)[:80]} | | | | |")
        log.info("%s", lines[-1])
    emit(lines, args.md)


if __name__ == "__main__":
    main()
