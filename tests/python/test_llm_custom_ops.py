"""``llama::update_cache`` / ``llama::custom_sdpa``: the PyTorch definitions (ExecuTorch's
schemas) against plain PyTorch attention, and Ember's C kernels against them after export
(grouped-query heads, start_pos, causal, masks, scale), in place on the cache buffers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.llm import custom_ops  # noqa: F401 - registers the ops
from ember.runtime import EmberRuntimeError, RuntimeProgram

L, HQ, HKV, D = 16, 6, 2, 8


def _sdpa_naive(q, k, v, start, causal, mask=None, scale=None):  # type: ignore[no-untyped-def]
    """Per-head loops with torch SDPA: query row s attends keys [0, start + s] (causal)."""
    S, n = q.shape[1], start + q.shape[1]
    rep = q.shape[2] // k.shape[2]
    out = torch.empty_like(q)
    for h in range(q.shape[2]):
        qh, kh, vh = q[0, :, h], k[0, :n, h // rep], v[0, :n, h // rep]
        if causal:
            m = torch.arange(n)[None, :] <= (torch.arange(S)[:, None] + start)
        else:
            m = mask[:, :n] if mask is not None else None
        out[0, :, h] = F.scaled_dot_product_attention(
            qh[None], kh[None], vh[None], attn_mask=m, scale=scale
        )[0]
    return out


def test_schemas_are_executorchs() -> None:
    assert str(torch.ops.llama.update_cache.out._schema) == (
        "llama::update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, "
        "Tensor(b!) out) -> Tensor(b!)"
    )
    assert str(torch.ops.llama.custom_sdpa.out._schema) == (
        "llama::custom_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, "
        "Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None, *, "
        "Tensor(a!) out) -> Tensor(a!)"
    )


@pytest.mark.parametrize(("S", "start"), [(1, 0), (1, 9), (5, 0), (4, 7)])
def test_reference_matches_torch_sdpa(S: int, start: int) -> None:
    g = torch.Generator().manual_seed(S * 31 + start)
    q = torch.randn(1, S, HQ, D, generator=g)
    k, v = torch.randn(1, L, HKV, D, generator=g), torch.randn(1, L, HKV, D, generator=g)
    got = torch.ops.llama.custom_sdpa(q, k, v, start, None, 0.0, True)
    torch.testing.assert_close(got, _sdpa_naive(q, k, v, start, True))
    mask = torch.randn(S, L, generator=g)
    got = torch.ops.llama.custom_sdpa(q, k, v, start, mask, 0.0, False, 0.3)
    torch.testing.assert_close(got, _sdpa_naive(q, k, v, start, False, mask, 0.3))


def test_update_cache_reference() -> None:
    cache = torch.zeros(1, L, HKV, D)
    val = torch.randn(1, 3, HKV, D)
    torch.ops.llama.update_cache(val, cache, 5)
    assert torch.equal(cache[:, 5:8], val) and not cache[:, :5].any() and not cache[:, 8:].any()


class Attn(torch.nn.Module):
    def __init__(self, causal: bool = True, scale: float | None = None) -> None:
        super().__init__()
        self.causal, self.scale = causal, scale
        self.register_buffer("kc", torch.zeros(1, L, HKV, D))
        self.register_buffer("vc", torch.zeros(1, L, HKV, D))

    def forward(self, q, k, v, pos, mask):  # type: ignore[no-untyped-def]
        p = pos[0].item()
        torch._check(p >= 0)
        torch._check(p + q.shape[1] <= L)
        torch.ops.llama.update_cache(k, self.kc, p)
        torch.ops.llama.update_cache(v, self.vc, p)
        m = None if self.causal else mask
        return torch.ops.llama.custom_sdpa(q, self.kc, self.vc, p, m, 0.0, self.causal, self.scale)


def _export(model: Attn) -> ember.Program:
    s = torch.export.Dim("s", min=1, max=8)
    ex = (
        torch.randn(1, 3, HQ, D),
        torch.randn(1, 3, HKV, D),
        torch.randn(1, 3, HKV, D),
        torch.tensor([2]),
        torch.randn(3, L),
    )
    return ember.export(model, ex, dynamic_shapes=({1: s}, {1: s}, {1: s}, None, {0: s}))


STEPS = [(4, 0), (1, 4), (1, 5), (3, 6), (1, 9), (6, 10)]


def _inputs(S: int, p: int, g: torch.Generator) -> list[torch.Tensor]:
    return [
        torch.randn(1, S, HQ, D, generator=g),
        torch.randn(1, S, HKV, D, generator=g),
        torch.randn(1, S, HKV, D, generator=g),
        torch.tensor([p]),
        torch.randn(S, L, generator=g),
    ]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("causal", "scale"), [(True, None), (False, 0.25)])
def test_ember_kernels_match_reference(causal: bool, scale: float | None, threads: int) -> None:
    prog = _export(Attn(causal, scale))
    kernels = [d.kernel for d in prog.debug_info()]
    assert kernels.count("llama::update_cache.out") == 2
    assert "aten::clone.out" not in kernels and "aten::copy_" not in kernels  # in place
    rt = RuntimeProgram(prog.buffer, threads=threads)
    ref = Attn(causal, scale)
    g = torch.Generator().manual_seed(3)
    for S, p in STEPS:  # the caches carry over between calls, as in decoding
        x = _inputs(S, p, g)
        got = rt.run("forward", x)[0]
        want = ref(*x)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_ember_rejects_cache_overflow() -> None:
    prog = _export(Attn())
    rt = RuntimeProgram(prog.buffer)
    g = torch.Generator().manual_seed(4)
    with pytest.raises(EmberRuntimeError, match="exceeds the cache"):
        rt.run("forward", _inputs(4, L - 2, g))


_ET_SCRIPT = """
import json, sys, torch
import executorch.extension.llm.custom_ops.custom_ops  # registers llama:: kernels
from executorch.runtime import Runtime
m = Runtime.get().load_program(sys.argv[1]).load_method("forward")
g = torch.Generator().manual_seed(3)
outs = []
for S, p in json.loads(sys.argv[2]):
    x = [torch.randn(1, S, 6, 8, generator=g), torch.randn(1, S, 2, 8, generator=g),
         torch.randn(1, S, 2, 8, generator=g), torch.tensor([p]), torch.randn(S, 16, generator=g)]
    outs.append(m.execute(x)[0].tolist())
print(json.dumps(outs))
"""


def test_stock_executorch_runs_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("executorch.runtime")
    path = _export(Attn()).save(tmp_path / "attn.pte")
    # A separate process: ExecuTorch's AOT library redefines the llama:: ops we registered.
    r = subprocess.run(
        [sys.executable, "-c", _ET_SCRIPT, str(path), json.dumps(STEPS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0 and "custom_ops" in r.stderr and "No module" in r.stderr:
        pytest.skip("ExecuTorch's LLM custom ops are not installed")
    assert r.returncode == 0, r.stderr[-2000:]
    outs = json.loads(r.stdout.strip().splitlines()[-1])
    ref = Attn()
    g = torch.Generator().manual_seed(3)
    for (S, p), got in zip(STEPS, outs, strict=True):
        torch.testing.assert_close(torch.tensor(got), ref(*_inputs(S, p, g)), atol=1e-5, rtol=1e-5)


# ---- an f16 KV cache (f32 query and output, f16 key / value caches) ------------------------------


class AttnKV16(torch.nn.Module):
    """Attn with f16 caches: the new keys / values rounded to f16 as they are written."""

    def __init__(self, d: int, causal: bool = True) -> None:
        super().__init__()
        self.causal = causal
        self.register_buffer("kc", torch.zeros(1, L, HKV, d, dtype=torch.float16))
        self.register_buffer("vc", torch.zeros(1, L, HKV, d, dtype=torch.float16))

    def forward(self, q, k, v, pos, mask):  # type: ignore[no-untyped-def]
        p = pos[0].item()
        torch._check(p >= 0)
        torch._check(p + q.shape[1] <= L)
        torch.ops.llama.update_cache(k.to(torch.float16), self.kc, p)
        torch.ops.llama.update_cache(v.to(torch.float16), self.vc, p)
        m = None if self.causal else mask
        return torch.ops.llama.custom_sdpa(q, self.kc, self.vc, p, m, 0.0, self.causal)


def test_reference_reads_f16_caches_as_their_f32_values() -> None:
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 3, h, 16, generator=g) for h in (HQ, HKV, HKV))
    kc = torch.randn(1, L, HKV, 16, generator=g).half()
    vc = torch.randn(1, L, HKV, 16, generator=g).half()
    got = torch.ops.llama.custom_sdpa(q, kc, vc, 4, None, 0.0, True)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, _sdpa_naive(q, kc.float(), vc.float(), 4, True))
    with pytest.raises(Exception, match="dtypes differ"):
        torch.ops.llama.custom_sdpa(q.double(), kc, vc, 4, None, 0.0, True)


@pytest.mark.parametrize("cap", [None, "avx2", "scalar"])
@pytest.mark.parametrize(("d", "causal"), [(64, True), (32, False), (8, True)])
def test_ember_f16_kv_cache_matches_reference(cap: str | None, d: int, causal: bool) -> None:
    """D = 64 / 32 causal reach the AVX-512 head task reading f16 rows itself (where the CPU has
    it); a mask, D = 8, or a cap below AVX-512 run the f32 paths on f32 copies of the rows."""
    import ctypes

    from ember import _lib

    lib = _lib.lib()
    lib.em_cpu_isa_cap.restype = ctypes.c_char_p
    lib.em_cpu_set_isa_cap.argtypes = [ctypes.c_char_p]
    before = lib.em_cpu_isa_cap()
    if cap is not None and lib.em_cpu_set_isa_cap(cap.encode()) != 0:
        pytest.skip(f"this CPU cannot run under the {cap} cap")
    try:
        s = torch.export.Dim("s", min=1, max=8)
        ex = (torch.randn(1, 3, HQ, d), torch.randn(1, 3, HKV, d), torch.randn(1, 3, HKV, d),
              torch.tensor([2]), torch.randn(3, L))  # fmt: skip
        prog = ember.export(
            AttnKV16(d, causal), ex, dynamic_shapes=({1: s}, {1: s}, {1: s}, None, {0: s})
        )
        ref = AttnKV16(d, causal)
        for threads in (1, 2):
            rt = RuntimeProgram(prog.buffer, threads=threads)
            g = torch.Generator().manual_seed(5)
            ref.kc.zero_(), ref.vc.zero_()
            for S, p in STEPS:
                x = [torch.randn(1, S, HQ, d, generator=g), torch.randn(1, S, HKV, d, generator=g),
                     torch.randn(1, S, HKV, d, generator=g), torch.tensor([p]),
                     torch.randn(S, L, generator=g)]  # fmt: skip
                got = rt.run("forward", x)[0]
                assert got.dtype == torch.float32
                torch.testing.assert_close(got, ref(*x), atol=1e-5, rtol=1e-5)
    finally:
        lib.em_cpu_set_isa_cap(None if before == b"none" else before)
