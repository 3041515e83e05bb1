"""Long runs of the random-graph property test of EmberCpuBackend (issue 27, item 5).

Checks seeds ``--seed-start`` .. ``--seed-start + --graphs - 1`` (tests/python/random_graphs.py
makes each graph; tests/python/random_graph_check.py checks the default path, at each of
``--threads``, and the portable path against eager) in batches of ``--batch`` per export, on
``--jobs`` processes, with a progress bar. Every failure is logged as it comes and appended to
``--failures`` (JSON lines: seed, kind, detail); the summary (command, seed range, graphs,
failures by kind, delegated share, the backend operators and fusions reached) goes to stdout
and to ``--out`` (markdown), which is also rewritten after every batch, so a run stopped early
leaves the summary of what it checked.

    .venv/bin/python tools/random_graphs.py --graphs 50000 --seed-start 100000 \\
        --out bench/results/random_graphs.md

``--int8 static`` / ``dynamic`` / ``xnnpack`` / ``xnnpack-dynamic`` checks the same graphs
quantized to int8 instead
(tests/python/random_q8_check.py: ``ember.quant.pt2e.quantize_exported``, then the default and
portable paths against the quantized graph run by PyTorch), one graph per export, ``--batch``
graphs per task.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from random_graph_check import Stats, run_batches  # noqa: E402
from random_q8_check import MODES, Q8Stats, run_q8  # noqa: E402

log = logging.getLogger("random_graphs")


def _details(failures: list, outside: Counter[str], features: Counter[str]) -> list[str]:
    """The summary's sections: the failures, the kernels left outside, the blob records."""
    lines = ["", "## Failures", ""]
    lines += [f"- seed {f.seed}: {f.kind}: {f.detail}" for f in failures] or ["none"]
    lines += ["", "## Left outside the delegates (kernel: instructions)", ""]
    lines += [", ".join(f"`{k}` {n}" for k, n in outside.most_common())]
    lines += ["", "## Backend operators and fusions reached (blob records)", ""]
    lines += [", ".join(f"`{k}` {n}" for k, n in sorted(features.items()))]
    return lines


def summary(
    st: Stats, args: argparse.Namespace, seconds: float, command: str, finished: bool = True
) -> str:
    outside = sum(st.outside.values())
    share = 100 * st.inside / max(1, st.inside + outside)
    kinds = Counter(f.kind for f in st.failures)
    lines = [
        "# Random graphs on EmberCpuBackend",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- seeds: {args.seed_start} .. {args.seed_start + args.graphs - 1} "
        f"({st.graphs} graphs checked{'' if finished else ' so far: still running or stopped'}"
        f"; families {dict(st.families)})",
        f"- batches of {args.batch}, {args.jobs} process(es), default path at threads "
        f"{args.threads}; {seconds:.0f} s",
        f"- **failures: {len(st.failures)}** "
        f"({', '.join(f'{k} {n}' for k, n in kinds.items()) or 'none'})",
        f"- instructions inside EmberCpuBackend: {st.inside} of {st.inside + outside} "
        f"({share:.1f} %), in {st.delegates} delegates",
    ]
    return "\n".join(lines + _details(st.failures, st.outside, st.features)) + "\n"


def summary_q8(st: Q8Stats, args: argparse.Namespace, seconds: float, command: str) -> str:
    kinds = Counter(f.kind for f in st.failures)
    lines = [
        f"# Random graphs quantized to int8 ({args.int8}) on EmberCpuBackend",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- seeds: {args.seed_start} .. {args.seed_start + args.graphs - 1} ({st.graphs} "
        f"graphs, {st.quantized} changed by the quantizer, the rest had nothing it handles)",
        f"- {args.jobs} process(es), default path at threads {args.threads}; {seconds:.0f} s",
        f"- **failures: {len(st.failures)}** "
        f"({', '.join(f'{k} {n}' for k, n in kinds.items()) or 'none'})",
        f"- largest error against the quantized graph in PyTorch: {st.worst:.3g} of its "
        f"output's largest magnitude; int8 operators in the delegates: {st.int8_records()}",
    ]
    return "\n".join(lines + _details(st.failures, st.outside, st.features)) + "\n"


def main_q8(args: argparse.Namespace, command: str) -> None:
    t0 = time.time()
    bar = tqdm(total=args.graphs, unit="graph", desc=f"int8 ({args.int8}) random graphs")
    so_far = Q8Stats()

    def done(st: Q8Stats) -> None:
        bar.update(st.graphs)
        so_far.merge(st)
        for f in st.failures:
            log.warning("seed %d: %s: %s", f.seed, f.kind, f.detail)
            if args.failures:
                with args.failures.open("a") as fh:
                    fh.write(json.dumps(f.__dict__) + "\n")
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(summary_q8(so_far, args, time.time() - t0, command))
        bar.set_postfix(failures=len(so_far.failures))

    seeds = range(args.seed_start, args.seed_start + args.graphs)
    st = run_q8(seeds, args.int8, args.jobs, tuple(args.threads), args.batch, done)
    bar.close()
    text = summary_q8(st, args, time.time() - t0, command)
    print(text)
    if args.out:
        args.out.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=2000)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--batch", type=int, default=40, help="graphs per export")
    ap.add_argument("--jobs", type=int, default=1, help="processes")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", type=Path, help="write the markdown summary here")
    ap.add_argument("--failures", type=Path, help="append failures here (JSON lines)")
    ap.add_argument(
        "--int8",
        choices=MODES,
        help="check the graphs quantized to int8 (quantize_exported) instead",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ember").propagate = False  # its WARNINGs go to the summary instead
    command = "python " + " ".join(sys.argv)
    if args.int8:
        main_q8(args, command)
        return
    seeds = range(args.seed_start, args.seed_start + args.graphs)
    t0 = time.time()
    bar = tqdm(total=args.graphs, unit="graph", desc="random graphs")
    n_fail = 0
    so_far = Stats()

    def done(st: Stats) -> None:
        nonlocal n_fail
        bar.update(st.graphs)
        so_far.merge(st)
        if args.out:  # rewritten after each batch: a stopped run leaves a valid summary
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(summary(so_far, args, time.time() - t0, command, False))
        for f in st.failures:
            n_fail += 1
            log.warning("seed %d: %s: %s", f.seed, f.kind, f.detail)
            if args.failures:
                with args.failures.open("a") as fh:
                    fh.write(json.dumps(f.__dict__) + "\n")
        bar.set_postfix(failures=n_fail)

    st = run_batches(seeds, args.batch, args.jobs, tuple(args.threads), done)
    bar.close()
    text = summary(st, args, time.time() - t0, command)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
