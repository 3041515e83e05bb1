"""Speed on the architecture corpus (issue 27 item 7): Ember's default path (EmberCpuBackend)
against ExecuTorch + XNNPACK and ONNX Runtime at 1 thread, on the corpus models
(tests/python/corpus) of at least ``--min-mflops`` (their sizes are the tests' small ones).

Each model is exported by ``bench/run.py``'s ``prepare`` (to out/bench/corpus/<name>/) and timed
by its ``run_all`` (each runtime in its own process, rounds interleaved), so the figures are taken
exactly as the zoo's are. A report, not a bar.

    .venv/bin/python bench/corpus.py [--models resnet vit ...] [--min-mflops 0.3]
                                     [--rounds 2] [--runs 20]
                                     [--out bench/results/corpus_speed_DATE.md]
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "python"))

from bench import run  # noqa: E402
from bench.report import write_report  # noqa: E402

PEERS = ("et_xnnpack", "ort")
log = logging.getLogger("corpus")


def fold_parametrizations(m: object) -> object:
    """Weight norm etc. folded into plain weights: ``run.prepare`` computes its reference under
    ``torch.inference_mode``, where a parametrized module cannot run."""
    import torch
    from torch.nn.utils import parametrize

    for mod in list(m.modules()):  # type: ignore[attr-defined]
        if parametrize.is_parametrized(mod):
            for name in list(mod.parametrizations):
                parametrize.remove_parametrizations(mod, name, leave_parametrized=True)
    assert isinstance(m, torch.nn.Module)
    return m


def mflops(m: object, inputs: tuple) -> float:
    """Forward FLOPs of the eager model (torch's FlopCounterMode), in millions."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        m(*inputs)  # type: ignore[operator]
    return fc.get_total_flops() / 1e6


def cpu_name() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for ln in out.splitlines():
        if ln.startswith("Model name:"):
            return ln.split(":", 1)[1].strip()
    return "?"


def main() -> None:
    from tests.python.corpus import CASES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--min-mflops", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per round")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--reuse", action="store_true", help="reuse out/bench/corpus exports")
    ap.add_argument("--out", type=Path, help="markdown table (else stdout)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ember").setLevel(logging.WARNING)

    run.build_ember_bench(Path(a.build))
    names, flops = [], {}
    for name in a.models:
        m, inputs = CASES[name].build()
        m = fold_parametrizations(m)
        flops[name] = mflops(m, inputs)
        if flops[name] < a.min_mflops:
            log.info("%s: %.2f MFLOP, below --min-mflops: skipped", name, flops[name])
            continue
        key = f"corpus/{name}"
        if not (a.reuse and (run.OUT / key / "prep.json").exists()):
            log.info("%s: exporting (%.2f MFLOP)", name, flops[name])
            prep = run.prepare(key, ["ember", *PEERS], built=(m, inputs))
            for rt, err in prep["errors"].items():
                log.info("  %s export failed: %s", rt, err)
        names.append(name)

    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        ns = argparse.Namespace(
            models=[f"corpus/{n}" for n in names],
            runtimes=["ember", *PEERS],
            threads=[1],
            rounds=a.rounds,
            runs=a.runs,
            warmup=a.warmup,
            portable_timeout=60.0,
            reuse=True,
            out=str(Path(tmp) / "run.md"),
            busy=0,
        )
        run.run_all(ns, rows)

    def cell(name: str, rt: str) -> dict:
        return next((r for r in rows if r["model"] == f"corpus/{name}" and r["runtime"] == rt), {})

    table = [
        "| model | family | MFLOP | Ember ms | XNNPACK ms | ORT ms | Ember / best peer "
        "| Ember err |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    slow = []
    for name in names:
        e = cell(name, "ember")
        peers = {rt: cell(name, rt) for rt in PEERS}
        best = min((p["median"] for p in peers.values() if "median" in p), default=None)

        def ms(r: dict) -> str:
            return f"{r['median']:.3f}" if "median" in r else f"— ({r.get('error', '?')[:60]})"

        ratio = e["median"] / best if "median" in e and best else None
        if ratio and ratio > 1.2:
            slow.append(name)
        err = "—" if e.get("err") is None else f"{e['err']:.1e}"
        table.append(
            f"| {name} | {CASES[name].family} | {flops[name]:.2f} | {ms(e)} | "
            f"{ms(peers['et_xnnpack'])} | {ms(peers['ort'])} | "
            f"{'—' if ratio is None else f'{ratio:.2f}'} | {err} |"
        )
    table += [
        "",
        f"Ember slower than the best peer by more than 1.2x: {', '.join(slow) or 'none'}.",
    ]
    write_report(
        "Corpus speed: Ember (default path) vs ExecuTorch + XNNPACK and ONNX Runtime, 1 thread",
        f"CPU: {cpu_name()} (`lscpu`). Median latency over {a.rounds} interleaved rounds of "
        f"{a.runs} runs (after {a.warmup} warm-up runs), each runtime in its own process "
        "(`bench/run.py`'s `prepare` / `run_all`); Ember by `ember_bench` (no Python), the peers "
        "from Python. The corpus models are the tests' small sizes (MFLOP: eager forward, "
        f"torch's FlopCounterMode; below {a.min_mflops} MFLOP skipped): these latencies are "
        "dominated by per-operator overhead, not arithmetic. Weight-norm parametrizations (the "
        "wav2vec2 family's positional conv) are folded into plain weights for every runtime. "
        "err: Ember's max |y - eager| / max |eager|.",
        table,
        a.out,
    )


if __name__ == "__main__":
    main()
