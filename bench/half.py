"""Half-precision models (float16 / bfloat16 weights and inputs) on Ember against its peers.

A model from the zoo (bench/models.py) is cast to the dtype (``model.to(dtype)``, inputs too)
and exported as it is by each runtime: Ember's default (``half="f32"``: computed in f32 inside
EmberCpuBackend, ember.passes.half), Ember ``half="keep"`` (ATen's half kernels, portable),
ExecuTorch 1.5.1 + XNNPACK (its partitioner on the half graph), ONNX Runtime (the half model
exported to ONNX), and Ember's f32 export of the f32 model for reference. Each measurement
runs in its own process; the runtimes are interleaved round by round. Reported: median and p90
latency and the largest error against the model computed in f32 by eager PyTorch, relative to
its largest value.

    .venv/bin/python bench/half.py [--models mobilenet_v2 resnet18] [--dtypes f16 bf16]
        [--threads 1 2] [--rounds 3] [--runs 10] [--warmup 3] [--out bench/results/NAME.md]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench_half"
RUNTIMES = ["ember", "ember_keep", "ember_f32", "et_xnnpack", "ort"]
PY = sys.executable
log = logging.getLogger("bench.half")


def _dtype(name: str):  # noqa: ANN202 - torch is imported lazily
    import torch

    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[name]


def prepare(model: str, dt: str, runtimes: list[str]) -> dict:
    """Export ``model`` in ``dt`` for every runtime into out/bench_half/<model>_<dt>/."""
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(ROOT))
    import ember
    from bench.models import EXTRA, ZOO

    d = OUT / f"{model}_{dt}"
    d.mkdir(parents=True, exist_ok=True)
    m, inputs = {**ZOO, **EXTRA}[model]()
    mh = m.eval().to(_dtype(dt))  # the weights rounded to the dtype
    xh = tuple(x.to(_dtype(dt)) if x.is_floating_point() else x for x in inputs)
    mf = copy.deepcopy(mh).float()  # the same weights, exactly widened: the f32 computation
    xf = tuple(x.float() if x.is_floating_point() else x for x in xh)
    with torch.inference_mode():
        ref = mf(*xf)
    torch.save((xh, ref), d / "io.pt")
    info: dict = {"errors": {}}

    def record(rt: str, fn) -> None:  # noqa: ANN001
        try:
            fn()
        except Exception as e:  # a runtime that cannot take the model is reported, not fatal
            info["errors"][rt] = f"{type(e).__name__}: {str(e)[:160]}"

    if "ember" in runtimes:
        record("ember", lambda: ember.export(mh, xh).save(d / "ember.pte"))
    if "ember_keep" in runtimes:
        record("ember_keep", lambda: ember.export(mh, xh, half="keep").save(d / "ember_keep.pte"))
    if "ember_f32" in runtimes:
        record("ember_f32", lambda: ember.export(mf, xf).save(d / "ember_f32.pte"))
    if "et_xnnpack" in runtimes:

        def et_x() -> None:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
                XnnpackPartitioner,
            )
            from executorch.exir import to_edge_transform_and_lower

            ep = torch.export.export(mh, xh)
            prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
            (d / "et_xnnpack.pte").write_bytes(prog.to_executorch().buffer)

        record("et_xnnpack", et_x)
    if "ort" in runtimes:

        def onnx() -> None:
            torch.onnx.export(mh, xh, str(d / "model.onnx"), dynamo=False, opset_version=17)
            import onnxruntime as ort

            ort.InferenceSession(str(d / "model.onnx"), providers=["CPUExecutionProvider"])

        record("ort", onnx)
    (d / "prep.json").write_text(json.dumps(info))
    return info


def worker(rt: str, model: str, dt: str, threads: int, warmup: int, runs: int) -> dict:
    """Time ``rt`` on the prepared files in this process; print nothing, return the figures."""
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    torch.set_num_threads(threads)
    d = OUT / f"{model}_{dt}"
    xh, ref = torch.load(d / "io.pt")
    if rt.startswith("ember"):
        from ember.runtime import RuntimeProgram

        xs = [x.float() if rt == "ember_f32" and x.is_floating_point() else x for x in xh]
        prog = RuntimeProgram((d / f"{rt}.pte").read_bytes(), threads=threads)

        def run():  # noqa: ANN202
            return prog.run("forward", xs)[0]
    elif rt == "et_xnnpack":
        import executorch.extension.pybindings.portable_lib as pl
        from executorch.runtime import Runtime

        pl._unsafe_reset_threadpool(threads)
        method = Runtime.get().load_program(d / "et_xnnpack.pte").load_method("forward")

        def run():  # noqa: ANN202
            return method.execute(list(xh))[0]
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(d / "model.onnx"), so, providers=["CPUExecutionProvider"])
        feed = {
            i.name: x.float().numpy().astype(_np_dtype(dt)) if x.is_floating_point() else x.numpy()
            for i, x in zip(sess.get_inputs(), xh, strict=True)
        }

        def run():  # noqa: ANN202
            return torch.from_numpy(sess.run(None, feed)[0].astype("float32"))

    sys.path.insert(0, str(ROOT))
    from bench.run import time_runs

    times, y = time_runs(run, warmup, runs)
    y = y.float()
    err = float((y - ref.float()).abs().max() / ref.float().abs().max())
    return {"times_ms": times, "err": err}


def _np_dtype(dt: str) -> str:
    return {"f16": "float16", "bf16": "float32", "f32": "float32"}[dt]


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=["mobilenet_v2", "resnet18"])
    ap.add_argument("--dtypes", nargs="*", default=["f16", "bf16"])
    ap.add_argument("--runtimes", nargs="*", default=RUNTIMES)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--slow-runs",
        type=int,
        default=2,
        help="timed runs of ember_keep and of a runtime "
        "whose runs took over 0.5 s (portable kernels)",
    )
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    ap.add_argument("--prepare", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        rt, model, dt, th, wu, runs = a.worker
        print(json.dumps(worker(rt, model, dt, int(th), int(wu), int(runs))))
        return
    if a.prepare:
        print(json.dumps(prepare(a.prepare[0], a.prepare[1], a.runtimes)))
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    info = {}
    for ln in open("/proc/cpuinfo"):
        k, _, v = ln.partition(":")
        info.setdefault(k.strip(), v.strip())
    cpu = (
        f"{info.get('model name', platform.processor())} (family {info.get('cpu family')}, "
        f"model {info.get('model')}), {len(os.sched_getaffinity(0))} vCPUs"
    )
    lines = [
        f"# Half-precision models, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"CPU: {cpu}; command: `{' '.join(sys.argv)}`. Medians (p90) in ms over "
        f"{a.rounds} interleaved rounds; err: max |y - f32| / max |f32| against the model "
        "computed in f32 by eager PyTorch.",
        "",
        "| model | dtype | threads | " + " | ".join(a.runtimes) + " | Ember ÷ best peer |",
        "|---|---|---|" + "---|" * (len(a.runtimes) + 1),
    ]
    notes: list[str] = []
    for model in a.models:
        for dt in a.dtypes:
            prep = json.loads(
                subprocess.run(
                    [PY, __file__, "--prepare", model, dt, "--runtimes", *a.runtimes],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            ok = [rt for rt in a.runtimes if rt not in prep["errors"]]
            for rt, why in prep["errors"].items():
                log.info("%s %s: %s cannot take it: %s", model, dt, rt, why)
            for th in a.threads:
                res: dict[str, dict] = {rt: {"times_ms": [], "err": None} for rt in ok}
                slow = {"ember_keep"}  # and, after a round, any runtime over half a second
                for _ in range(a.rounds):
                    for rt in ok:
                        runs = a.slow_runs if rt in slow else a.runs
                        wu = 1 if rt in slow else a.warmup
                        p = subprocess.run(
                            [PY, __file__, "--worker", rt, model, dt, str(th), str(wu), str(runs)],
                            capture_output=True,
                            text=True,
                        )
                        if p.returncode != 0:
                            prep["errors"][rt] = p.stderr.strip().splitlines()[-1][:160]
                            continue
                        r = json.loads(p.stdout.strip().splitlines()[-1])
                        res[rt]["times_ms"] += r["times_ms"]
                        if statistics.median(r["times_ms"]) > 500:
                            slow.add(rt)
                        res[rt]["err"] = r["err"]
                cells, med = [], {}
                for rt in a.runtimes:
                    t = res.get(rt, {}).get("times_ms")
                    if not t:
                        cells.append("—")
                        continue
                    med[rt] = statistics.median(t)
                    cells.append(
                        f"{med[rt]:.2f} ({_quantile(t, 0.9):.2f}), err {res[rt]['err']:.1e}"
                    )
                peers = [med[r] for r in ("et_xnnpack", "ort") if r in med]
                ratio = f"{med['ember'] / min(peers):.2g}" if "ember" in med and peers else "—"
                lines.append(f"| {model} | {dt} | {th} | " + " | ".join(cells) + f" | {ratio} |")
                log.info("%s", lines[-1])
            for rt, why in prep["errors"].items():
                notes.append(f"- {model} {dt}: `{rt}` could not run it: {why}")
    text = "\n".join(lines + [""] + notes) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
