"""Where a zoo model's time goes in Ember and in ONNX Runtime, operator by operator.

Ember's EmberCpuBackend prints each operator's time with EMBER_CPU_PROFILE=1 (timed by
bench/ember_bench.c, no Python in the process); ONNX Runtime's session profiler records each
node's kernel time. This script runs both on the files bench/run.py prepared under
out/bench/<model>/ (ember.pte, model.onnx, input.bin) and prints the medians over the timed
runs: totals by kind of operator for each runtime (convolutions by kernel and stride, pools,
GEMMs, the rest), then both operator lists in execution order. Each runtime fuses differently
(ONNX Runtime's NCHWc layout adds reorder nodes, Ember folds residual adds and activations
into its convs), so compare the totals by kind; the two lists line up one to one only where
the fusions agree. Ember prints a chain of operators it runs as one (a depthwise conv with its
1x1 convs, a conv with the max pool after it) as one line under the chain's last operator: a
ResNet's stem is in its "maxpool" line.

    .venv/bin/python bench/profile_peer.py resnet50 [--threads 2] [--runs 30]

Profiling adds a little time to both; the timings are for finding the gap, not for the tables
of bench/run.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import OUT, build_ember_bench  # noqa: E402

log = logging.getLogger("bench.profile_peer")

KINDS = {
    1: "conv",
    2: "gemm",
    3: "binary",
    4: "unary",
    5: "maxpool",
    6: "avgpool",
    7: "mean",
    8: "softmax",
    9: "layernorm",
    10: "permute",
    11: "copy",
    12: "cat",
    13: "slice",
    14: "channel_affine",
    15: "rmsnorm",
}
LINE = re.compile(r"emc op\s+\d+ kind\s+(\d+) act\s+\d+ ip\[([^\]]*)\] out (\d+): ([\d.]+) ms")


def ember_label(kind: int, ip: list[int]) -> str:
    """conv kh x kw / stride (grouped: "dw/g"), or the operator kind's name."""
    if kind == 1:
        groups, kh, kw, sh = ip[0], ip[1], ip[2], ip[3]
        return f"conv {kh}x{kw} s{sh}" + (" dw/g" if groups > 1 else "")
    return KINDS.get(kind, f"kind {kind}")


def ember_profile(model_dir: Path, threads: int, runs: int) -> list[tuple[str, float]]:
    """(label, median ms) of each operator line of one Ember run, in order."""
    warmup = 5
    r = subprocess.run(
        [
            str(OUT / "ember_bench"),
            str(model_dir / "ember.pte"),
            str(model_dir / "input.bin"),
            os.devnull,
            str(threads),
            str(warmup),
            str(runs),
        ],
        env=dict(os.environ, EMBER_CPU_PROFILE="1"),
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [m for m in map(LINE.search, r.stderr.splitlines()) if m]
    per_run = len(lines) // (warmup + runs)
    if per_run == 0 or len(lines) % (warmup + runs):
        raise RuntimeError(f"unexpected profile output: {len(lines)} operator lines")
    timed = lines[warmup * per_run :]
    out = []
    for p in range(per_run):
        ms = [float(timed[k * per_run + p].group(4)) for k in range(runs)]
        first = timed[p]
        ip = [int(v) for v in first.group(2).split()]
        out.append((ember_label(int(first.group(1)), ip), statistics.median(ms)))
    return out


def ort_label(ev: dict) -> str:
    """The node's op type; convolutions with their kernel size (from the weight's shape)."""
    args = ev.get("args", {})
    op = args.get("op_name", "?")
    if "Conv" in op:
        shapes = args.get("input_type_shape", [])
        if len(shapes) > 1:
            w = next(iter(shapes[1].values()))
            if len(w) == 4:
                return f"{op} {w[2]}x{w[3]}"
    return op


def ort_profile(model_dir: Path, threads: int, runs: int) -> list[tuple[str, float]]:
    """(label, median ms) of each node of one ONNX Runtime session, in order of first run."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = str(Path(tmp) / "ort")
        s = ort.InferenceSession(
            str(model_dir / "model.onnx"), so, providers=["CPUExecutionProvider"]
        )
        inp = s.get_inputs()[0]
        x = np.fromfile(model_dir / "input.bin", dtype=np.float32).reshape(inp.shape)
        for _ in range(runs):
            s.run(None, {inp.name: x})
        events = json.loads(Path(s.end_profiling()).read_text())
    times: dict[str, list[float]] = defaultdict(list)
    labels: dict[str, str] = {}
    for ev in events:
        if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
            times[ev["name"]].append(ev["dur"] / 1000)
            labels.setdefault(ev["name"], ort_label(ev))
    # the first run includes one-time work: drop it where there are more
    return [(labels[n], statistics.median(t[1:] if len(t) > 1 else t)) for n, t in times.items()]


def totals(ops: list[tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for label, ms in ops:
        out[label] += ms
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a zoo model bench/run.py prepared (out/bench/<model>/)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    model_dir = OUT / a.model
    missing = [f for f in ("ember.pte", "model.onnx", "input.bin") if not (model_dir / f).exists()]
    if missing:
        sys.exit(
            f"{model_dir} lacks {', '.join(missing)}: run "
            f"`.venv/bin/python bench/run.py --models {a.model} --runtimes ember ort` first"
        )
    build_ember_bench(ROOT / "build")
    em = ember_profile(model_dir, a.threads, a.runs)
    rt = ort_profile(model_dir, a.threads, a.runs)
    lines = [f"# {a.model}, {a.threads} thread(s), medians of {a.runs} runs (ms)", ""]
    for name, ops in (("Ember", em), ("ONNX Runtime", rt)):
        lines.append(f"{name}: {sum(ms for _, ms in ops):.3f} ms over {len(ops)} operators")
        for label, ms in totals(ops).items():
            lines.append(f"  {ms:9.3f}  {label}")
        lines.append("")
    lines.append(f"{'#':>4} {'Ember':<22} {'ms':>8} | {'ONNX Runtime':<26} {'ms':>8}")
    for i in range(max(len(em), len(rt))):
        e = f"{em[i][0]:<22} {em[i][1]:8.3f}" if i < len(em) else " " * 31
        o = f"{rt[i][0]:<26} {rt[i][1]:8.3f}" if i < len(rt) else ""
        lines.append(f"{i:4d} {e} | {o}")
    log.info("%s", "\n".join(lines))


if __name__ == "__main__":
    main()
