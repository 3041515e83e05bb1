"""Int8 benchmark (issue 31): Ember's static int8 against ExecuTorch + XNNPACK int8 and ONNX
Runtime int8 on the CNNs of the zoo (bench/models.py), batch 1, median latency in ms.

For each model the same float model is quantized by each runtime's own tool, calibrated on the
same 8 seeded random batches of the model's input shape:

- ``ember_f32``: ``ember.export(model, inputs)`` (default backend), the float reference;
- ``ember_int8``: ``ember.quant.pt2e.quantize_exported`` (static int8, min/max), then
  ``ember.export`` (default backend: EmberCpuBackend takes the Q/DQ graph); both Ember programs
  run through ``ember.runtime.RuntimeProgram(buffer, threads=N)``;
- ``et_xnnpack_int8``: ExecuTorch's PT2E flow, ``XNNPACKQuantizer`` with
  ``get_symmetric_quantization_config(is_per_channel=True)``, ``prepare_pt2e`` / calibration /
  ``convert_pt2e``, lowered with ``XnnpackPartitioner`` (bench/run.py's et_xnnpack runner:
  ExecuTorch's thread pool reset to N);
- ``ort_s8s8`` / ``ort_u8s8``: the float model exported to ONNX as bench/run.py does,
  ``quant_pre_process`` (ORT's recommended shape inference and optimization), then
  ``onnxruntime.quantization.quantize_static`` in QDQ format, per-channel weights, activations
  QInt8 / QUInt8 and weights QInt8 (bench/run.py's ort runner: ``intra_op_num_threads = N``).

Every runtime runs in its own process; runtimes are interleaved round by round and each round's
timed runs pooled (as bench/run.py). Also reported: each int8 program's max |y - y_eager|
against the float model's eager output on the test input (a sanity check: quantization error,
not accuracy), Ember int8 ÷ Ember f32 and Ember int8 ÷ the best int8 peer. A peer that cannot
quantize or lower a model gets its error text in its cell.

    .venv/bin/python bench/int8.py [--models mobilenet_v2 mobilenet_v3_small resnet18]
                                   [--threads 1 2] [--rounds 3] [--runs 5] [--warmup 2]
                                   [--quick] [--out bench/results/int8_DATE.md]

Exports go to out/bench/int8/<model>/<runtime>/ (``--reuse`` keeps them).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import run as brun  # noqa: E402  (bench/run.py: the ExecuTorch / ORT runners)
from bench.report import cpu_name, write_report  # noqa: E402

log = logging.getLogger("bench.int8")
OUT = brun.OUT / "int8"
PY = sys.executable
CALIB_BATCHES = 8
RUNTIMES = ["ember_f32", "ember_int8", "et_xnnpack_int8", "ort_s8s8", "ort_u8s8"]
INT8_PEERS = ["et_xnnpack_int8", "ort_s8s8", "ort_u8s8"]
# the runtime name bench/run.py's worker knows each peer by (it reads <dir>/<name>.pte, or
# <dir>/model.onnx for "ort")
PEER_RUNNER = {"et_xnnpack_int8": "et_xnnpack", "ort_s8s8": "ort", "ort_u8s8": "ort"}
LABEL = {
    "ember_f32": "Ember f32",
    "ember_int8": "Ember int8",
    "et_xnnpack_int8": "ET+XNNPACK int8",
    "ort_s8s8": "ORT int8 S8S8",
    "ort_u8s8": "ORT int8 U8S8",
}


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]


# ---- preparation (one subprocess per model) -------------------------------------------------
def prepare(model: str, runtimes: list[str]) -> dict[str, Any]:
    """Quantizes and exports zoo model `model` for every runtime of `runtimes` into
    out/bench/int8/`model`/<runtime>/, each directory with the test input (io.pt, as
    bench/run.py's worker reads it); returns {"files": sizes, "errors": texts, "export_s"}."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    from bench.models import ZOO

    base = OUT / model
    m, inputs = ZOO[model]()
    x = inputs[0]
    with torch.inference_mode():
        ref = m(*inputs)
    g = torch.Generator().manual_seed(1)
    calib = [tuple(torch.randn(t.shape, generator=g) for t in inputs) for _ in range(CALIB_BATCHES)]
    base.mkdir(parents=True, exist_ok=True)
    np.save(base / "ref.npy", ref.detach().numpy())
    info: dict[str, Any] = {"files": {}, "errors": {}, "export_s": {}}

    def record(rt: str, name: str, fn: Any) -> None:
        d = base / rt
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        torch.save((x, ref), d / "io.pt")
        t = time.perf_counter()
        try:
            fn(d / name)
            info["files"][rt] = (d / name).stat().st_size
        except Exception as e:  # a runtime that cannot quantize this model is a cell, not fatal
            log.exception("%s: %s failed", model, rt)
            info["errors"][rt] = _err(e)
        info["export_s"][rt] = round(time.perf_counter() - t, 1)

    if "ember_f32" in runtimes or "ember_int8" in runtimes:
        import ember
        import ember.quant.pt2e

        def ember_f32(p: Path) -> None:
            ember.export(m, inputs).save(p)

        def ember_int8(p: Path) -> None:
            ep = ember.quant.pt2e.quantize_exported(m, inputs, calib, progress=False)
            ember.export(ep, inputs).save(p)

        if "ember_f32" in runtimes:
            record("ember_f32", "ember.pte", ember_f32)
        if "ember_int8" in runtimes:
            record("ember_int8", "ember.pte", ember_int8)
    if "et_xnnpack_int8" in runtimes:

        def et_int8(p: Path) -> None:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
                XnnpackPartitioner,
            )
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
                XNNPACKQuantizer,
                get_symmetric_quantization_config,
            )
            from executorch.exir import to_edge_transform_and_lower
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            q = XNNPACKQuantizer().set_global(
                get_symmetric_quantization_config(is_per_channel=True)
            )
            prepared = prepare_pt2e(torch.export.export(m, inputs).module(), q)
            with torch.no_grad():
                for b in calib:
                    prepared(*b)
            converted = convert_pt2e(prepared)
            ep = torch.export.export(converted, inputs)
            prog = to_edge_transform_and_lower(
                ep, partitioner=[XnnpackPartitioner()]
            ).to_executorch()
            p.write_bytes(prog.buffer)

        record("et_xnnpack_int8", "et_xnnpack.pte", et_int8)
    ort_rts = [rt for rt in ("ort_s8s8", "ort_u8s8") if rt in runtimes]
    if ort_rts:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process

        f32 = base / "model_f32.onnx"
        f32_err = None
        try:  # as bench/run.py's ort runner exports the float model
            torch.onnx.export(
                m, inputs, str(base / "model_raw.onnx"), dynamo=False, opset_version=17
            )
        except Exception as e:
            log.exception("%s: ONNX export failed", model)
            f32_err = "ONNX export: " + _err(e)
        if f32_err is None:
            try:  # ORT's recommended step before quantize_static: shape inference, optimization
                quant_pre_process(str(base / "model_raw.onnx"), str(f32))
            except Exception as e:
                log.exception("%s: quant_pre_process failed", model)
                f32_err = "quant_pre_process: " + _err(e)

        class Reader(CalibrationDataReader):
            def __init__(self, name: str) -> None:
                self.it = iter([{name: b[0].numpy()} for b in calib])

            def get_next(self) -> dict[str, Any] | None:
                return next(self.it, None)

        def ort_int8(act: Any) -> Any:
            def fn(p: Path) -> None:
                import onnx

                if f32_err:
                    raise RuntimeError(f32_err)
                name = onnx.load(str(f32), load_external_data=False).graph.input[0].name
                quantize_static(
                    str(f32),
                    str(p),
                    Reader(name),
                    quant_format=QuantFormat.QDQ,
                    per_channel=True,
                    activation_type=act,
                    weight_type=QuantType.QInt8,
                )

            return fn

        acts = {"ort_s8s8": QuantType.QInt8, "ort_u8s8": QuantType.QUInt8}
        for rt in ort_rts:
            record(rt, "model.onnx", ort_int8(acts[rt]))
    return info


# ---- Ember worker (one subprocess per measurement) ------------------------------------------
def ember_worker(rt: str, model: str, threads: int, warmup: int, runs: int) -> dict[str, Any]:
    """Times out/bench/int8/`model`/`rt`/ember.pte on ``RuntimeProgram(buffer, threads=N)``."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    from ember.runtime import RuntimeProgram

    d = OUT / model / rt
    x, _ = torch.load(d / "io.pt")
    t0 = time.perf_counter()
    prog = RuntimeProgram((d / "ember.pte").read_bytes(), threads=threads)
    prog.run("forward", [x])  # prepares the method: part of load, as for the peers' load
    load_ms = (time.perf_counter() - t0) * 1e3
    times = []
    y: Any = None
    for i in range(warmup + runs):
        s = time.perf_counter()
        y = prog.run("forward", [x])[0]
        if i >= warmup:
            times.append((time.perf_counter() - s) * 1e3)
    np.asarray(y.numpy(), dtype=np.float32).tofile(d / f"out_{rt}.bin")
    prog.close()
    return {"load_ms": load_ms, "times_ms": times}


def measure(rt: str, model: str, threads: int, warmup: int, runs: int) -> dict[str, Any]:
    """One timed process: Ember's through this script's worker, the peers' through
    bench/run.py's (same thread settings as its et_xnnpack / ort runtimes)."""
    if rt in PEER_RUNNER:
        return brun.measure(PEER_RUNNER[rt], f"int8/{model}/{rt}", threads, warmup, runs, 900)
    cmd = [PY, __file__, "--worker", rt, model, str(threads), str(warmup), str(runs)]
    # torch is only the worker's loader here: one OpenMP thread, so none of its threads spins on
    # the core Ember's second worker needs (2 threads, int8 ResNet-18 on the Zen 4: median
    # 7.1 -> 6.4-6.7 ms with OMP_NUM_THREADS=1 instead of 2)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timeout (900 s)"}
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not line:
        last = (r.stderr.strip().splitlines() or ["failed"])[-1]
        return {"error": last.removeprefix("ember.runtime.EmberRuntimeError: ")[:400]}
    return json.loads(line[-1])


def max_abs_diff(model: str, rt: str) -> float | None:
    """max |y - y_eager| of `rt`'s last output against the float model's eager output."""
    import numpy as np

    ref = np.load(OUT / model / "ref.npy").reshape(-1)
    p = OUT / model / rt / f"out_{PEER_RUNNER.get(rt, rt)}.bin"
    if not p.exists():
        return None
    y = np.fromfile(p, dtype=np.float32)
    return float(np.abs(y - ref).max()) if y.size == ref.size else None


# ---- driver -----------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def run_model(model: str, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Prepares `model` (or reuses its exports) and times every runtime at every thread count;
    one row per thread count."""
    cached = OUT / model / "prep.json"
    if a.reuse and cached.exists():
        prep = json.loads(cached.read_text())
    else:
        log.info("[%s] quantizing and exporting for %s", model, ", ".join(RUNTIMES))
        r = subprocess.run(
            [PY, __file__, "--prepare", model], capture_output=True, text=True, timeout=3600
        )
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            msg = _cell((r.stderr.strip().splitlines() or ["failed"])[-1][:160])
            prep = {"files": {}, "errors": dict.fromkeys(RUNTIMES, "prepare: " + msg)}
        else:
            prep = json.loads(lines[-1])
            cached.write_text(json.dumps(prep))
    for rt, e in prep["errors"].items():
        log.info("[%s] %s: %s", model, rt, e)
    rows = []
    for th in a.threads:
        res: dict[str, dict[str, Any]] = {rt: {"times_ms": []} for rt in RUNTIMES}
        for rnd in range(a.rounds):
            for rt in RUNTIMES:
                if rt in prep["errors"]:
                    res[rt]["error"] = "export: " + prep["errors"][rt]
                    continue
                if "error" in res[rt]:
                    continue
                m = measure(rt, model, th, a.warmup, a.runs)
                if "error" in m:
                    res[rt]["error"] = m["error"]
                else:
                    res[rt]["times_ms"] += m["times_ms"]
            log.info("[%s] threads=%d round %d/%d done", model, th, rnd + 1, a.rounds)
        row: dict[str, Any] = {"model": model, "threads": th, "sizes": prep["files"]}
        for rt in RUNTIMES:
            v = res[rt]
            if v["times_ms"] and "error" not in v:
                row[rt] = statistics.median(v["times_ms"])
                row[rt + ":n"] = len(v["times_ms"])
                row[rt + ":diff"] = max_abs_diff(model, rt)
            else:
                row[rt + ":error"] = _cell(v.get("error", "no timed run"))
        rows.append(row)
    return rows


def _ms(row: dict[str, Any], rt: str) -> str:
    return f"{row[rt]:.2f}" if rt in row else f"error: {row[rt + ':error']}"


def _diff(row: dict[str, Any], rt: str) -> str:
    v = row.get(rt + ":diff")
    return "—" if v is None else f"{v:.3g}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    head = (
        "| model | threads | "
        + " | ".join(LABEL[rt] for rt in RUNTIMES)
        + " | Ember int8 ÷ f32 | Ember int8 ÷ best int8 peer | "
        + " | ".join(f"max abs diff {LABEL[rt]}" for rt in ["ember_f32", "ember_int8", *INT8_PEERS])
        + " | max abs eager |"
    )
    lines = [head, "|---|---:|" + "---:|" * (len(RUNTIMES) + 2 + len(INT8_PEERS) + 3)]
    import numpy as np

    for r in rows:
        peers = [r[rt] for rt in INT8_PEERS if rt in r]
        best = min(peers) if peers else None
        q, f = r.get("ember_int8"), r.get("ember_f32")
        ref = OUT / r["model"] / "ref.npy"
        scale = f"{float(np.abs(np.load(ref)).max()):.3g}" if ref.exists() else "—"
        cells = [r["model"], str(r["threads"])]
        cells += [_ms(r, rt) for rt in RUNTIMES]
        cells.append(f"{q / f:.2f}" if q and f else "—")
        cells.append(f"{q / best:.2f}" if q and best else "—")
        cells += [_diff(r, rt) for rt in ["ember_f32", "ember_int8", *INT8_PEERS]]
        cells.append(scale)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models", nargs="+", default=["mobilenet_v2", "mobilenet_v3_small", "resnet18"]
    )
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per round")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 round of 3 runs")
    ap.add_argument("--reuse", action="store_true", help="reuse the exports of an earlier run")
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/int8_DATE.md")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--prepare", help=argparse.SUPPRESS)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if a.worker:
        rt, model, th, wu, runs = a.worker
        print(json.dumps(ember_worker(rt, model, int(th), int(wu), int(runs))))
        return
    if a.prepare:
        print(json.dumps(prepare(a.prepare, RUNTIMES)))
        return
    if a.quick:
        a.rounds, a.runs, a.warmup = 1, 3, 1
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    out = a.out or ROOT / "bench" / "results" / f"int8_{today}.md"
    rows: list[dict[str, Any]] = []
    for model in a.models:
        rows += run_model(model, a)
    explanation = (
        f"CPU: {cpu_name()}, {os.cpu_count()} CPUs. Timings from a shared 2-vCPU host are noisy: "
        "compare runtimes within a row, not across runs.\n\n"
        f"Median latency in ms of {a.rounds} interleaved round(s) of {a.runs} timed runs "
        f"({a.warmup} warm-up) per runtime, batch 1, one process per runtime and round. Every "
        f"int8 program is calibrated on the same {CALIB_BATCHES} seeded random batches. Ember: "
        "`ember.export` (default backend) of the float model and of "
        "`ember.quant.pt2e.quantize_exported` (static int8), run by "
        "`ember.runtime.RuntimeProgram(buffer, threads=N)`. ET+XNNPACK int8: ExecuTorch "
        "`XNNPACKQuantizer` (`get_symmetric_quantization_config(is_per_channel=True)`, PT2E), "
        "`XnnpackPartitioner`. ORT int8: `quant_pre_process`, then `quantize_static`, QDQ, "
        "per-channel, activations "
        "QInt8 (S8S8) or QUInt8 (U8S8), weights QInt8, `intra_op_num_threads = N`. "
        "`best int8 peer` = the fastest of ET+XNNPACK int8 and the two ORT int8 models. "
        "`max abs diff` = max |y - y_eager| of each program's output against the float model's "
        "eager output on the test input (a sanity check of the quantized program, not an "
        "accuracy figure: random weights and inputs); `max abs eager` = max |y_eager|, its scale."
    )
    lines = table(rows)
    lines += [
        "",
        "File sizes in MB (`—`: no file):",
        "",
        "| model | " + " | ".join(LABEL[rt] for rt in RUNTIMES) + " |",
        "|---|" + "---:|" * len(RUNTIMES),
    ]
    for r in rows:
        if r["threads"] == a.threads[0]:
            mb = [f"{r['sizes'][rt] / 1e6:.1f}" if rt in r["sizes"] else "—" for rt in RUNTIMES]
            lines.append(f"| {r['model']} | " + " | ".join(mb) + " |")
    title = "Int8 benchmark (Ember, ExecuTorch + XNNPACK, ONNX Runtime)"
    write_report(title, explanation, lines, None)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_report(title, explanation, lines, out)


if __name__ == "__main__":
    main()
