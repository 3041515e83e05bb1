"""Mutation sweep through the CLI (issue 30): N mutants per seed file, each run by the release and
the ASan/UBSan ``ember run`` with a timeout, classified refused / ran / crashed / hung; the
crashers (and hangs, and ASan/UBSan reports) are kept under ``tests/corrupt_regressions/``.

Mutations: truncations, bit flips and random bytes, aligned 32-bit words overwritten with 0,
0x100, 0x7FFFFFFF or 0xFFFFFFFF, and flatbuffer-guided edits (a word that reads as a small
count, size or offset — below the file size — moved by a small delta, doubled, negated or set
to the file size), several at once in a fraction of the mutants.

    .venv/bin/python tools/mutation_sweep.py --seeds build-h30/seeds --per-seed 1000 \\
        --release build-h30/ember --asan build-h30-asan/ember --jobs 2 \\
        --report bench/results/mutation_sweep_2026-12-01.md

A seed ``X.pte`` with ``X.ptd`` next to it is run with ``--ptd``; each mutant runs one of the
seed's methods (from ``ember info``), chosen at random. When the release build finished (refused
or ran) but the ASan build passed the timeout, the ASan run is retried with 5x the time: a
terminating run (e.g. a backward jump cut by the 10 M instruction cap) is not a hang.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import random
import re
import struct
import subprocess
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

log = logging.getLogger("mutation_sweep")

EVIL = (0, 0x100, 0x7FFFFFFF, 0xFFFFFFFF)
SAN_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")
SAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:exitcode=99:allocator_may_return_null=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98",
}


@dataclass
class Seed:
    path: Path
    data: bytes
    ptd: Path | None
    methods: list[str]


@dataclass
class Outcome:
    seed: str
    kind: str
    build: str
    verdict: str  # refused / ran / crashed / hung / sanitizer
    detail: str


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One mutant of ``data`` and the name of its mutation kind."""
    n = len(data)
    b = bytearray(data)
    r = rng.random()
    if r < 0.12:
        return "truncate", bytes(b[: rng.randrange(n)])
    if r < 0.32:
        for _ in range(rng.choice((1, 1, 1, 2, 4))):
            at = rng.randrange(n)
            if rng.random() < 0.5:
                b[at] ^= 1 << rng.randrange(8)
            else:
                b[at] = rng.randrange(256)
        return "byte", bytes(b)
    if r < 0.62:
        for _ in range(rng.choice((1, 1, 1, 2))):
            at = rng.randrange(n // 4) * 4
            b[at : at + 4] = struct.pack("<I", rng.choice(EVIL))
        return "word", bytes(b)
    # Flatbuffer-guided: words that read as small counts / sizes / offsets (the fields that steer
    # the reader), edited in ways a table walker cares about.
    cands = [
        i for i in range(0, n - 3, 4) if 0 < struct.unpack_from("<I", data, i)[0] < min(n, 1 << 16)
    ]
    if not cands:
        return "word", bytes(b)
    for _ in range(rng.choice((1, 1, 2, 3))):
        at = rng.choice(cands)
        v = struct.unpack_from("<I", b, at)[0]
        op = rng.randrange(6)
        if op == 0:
            v = v + rng.choice((-8, -4, -1, 1, 4, 8, 16))
        elif op == 1:
            v = v * 2
        elif op == 2:
            v = -v
        elif op == 3:
            v = n + rng.randrange(-16, 17)
        elif op == 4:
            v = v ^ (1 << rng.randrange(32))
        else:
            v = rng.choice((1, 2, 3, 16, 17, 255))
        b[at : at + 4] = struct.pack("<I", v & 0xFFFFFFFF)
    return "field", bytes(b)


def methods_of(ember: str, pte: Path, ptd: Path | None) -> list[str]:
    cmd = [ember, "info", str(pte)] + (["--ptd", str(ptd)] if ptd else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    return re.findall(r"^  method '([^']+)'", out, re.M) or ["forward"]


def run_one(
    binary: str, build: str, path: Path, ptd: Path | None, method: str, timeout: float
) -> tuple[str, str]:
    """(verdict, detail) of ``ember run`` on one file."""
    cmd = [binary, "run", str(path), "--method", method] + (["--ptd", str(ptd)] if ptd else [])
    env = dict(os.environ, **SAN_ENV) if build == "asan" else None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                           env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "hung", f"no answer in {timeout:.0f} s"
    err = p.stderr
    if any(m in err for m in SAN_MARKERS) or p.returncode in (98, 99):
        line = next((x for x in err.splitlines() if any(m in x for m in SAN_MARKERS)), err[-300:])
        return "sanitizer", line.strip()[:300]
    if p.returncode < 0 or p.returncode >= 128:
        return "crashed", f"signal/exit {p.returncode}: {err.strip()[-200:]}"
    if p.returncode == 0:
        return "ran", ""
    msg = next((x for x in reversed(err.splitlines()) if x.startswith("ember")), "")
    if p.returncode in (1, 2) and msg:
        return "refused", msg[:300]
    return "crashed", f"exit {p.returncode} without a message: {err.strip()[-200:]}"


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=Path, nargs="+", required=True, help="seed files or folders")
    ap.add_argument("--per-seed", type=int, default=1000)
    ap.add_argument("--release", default="build/ember")
    ap.add_argument("--asan", default="build-asan/ember")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--work", type=Path, default=Path("/tmp/ember_mutation_sweep"))
    ap.add_argument("--crash-dir", type=Path, default=Path("tests/corrupt_regressions"))
    ap.add_argument("--report", type=Path, default=None)
    a = ap.parse_args()

    files: list[Path] = []
    for s in a.seeds:
        files += sorted(s.glob("*.pte")) + sorted(s.glob("*.bpte")) if s.is_dir() else [s]
    seeds = []
    for f in files:
        ptd = f.with_suffix(".ptd")
        ptd = ptd if ptd.exists() else None
        seeds.append(Seed(f, f.read_bytes(), ptd, methods_of(a.release, f, ptd)))
    a.work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(a.seed)
    jobs = []
    for s in seeds:
        for k in range(a.per_seed):
            kind, data = mutate(s.data, rng)
            jobs.append((s, k, kind, data, rng.choice(s.methods)))

    def work(job: tuple[Seed, int, str, bytes, str]) -> list[Outcome]:
        s, k, kind, data, method = job
        path = a.work / f"{s.path.stem}_{k}{s.path.suffix}"
        path.write_bytes(data)
        res = []
        first = ""
        for build, binary in (("release", a.release), ("asan", a.asan)):
            verdict, detail = run_one(binary, build, path, s.ptd, method, a.timeout)
            if build == "asan" and verdict == "hung" and first in ("refused", "ran"):
                # The release build finished: give the ~10x slower ASan build 5x the time.
                verdict, detail = run_one(binary, build, path, s.ptd, method, 5 * a.timeout)
                detail = f"{detail} (ASan needed over {a.timeout:.0f} s)"
            first = first or verdict
            res.append(Outcome(s.path.name, kind, build, verdict, detail))
            if verdict in ("crashed", "hung", "sanitizer"):
                a.crash_dir.mkdir(parents=True, exist_ok=True)
                h = hashlib.sha1(data).hexdigest()[:12]
                keep = a.crash_dir / f"{s.path.stem}_{h}{s.path.suffix}"
                keep.write_bytes(data)
                keep.with_suffix(".txt").write_text(
                    f"seed {s.path.name}, mutation {kind}, method {method}, {build}: {verdict}\n"
                    f"{detail}\n"
                )
        path.unlink()
        return res

    t0 = time.time()
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(a.jobs) as ex:
        for res in tqdm(ex.map(work, jobs), total=len(jobs), desc="mutants", mininterval=5):
            outcomes += res
            for o in res:
                if o.verdict in ("crashed", "hung", "sanitizer"):
                    tqdm.write(f"{o.verdict}: {o.seed} {o.kind} {o.build}: {o.detail}")
    wall = time.time() - t0
    if a.report:
        write_report(a, seeds, outcomes, len(jobs), wall)
    bad = sum(o.verdict in ("crashed", "hung", "sanitizer") for o in outcomes)
    log.info("%d mutants, %d bad outcomes, %.0f s", len(jobs), bad, wall)
    return 1 if bad else 0


def write_report(
    a: argparse.Namespace, seeds: list[Seed], outcomes: list[Outcome], n: int, wall: float
) -> None:
    verdicts = ("refused", "ran", "crashed", "hung", "sanitizer")
    by_seed: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    by_kind: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    messages: Counter[str] = Counter()
    for o in outcomes:
        by_seed[(o.seed, o.build)][o.verdict] += 1
        by_kind[(o.kind, o.build)][o.verdict] += 1
        if o.verdict == "refused" and o.build == "release":
            messages[re.sub(r"\d+", "N", o.detail.split(": ", 2)[-1])[:90]] += 1
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# Mutation sweep through the CLI (issue 30)",
        "",
        f"{n} mutants of {len(seeds)} seed files, each run by the release and the ASan/UBSan "
        f"`ember run` (timeout {a.timeout:.0f} s, {a.jobs} jobs, {wall / 60:.1f} min), "
        f"at commit {commit} plus the working tree of this sweep.",
        "",
        "```sh",
        "python " + " ".join(sys.argv),
        "```",
        "",
        f"ASan run with `{SAN_ENV['ASAN_OPTIONS']}`, `{SAN_ENV['UBSAN_OPTIONS']}`. "
        "Verdicts: refused (exit 1/2 with an `ember:` message), ran (exit 0), crashed (a signal "
        "or an exit without a message), hung (timeout), sanitizer (an ASan/UBSan/LSan report).",
        "",
        "## Totals",
        "",
        "| build | " + " | ".join(verdicts) + " |",
        "|---|" + "---:|" * len(verdicts),
    ]
    for build in ("release", "asan"):
        c: Counter[str] = Counter(o.verdict for o in outcomes if o.build == build)
        lines.append(f"| {build} | " + " | ".join(str(c[v]) for v in verdicts) + " |")
    lines += ["", "## By seed", "", "| seed | bytes | methods | build | " + " | ".join(verdicts)
              + " |", "|---|---:|---|---|" + "---:|" * len(verdicts)]  # fmt: skip
    for s in seeds:
        for build in ("release", "asan"):
            c = by_seed[(s.path.name, build)]
            lines.append(
                f"| {s.path.name} | {len(s.data)} | {', '.join(s.methods)[:40]} | {build} | "
                + " | ".join(str(c[v]) for v in verdicts)
                + " |"
            )
    lines += ["", "## By mutation", "", "| mutation | build | " + " | ".join(verdicts) + " |",
              "|---|---|" + "---:|" * len(verdicts)]  # fmt: skip
    for (kind, build), c in sorted(by_kind.items()):
        lines.append(f"| {kind} | {build} | " + " | ".join(str(c[v]) for v in verdicts) + " |")
    bare = [o for o in outcomes if o.verdict == "refused" and not re.search(r": \w+: .", o.detail)]
    lines += [
        "",
        f"Refusals without a message (a bare status, or a usage error): {len(bare)}.",
        "",
        "## Most frequent refusals (release; numbers as N)",
        "",
    ]
    for msg, k in messages.most_common(25):
        lines.append(f"- {k} × `{msg}`")
    bad = [o for o in outcomes if o.verdict in ("crashed", "hung", "sanitizer")]
    lines += ["", "## Crashes, hangs, sanitizer reports", ""]
    lines += [f"- {o.seed} ({o.kind}, {o.build}): {o.verdict}: `{o.detail}`" for o in bad] or [
        "None."
    ]
    a.report.parent.mkdir(parents=True, exist_ok=True)
    a.report.write_text("\n".join(lines) + "\n")
    log.info("wrote %s", a.report)


if __name__ == "__main__":
    sys.exit(main())
