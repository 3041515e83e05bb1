#!/usr/bin/env python3
"""size_report.py — how many bytes the Ember runtime core costs, on x86-64 and on a Cortex-M33.

The core is src/*.c (flatbuffer reader, verifier, program/method, executor, registries, tensors,
data maps) plus the platform layer a bare-metal build uses (src/platform/noos.c, log.c, format.c and
threadpool.c with EMBER_NO_THREADS); no kernels, no extensions. Built with -Os,
-ffunction-sections -fdata-sections. Three numbers per target:

* ``all core objects``: text + data + bss of every core object (nothing dropped);
* ``linked (gc-sections)``: what a program that loads, prepares and executes a method keeps of the
  core, summed from the linker's map file (input sections kept from core objects);
* x86-64 only, ``stripped delta``: file size of that stripped program minus the same program
  without Ember (libc is shared and not counted).

It also builds the Cortex-M33 firmware for the add.pte fixture (mcu/, hard and soft float) when
arm-none-eabi-gcc is installed and reports its map-file breakdown. Writes bench/results/size.md.

    python3 tools/size_report.py [--out bench/results/size.md] [--no-firmware]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mcu"))
import size_breakdown  # noqa: E402

CORE_SRC = sorted(REPO.glob("src/*.c")) + [
    REPO / "src" / "platform" / n for n in ("noos.c", "log.c", "format.c", "threadpool.c")
]
FLAGS = ["-std=c11", "-Os", "-ffunction-sections", "-fdata-sections", "-DEMBER_NO_THREADS=1",
         "-DEMBER_PLATFORM_NOOS=1", f"-I{REPO / 'include'}", f"-I{REPO / 'src'}"]  # fmt: skip
M33 = ["-mcpu=cortex-m33", "-mthumb", "-mfloat-abi=soft"]

# A program that uses the core the way an application does: load a buffer, prepare, execute.
DRIVER = r"""
#include <stddef.h>
#include <stdint.h>
#include "ember/ember.h"
extern const unsigned char *volatile g_pte;
extern volatile size_t g_pte_len;
const unsigned char *volatile g_pte;
volatile size_t g_pte_len;
static uint8_t pool[16384] __attribute__((aligned(16)));
static uint8_t arena[4096] __attribute__((aligned(16)));
int main(void) {
  em_allocator a;
  em_allocator_init(&a, pool, sizeof pool);
  em_buffer_loader bl;
  em_data_loader *ld = em_buffer_loader_init(&bl, g_pte, g_pte_len);
  em_program *p;
  if (em_program_load(ld, EM_VERIFY_FULL, &a, &p) != EM_OK) return 1;
  uint8_t *arenas[1] = {arena};
  uint64_t sizes[1] = {sizeof arena};
  em_method_config cfg = {&a, NULL, arenas, sizes, 1, NULL, NULL, NULL, 0};
  em_method *m;
  if (em_method_prepare(p, "forward", &cfg, &m) != EM_OK) return 2;
  if (em_method_set_input(m, 0, em_method_input(m, 0)) != EM_OK) return 3;
  if (em_method_execute(m) != EM_OK) return 4;
  int r = em_method_output(m, 0) ? 0 : 5;
  em_method_destroy(m);
  return r;
}
"""
BASELINE = """
#include <stddef.h>
const unsigned char *volatile g_pte;
volatile size_t g_pte_len;
int main(void) { return g_pte_len ? 1 : 0; }
"""
ARM_STUBS = """
static char tls_block[1024] __attribute__((aligned(8)));
void *__aeabi_read_tp(void) { return tls_block; }
"""


def run(cmd: list[str], **kw) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def sum_size(size_tool: str, objs: list[Path]) -> dict[str, int]:
    out = run([size_tool, "-t", *map(str, objs)])
    text, data, bss = out.strip().splitlines()[-1].split()[:3]
    return {"text": int(text), "data": int(data), "bss": int(bss)}


def kept_core(map_path: Path, obj_dir: Path) -> dict[str, int]:
    tot = {"text": 0, "data": 0, "bss": 0}
    for out_sec, _sec, size, origin in size_breakdown.parse(str(map_path)):
        if origin.startswith(str(obj_dir)):
            kind = size_breakdown.kind(out_sec)
            tot[kind] += size
    return tot


def build(target: str, tmp: Path, extra: tuple[str, ...] = ()) -> dict:
    arm = target.startswith("cortex-m33")
    cc = "arm-none-eabi-gcc" if arm else os.environ.get("CC", "cc")
    size_tool = "arm-none-eabi-size" if arm else "size"
    strip = "arm-none-eabi-strip" if arm else "strip"
    flags = FLAGS + (M33 if arm else []) + list(extra)
    tmp = tmp / ("_".join(e.strip("-").replace("=", "") for e in extra) or "default")
    obj_dir = tmp / target / "core"
    obj_dir.mkdir(parents=True)
    objs = []
    for src in CORE_SRC:
        o = obj_dir / (src.stem + ".o")
        run([cc, *flags, "-c", str(src), "-o", str(o)])
        objs.append(o)
    label = target + "".join(f" `{e}`" for e in extra)
    res = {
        "target": label,
        "cc": run([cc, "--version"]).splitlines()[0],
        "all": sum_size(size_tool, objs),
    }
    drv, base = tmp / target / "driver.c", tmp / target / "baseline.c"
    drv.write_text(DRIVER + (ARM_STUBS if arm else ""))
    base.write_text(BASELINE + (ARM_STUBS if arm else ""))
    ld = ["-Wl,--gc-sections"] + (["--specs=nosys.specs"] if arm else [])
    exe, exe0, mp = tmp / target / "driver", tmp / target / "baseline", tmp / target / "driver.map"
    run([cc, *flags, *ld, f"-Wl,-Map={mp}", str(drv), *map(str, objs), "-o", str(exe)])
    run([cc, *flags, *ld, str(base), "-o", str(exe0)])
    res["kept"] = kept_core(mp, obj_dir)
    if not arm:
        run([strip, "-s", str(exe), str(exe0)])
        res["stripped_delta"] = exe.stat().st_size - exe0.stat().st_size
    res["flags"] = " ".join(f for f in flags if not f.startswith("-I"))
    return res


def firmware(name: str, pte: Path, float_abi: str, gen_args: str = "") -> dict | None:
    """Builds the mcu/ firmware for `pte`, runs it in QEMU when available, and breaks it down."""
    ember = REPO / "build" / "ember"
    if not (pte.exists() and ember.exists()):
        return None
    cmd = ["make", "-s", "--no-print-directory", "-C", str(REPO / "mcu"), f"-j{os.cpu_count()}",
           f"MODEL={pte}", f"FLOAT={float_abi}", f"HOST_EMBER={ember}", f"PY={sys.executable}",
           f"GEN_ARGS={gen_args}", "all"]  # fmt: skip
    run(cmd)
    out = REPO / "build-mcu" / f"{pte.stem}-{float_abi}"
    b = size_breakdown.breakdown(str(out / "app.map"))
    b["size"] = run(["arm-none-eabi-size", str(out / "app.elf")]).strip()
    b["name"] = name
    if shutil.which("qemu-system-arm"):
        r = subprocess.run(cmd[:-1] + ["QEMU_TIMEOUT=120", "run"], capture_output=True, text=True)
        keep = ("ram:", "work:", "accuracy:", "RESULT")
        b["run"] = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith(keep)]
    return b


def kib(n: int) -> str:
    return f"{n:,} B ({n / 1024:.1f} KiB)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "size.md"))
    ap.add_argument("--no-firmware", action="store_true")
    args = ap.parse_args(argv)
    have_arm = shutil.which("arm-none-eabi-gcc") is not None
    targets = ["x86-64"] + (["cortex-m33"] if have_arm else [])
    with tempfile.TemporaryDirectory() as t:
        results = [build(tg, Path(t)) for tg in targets]
        # Without log messages (EM_LOG_ENABLED=0): error codes only, no format strings.
        results += [build(tg, Path(t), ("-DEM_LOG_ENABLED=0",)) for tg in targets]
    fixtures = REPO / "build" / "fixtures" / "executorch"  # `make fixtures`
    models = REPO / "build-mcu" / "models"
    firmwares = [("add.pte (aten::add.out)", fixtures / "add.pte", "")]
    lab = f"--labels {models / 'mlp_labels.npy'} --cases 8"
    img, img8 = models / "mlp_images.npy", models / "mlp_images_int8.npy"
    for stem, what, gen in (
        ("mlp", "fp32", f"--input {img} {lab}"),
        ("mlp_int8", "int8 Q/DQ (ember.quant)", f"--input {img} {lab}"),
        ("mlp_int8_fused", "int8 integer-only (ember::quantized_linear), f32 input",
         f"--input {img} {lab} --expected {models / 'mlp_int8_fused_expected.npy'}"),
        ("mlp_int8_in8", "int8 integer-only, int8 input",
         f"--input {img8} {lab} --expected {models / 'mlp_int8_in8_expected.npy'}"),
    ):  # fmt: skip
        if (models / f"{stem}.pte").exists():
            name = f"{stem}.pte (784-32-16-10 MLP, {what}, Fashion-MNIST; `make mcu` makes it)"
            firmwares.append((name, models / f"{stem}.pte", gen))
    all_fws = []
    if have_arm and not args.no_firmware:
        for name, pte, gen in firmwares:
            fws = {fa: fw for fa in ("hard", "soft") if (fw := firmware(name, pte, fa, gen))}
            if fws:
                all_fws.append(fws)

    L = ["# Ember code size", ""]
    L.append("Generated by `python3 tools/size_report.py` (`make size`) on "
             f"{platform.machine()} Linux. The core = `src/*.c` + `src/platform/{{noos,log,"
             "threadpool}.c` (EMBER_NO_THREADS): format reader, verifier, program/method, "
             "executor, registries. No kernels, no extensions.")  # fmt: skip
    L += [
        "",
        "| target | compiler | all core objects (text+data) | kept by a load/prepare/execute "
        "program (--gc-sections) | stripped executable delta |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        a, k = r["all"], r["kept"]
        delta = kib(r["stripped_delta"]) if "stripped_delta" in r else "—"
        L.append(f"| {r['target']} | {r['cc']} | {kib(a['text'] + a['data'])} | "
                 f"{kib(k['text'] + k['data'])} | {delta} |")  # fmt: skip
    L += ["", "Flags: `" + (results[0]["flags"] if results else "") + "` (+ `-mcpu=cortex-m33 "
          "-mthumb -mfloat-abi=soft` for the M33). Target: ≤ 30 KiB; ExecuTorch's core runtime "
          "is 44–52 KiB.", ""]  # fmt: skip
    for r in results:
        k = r["kept"]
        L.append(
            f"- {r['target']}: kept text+rodata {k['text']} B, data {k['data']} B, bss {k['bss']}"
            " B (bss is mostly the kernel registry: EM_MAX_KERNELS pointers)."
        )
    if all_fws:
        L += ["", "## Cortex-M33 summary (QEMU mps2-an505, `-icount shift=0`)", "",
              "| firmware | float ABI | runtime+kernels .text | runtime RAM (program + method + "
              "arenas + temp) | instructions / inference |", "|---|---|---|---|---|"]  # fmt: skip
        for fws in all_fws:
            for fa, fw in fws.items():
                run_text = "\n".join(fw.get("run", []))
                ram = re.search(r"= (\d+) B", run_text)
                ins = re.search(r"~(\d+) instructions", run_text)
                L.append(
                    f"| {fw['name'].split(' (')[0]} | {fa} | "
                    f"{kib(fw['runtime_and_kernels']['text'])} | "
                    f"{int(ram.group(1)):,} B | "
                    if ram
                    else "— | "
                )
                L[-1] += f"{int(ins.group(1)):,} |" if ins else "— |"
        acc = REPO / "build-mcu" / "models" / "mlp_accuracy.txt"
        if acc.exists():
            L += ["", "MLP test-set accuracy (10,000 Fashion-MNIST test images; "
                  "`mcu/models/mlp.py`):", "", "```", acc.read_text().strip(), "```"]  # fmt: skip
    for fws in all_fws:
        name = next(iter(fws.values()))["name"]
        L += ["", f"## Cortex-M33 firmware: {name}, QEMU mps2-an505", "",
              "`make -C mcu MODEL=<pte> FLOAT={hard,soft} size run` "
              "(map-file breakdown by `mcu/size_breakdown.py`; -Os, --gc-sections, selective "
              "build; full newlib because the runtime's log messages use %lld). The pools are "
              "static buffers sized generously (runtime 16 KiB, temp 64 KiB); the firmware "
              "prints what it used (`ram:` below).", "",
              "| section owner | hard float: flash (text+rodata+data) / RAM (data+bss) "
              "| soft float: flash / RAM |", "|---|---|---|"]  # fmt: skip
        cats = list(dict.fromkeys(c for fw in fws.values() for c in fw["categories"]))
        for c in cats:
            cells = []
            for fa in ("hard", "soft"):
                v = fws.get(fa, {}).get("categories", {}).get(c)
                cells.append(f"{v['text'] + v['data']:,} / {v['data'] + v['bss']:,}" if v else "—")
            L.append(f"| {c} | {cells[0]} | {cells[1]} |")
        for fa, fw in fws.items():
            rt = fw["runtime_and_kernels"]
            L += ["", f"{fa} float: runtime + kernels text {kib(rt['text'])}; "
                  f"`arm-none-eabi-size`:", "", "```", fw["size"], "```"]  # fmt: skip
            top = ", ".join(f"{n} {s}" for n, s in fw["libc_top"][:6])
            L.append(f"Largest C library members: {top}.")
            if fw.get("run"):
                L += ["", "QEMU run:", "", "```", *fw["run"], "```"]
    text = "\n".join(L) + "\n"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
