#!/usr/bin/env python3
"""bench.py — Cortex-M33 figures for the MCU models: RAM, code size and instructions per inference.

For every model form (fp32, int8 Q/DQ, int8 integer-only, int8 integer-only with int8 input) and
both float ABIs (FPU, soft-float), builds the firmware with pools sized exactly
(``make -C mcu ... exact``), runs it under QEMU with ``-icount shift=0`` and collects what it
prints: runtime RAM (program + method bookkeeping + planned arenas + kernel scratch peak),
instructions per inference, test-image hits, .text/.rodata/.data/.bss and the runtime + kernel
code. Writes a Markdown table (``--md``) and JSON (``--json``).

    .venv/bin/python mcu/bench.py --models build-mcu/models --md bench/results/mcu.md
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger("mcu.bench")
FORMS = [
    ("", "fp32"),
    ("_int8", "int8 Q/DQ (portable kernels)"),
    ("_int8_fused", "int8 integer-only"),
    ("_int8_in8", "int8 integer-only, int8 input"),
]


def run_one(models: Path, model: str, suffix: str, float_abi: str, cases: int) -> dict:
    name = f"{model}{suffix}"
    img = f"{model}_images_int8" if suffix == "_int8_in8" else f"{model}_images"
    gen = f"--input {models / (img + '.npy')} --labels {models / (model + '_labels.npy')} "
    gen += f"--cases {cases}"
    if suffix in ("_int8_fused", "_int8_in8"):
        gen += f" --expected {models / (name + '_expected.npy')}"
    cmd = ["make", "-s", "--no-print-directory", "-C", str(REPO / "mcu"),
           f"MODEL={models / (name + '.pte')}", f"FLOAT={float_abi}",
           f"HOST_EMBER={REPO / 'build' / 'ember'}", f"PY={sys.executable}", f"GEN_ARGS={gen}",
           "exact"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    res: dict = {"model": model, "form": suffix, "float": float_abi, "ok": "RESULT: OK" in out}
    if r.returncode != 0 or not res["ok"]:
        log.error("%s (%s): failed\n%s", name, float_abi, out[-3000:])
        return res
    m = re.search(r"ram: program (\d+) B \+ method (\d+) B \+ planned arenas (\d+) B \+ temp peak "
                  r"(\d+) B = (\d+) B", out)  # fmt: skip
    if m:
        keys = ("program", "method", "arenas", "temp", "ram")
        res.update({k: int(v) for k, v in zip(keys, m.groups(), strict=True)})
    m = re.search(r"~(\d+) instructions per inference", out)
    res["instructions"] = int(m.group(1)) if m else None
    m = re.search(r"accuracy: (\d+)/(\d+)", out)
    res["hits"] = f"{m.group(1)}/{m.group(2)}" if m else None
    for sec in ("text", "rodata", "data", "bss"):
        m = re.search(rf"^\.{sec}\s+(\d+)", out, re.M)
        res[sec] = int(m.group(1)) if m else None
    m = re.search(r"runtime \+ kernels \(core, platform, kernels\): text (\d+) B", out)
    res["runtime_text"] = int(m.group(1)) if m else None
    log.info("%s (%s): %s", name, float_abi, res)
    return res


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | form | float | runtime RAM (B) = program + method + arenas + temp | "
        "instructions / inference | runtime + kernels .text (B) | image .text / .rodata / "
        ".data / .bss (B) | sample hits |",
        "|---|---|---|---|---:|---:|---|---|",
    ]
    forms = dict(FORMS)
    for r in rows:
        if not r.get("ok"):
            lines.append(f"| {r['model']} | {forms[r['form']]} | {r['float']} | FAILED | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {forms[r['form']]} | {r['float']} | {r['ram']:,} = {r['program']} + "
            f"{r['method']:,} + {r['arenas']:,} + {r['temp']:,} | {r['instructions']:,} | "
            f"{r['runtime_text']:,} | {r['text']:,} / {r['rodata']:,} / {r['data']:,} / "
            f"{r['bss']:,} | {r['hits']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=str(REPO / "build-mcu" / "models"))
    ap.add_argument("--names", default="mlp,cnn")
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--md")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from tqdm import tqdm

    jobs = [(m, s, f) for m in args.names.split(",") for s, _ in FORMS for f in ("hard", "soft")]
    rows = [run_one(Path(args.models).resolve(), m, s, f, args.cases)
            for m, s, f in tqdm(jobs, desc="firmware", disable=None)]  # fmt: skip
    if args.md:
        Path(args.md).write_text(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
