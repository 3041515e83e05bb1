"""Per-operator peer benchmark: stacks of one kind of convolution, Ember against ONNX Runtime.

A whole-model table (bench/run.py) says which runtime is faster, not where. This one times small
models that repeat one zoo layer shape (ResNet-50's 1x1 convs at each map size, its 3x3 convs
on 14x14 and 7x7 maps; one stride-2 3x3 conv and one 7x7 RGB stem), so a ratio points at the kind
of operator to work on. Each model is exported to an Ember .pte (EmberCpuBackend) and an ONNX
file under out/bench/ops/; Ember is timed by bench/ember_bench.c (no Python in the process),
ONNX Runtime in its own Python process; the two alternate round by round so the host's load
hits both alike, and every round's runs are pooled.

    .venv/bin/python bench/ops.py [--ops pw56 s2_28] [--threads 1 2] [--rounds 2] [--runs 60]
                                  [--out bench/results/ops_DATE.md]

Reported: median and p10 of each runtime in ms, GFLOP/s of Ember's median, Ember / ORT of the
medians and of the p10s (lower is better), and the largest error of Ember's output relative to
ORT's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "python"))

from bench.run import OUT, build_ember_bench  # noqa: E402

log = logging.getLogger("bench.ops")
OPS_DIR = OUT / "ops"


@dataclass(frozen=True)
class OpSpec:
    """A stack of `reps` identical blocks on an input of `shape`; `macs` per run."""

    what: str
    shape: tuple[int, ...]
    blocks: list[tuple[int, int, int, int]]  # (cin, cout, kernel, stride) of one block, + ReLU
    reps: int

    def macs(self) -> int:
        h, w = self.shape[2], self.shape[3]
        total = 0
        for _ in range(self.reps):
            for cin, cout, k, s in self.blocks:
                oh, ow = (h + 2 * (k // 2) - k) // s + 1, (w + 2 * (k // 2) - k) // s + 1
                total += cin * cout * k * k * oh * ow
                h, w = oh, ow
        return total


SPECS: dict[str, OpSpec] = {
    "pw56": OpSpec(
        "1x1 256->64->256, 56x56", (1, 256, 56, 56), [(256, 64, 1, 1), (64, 256, 1, 1)], 6
    ),
    "pw28": OpSpec(
        "1x1 512->128->512, 28x28", (1, 512, 28, 28), [(512, 128, 1, 1), (128, 512, 1, 1)], 6
    ),
    "pw14": OpSpec(
        "1x1 1024->256->1024, 14x14", (1, 1024, 14, 14), [(1024, 256, 1, 1), (256, 1024, 1, 1)], 6
    ),
    "pw7": OpSpec(
        "1x1 2048->512->2048, 7x7", (1, 2048, 7, 7), [(2048, 512, 1, 1), (512, 2048, 1, 1)], 6
    ),
    "c3_14": OpSpec("3x3 256->256, 14x14", (1, 256, 14, 14), [(256, 256, 3, 1)], 6),
    "c3_7": OpSpec("3x3 512->512, 7x7", (1, 512, 7, 7), [(512, 512, 3, 1)], 6),
    "s2_28": OpSpec("3x3 stride 2 256->256, 28x28", (1, 256, 28, 28), [(256, 256, 3, 2)], 1),
    "stem": OpSpec("7x7 stride 2 3->64, 224x224", (1, 3, 224, 224), [(3, 64, 7, 2)], 1),
}


def build_model(spec: OpSpec) -> torch.nn.Module:
    import torch

    layers: list[torch.nn.Module] = []
    for _ in range(spec.reps):
        for cin, cout, k, s in spec.blocks:
            layers += [torch.nn.Conv2d(cin, cout, k, stride=s, padding=k // 2), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval()


def prepare(name: str) -> None:
    """Exports NAME to out/bench/ops/NAME.{pte,onnx} with its input and ORT's output."""
    import numpy as np
    import onnxruntime as ort
    import torch

    import ember

    torch.manual_seed(0)
    spec = SPECS[name]
    model, x = build_model(spec), torch.randn(*spec.shape)
    OPS_DIR.mkdir(parents=True, exist_ok=True)
    ember.export(model, (x,), backend="cpu").save(str(OPS_DIR / f"{name}.pte"))
    torch.onnx.export(model, (x,), str(OPS_DIR / f"{name}.onnx"), dynamo=False, opset_version=17)
    x.numpy().astype(np.float32).tofile(OPS_DIR / f"{name}.in.bin")
    s = ort.InferenceSession(str(OPS_DIR / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    y = s.run(None, {s.get_inputs()[0].name: x.numpy()})[0]
    np.save(OPS_DIR / f"{name}.ort.npy", y)


def ort_worker(name: str, threads: int, warmup: int, runs: int) -> None:
    """Times ONNX Runtime on NAME in this process; prints one JSON line of per-run ms."""
    import time

    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    s = ort.InferenceSession(str(OPS_DIR / f"{name}.onnx"), so, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    x = np.fromfile(OPS_DIR / f"{name}.in.bin", dtype=np.float32).reshape(SPECS[name].shape)
    for _ in range(warmup):
        s.run(None, {inp.name: x})
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        s.run(None, {inp.name: x})
        times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"times_ms": times}))


def time_ember(name: str, threads: int, warmup: int, runs: int) -> list[float]:
    out = subprocess.run(
        [
            str(OUT / "ember_bench"),
            str(OPS_DIR / f"{name}.pte"),
            str(OPS_DIR / f"{name}.in.bin"),
            str(OPS_DIR / f"{name}.ember.bin"),
            str(threads),
            str(warmup),
            str(runs),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["times_ms"]


def time_ort(name: str, threads: int, warmup: int, runs: int) -> list[float]:
    args = [sys.executable, __file__, "--ort-worker", name, str(threads), str(warmup), str(runs)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["times_ms"]


def ember_error(name: str) -> float:
    """max |y_ember - y_ort| / max |y_ort| of the last Ember run's output."""
    import numpy as np

    ref = np.load(OPS_DIR / f"{name}.ort.npy").ravel()
    got = np.fromfile(OPS_DIR / f"{name}.ember.bin", dtype=np.float32)
    if got.size != ref.size:
        raise RuntimeError(f"{name}: Ember wrote {got.size} values, ORT {ref.size}")
    return float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def machine() -> str:
    """The CPU's model name, CPU count, OS and load average, for the table's header."""
    cpu, load = platform.machine(), "?"
    try:
        cpu = next(
            ln.split(":", 1)[1].strip()
            for ln in open("/proc/cpuinfo")
            if ln.startswith("model name")
        )
        load = " ".join(open("/proc/loadavg").read().split()[:3])
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, {platform.platform()}; load average at the end {load}"


def p10(v: list[float]) -> float:
    return sorted(v)[len(v) // 10]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ort-worker":
        name, threads, warmup, runs = sys.argv[2], *map(int, sys.argv[3:6])
        ort_worker(name, threads, warmup, runs)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="+", default=list(SPECS), choices=list(SPECS))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from tqdm import tqdm

    build_ember_bench(ROOT / "build")
    for name in tqdm(a.ops, desc="export"):
        prepare(name)
    rows = []
    steps = len(a.ops) * len(a.threads) * a.rounds
    with tqdm(total=steps, desc="time") as bar:
        for name in a.ops:
            for th in a.threads:
                em: list[float] = []
                rt: list[float] = []
                for _ in range(a.rounds):
                    em += time_ember(name, th, a.warmup, a.runs)
                    rt += time_ort(name, th, a.warmup, a.runs)
                    bar.update()
                rows.append((name, th, em, rt, ember_error(name)))
    lines = [
        f"# Per-operator benchmark {datetime.datetime.now(datetime.UTC):%Y-%m-%d_%H%M} UTC",
        "",
        "Command: `" + shlex.join([".venv/bin/python", "bench/ops.py", *sys.argv[1:]]) + "`",
        "",
        f"Machine: {machine()}. "
        "Ember (ember_bench, EmberCpuBackend) and ONNX Runtime alternate round by round; "
        "ms are of one run of the whole stack, pooled over rounds; ratios are Ember / ORT "
        "(lower is better); err = max |y_ember - y_ort| / max |y_ort|.",
        "",
        "| stack | what | threads | Ember median | Ember p10 | ORT median | ORT p10 | "
        "Ember GFLOP/s | median ratio | p10 ratio | err |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, th, em, rt, err in rows:
        em_med, rt_med = statistics.median(em), statistics.median(rt)
        gf = 2 * SPECS[name].macs() / em_med * 1e-6
        lines.append(
            f"| {name} | {SPECS[name].what} | {th} | {em_med:.3f} | {p10(em):.3f} | {rt_med:.3f} "
            f"| {p10(rt):.3f} | {gf:.0f} | {em_med / rt_med:.2f} | {p10(em) / p10(rt):.2f} "
            f"| {err:.1e} |"
        )
    text = "\n".join(lines) + "\n"
    log.info("%s", text)
    if a.out:
        a.out.write_text(text)
        log.info("wrote %s", a.out)


if __name__ == "__main__":
    main()
