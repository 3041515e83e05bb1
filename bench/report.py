"""Shared pieces of the benchmark scripts: building a C benchmark against libember.a, and writing
a results table as markdown headed by the command that made it."""

from __future__ import annotations

import datetime
import logging
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger("bench")


def build_c_bench(
    src: Path, exe: Path, build: Path | None = None, flags: tuple[str, ...] = ()
) -> None:
    """Builds `build`/libember.a (default build/), then compiles `src` against it into `exe`."""
    build = build or ROOT / "build"
    subprocess.run(
        ["cmake", "--build", str(build), "--target", "ember_static"],
        check=True,
        capture_output=True,
    )
    exe.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "cc",
            "-O2",
            "-std=c11",
            *flags,
            f"-I{ROOT / 'include'}",
            str(src),
            str(build / "libember.a"),
            "-lpthread",
            "-lm",
            "-o",
            str(exe),
        ],
        check=True,
    )


def write_report(title: str, explanation: str, rows: list[str], out: Path | None) -> None:
    """`# title, date UTC`, the command line that ran this script, `explanation` and the table
    rows, to `out` (logged) or to stdout."""
    script = Path(sys.argv[0]).resolve()
    script_name = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    cmd = f"    .venv/bin/python {script_name} " + " ".join(sys.argv[1:])
    now = datetime.datetime.now(datetime.UTC)
    text = "\n".join(
        [f"# {title}, {now:%Y-%m-%d %H:%M} UTC", "", "Command:", "", cmd, "", explanation, ""]
        + rows
        + [""]
    )
    if out:
        out.write_text(text)
        log.info("wrote %s", out)
    else:
        sys.stdout.write(text)


def bar_cells(floor: float, peers: dict[str, float], factor: float, ember: float | None) -> str:
    """The roofline tables' last six cells (bench/roofline.py, bench/int8_roofline.py): the best
    peer's median (and which), the bar (``factor`` x it), bar / floor, Ember's median, and the
    share of the floor Ember and the best peer reach ("-" where Ember has no median)."""
    best_rt, best = min(peers.items(), key=lambda kv: kv[1])
    bar = factor * best
    em = "- | -" if ember is None else f"{ember:.2f} | {100 * floor / ember:.0f} %"
    return (
        f"{best:.2f} ({best_rt}) | {bar:.2f} | **{bar / floor:.2f}** | {em} "
        f"| {100 * floor / best:.0f} % |"
    )


def cpu_name() -> str:
    """The host CPU's model name (/proc/cpuinfo), with its family and model numbers and, for the
    hosts this project meets, the microarchitecture (a VM may show only "AMD EPYC"), for the
    line every results table starts with."""
    try:
        info: dict[str, str] = {}
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = ln.partition(":")
            info.setdefault(k.strip(), v.strip())
            if not ln.strip():
                break
    except OSError:
        return "?"
    name = info.get("model name", "?")
    fam, model = info.get("cpu family"), info.get("model")
    if fam is None or model is None or not fam.isdigit() or not model.isdigit():
        return name
    f, m = int(fam), int(model)
    arch = ""
    if info.get("vendor_id") == "AuthenticAMD" and f == 25:
        arch = (
            "Zen 4"
            if m in range(0x10, 0x20) or m in range(0x60, 0x80) or m in range(0xA0, 0xB0)
            else "Zen 3"
        )
    elif info.get("vendor_id") == "AuthenticAMD" and f == 26:
        arch = "Zen 5"
    return f"{name} (family {f}, model {m}{', ' + arch if arch else ''})"


def membw(threads: int, out_dir: Path) -> float:
    """Read bandwidth in GB/s with `threads` threads (bench/membw.c, built once into
    `out_dir`)."""
    import json

    exe, src = out_dir / "membw", ROOT / "bench" / "membw.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        out_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["cc", "-O2", "-march=native", "-pthread", str(src), "-o", exe],
            check=True,
        )
    r = subprocess.run([str(exe), str(threads), "1024"], capture_output=True, text=True, check=True)
    return float(json.loads(r.stdout)["gbps"])


def emit(lines: list[str], md: Path | None) -> None:
    """Prints a results table (the benchmark's report) and writes it to `md` when given."""
    text = "\n".join(lines)
    sys.stdout.write(text + "\n")
    if md:
        md.write_text(text + "\n")
