"""`make bench`: Ember (EmberCpuBackend) against ExecuTorch 1.5.1 + XNNPACK, ExecuTorch portable,
ONNX Runtime and PyTorch eager on the model zoo (bench/models.py), f32, batch 1.

Every runtime runs in its own process; for each model and thread count the runtimes are
interleaved round by round (A B C D E, A B C D E, ...), and each round's timed runs are pooled,
so background load on a shared machine hits every runtime alike. Reported per runtime: median and
p90 latency, load time (file to ready-to-run), peak RSS (for Python peers this includes the
interpreter and torch; "ΔRSS" is the growth after imports), file size, and the largest error
relative to eager's output (max |y - y_eager| / max |y_eager|).

    .venv/bin/python bench/run.py [--models resnet18 mobilenet_v2] [--threads 1 2]
                                  [--rounds 3] [--runs 5] [--out bench/results/NAME.md]

Ember is timed by bench/ember_bench.c (built here against build/libember.a), not from Python.
`--baseline-build DIR` adds the runtime `ember_base`: the same ember.pte timed by an
ember_bench built against DIR/libember.a (e.g. a build of the commit before a change),
interleaved with the others, so a before/after comparison shares the machine's load.
`--baseline-pte NAME` has ember_base run out/bench/<model>/NAME instead (an export by the
baseline's exporter, when the blob format changed and the baseline cannot read the new one).
The runtime `ember_fma` times Ember's file with EMBER_CPU_ISA=avx512f: every product in f32
FMAs, where `ember` takes the AMX bf16x3 GEMM path on CPUs that have it (its `isa` says which).
The opt-in runtime `ember_vulkan` (`--runtimes ember ember_vulkan`) times the model exported with
`backend="vulkan"` on the Vulkan device (backends/vulkan; on lavapipe a functional check only).
`--busy N` runs N busy-looping processes in the background for the whole measurement: a loaded
machine, where a runtime's threads share the cores with other work (the table says so).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench"
RUNTIMES = ["ember", "ember_fma", "et_xnnpack", "et_portable", "ort", "eager"]
PY = sys.executable


# ---- preparation (one subprocess per model) -------------------------------------------------
def prepare(model: str, runtimes: list[str], built: tuple | None = None) -> dict:
    """Export the model (zoo model `model`, or `built` = (module, inputs) under the name
    `model`) for every runtime; write input, eager reference and files to out/bench/`model`."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(ROOT))
    from bench.models import EXTRA, ZOO

    d = OUT / model
    d.mkdir(parents=True, exist_ok=True)
    m, inputs = built or {**ZOO, **EXTRA}[model]()
    x = inputs[0]
    with torch.inference_mode():
        ref = m(*inputs)
    x.numpy().tofile(d / "input.bin")
    torch.save((x, ref), d / "io.pt")
    info: dict = {"files": {}, "errors": {}, "export_s": {}}

    def record(rt: str, path: Path, fn) -> None:
        t = time.perf_counter()
        try:
            fn()
            info["files"][rt] = path.stat().st_size
        except Exception as e:  # a peer that cannot export this model is reported, not fatal
            info["errors"][rt] = f"{type(e).__name__}: {str(e)[:200]}"
        info["export_s"][rt] = round(time.perf_counter() - t, 1)

    if "ember" in runtimes:
        import ember

        def ember_export() -> None:
            ember.export(m, inputs, backend="cpu").save(d / "ember.pte")

        record("ember", d / "ember.pte", ember_export)
    if "ember_vulkan" in runtimes:  # EmberVulkanBackend (opt-in: --runtimes ... ember_vulkan)
        import ember

        def vulkan_export() -> None:
            ember.export(m, inputs, backend="vulkan").save(d / "ember_vulkan.pte")

        record("ember_vulkan", d / "ember_vulkan.pte", vulkan_export)
    if "et_xnnpack" in runtimes or "et_portable" in runtimes:
        from executorch.exir import to_edge, to_edge_transform_and_lower

        ep = torch.export.export(m, inputs)
        if "et_xnnpack" in runtimes:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

            def et_x() -> None:
                prog = to_edge_transform_and_lower(
                    ep, partitioner=[XnnpackPartitioner()]
                ).to_executorch()
                (d / "et_xnnpack.pte").write_bytes(prog.buffer)

            record("et_xnnpack", d / "et_xnnpack.pte", et_x)
        if "et_portable" in runtimes:

            def et_p() -> None:
                (d / "et_portable.pte").write_bytes(to_edge(ep).to_executorch().buffer)

            record("et_portable", d / "et_portable.pte", et_p)
    if "ort" in runtimes:

        def onnx_export() -> None:
            torch.onnx.export(m, inputs, str(d / "model.onnx"), dynamo=False, opset_version=17)

        record("ort", d / "model.onnx", onnx_export)
    info["files"]["eager"] = sum(p.numel() * p.element_size() for p in m.parameters())
    np.save(d / "ref.npy", ref.detach().numpy())
    (d / "prep.json").write_text(json.dumps(info))
    return info


# ---- workers (one subprocess per measurement) -------------------------------------------------
def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_runs(run, warmup: int, runs: int) -> tuple[list[float], object]:  # noqa: ANN001
    """The wall times in ms of ``runs`` calls of ``run`` after ``warmup`` untimed ones, and the
    last call's result."""
    times: list[float] = []
    y = None
    for i in range(warmup + runs):
        s = time.perf_counter()
        y = run()
        if i >= warmup:
            times.append((time.perf_counter() - s) * 1e3)
    return times, y


def worker(rt: str, model: str, threads: int, warmup: int, runs: int) -> dict:
    d = OUT / model
    import numpy as np

    if rt == "ember":
        raise AssertionError("ember is timed by ember_bench")
    import torch

    torch.set_num_threads(threads)
    x, _ = torch.load(d / "io.pt")
    if rt.startswith("et_"):
        import executorch.extension.pybindings.portable_lib as pl
        from executorch.runtime import Runtime

        pl._unsafe_reset_threadpool(threads)
        Runtime.get()
    elif rt == "ort":
        import onnxruntime as ort
    else:
        sys.path.insert(0, str(ROOT))
        from bench.models import EXTRA, ZOO
    base = _rss_mb()
    t0 = time.perf_counter()  # load = file (or model construction, for eager) to ready-to-run
    if rt.startswith("et_"):
        method = Runtime.get().load_program(d / f"{rt}.pte").load_method("forward")

        def run():
            return method.execute([x])[0]
    elif rt == "ort":
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(d / "model.onnx"), so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        xn = x.numpy()

        def run():
            return torch.from_numpy(sess.run(None, {name: xn})[0])
    else:
        m, _ = {**ZOO, **EXTRA}[model]()
        torch.inference_mode().__enter__()

        def run():
            return m(x)

    load_ms = (time.perf_counter() - t0) * 1e3
    times, y = time_runs(run, warmup, runs)
    np.asarray(y.detach().numpy() if hasattr(y, "detach") else y, dtype=np.float32).tofile(
        d / f"out_{rt}.bin"
    )
    return {
        "load_ms": load_ms,
        "times_ms": times,
        "rss_mb": _rss_mb(),
        "rss_delta_mb": _rss_mb() - base,
    }


BASELINE_PTE = "ember.pte"  # --baseline-pte


def measure(rt: str, model: str, threads: int, warmup: int, runs: int, timeout: float) -> dict:
    d = OUT / model
    if rt in ("ember", "ember_base", "ember_fma", "ember_vulkan"):
        pte = {"ember_base": BASELINE_PTE, "ember_vulkan": "ember_vulkan.pte"}.get(rt, "ember.pte")
        cmd = [
            str(OUT / ("ember_bench_base" if rt == "ember_base" else "ember_bench")),
            str(d / pte),
            str(d / "input.bin"),
            str(d / f"out_{rt}.bin"),
            str(threads),
            str(warmup),
            str(runs),
        ]
        env = dict(os.environ)
        if rt == "ember_fma":  # every product in f32 FMAs, no AMX bf16x3 path
            env["EMBER_CPU_ISA"] = "avx512f"
    else:
        cmd = [PY, __file__, "--worker", rt, model, str(threads), str(warmup), str(runs)]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout ({timeout:.0f} s)"}
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not line:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:160]}
    return json.loads(line[-1])


def build_ember_bench(build: Path, name: str = "ember_bench") -> None:
    sys.path.insert(0, str(ROOT))
    from bench.report import build_c_bench

    build_c_bench(
        ROOT / "bench" / "ember_bench.c", OUT / name, build, flags=(f"-I{ROOT / 'extension'}",)
    )


def max_rel_err(model: str, rt: str) -> float | None:
    import numpy as np

    d = OUT / model
    ref = np.load(d / "ref.npy").reshape(-1)
    p = d / f"out_{rt}.bin"
    if not p.exists():
        return None
    y = np.fromfile(p, dtype=np.float32)
    if y.size != ref.size:
        return None
    return float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))


# ---- driver -------------------------------------------------------------------------------------
def _export_of(rt: str) -> str:
    """The runtime whose export a runtime runs (ember_base runs Ember's file)."""
    return "ember" if rt in ("ember_base", "ember_fma") else rt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models",
        nargs="*",
        default=[
            "mobilenet_v2",
            "resnet18",
            "mobilenet_v3_small",
            "resnet50",
            "minilm_l6",
            "vit_b16",
        ],
    )
    ap.add_argument("--runtimes", nargs="*", default=RUNTIMES)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per round")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--portable-timeout", type=float, default=240.0)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument(
        "--baseline-build",
        default=None,
        help="also time ember.pte with an ember_bench built against this build dir (ember_base)",
    )
    ap.add_argument(
        "--baseline-pte",
        default="ember.pte",
        help="the file in out/bench/<model>/ that ember_base runs (default: ember.pte)",
    )
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--reuse", action="store_true", help="reuse exports from an earlier run (out/bench)"
    )
    ap.add_argument(
        "--busy",
        type=int,
        default=0,
        help="N background processes that busy-loop while everything is timed (a loaded machine)",
    )
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--prepare", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        rt, model, th, wu, runs = a.worker
        print(json.dumps(worker(rt, model, int(th), int(wu), int(runs))))
        return
    if a.prepare:
        print(json.dumps(prepare(a.prepare, a.runtimes)))
        return
    build_ember_bench(Path(a.build))
    global BASELINE_PTE
    BASELINE_PTE = a.baseline_pte
    if a.baseline_build:
        build_ember_bench(Path(a.baseline_build), "ember_bench_base")
        if "ember_base" not in a.runtimes:
            at = a.runtimes.index("ember") + 1 if "ember" in a.runtimes else 0
            a.runtimes.insert(at, "ember_base")
    busy = [
        subprocess.Popen([PY, "-c", "while True: pass"], stdout=subprocess.DEVNULL)
        for _ in range(a.busy)
    ]
    try:
        run_all(a, [])
    finally:
        for b in busy:
            b.kill()
            b.wait()


def run_all(a: argparse.Namespace, rows: list[dict]) -> None:
    """Times every model, thread count and runtime of `a`, appending to rows (and the table)."""
    for model in a.models:
        cached = OUT / model / "prep.json"
        if a.reuse and cached.exists():
            prep = json.loads(cached.read_text())
            print(f"[{model}] reusing the exports in {cached.parent}", flush=True)
        else:
            print(f"[{model}] exporting for {', '.join(a.runtimes)}", flush=True)
            r = subprocess.run(
                [PY, __file__, "--prepare", model, "--runtimes", *a.runtimes],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                print(r.stderr[-2000:])
                continue
            prep = json.loads(r.stdout.strip().splitlines()[-1])
        for th in a.threads:
            res: dict[str, dict] = {
                rt: {"times_ms": [], "load_ms": [], "rss_mb": 0.0, "rss_delta_mb": 0.0}
                for rt in a.runtimes
            }
            for rnd in range(a.rounds):
                for rt in a.runtimes:
                    if _export_of(rt) in prep["errors"] or "error" in res[rt]:
                        continue
                    slow = rt == "et_portable"
                    if slow and (rnd > 0 or th != a.threads[0]):
                        continue  # portable kernels: one run at the first thread count places them
                    m = measure(
                        rt,
                        model,
                        th,
                        0 if slow else a.warmup,
                        1 if slow else a.runs,
                        a.portable_timeout if slow else 900,
                    )
                    if "error" in m:
                        res[rt]["error"] = m["error"]
                        continue
                    res[rt]["times_ms"] += m["times_ms"]
                    res[rt]["load_ms"].append(m["load_ms"])
                    res[rt]["rss_mb"] = max(res[rt]["rss_mb"], m["rss_mb"])
                    res[rt]["rss_delta_mb"] = max(
                        res[rt]["rss_delta_mb"], m.get("rss_delta_mb", m["rss_mb"])
                    )
                    if rt in ("ember", "ember_base", "ember_fma"):
                        res[rt]["isa"] = m.get("isa")
                print(f"  threads={th} round {rnd + 1}/{a.rounds} done", flush=True)
            for rt in a.runtimes:
                v = res[rt]
                row = {
                    "model": model,
                    "threads": th,
                    "runtime": rt,
                    "size_mb": prep["files"].get(_export_of(rt), 0) / 1e6,
                }
                if _export_of(rt) in prep["errors"]:
                    row["error"] = "export: " + prep["errors"][_export_of(rt)]
                elif "error" in v:
                    row["error"] = v["error"]
                if v["times_ms"]:
                    t = sorted(v["times_ms"])
                    row.update(
                        median=statistics.median(t),
                        p90=t[min(len(t) - 1, int(round(0.9 * (len(t) - 1))))],
                        n=len(t),
                        load=statistics.median(v["load_ms"]),
                        rss=v["rss_mb"],
                        drss=v["rss_delta_mb"],
                        err=max_rel_err(model, rt),
                    )
                    if v.get("isa"):
                        row["isa"] = v["isa"]
                rows.append(row)
            best_peer = min(
                (
                    r["median"]
                    for r in rows
                    if r["model"] == model
                    and r["threads"] == th
                    and r["runtime"] in ("et_xnnpack", "ort", "eager")
                    and "median" in r
                ),
                default=None,
            )
            for r in rows:
                if r["model"] == model and r["threads"] == th and "median" in r and best_peer:
                    r["vs_best"] = r["median"] / best_peer
            for r in rows[-len(a.runtimes) :]:
                print("   ", _fmt_row(r), flush=True)
            write_table(rows, a)  # after every group, so a long run leaves a table behind


def _fmt_row(r: dict) -> str:
    if "median" not in r:
        return (
            f"| {r['model']} | {r['threads']} | {r['runtime']} | — | — | — | — | — | — | "
            f"{r['size_mb']:.1f} | — | {r.get('error', '')} |"
        )
    err = "—" if r.get("err") is None else f"{r['err']:.1e}"
    return (
        f"| {r['model']} | {r['threads']} | {r['runtime']} | {r['median']:.2f} | {r['p90']:.2f} | "
        f"{r.get('vs_best', float('nan')):.2f} | {r['load']:.1f} | {r['rss']:.0f} | "
        f"{r['drss']:.0f} | "
        f"{r['size_mb']:.1f} | {err} | n={r['n']} {r.get('isa', '')} {r.get('error', '')} |"
    )


def write_table(rows: list[dict], a: argparse.Namespace) -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d_%H%M")
    out = Path(a.out) if a.out else ROOT / "bench" / "results" / f"{stamp}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = "cd /work/main && .venv/bin/python bench/run.py " + " ".join(
        shlex.quote(x) for x in sys.argv[1:]
    )
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = ["?"]
    cpu = "?"
    try:
        cpu = next(
            ln.split(":", 1)[1].strip()
            for ln in open("/proc/cpuinfo")
            if ln.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    lines = [
        f"# Benchmark {stamp} UTC",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {cpu}, {os.cpu_count()} CPUs, {platform.platform()}; load average at the end "
        f"{' '.join(load)} (shared machine: compare runtimes within a row group, not across runs).",
        "",
        *(
            [
                f"**Loaded machine**: {a.busy} busy-looping process(es) ran in the background "
                "the whole time (`--busy`).",
                "",
            ]
            if a.busy
            else []
        ),
        "Latency in ms (median, p90 of all timed runs pooled over interleaved rounds); "
        "`vs best` = median / best median among ExecuTorch+XNNPACK, ONNX Runtime, eager; "
        "load in ms; RSS = peak resident MB of the process (Python peers include the "
        "interpreter and torch); ΔRSS = growth after imports; size = file MB (eager: "
        "parameter bytes); err = max |y - y_eager| / max |y_eager|. ExecuTorch portable runs "
        "once, at the first thread count (it is minutes per run on the large models).",
        "",
        "| model | threads | runtime | median | p90 | vs best | load | RSS | ΔRSS | size | err "
        "| notes |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [_fmt_row(r) for r in rows]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
