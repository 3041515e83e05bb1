"""One ISA cap for the whole library (issue 28 item 3): ``em_cpu_set_isa_cap`` (EMBER_CPU_ISA in
the CLIs and bindings) limits EmberCpuBackend, the quantized linear kernels and the portable
kernels' optimized paths alike, and the paths it forces agree with eager and the vector paths."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest
import torch

from ember import _lib

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
ref = {"mm_ref": a @ b, "sigmoid_ref": torch.sigmoid(x), "silu_ref": torch.nn.functional.silu(x)}
out = {"mm": mm, "sigmoid": sig, "silu": silu, **ref}
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


def _probe(isa: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "EMBER_CPU_ISA"}
    if isa:
        env["EMBER_CPU_ISA"] = isa
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
    for k in ("mm", "sigmoid", "silu"):
        got, ref = torch.tensor(capped[k]), torch.tensor(capped[k + "_ref"])
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), k
    if _has_avx512():
        # The AVX-512 sigmoid row computes e^x with the shared recipe, the others with libm's
        # expf: some bits differ, which shows the cap switched the portable kernel's path.
        assert capped["sigmoid"] != free["sigmoid"]
    for k in ("mm", "sigmoid", "silu"):  # the forced and the free paths agree
        assert torch.allclose(torch.tensor(capped[k]), torch.tensor(free[k]), rtol=1e-5, atol=1e-5)
