"""What of each architecture-corpus model (tests/python/corpus) stays outside EmberCpuBackend:
``ember.export(m, x)`` (the default path) of every case, then its partition report's
instructions with ``delegated=False``, counted by kernel. Writes a markdown table (model, family,
instructions outside of all, the kernels outside) and the number of models with nothing outside.

    .venv/bin/python tools/corpus_partition.py [--out FILE] [--models NAME ...]
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

log = logging.getLogger("corpus_partition")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="*", default=None, help="corpus case names (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="write the table here too")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ember").setLevel(logging.ERROR)
    from corpus import CASES

    import ember

    names = args.models or list(CASES)
    rows, clean = [], 0
    for name in tqdm(names, desc="corpus", unit="model"):
        case = CASES[name]
        m, inputs = case.build()
        try:
            prog = ember.export(m, inputs)
        except Exception as e:  # noqa: BLE001 - an export failure is a row of the table
            rows.append(f"| {name} | {case.family} | export failed: {type(e).__name__} | |")
            continue
        rep = prog._irs["forward"].partition_report
        out = collections.Counter(
            d.kernel.replace("aten::", "").split(".")[0] for d in rep if not d.delegated
        )
        clean += not out
        kinds = ", ".join(f"{k} x{v}" for k, v in out.most_common()) or "none"
        rows.append(f"| {name} | {case.family} | {sum(out.values())} of {len(rep)} | {kinds} |")
    text = "\n".join(
        [
            f"Models with nothing outside EmberCpuBackend: **{clean} of {len(names)}**.",
            "",
            "| model | family | instructions outside | kernels outside |",
            "|---|---|---:|---|",
            *rows,
        ]
    )
    log.info("%s", text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
