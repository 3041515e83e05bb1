"""Regenerates bench/results/zoo.md: the model zoo (tests/python/zoo/models.py) on Ember's
portable kernels.

For every model: parameters, the operators its program calls (instruction count and the distinct
operators, from ``build/ember info``), parity with eager PyTorch on the zoo's seeded inputs (max
abs error and max abs error / max |eager output|; for real-weight models also the real-input
check of tests/python/zoo/test_zoo.py), export time, ``.pte`` size, and the median latency of
``build/ember run <pte> --input ... --iters N --threads 1`` (portable kernels, one thread; N is
chosen so that each model gets about ``--budget`` seconds).

    .venv/bin/python bench/zoo_table.py [--models mlp lenet ...] [--budget 5]
                                        [--out bench/results/zoo.md] [--ember build/ember]

Needs a built ``build/ember`` (``ninja -C build``). Programs and inputs go to out/zoo/.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "zoo"
EMBER = ROOT / "build" / "ember"  # --ember overrides
COMMAND = ".venv/bin/python bench/zoo_table.py"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ember  # noqa: E402


def _load_zoo():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(
        "ember_zoo_models", ROOT / "tests" / "python" / "zoo" / "models.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ember_zoo_models"] = mod
    spec.loader.exec_module(mod)
    return mod


zoo = _load_zoo()


def operators(pte: Path, ember_cli: Path) -> list[tuple[str, int]]:
    """(operator, calls) from ``ember info``, in the program's operator-table order."""
    info = subprocess.run([str(ember_cli), "info", str(pte)], capture_output=True, text=True)
    if info.returncode != 0:
        raise RuntimeError(f"ember info failed: {info.stdout}{info.stderr}")
    ops = []
    for line in info.stdout.splitlines():
        m = re.match(r"\s+(\S+::\S+)\s+calls (\d+)", line)
        if m:
            ops.append((m.group(1), int(m.group(2))))
    return ops


def latency(pte: Path, inputs: list[Path], budget: float, ember_cli: Path) -> tuple[float, int]:
    """Median ms of ``ember run --threads 1``; a 1-iteration probe sets N to fill ``budget``."""

    def run(iters: int) -> float:
        cmd = [str(ember_cli), "run", str(pte), "--iters", str(iters), "--threads", "1"]
        for p in inputs:
            cmd += ["--input", str(p)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        m = re.search(r"median ([0-9.]+) ms", r.stdout)
        if r.returncode != 0 or not m:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stdout}{r.stderr}")
        return float(m.group(1))

    probe = run(1)
    iters = int(max(3, min(100, budget * 1000.0 / max(probe, 1e-3))))
    return run(iters), iters


def short(op: str) -> str:
    """``aten::convolution.out`` -> ``convolution``, ``aten::add.Scalar_out`` -> ``add.Scalar``;
    other namespaces keep theirs."""
    name = op.removeprefix("aten::")
    if name.endswith(".out"):
        return name[: -len(".out")]
    return name.removesuffix("_out")


def real_check(name: str, model: torch.nn.Module, prog: ember.Program, model_inputs: tuple) -> str:
    """The real-input check of test_zoo.py for real-weight models, as one line."""
    with torch.no_grad():
        if name == "efficientnet_lite0":
            same = 0
            imgs = zoo.real_images(224)
            for img in imgs.values():
                same += (
                    model(img).topk(5).indices.tolist() == prog.run(img).topk(5).indices.tolist()
                )
            return f"top-5 identical on {same}/{len(imgs)} photos"
        if name == "minilm":
            ids, mask = zoo.minilm_real_inputs()
            cos = torch.nn.functional.cosine_similarity(
                prog.run(ids, mask).double(), model(ids, mask).double(), dim=-1
            )
            return f"cosine min {cos.min().item():.7f} ({len(cos)} sentences)"
        if name == "smollm2_135m":
            (ids,) = model_inputs
            tokens = zoo.gguf_tokens()
            got, want = int(prog.run(ids).argmax()), int(model(ids).argmax())
            same = "same as eager" if got == want else f"eager: {tokens[want]!r}"
            return (
                f"inputs are the real prompt {zoo.PROMPT!r}; next token "
                f"{tokens[got].replace(chr(0x120), ' ')!r} ({same})"
            )
    return ""


def measure(name: str, budget: float, ember_cli: Path) -> dict:
    spec = zoo.ZOO[name]
    model, inputs = spec.build()
    params = sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        want = model(*inputs)
    t0 = time.perf_counter()
    prog = ember.export(model, inputs, backend=None)
    export_s = time.perf_counter() - t0
    pte = prog.save(OUT / f"{name}.pte")
    got = prog.run(*inputs)
    diff = (got.double() - want.double()).abs().max().item()
    rel = diff / max(want.double().abs().max().item(), 1e-30)
    in_paths = []
    for i, x in enumerate(inputs):
        p = OUT / f"{name}_input{i}.npy"
        np.save(p, x.numpy())
        in_paths.append(p)
    ops = operators(pte, ember_cli)
    ms, iters = latency(pte, in_paths, budget, ember_cli)
    return {
        "name": name,
        "weights": spec.weights,
        "input": spec.input_desc,
        "params": params,
        "ops": ops,
        "abs": diff,
        "rel": rel,
        "real": real_check(name, model, prog, inputs),
        "export_s": export_s,
        "pte_mb": pte.stat().st_size / 1e6,
        "ms": ms,
        "iters": iters,
    }


def render(rows: list[dict], argv: list[str]) -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    lib = os.environ.get("EMBER_LIB")
    cmd = " ".join(([f"EMBER_LIB={lib}"] if lib else []) + [COMMAND, *argv])
    out = [
        "# Model zoo on Ember's portable kernels",
        "",
        f"Generated by `{cmd}` on {datetime.date.today().isoformat()} "
        f"({cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}; "
        f"load average at the end {os.getloadavg()[0]:.1f}).",
        "",
        "Each model is exported with `ember.export(model, inputs, backend=None)` (portable "
        "kernels only), checked against eager PyTorch on the zoo's seeded inputs (f32; the test "
        "bound is max abs error ≤ 1e-4 × max |eager output|), and timed with "
        "`build/ember run <pte> --input ... --iters N --threads 1` (median over N iterations). "
        "Models and inputs: `tests/python/zoo/models.py`; the tests: "
        "`.venv/bin/python -m pytest tests/python/zoo`. The machine is shared with other builds, "
        "so latencies are indicative.",
        "",
        "| model | weights | input | params | ops: calls / distinct | max abs err | rel err "
        "| real-input check | export s | .pte MB | latency ms (1 thread) |",
        "|---|---|---|--:|--:|--:|--:|---|--:|--:|--:|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['name']} | | | | | | | **failed**: {r['error']} | | | |")
            continue
        calls = sum(c for _, c in r["ops"])
        out.append(
            f"| {r['name']} | {r['weights']} | {r['input']} | {r['params'] / 1e6:.2f} M "
            f"| {calls} / {len(r['ops'])} | {r['abs']:.2e} | {r['rel']:.2e} | {r['real']} "
            f"| {r['export_s']:.1f} | {r['pte_mb']:.1f} | {r['ms']:.2f} (N={r['iters']}) |"
        )
    out += ["", "## Operators per model", "", "| model | distinct operators (calls) |", "|---|---|"]
    for r in rows:
        if "error" not in r:
            ops = ", ".join(f"{short(o)} ({c})" for o, c in r["ops"])
            out.append(f"| {r['name']} | {ops} |")
    every = sorted({short(o) for r in rows if "error" not in r for o, _ in r["ops"]})
    out += ["", f"All operators the zoo uses ({len(every)}): " + ", ".join(every) + "."]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(zoo.ZOO), choices=list(zoo.ZOO))
    ap.add_argument("--budget", type=float, default=5.0, help="seconds of timed runs per model")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "zoo.md")
    ap.add_argument(
        "--ember",
        type=Path,
        default=EMBER,
        help="the CLI to time (default build/ember; the Python runtime follows $EMBER_LIB)",
    )
    args = ap.parse_args()
    ember_cli = args.ember.resolve()
    if not ember_cli.exists():
        print(f"{ember_cli} is missing: build it with `ninja -C build`", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models:
        print(f"{name} ...", end=" ", flush=True)
        try:
            rows.append(measure(name, args.budget, ember_cli))
            r = rows[-1]
            print(f"rel {r['rel']:.1e}, {r['ms']:.2f} ms", flush=True)
        except Exception as e:  # a failing model is a row, not the end of the table
            rows.append({"name": name, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            print(f"FAILED: {rows[-1]['error']}", flush=True)
    args.out.write_text(render(rows, sys.argv[1:]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
