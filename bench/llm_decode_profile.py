"""Where one decode token's time goes (issue 29): per operator, against its own memory bound.

Runs ``ember run --profile --no-mmap`` on SmolLM2-135M-Instruct 4-bit (``4w32``, the file
``bench/devtools_overhead.py`` exports) decoding one token at KV-cache position 100, at each
thread count, beside ``bench/membw.c``'s read bandwidth at the same thread count. For every
operator: calls, time per token, share, the constant bytes its calls read per token (the weights:
from the ``.pte``'s tensor metadata), and the rate at which it reads them (GB/s) against the
measured bandwidth. Operators with no weights (attention over the cache, norms, rope) get their
time and share only.

    .venv/bin/python bench/llm_decode_profile.py --threads 1 2 --iters 200 --md out.md

``--pte FILE --label TEXT`` profiles another LLM ``.pte`` the same way (e.g. the 1B-shaped
model ``bench/llm.py --model 1b`` exports); the token and position inputs are written beside
this script's other outputs. ``--pos N`` decodes at KV position N instead of 100 (a long chat:
attention reads N + 1 cache rows per layer; N must be below the file's cache length).
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench" / "devtools"
from report import cpu_name, emit, membw  # noqa: E402  (bench/report.py)

log = logging.getLogger("bench.llm_decode_profile")
_ROW = re.compile(r"^(\S+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%$")
_MEDIAN = re.compile(r"execute: median ([0-9.]+) ms")


def weight_bytes(pte: Path, pos: int) -> dict[str, int]:
    """Bytes of weights (and KV cache) each operator's calls read for one token at ``pos``: a
    constant whole, an embedding table one row, a KV cache (a planned tensor with initial data,
    [1, S, heads, dim]) its first pos + 1 rows."""
    sys.path.insert(0, str(ROOT / "python"))
    from ember.reader import read_file

    (plan,) = [p for p in read_file(str(pte)) if p.name == "forward"]
    out: dict[str, int] = defaultdict(int)
    for kc in plan.kernel_calls:
        op = plan.operators[kc.op_index]
        for a in kc.args:
            for t in plan._tensors_of(a):
                if not t.constant:
                    continue
                if t.planned:  # a mutable buffer: the KV cache, read up to pos by attention
                    if "sdpa" in op and len(t.sizes) == 4:
                        out[op] += t.nbytes * (pos + 1) // t.sizes[1]
                elif "embedding" in op and t.sizes:
                    out[op] += t.nbytes // t.sizes[0]
                else:
                    out[op] += t.nbytes
    return out


def profile(
    exe: Path, pte: Path, threads: int, iters: int, pos: int = 100
) -> tuple[float, list[tuple]]:
    import numpy as np

    OUT.mkdir(parents=True, exist_ok=True)
    np.save(OUT / "tok.npy", np.array([[1234]], dtype=np.int64))
    np.save(OUT / "pos.npy", np.array([pos], dtype=np.int64))
    ins = ["--input", str(OUT / "tok.npy"), "--input", str(OUT / "pos.npy")]
    cmd = [str(exe), "run", str(pte), *ins, "--iters", str(iters), "--threads", str(threads)]
    # --no-mmap: the weights in the runtime's own copy in huge pages, as `ember-llm` and the
    # Python API hold them; the CLI's default mmap of the file (4 KiB pages) streams them ~20 %
    # slower and less evenly (1B 4w32sh:o4, Zen 4, 1 thread: 32-49 ms a token against 29.6-30.4).
    cmd += ["--profile", "--no-mmap"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    text = r.stdout + r.stderr
    med = float(_MEDIAN.search(text).group(1))  # type: ignore[union-attr]
    rows = []
    for ln in text.splitlines():
        m = _ROW.match(ln.strip())
        if m:
            rows.append((m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(5))))
    return med, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--ember", type=Path, default=ROOT / "build" / "ember")
    ap.add_argument("--md", type=Path)
    ap.add_argument("--pte", type=Path, help="another LLM .pte (default: SmolLM2 4w32)")
    ap.add_argument("--label", default="SmolLM2-135M 4w32", help="the model's name in the text")
    ap.add_argument("--pos", type=int, default=100, help="the KV position decoded at")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    pte = args.pte or OUT / "smollm2_4w32.pte"
    if not pte.exists():
        raise SystemExit(f"{pte} is missing: run bench/devtools_overhead.py first (it exports it)")
    wb = weight_bytes(pte, args.pos)
    cpu = cpu_name()
    lines = [f"CPU: {cpu}. {args.label}, one decode token at position {args.pos}, "
             f"`ember run --profile --no-mmap`, {args.iters} iterations.", ""]  # fmt: skip
    for t in args.threads:
        bw = membw(t, OUT)
        med, rows = profile(args.ember, pte, t, args.iters, args.pos)
        total_w = sum(wb.values())
        bound_ms = total_w / (bw * 1e9) * 1e3
        lines += [
            f"### {t} thread{'s' if t > 1 else ''}: {med:.3f} ms/token ({1e3 / med:.1f} tok/s); "
            f"weights + KV cache {total_w / 2**20:.1f} MiB/token, read bandwidth {bw:.1f} GB/s, "
            f"bound {bound_ms:.3f} ms ({100 * bound_ms / med:.0f} % of it reached)",
            "",
            "| operator | calls | ms/token | share | MiB read/token | GB/s | % of bandwidth |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for op, calls, per, share in rows:  # the table is per run
            b = wb.get(op, 0)
            rate = b / (per * 1e-3) / 1e9 if per > 0 and b else 0.0
            lines.append(
                f"| {op} | {calls} | {per:.3f} | {share:.1f} % | "
                f"{b / 2**20:.1f} | {rate:.1f} | {100 * rate / bw:.0f} % |"
                if b
                else f"| {op} | {calls} | {per:.3f} | {share:.1f} % | - | - | - |"
            )
        lines.append("")
    emit(lines, args.md)


if __name__ == "__main__":
    main()
