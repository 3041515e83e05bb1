#!/usr/bin/env python3
"""size_breakdown.py — who uses the firmware's flash and RAM, from a GNU ld map file.

Sums every input section the linker kept, by where it came from:

* ``runtime core``   — src/*.c (format reader, verifier, program/method, executor, registries)
* ``platform``       — src/platform/{noos,log,threadpool}.c
* ``kernels``        — kernels/portable, kernels/prim and the generated selected-kernel table
* ``app``            — mcu/main.c, startup.c, mcu_io.c (firmware glue, semihosting output)
* ``model (.pte)``   — the embedded program (weights included)
* ``test data``      — embedded inputs and expected outputs
* ``arenas``, ``pools`` — planned memory and the runtime/temp pools (RAM)
* ``libc (newlib)``, ``libm``, ``libgcc`` — C library (vsnprintf behind log.c, semihosting
  syscalls, memcpy...) and the compiler runtime (soft-float and 64-bit division helpers)

Flash = .isr_vector/.text/.rodata/.ARM.*/init arrays + the initial values of .data/.tdata;
RAM = .data/.tdata + .bss/.tbss (the stack is extra: 16 KiB reserved by link.ld).

    python3 mcu/size_breakdown.py build-mcu/add-hard/app.map [--json] [--top N]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict

SEC_RE = re.compile(r"^ (\.\S+|COMMON)\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)\s+(\S.*)$")
NAME_ONLY_RE = re.compile(r"^ (\.\S+|COMMON)\s*$")
CONT_RE = re.compile(r"^\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)\s+(\S.*)$")
OUT_RE = re.compile(r"^(\.\S+)(\s+0x[0-9a-fA-F]+)?")

ORDER = ["runtime core", "platform", "kernels", "app", "model (.pte)", "test data", "arenas",
         "pools", "libc (newlib)", "libm", "libgcc", "other"]  # fmt: skip
RUNTIME = ("runtime core", "platform", "kernels")


def category(section: str, origin: str) -> str:
    if "em_model_pte" in section:
        return "model (.pte)"
    if "em_model_arena" in section and "sizes" not in section:
        return "arenas"
    if "em_case" in section or "em_model_inputs" in section or "em_model_expected" in section:
        return "test data"
    if "g_runtime_pool" in section or "g_temp_pool" in section:
        return "pools"
    if "libember_core.a(" in origin:
        member = origin.split("(")[-1]
        return (
            "platform" if member.split(".")[0] in ("noos", "log", "threadpool") else "runtime core"
        )
    if "libember_kernels.a(" in origin or "selected_kernels.o" in origin:
        return "kernels"
    if "/mcu/" in origin:
        return "app"
    if "libgcc.a" in origin:
        return "libgcc"
    if "libm.a" in origin:
        return "libm"
    if re.search(r"lib(c|g|rdimon|nosys|c_nano|rdimon_nano)\.a", origin):
        return "libc (newlib)"
    return "other"


ALLOC = {
    ".isr_vector",
    ".text",
    ".rodata",
    ".ARM.extab",
    ".ARM.exidx",
    ".preinit_array",
    ".init_array",
    ".fini_array",
    ".tdata",
    ".tbss",
    ".data",
    ".bss",
}


def kind(out_section: str) -> str:
    if out_section in (".data", ".tdata"):
        return "data"
    if out_section in (".bss", ".tbss", ".heap"):
        return "bss"
    return "text"


def parse(path: str):
    """[(output section, input section, size, origin)] of every kept input section."""
    rows = []
    in_map = False
    out_sec = None
    pending = None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not in_map:
                in_map = line.startswith("Linker script and memory map")
                continue
            if line.startswith("/DISCARD/") or line.startswith("OUTPUT("):
                out_sec = None
                continue
            m = OUT_RE.match(line)
            if m and not line.startswith(" "):
                out_sec = m.group(1)
                continue
            if out_sec is None:
                continue
            if pending:
                m = CONT_RE.match(line)
                if m:
                    rows.append((out_sec, pending, int(m.group(2), 16), m.group(3).strip()))
                pending = None
                continue
            m = SEC_RE.match(line)
            if m:
                rows.append((out_sec, m.group(1), int(m.group(3), 16), m.group(4).strip()))
                continue
            m = NAME_ONLY_RE.match(line)
            if m:
                pending = m.group(1)
    return [r for r in rows if r[2] > 0 and r[0] in ALLOC]


def breakdown(path: str) -> dict:
    sums: dict[str, dict[str, int]] = defaultdict(lambda: {"text": 0, "data": 0, "bss": 0})
    libc_members: dict[str, int] = defaultdict(int)
    for out_sec, sec, size, origin in parse(path):
        cat = category(sec, origin)
        sums[cat][kind(out_sec)] += size
        if cat in ("libc (newlib)", "libm", "libgcc") and kind(out_sec) == "text":
            libc_members[origin.split("(")[-1].rstrip(")")] += size
    res = {c: dict(sums[c]) for c in ORDER if c in sums}
    tot = {k: sum(v[k] for v in res.values()) for k in ("text", "data", "bss")}
    rt = {k: sum(res.get(c, {}).get(k, 0) for c in RUNTIME) for k in ("text", "data", "bss")}
    return {"categories": res, "total": tot, "runtime_and_kernels": rt,
            "libc_top": sorted(libc_members.items(), key=lambda kv: -kv[1])}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("map")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--top", type=int, default=8, help="largest C library members to list")
    args = ap.parse_args(argv)
    b = breakdown(args.map)
    if args.json:
        json.dump(b, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'':16s} {'text+rodata':>12s} {'data':>8s} {'bss':>8s}   (bytes)")
    for c, v in b["categories"].items():
        print(f"{c:16s} {v['text']:12d} {v['data']:8d} {v['bss']:8d}")
    rt, tot = b["runtime_and_kernels"], b["total"]
    print(f"{'total':16s} {tot['text']:12d} {tot['data']:8d} {tot['bss']:8d}")
    print(f"runtime + kernels (core, platform, kernels): text {rt['text']} B "
          f"({rt['text'] / 1024:.1f} KiB), data {rt['data']} B, bss {rt['bss']} B")  # fmt: skip
    if b["libc_top"]:
        print("largest C library members: " + ", ".join(
            f"{n} {s}" for n, s in b["libc_top"][: args.top]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
