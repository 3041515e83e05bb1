"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch:
llama:: custom ops (SDPA, the KV cache).

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_nn_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn_llama.py
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import CaseList
from kernels_nn_common import (
    BF16,
    F16,
    F32,
    F64,
    Builder,
    Call,
    err,
    rnd,
    run_case,
    sdpa_ref,
    simple,
)

CASES = CaseList()
case = CASES.case


# ---------------------------------------------------------------------------------------------
# llama:: custom ops (reference: eager SDPA over the sliced cache, written in torch)
# ---------------------------------------------------------------------------------------------


for dt in [F32, F16, BF16, F64]:
    for B, S, Hq, Hkv, D, L, start in [
        (1, 1, 4, 4, 8, 16, 5),
        (2, 5, 6, 2, 16, 12, 3),
        (1, 7, 2, 1, 4, 7, 0),
        (1, 3, 8, 2, 32, 40, 37),
    ]:
        for mode in ["causal", "none", "mask", "boolmask", "scale"]:

            @case(f"custom-sdpa-{dt}-{B}x{S}x{Hq}x{Hkv}x{D}x{L}-{start}-{mode}")
            def _(g, dt=dt, B=B, S=S, Hq=Hq, Hkv=Hkv, D=D, L=L, start=start, mode=mode):
                q = rnd((B, S, Hq, D), dt, g)
                k, v = rnd((B, L, Hkv, D), dt, g), rnd((B, L, Hkv, D), dt, g)
                mask, causal, scale = None, mode == "causal", 0.3 if mode == "scale" else None
                if mode == "mask":
                    mask = rnd((S, start + S), F32, g, lo=-3, hi=0)
                    mask[:, 0] = float("-inf")
                elif mode == "boolmask":
                    mask = torch.rand(S, L, generator=g) > 0.3
                    mask[:, 0] = True
                exp = sdpa_ref(q, k, v, start, mask, causal, scale)
                tol = {
                    F32: (1e-5, 1e-5),
                    F64: (1e-10, 1e-10),
                    F16: (1e-2, 1e-2),
                    BF16: (2e-2, 2e-2),
                }[dt]
                return simple(
                    "llama::custom_sdpa.out",
                    [q, k, v, start, mask, 0.0, causal, scale],
                    exp,
                    tol=tol,
                )


@case("custom-sdpa-f32-long-prefill")
def _(g):
    q, k, v = (
        rnd((1, 300, 4, 64), F32, g),
        rnd((1, 400, 2, 64), F32, g),
        rnd((1, 400, 2, 64), F32, g),
    )
    return simple(
        "llama::custom_sdpa.out",
        [q, k, v, 20, None, 0.0, True, None],
        sdpa_ref(q, k, v, 20, None, True, None),
        tol=(1e-4, 1e-5),
    )


# Decode (one query row) with head dim 64 or 128 and no mask: on AVX-512 the keys split into
# chunks (two or more from 96 keys, more with a pool), each kv head's rows read once for the query
# heads that share it (groups of up to 4 at D = 64, 2 at D = 128), the chunks merged after. Query
# heads per kv head 1 to 6, f32 and f16 caches, one key to hundreds, large scores (the merge's
# rescaling), every key visible or causal. Head dims 96 and 32 take the head path.
_DECODE = [
    (64, 1, 9, 3, 200, 99, False),
    (64, 1, 8, 2, 40, 0, False),
    (64, 2, 4, 4, 300, 250, False),
    (64, 1, 6, 1, 129, 128, True),
    (64, 1, 5, 5, 70, 47, True),
    (64, 1, 12, 4, 1100, 1023, False),
    (128, 1, 9, 3, 200, 99, False),
    (128, 2, 4, 4, 300, 250, False),
    (128, 1, 6, 1, 129, 128, True),
    (128, 1, 5, 5, 70, 47, True),
    (128, 1, 8, 2, 1100, 1023, False),
    (96, 1, 6, 2, 150, 120, False),
]
for kvdt in [F32, F16]:
    for D, B, Hq, Hkv, L, start, big in _DECODE:
        for mode in ["causal", "none"]:
            for threads in [False, True]:

                @case(
                    f"custom-sdpa-decode-{kvdt}-d{D}-{B}x{Hq}x{Hkv}x{L}-{start}-{mode}"
                    f"{'-big' if big else ''}{'-pool' if threads else ''}"
                )
                def _(
                    g,
                    kvdt=kvdt,
                    D=D,
                    B=B,
                    Hq=Hq,
                    Hkv=Hkv,
                    L=L,
                    start=start,
                    big=big,
                    mode=mode,
                    threads=threads,
                ):
                    hi = 12.0 if big else 2.0
                    q = rnd((B, 1, Hq, D), F32, g, lo=-hi, hi=hi)
                    k, v = rnd((B, L, Hkv, D), kvdt, g), rnd((B, L, Hkv, D), kvdt, g)
                    causal = mode == "causal"
                    exp = sdpa_ref(q, k.float(), v.float(), start, None, causal, None)
                    c = simple(
                        "llama::custom_sdpa.out",
                        [q, k, v, start, None, 0.0, causal, None],
                        exp,
                        tol=(2e-5, 2e-5),
                    )
                    c.threads = threads
                    return c


# Hostile decode rows: an infinite query entry (scores +-inf: NaN outputs, as eager) and NaN
# keys: the split path hands over to the head path, which decides.
for bad in ["inf", "nan"]:
    for D in [64, 128]:

        @case(f"custom-sdpa-decode-hostile-{bad}-d{D}")
        def _(g, bad=bad, D=D):
            q = rnd((1, 1, 4, D), F32, g)
            k, v = rnd((1, 150, 2, D), F32, g), rnd((1, 150, 2, D), F32, g)
            if bad == "inf":
                q[0, 0, 1, 3] = float("inf")
            else:
                k[0, 100:, 0, :] = float("nan")
            exp = sdpa_ref(q, k, v, 149, None, True, None)
            return simple(
                "llama::custom_sdpa.out",
                [q, k, v, 149, None, 0.0, True, None],
                exp,
                tol=(1e-5, 1e-5),
            )


CASES.append(
    (
        "custom-sdpa-err-cache",
        err(
            "llama::custom_sdpa.out",
            [
                torch.ones(1, 3, 2, 4),
                torch.ones(1, 4, 2, 4),
                torch.ones(1, 4, 2, 4),
                2,
                None,
                0.0,
                True,
                None,
                torch.ones(1, 3, 2, 4),
                torch.ones(1, 3, 2, 4),
            ],
        ),
    )
)
CASES.append(
    (
        "custom-sdpa-err-gqa",
        err(
            "llama::custom_sdpa.out",
            [
                torch.ones(1, 1, 3, 4),
                torch.ones(1, 4, 2, 4),
                torch.ones(1, 4, 2, 4),
                0,
                None,
                0.0,
                True,
                None,
                torch.ones(1, 1, 3, 4),
                torch.ones(1, 1, 3, 4),
            ],
        ),
    )
)
CASES.append(
    (
        "custom-sdpa-err-mask-and-causal",
        err(
            "llama::custom_sdpa.out",
            [
                torch.ones(1, 1, 2, 4),
                torch.ones(1, 4, 2, 4),
                torch.ones(1, 4, 2, 4),
                0,
                torch.zeros(1, 1),
                0.0,
                True,
                None,
                torch.ones(1, 1, 2, 4),
                torch.ones(1, 1, 2, 4),
            ],
        ),
    )
)

for dt in [F32, BF16, torch.int8]:
    for B, S, H, D, L, start in [(1, 1, 2, 4, 8, 7), (2, 3, 2, 5, 6, 0), (1, 4, 1, 3, 9, 2)]:
        for lay in ["c", "t"]:

            @case(f"update-cache-{dt}-{B}x{S}x{H}x{D}x{L}-{start}-{lay}")
            def _(g, dt=dt, B=B, S=S, H=H, D=D, L=L, start=start, lay=lay):
                val = rnd((B, S, H, D), dt, g, lay)
                cache = rnd((B, L, H, D), dt, g)
                exp = cache.clone()
                exp[:, start : start + S] = val
                dummy = torch.zeros(1, dtype=dt)
                return Call(
                    "llama::update_cache.out",
                    [val, cache, start, dummy, dummy],
                    [(cache, exp), (dummy, torch.zeros(1, dtype=dt))],
                )


CASES.append(
    (
        "update-cache-err-overflow",
        err(
            "llama::update_cache.out",
            [torch.ones(1, 3, 2, 4), torch.ones(1, 4, 2, 4), 2, torch.ones(1), torch.ones(1)],
        ),
    )
)
CASES.append(
    (
        "update-cache-err-heads",
        err(
            "llama::update_cache.out",
            [torch.ones(1, 1, 3, 4), torch.ones(1, 4, 2, 4), 0, torch.ones(1), torch.ones(1)],
        ),
    )
)
CASES.append(
    (
        "update-cache-err-dtype",
        err(
            "llama::update_cache.out",
            [
                torch.ones(1, 1, 2, 4),
                torch.ones(1, 4, 2, 4, dtype=F64),
                0,
                torch.ones(1),
                torch.ones(1),
            ],
        ),
    )
)


for dt in [F32, BF16]:
    for causal in [True, False]:

        @case(f"sdpa-with-kv-cache-{dt}-{causal}")
        def _(g, dt=dt, causal=causal):
            B, S, H, D, L, start = 1, 3, 4, 8, 10, 2
            q, k, v = rnd((B, S, H, D), dt, g), rnd((B, S, 2, D), dt, g), rnd((B, S, 2, D), dt, g)
            kc, vc = rnd((B, L, 2, D), dt, g), rnd((B, L, 2, D), dt, g)
            ekc, evc = kc.clone(), vc.clone()
            ekc[:, start : start + S] = k
            evc[:, start : start + S] = v
            exp = sdpa_ref(q, ekc, evc, start, None, causal, None)
            o = torch.zeros_like(exp)
            tol = (1e-5, 1e-5) if dt == F32 else (2e-2, 2e-2)
            return Call(
                "llama::sdpa_with_kv_cache.out",
                [q, k, v, kc, vc, start, S, None, 0.0, causal, None, o, o],
                [(o, exp), (kc, ekc), (vc, evc)],
                tol,
            )


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)
