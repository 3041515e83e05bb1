"""One ISA cap for the whole library (issue 28 item 3): ``em_cpu_set_isa_cap`` (EMBER_CPU_ISA in
the CLIs and bindings) limits EmberCpuBackend, the quantized linear kernels and the portable
kernels' optimized paths alike, and the paths it forces agree with eager and the vector paths.

The portable kernels' optimized paths are an optional layer (kernels/optimized/, CMake's
EMBER_OPTIMIZED_KERNELS): kernels/portable holds no intrinsics, and a library built with the
layer OFF (build-optimized-off/, configured and built here, ~40 s of CPU cold and a few seconds
after) gives the scalar-capped results of the regular library bit for bit.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ember import _lib

ROOT = Path(__file__).resolve().parents[2]
# The build with the optimized layer OFF (only ember_shared is built; EMBER_OPTIMIZED_OFF_BUILD
# puts it elsewhere).
OFF_BUILD = Path(os.environ.get("EMBER_OPTIMIZED_OFF_BUILD", ROOT / "build-optimized-off"))

# Runs in a fresh process under EMBER_CPU_ISA (the cap is taken when the library loads) and
# prints the kernels' results as lists.
_PROBE = r"""
import ctypes, json, torch
from ember import _lib
L = _lib.lib()
L.em_cpu_isa_cap.restype = ctypes.c_char_p
torch.manual_seed(0)
a, b = torch.randn(37, 53), torch.randn(53, 29)
x = torch.randn(4, 40) * 8
mm = torch.empty(37, 29)
_lib.call_kernel("aten::mm.out", [a, b, mm, mm])
sig = torch.empty_like(x)
_lib.call_kernel("aten::sigmoid.out", [x, sig, sig])
silu = torch.empty_like(x)
_lib.call_kernel("aten::silu.out", [x, silu, silu])
# llama::custom_sdpa: D 64 without a mask (the AVX-512 head task), D 20 (the AVX2 one)
sdpa = {}
for d in (64, 20):
    q, k, v = torch.randn(1, 3, 4, d), torch.randn(1, 9, 2, d), torch.randn(1, 9, 2, d)
    o = torch.empty(1, 3, 4, d)
    _lib.call_kernel("llama::custom_sdpa.out", [q, k, v, 5, None, 0.0, True, None, o, o])
    sdpa[f"sdpa{d}"] = o
    sdpa[f"sdpa{d}_ref"] = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k[:, :8].transpose(1, 2).repeat_interleave(2, 1),
        v[:, :8].transpose(1, 2).repeat_interleave(2, 1),
        attn_mask=torch.ones(3, 8, dtype=torch.bool).tril(5)).transpose(1, 2)
ref = {"mm_ref": a @ b, "sigmoid_ref": torch.sigmoid(x), "silu_ref": torch.nn.functional.silu(x)}
out = {"mm": mm, "sigmoid": sig, "silu": silu, **ref, **sdpa}
print(json.dumps({"cap": L.em_cpu_isa_cap().decode(), **{k: v.tolist() for k, v in out.items()}}))
"""


def _has_avx512() -> bool:
    class Features(ctypes.Structure):
        _fields_ = [
            (n, ctypes.c_bool) for n in ("avx2", "avx512f", "bw", "vnni", "bf16", "amx", "neon")
        ]

    L = _lib.lib()
    L.em_cpu_features_detected.restype = ctypes.POINTER(Features)
    return bool(L.em_cpu_features_detected().contents.avx512f)


KEYS = ("mm", "sigmoid", "silu", "sdpa64", "sdpa20")


def _probe(isa: str | None, lib: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "EMBER_CPU_ISA"}
    if isa:
        env["EMBER_CPU_ISA"] = isa
    if lib is not None:
        env["EMBER_LIB"] = str(lib)
    r = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_cap_reaches_every_family() -> None:
    L = _lib.lib()
    L.em_cpu_isa_cap.restype = ctypes.c_char_p
    L.em_cpu_set_isa_cap.argtypes = [ctypes.c_char_p]
    L.em_cpu_backend_isa.restype = ctypes.c_char_p
    L.em_linear_q_isa.restype = ctypes.c_char_p
    before = L.em_cpu_isa_cap()
    try:
        assert L.em_cpu_set_isa_cap(b"no-such-isa") != 0
        assert L.em_cpu_isa_cap() == before  # refused: unchanged
        assert L.em_cpu_set_isa_cap(b"scalar") == 0
        assert L.em_cpu_isa_cap() == b"scalar"
        assert L.em_cpu_backend_isa() == b"scalar"
        assert L.em_linear_q_isa() == b"portable"
    finally:
        L.em_cpu_set_isa_cap(None if before == b"none" else before)
    assert L.em_cpu_isa_cap() == before


@pytest.mark.parametrize("isa", ["scalar", "avx2"])
def test_forced_paths_match_eager_and_the_vector_paths(isa: str) -> None:
    free = _probe(None)
    capped = _probe(isa)
    assert capped["cap"] == isa and free["cap"] == "none"
    for k in KEYS:
        got, ref = torch.tensor(capped[k]), torch.tensor(capped[k + "_ref"])
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), k
    if _has_avx512():
        # The AVX-512 sigmoid row computes e^x with the shared recipe, the others with libm's
        # expf: some bits differ, which shows the cap switched the portable kernel's path.
        assert capped["sigmoid"] != free["sigmoid"]
    for k in KEYS:  # the forced and the free paths agree
        assert torch.allclose(torch.tensor(capped[k]), torch.tensor(free[k]), rtol=1e-5, atol=1e-5)


def test_portable_kernels_hold_no_intrinsics() -> None:
    """The SIMD bodies live in kernels/optimized/; kernels/portable is plain C."""
    bad = re.compile(
        r"#\s*include\s*<\w*(intrin|neon)\w*\.h>|\b__m(128|256|512)|\b_mm(256|512)?_\w+\(|target\(\""
    )
    for f in sorted((ROOT / "kernels" / "portable").glob("*.[ch]")):
        hits = [n for n, line in enumerate(f.read_text().splitlines(), 1) if bad.search(line)]
        assert not hits, f"{f.name}: lines {hits}"


def test_optimized_layer_off_builds_and_matches_the_scalar_paths() -> None:
    """EMBER_OPTIMIZED_KERNELS=OFF: the library builds (-Werror), carries none of the layer's
    bodies, and its portable kernels give what the regular library gives under the scalar cap."""
    cmake = shutil.which("cmake")
    assert cmake is not None, "cmake not found (make test builds with it)"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    if (OFF_BUILD / "CMakeCache.txt").exists():
        gen = []  # keep the generator the directory was configured with
    cfg = [cmake, "-S", str(ROOT), "-B", str(OFF_BUILD), *gen, "-DCMAKE_BUILD_TYPE=Release"]
    cfg += ["-DEMBER_OPTIMIZED_KERNELS=OFF", "-DEMBER_TESTS=OFF"]
    r = subprocess.run(cfg, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    jobs = str(min(4, os.cpu_count() or 1))
    build = [cmake, "--build", str(OFF_BUILD), "--target", "ember_shared", "-j", jobs]
    r = subprocess.run(build, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lib = OFF_BUILD / "libember.so"
    assert lib.exists()
    if shutil.which("nm"):  # none of the layer's code is in it
        syms = subprocess.run(["nm", str(lib)], capture_output=True, text=True).stdout
        assert "em_f32_gemm_ukernel_6x16__avx2" not in syms
        assert "em_portable_fast_config_get" not in syms
    off = _probe(None, lib)
    scalar = _probe("scalar")
    for k in KEYS:
        assert off[k] == scalar[k], k
        got, ref = torch.tensor(off[k]), torch.tensor(off[k + "_ref"])
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), k
