"""Int8 benchmark (issue 31): Ember's int8 against ExecuTorch + XNNPACK int8 and ONNX Runtime
int8 on the zoo (bench/models.py), batch 1, median latency in ms.

Each model takes one of two forms, chosen by name (``DYNAMIC_MODELS``):

- **static** int8 (the CNNs: every model not in ``DYNAMIC_MODELS``): convolutions, linears and
  their activations int8, activation ranges calibrated ahead of time;
- **dynamic** int8 linears (``DYNAMIC_MODELS`` = the transformers ``minilm_l6`` and ``vit_b16``):
  only the linear layers (matmuls with a constant weight) are quantized, int8 per-channel
  weights, activations quantized per row / token (Ember, XNNPACK) or per tensor (ORT) at run
  time; no calibration. The report says which form each model used.

Static form: the same float model is quantized by each runtime's own tool, calibrated on the
same 8 seeded random batches of the model's input shape:

- ``ember_f32``: ``ember.export(model, inputs)`` (default backend), the float reference;
- ``ember_int8``: ``ember.quant.pt2e.quantize_exported`` (static int8, min/max), then
  ``ember.export`` (default backend: EmberCpuBackend takes the Q/DQ graph); both Ember programs
  run through ``ember.runtime.RuntimeProgram(buffer, threads=N)``;
- ``ember_xnnq``: the graph of the ``et_xnnpack_int8`` column (ExecuTorch's quantizer) exported
  by ``ember.export`` as it is: the same quantization, Ember's kernels (both forms);
- ``et_xnnpack_int8``: ExecuTorch's PT2E flow, ``XNNPACKQuantizer`` with
  ``get_symmetric_quantization_config(is_per_channel=True)``, ``prepare_pt2e`` / calibration /
  ``convert_pt2e``, lowered with ``XnnpackPartitioner`` (bench/run.py's et_xnnpack runner:
  ExecuTorch's thread pool reset to N);
- ``ort_s8s8`` / ``ort_u8s8``: the float model exported to ONNX as bench/run.py does,
  ``quant_pre_process`` (ORT's recommended shape inference and optimization), then
  ``onnxruntime.quantization.quantize_static`` in QDQ format, per-channel weights, activations
  QInt8 / QUInt8 and weights QInt8 (bench/run.py's ort runner: ``intra_op_num_threads = N``).

Dynamic form (no calibration data):

- ``ember_f32``: as above;
- ``ember_int8``: ``ember.quant.pt2e.quantize_exported(model, inputs, None, dynamic=True)``
  (int8 per-channel linear weights, activations ``choose_qparams_per_token_asymmetric`` /
  ``quantize_per_token`` at run time), then ``ember.export`` (default backend);
- ``et_xnnpack_int8``: ``XNNPACKQuantizer`` with
  ``get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)``, ``prepare_pt2e``
  / two calls with the example inputs / ``convert_pt2e``, ``XnnpackPartitioner``; the report
  notes how much of the graph XNNPACK took (``get_delegation_info``);
- ``ort_dyn``: the float ONNX model (``quant_pre_process`` as above), then
  ``onnxruntime.quantization.quantize_dynamic(per_channel=True, weight_type=QInt8,
  op_types_to_quantize=["MatMul"])``: the linears' MatMuls with int8 per-channel weights,
  activations u8 per tensor at run time (``DynamicQuantizeLinear``; ORT's only dynamic form),
  the ``ort_s8s8`` / ``ort_u8s8`` rows replaced by this one.

Every runtime runs in its own process; runtimes are interleaved round by round and each round's
timed runs pooled (as bench/run.py). Also reported: each int8 program's max |y - y_eager|
against the float model's eager output on the test input (a sanity check: quantization error,
not accuracy), Ember int8 ÷ Ember f32 and Ember int8 ÷ the best int8 peer. A peer that cannot
quantize or lower a model gets its error text in its cell.

    .venv/bin/python bench/int8.py [--models mobilenet_v2 mobilenet_v3_small resnet18 minilm_l6]
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
#: the models quantized in the dynamic form (int8 linears, activations quantized at run time)
DYNAMIC_MODELS = {"minilm_l6", "vit_b16"}
STATIC_RUNTIMES = [
    "ember_f32",
    "ember_int8",
    "ember_xnnq",
    "et_xnnpack_int8",
    "ort_s8s8",
    "ort_u8s8",
]
DYNAMIC_RUNTIMES = ["ember_f32", "ember_int8", "ember_xnnq", "et_xnnpack_int8", "ort_dyn"]
RUNTIMES = STATIC_RUNTIMES + [rt for rt in DYNAMIC_RUNTIMES if rt not in STATIC_RUNTIMES]
INT8_PEERS = ["et_xnnpack_int8", "ort_s8s8", "ort_u8s8", "ort_dyn"]
# the runtime name bench/run.py's worker knows each peer by (it reads <dir>/<name>.pte, or
# <dir>/model.onnx for "ort")
PEER_RUNNER = {
    "et_xnnpack_int8": "et_xnnpack",
    "ort_s8s8": "ort",
    "ort_u8s8": "ort",
    "ort_dyn": "ort",
}
LABEL = {
    "ember_f32": "Ember f32",
    "ember_int8": "Ember int8",
    "ember_xnnq": "Ember int8 (XNNPACKQuantizer graph)",
    "et_xnnpack_int8": "ET+XNNPACK int8",
    "ort_s8s8": "ORT int8 S8S8",
    "ort_u8s8": "ORT int8 U8S8",
    "ort_dyn": "ORT int8 dynamic",
}


def runtimes_of(model: str) -> list[str]:
    """The runtimes measured on `model`: its form's (static or dynamic)."""
    return DYNAMIC_RUNTIMES if model in DYNAMIC_MODELS else STATIC_RUNTIMES


def form_of(model: str) -> str:
    return "dynamic" if model in DYNAMIC_MODELS else "static"


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]


# ---- preparation (one subprocess per model) -------------------------------------------------
def prepare(model: str, runtimes: list[str]) -> dict[str, Any]:
    """Quantizes and exports zoo model `model` for every runtime of `runtimes` into
    out/bench/int8/`model`/<runtime>/, each directory with the test input (io.pt, as
    bench/run.py's worker reads it); returns {"files": sizes, "errors": texts, "export_s",
    "notes": texts}. The model's form (``DYNAMIC_MODELS``) picks static or dynamic quantization."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    from bench.models import ZOO

    base = OUT / model
    m, inputs = ZOO[model]()
    if len(inputs) != 1:  # io.pt and bench/run.py's workers carry one input
        raise ValueError(f"{model}: {len(inputs)} inputs, this benchmark feeds one")
    x = inputs[0]
    dynamic = model in DYNAMIC_MODELS
    with torch.inference_mode():
        ref = m(*inputs)
    g = torch.Generator().manual_seed(1)
    # static calibration batches (float inputs); the dynamic form calibrates nothing (ExecuTorch's
    # prepare_pt2e / convert_pt2e still want a call, given the example inputs)
    calib = (
        [inputs, inputs]
        if dynamic
        else [
            tuple(torch.randn(t.shape, generator=g) for t in inputs) for _ in range(CALIB_BATCHES)
        ]
    )
    base.mkdir(parents=True, exist_ok=True)
    np.save(base / "ref.npy", ref.detach().numpy())
    info: dict[str, Any] = {"files": {}, "errors": {}, "export_s": {}, "notes": {}}

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
            if dynamic:
                ep = ember.quant.pt2e.quantize_exported(
                    m, inputs, None, dynamic=True, progress=False
                )
            else:
                ep = ember.quant.pt2e.quantize_exported(m, inputs, calib, progress=False)
            s = ember.quant.pt2e.summarize(ep)
            prog = ember.export(ep, inputs)
            # what the exported program still runs of the Q/DQ graph (its instruction list): a
            # weight dequantize that the exporter folded into a float constant is not there
            kernels = [ln.split()[1] for ln in prog.explain().splitlines()[1:] if ln.strip()]
            dq_w = sum("dequantize_per_channel" in k for k in kernels)
            q_act = sum(k.startswith("quantized_decomposed::quantize") for k in kernels)
            info["notes"]["ember_int8"] = (
                f"quantizer: {s.weights} int8 weights, {s.quantize} activation quantize ops; "
                f"exported program: {len(kernels)} instructions, {dq_w} weight "
                f"dequantize_per_channel, {q_act} activation quantize"
            )
            prog.save(p)

        if "ember_f32" in runtimes:
            record("ember_f32", "ember.pte", ember_f32)
        if "ember_int8" in runtimes:
            record("ember_int8", "ember.pte", ember_int8)
    xnnq: list[Any] = []

    def xnnpack_quantized() -> Any:
        """The model quantized by ExecuTorch's XNNPACKQuantizer through PT2E (exported once, for
        ExecuTorch and for Ember alike)."""
        if not xnnq:
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
                XNNPACKQuantizer,
                get_symmetric_quantization_config,
            )
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            q = XNNPACKQuantizer().set_global(
                get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
            )
            prepared = prepare_pt2e(torch.export.export(m, inputs).module(), q)
            with torch.no_grad():
                for b in calib:
                    prepared(*b)
            xnnq.append(torch.export.export(convert_pt2e(prepared), inputs))
        return xnnq[0]

    if "ember_xnnq" in runtimes:

        def ember_xnnq(p: Path) -> None:
            import ember

            prog = ember.export(xnnpack_quantized(), inputs)
            portable = [ln.split()[1] for ln in prog.explain().splitlines()[1:] if "portable" in ln]
            qdq = sum(k.startswith("quantized_decomposed::") for k in portable)
            info["notes"]["ember_xnnq"] = (
                f"the ET+XNNPACK column's quantized graph through ember.export: {len(portable)} "
                f"portable instructions, {qdq} of them Q/DQ"
            )
            prog.save(p)

        record("ember_xnnq", "ember.pte", ember_xnnq)
    if "et_xnnpack_int8" in runtimes:

        def et_int8(p: Path) -> None:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
                XnnpackPartitioner,
            )
            from executorch.devtools.backend_debug import get_delegation_info
            from executorch.exir import to_edge_transform_and_lower

            ep = xnnpack_quantized()
            qops = [
                n
                for n in ep.graph.nodes
                if n.op == "call_function" and "choose_qparams" in str(n.target)
            ]
            edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
            d = get_delegation_info(edge.exported_program().graph_module)
            left = sorted(
                f"{k} x{v.non_delegated}"
                for k, v in d.delegation_by_operator.items()
                if v.non_delegated
            )
            info["notes"]["et_xnnpack_int8"] = (
                (f"{len(qops)} dynamic activation quantizers, " if dynamic else "")
                + f"{d.num_delegated_subgraphs} XNNPACK subgraphs, {d.num_delegated_nodes} nodes "
                f"delegated, {d.num_non_delegated_nodes} not"
                + (f" ({', '.join(left)})" if left else "")
            )
            if d.num_delegated_subgraphs == 0:
                raise RuntimeError("XnnpackPartitioner delegated nothing")
            if dynamic and not qops:
                raise RuntimeError("XNNPACKQuantizer inserted no dynamic quantization")
            prog = edge.to_executorch()
            p.write_bytes(prog.buffer)

        record("et_xnnpack_int8", "et_xnnpack.pte", et_int8)
    ort_rts = [rt for rt in ("ort_s8s8", "ort_u8s8", "ort_dyn") if rt in runtimes]
    if ort_rts:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_dynamic,
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

        def ort_dyn(p: Path) -> None:
            import onnx

            if f32_err:
                raise RuntimeError(f32_err)
            # the linears' MatMuls only (as Ember and XNNPACK quantize only linears): int8
            # per-channel weights, activations u8 per tensor at run time (DynamicQuantizeLinear)
            quantize_dynamic(
                str(f32),
                str(p),
                op_types_to_quantize=["MatMul"],
                per_channel=True,
                weight_type=QuantType.QInt8,
            )
            ops: dict[str, int] = {}
            for n in onnx.load(str(p), load_external_data=False).graph.node:
                ops[n.op_type] = ops.get(n.op_type, 0) + 1
            info["notes"]["ort_dyn"] = ", ".join(
                f"{ops.get(k, 0)} {k}" for k in ("MatMulInteger", "DynamicQuantizeLinear", "MatMul")
            )
            if not ops.get("MatMulInteger"):
                raise RuntimeError("quantize_dynamic quantized no MatMul")

        acts = {"ort_s8s8": QuantType.QInt8, "ort_u8s8": QuantType.QUInt8}
        for rt in ort_rts:
            record(rt, "model.onnx", ort_dyn if rt == "ort_dyn" else ort_int8(acts[rt]))
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
    """Prepares `model` (or reuses its exports) and times every runtime of its form
    (:func:`runtimes_of`) at every thread count; one row per thread count."""
    rts = runtimes_of(model)
    cached = OUT / model / "prep.json"
    if a.reuse and cached.exists():
        prep = json.loads(cached.read_text())
    else:
        log.info(
            "[%s] %s int8: quantizing and exporting for %s", model, form_of(model), ", ".join(rts)
        )
        r = subprocess.run(
            [PY, __file__, "--prepare", model], capture_output=True, text=True, timeout=3600
        )
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            msg = _cell((r.stderr.strip().splitlines() or ["failed"])[-1][:160])
            prep = {"files": {}, "errors": dict.fromkeys(rts, "prepare: " + msg)}
        else:
            prep = json.loads(lines[-1])
            cached.write_text(json.dumps(prep))
    for rt, e in prep["errors"].items():
        log.info("[%s] %s: %s", model, rt, e)
    for rt, n in prep.get("notes", {}).items():
        log.info("[%s] %s: %s", model, rt, n)
    rows = []
    for th in a.threads:
        res: dict[str, dict[str, Any]] = {rt: {"times_ms": []} for rt in rts}
        for rnd in range(a.rounds):
            for rt in rts:
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
        row: dict[str, Any] = {
            "model": model,
            "threads": th,
            "form": form_of(model),
            "sizes": prep["files"],
            "notes": prep.get("notes", {}),
        }
        for rt in rts:
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
    if rt in row:
        return f"{row[rt]:.2f}"
    if rt + ":error" in row:
        return f"error: {row[rt + ':error']}"
    return "n/a"  # not a runtime of this model's form


def _diff(row: dict[str, Any], rt: str) -> str:
    v = row.get(rt + ":diff")
    return "—" if v is None else f"{v:.3g}"


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """The runtimes of the models in `rows` (RUNTIMES order): a static-only report keeps its
    five columns, a dynamic-only one its four."""
    used = {rt for r in rows for rt in runtimes_of(r["model"])}
    return [rt for rt in RUNTIMES if rt in used]


def table(rows: list[dict[str, Any]]) -> list[str]:
    cols = columns(rows)
    peers_of = [rt for rt in INT8_PEERS if rt in cols]
    head = (
        "| model | int8 form | threads | "
        + " | ".join(LABEL[rt] for rt in cols)
        + " | Ember int8 ÷ f32 | Ember int8 ÷ best int8 peer | "
        + " | ".join(f"max abs diff {LABEL[rt]}" for rt in ["ember_f32", "ember_int8", *peers_of])
        + " | max abs eager |"
    )
    lines = [head, "|---|---|---:|" + "---:|" * (len(cols) + 2 + len(peers_of) + 3)]
    import numpy as np

    for r in rows:
        peers = [r[rt] for rt in peers_of if rt in r]
        best = min(peers) if peers else None
        q, f = r.get("ember_int8"), r.get("ember_f32")
        ref = OUT / r["model"] / "ref.npy"
        scale = f"{float(np.abs(np.load(ref)).max()):.3g}" if ref.exists() else "—"
        cells = [r["model"], r["form"], str(r["threads"])]
        cells += [_ms(r, rt) for rt in cols]
        cells.append(f"{q / f:.2f}" if q and f else "—")
        cells.append(f"{q / best:.2f}" if q and best else "—")
        cells += [_diff(r, rt) for rt in ["ember_f32", "ember_int8", *peers_of]]
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
        print(json.dumps(prepare(a.prepare, runtimes_of(a.prepare))))
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
        f"({a.warmup} warm-up) per runtime, batch 1, one process per runtime and round. "
        "`int8 form` says how each model was quantized (bench/int8.py's `DYNAMIC_MODELS`).\n\n"
        f"**static** (CNNs): every int8 program is calibrated on the same {CALIB_BATCHES} seeded "
        "random batches. Ember: `ember.export` (default backend) of the float model and of "
        "`ember.quant.pt2e.quantize_exported` (static int8), run by "
        "`ember.runtime.RuntimeProgram(buffer, threads=N)`. ET+XNNPACK int8: ExecuTorch "
        "`XNNPACKQuantizer` (`get_symmetric_quantization_config(is_per_channel=True)`, PT2E), "
        "`XnnpackPartitioner`. ORT int8: `quant_pre_process`, then `quantize_static`, QDQ, "
        "per-channel, activations "
        "QInt8 (S8S8) or QUInt8 (U8S8), weights QInt8, `intra_op_num_threads = N`.\n\n"
        "**dynamic** (transformers): only the linear layers int8, per-channel int8 weights, "
        "activations quantized at run time, no calibration. Ember: `quantize_exported(..., "
        "dynamic=True)` (activations per token, asymmetric int8). ET+XNNPACK int8: "
        "`get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)` (XNNPACK's "
        "dynamically quantized fully-connected: activations per row, asymmetric int8). ORT int8 "
        "dynamic: `quant_pre_process`, then `quantize_dynamic(per_channel=True, "
        "weight_type=QInt8, op_types_to_quantize=['MatMul'])` (MatMulInteger: activations u8 "
        "per tensor, ORT's only dynamic form); `n/a`: not a runtime of that form.\n\n"
        "Ember int8 (XNNPACKQuantizer graph): the very graph the ET+XNNPACK column runs (its "
        "PT2E quantization, static or dynamic per tensor), exported by `ember.export` as it "
        "is: the same quantization, Ember's kernels.\n\n"
        "`best int8 peer` = the fastest of the model's ET+XNNPACK and ORT int8 programs. "
        "`max abs diff` = max |y - y_eager| of each program's output against the float model's "
        "eager output on the test input (a sanity check of the quantized program, not an "
        "accuracy figure: random weights and inputs); `max abs eager` = max |y_eager|, its scale."
    )
    lines = table(rows)
    cols = columns(rows)
    lines += [
        "",
        "File sizes in MB (`—`: no file):",
        "",
        "| model | " + " | ".join(LABEL[rt] for rt in cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    firsts = [r for r in rows if r["threads"] == a.threads[0]]
    for r in firsts:
        mb = [f"{r['sizes'][rt] / 1e6:.1f}" if rt in r["sizes"] else "—" for rt in cols]
        lines.append(f"| {r['model']} | " + " | ".join(mb) + " |")
    notes = [
        f"- {r['model']} ({r['form']}), {LABEL[rt]}: {n}"
        for r in firsts
        for rt, n in r.get("notes", {}).items()
    ]
    for r in firsts:  # an int8 file about as large as the float one holds float weights
        sz = r["sizes"]
        if "ember_int8" in sz and "ember_f32" in sz and sz["ember_int8"] > 0.9 * sz["ember_f32"]:
            notes.append(
                f"- {r['model']}: Ember int8's file ({sz['ember_int8'] / 1e6:.1f} MB) is as "
                f"large as Ember f32's ({sz['ember_f32'] / 1e6:.1f} MB): its weights are "
                "stored in f32, not int8"
            )
    if notes:
        lines += ["", "Quantized graphs:", "", *notes]
    title = "Int8 benchmark (Ember, ExecuTorch + XNNPACK, ONNX Runtime)"
    write_report(title, explanation, lines, None)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_report(title, explanation, lines, out)


if __name__ == "__main__":
    main()
