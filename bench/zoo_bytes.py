"""Byte-identity of the zoo's outputs across two builds of the runtime (refactors of issue 28).

A refactor that only moves code must leave every output bit unchanged. This exports every model
of ``tests/python/zoo/models.py`` twice (the default path, EmberCpuBackend, and the portable path,
``backend=None``) plus SmolLM2-135M in 4-bit and 8-bit weights (the quantized LLM kernels), once,
into a directory; runs each file with the library named by ``--lib`` and stores the outputs'
raw bytes; and compares two such runs::

    python bench/zoo_bytes.py export --dir out/zoo_bytes
    python bench/zoo_bytes.py run --dir out/zoo_bytes --lib /path/to/old/libember.so --tag before
    python bench/zoo_bytes.py run --dir out/zoo_bytes --lib build/libember.so --tag after
    python bench/zoo_bytes.py compare --dir out/zoo_bytes before after

``run`` executes in a child process with ``EMBER_LIB`` set (the library is chosen when ember's
runtime first loads), one thread and two (the threaded splits must not change a bit either).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("zoo_bytes")


def _zoo():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "ember_zoo_models", ROOT / "tests" / "python" / "zoo" / "models.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ember_zoo_models"] = mod
    spec.loader.exec_module(mod)
    return mod


def export_all(d: Path, only: list[str] | None) -> None:
    import torch
    from tqdm import tqdm

    import ember
    from ember.llm import export as llm_export
    from ember.llm import llama

    zoo = _zoo()
    d.mkdir(parents=True, exist_ok=True)
    names = [n for n in zoo.ZOO if not only or n in only]
    for name in tqdm(names, desc="export"):
        try:
            m, inputs = zoo.build(name)
        except Exception as e:  # an optional model whose weights are not installed
            log.warning("%s: not built (%s)", name, e)
            continue
        torch.save(inputs, d / f"{name}.inputs.pt")
        ember.export(m, inputs).save(d / f"{name}.default.pte")
        ember.export(m, inputs, backend=None).save(d / f"{name}.portable.pte")
    if only and "smollm2_q" not in only:
        return
    gguf = zoo.smollm2_path()
    base = llama.load_gguf(gguf, max_seq_len=64)
    ids = torch.arange(1, 17, dtype=torch.int64)[None, :] * 37
    for scheme in ("4w32", "8w"):
        prog = llm_export(copy.deepcopy(base), max_seq_len=64, max_prefill=16, quant=scheme)
        prog.save(d / f"smollm2_{scheme}.llm.pte")
        torch.save((ids, torch.tensor([0], dtype=torch.int64)), d / f"smollm2_{scheme}.inputs.pt")


def _digest(outs: object) -> str:
    import torch

    h = hashlib.sha256()
    seq = outs if isinstance(outs, (list, tuple)) else [outs]
    for t in seq:
        t = torch.as_tensor(t).contiguous()
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def run_child(d: Path, tag: str) -> None:
    import torch

    from ember.runtime import RuntimeProgram

    res: dict[str, str] = {}
    for pte in sorted(d.glob("*.pte")):
        stem = pte.name.split(".")[0]
        inputs = torch.load(d / f"{stem}.inputs.pt")
        for threads in (1, 2):
            try:
                rt = RuntimeProgram(pte.read_bytes(), None, threads=threads)
                res[f"{pte.name}@{threads}t"] = _digest(rt.run("forward", list(inputs)))
                rt.close()
            except Exception as e:  # recorded, so that a difference in failures shows too
                res[f"{pte.name}@{threads}t"] = f"error: {type(e).__name__}: {e}"
            log.info("%s @%dt %s", pte.name, threads, res[f"{pte.name}@{threads}t"][:16])
    (d / f"digests_{tag}.json").write_text(json.dumps(res, indent=1, sort_keys=True))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--dir", type=Path, default=ROOT / "out" / "zoo_bytes")
    e.add_argument("--only", nargs="*")
    r = sub.add_parser("run")
    r.add_argument("--dir", type=Path, default=ROOT / "out" / "zoo_bytes")
    r.add_argument("--lib", type=Path, required=True)
    r.add_argument("--tag", required=True)
    r.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    c = sub.add_parser("compare")
    c.add_argument("--dir", type=Path, default=ROOT / "out" / "zoo_bytes")
    c.add_argument("a")
    c.add_argument("b")
    a = ap.parse_args()
    if a.cmd == "export":
        export_all(a.dir, a.only)
    elif a.cmd == "run" and a.child:
        run_child(a.dir, a.tag)
    elif a.cmd == "run":
        env = dict(os.environ, EMBER_LIB=str(a.lib.resolve()))
        argv = [sys.executable, __file__, "run", "--dir", str(a.dir), "--lib", str(a.lib)]
        subprocess.run([*argv, "--tag", a.tag, "--child"], env=env, check=True)
    else:
        da = json.loads((a.dir / f"digests_{a.a}.json").read_text())
        db = json.loads((a.dir / f"digests_{a.b}.json").read_text())
        keys = sorted(set(da) | set(db))
        diff = [k for k in keys if da.get(k) != db.get(k)]
        errors = [k for k in keys if str(da.get(k, "")).startswith("error")]
        for k in diff:
            log.error("differs: %s: %s vs %s", k, da.get(k), db.get(k))
        log.info(
            "%d outputs compared (%d files x threads), %d identical, %d differ, %d errors in %s",
            len(keys),
            len(keys) // 2,
            len(keys) - len(diff),
            len(diff),
            len(errors),
            a.a,
        )
        sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
