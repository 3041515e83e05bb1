"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch:
quantized_decomposed:: ops.

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_nn_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn_quant.py
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
    simple,
)

CASES = CaseList()
case = CASES.case


# ---------------------------------------------------------------------------------------------
# quantized_decomposed:: (references: torch.ops.quantized_decomposed, registered by _decomposed)
# ---------------------------------------------------------------------------------------------

from torch.ao.quantization.fx import _decomposed  # noqa: E402,F401

QD = torch.ops.quantized_decomposed
QRANGES = {
    torch.uint8: (0, 255),
    torch.int8: (-128, 127),
    torch.int16: (-32768, 32767),
    torch.int32: (-(2**31), 2**31 - 1),
}

for dt in [F32, F16, BF16]:
    for qdt in QRANGES:
        for lay in ["c", "t"]:

            @case(f"q-per-tensor-{dt}-{qdt}-{lay}")
            def _(g, dt=dt, qdt=qdt, lay=lay):
                lo, hi = QRANGES[qdt]
                x = rnd((4, 7), dt, g, lay, -3, 3)
                x[0, 0] = 0.25  # exact ties (with scale 0.05 -> 5.0 ulp-close): round half even
                x[0, 1] = 0.75
                x[1, 0] = 2.5 * (0.05 if qdt in (torch.uint8, torch.int8) else 0.001)
                scale, zp = 0.05 if qdt in (torch.uint8, torch.int8) else 0.001, 3
                exp = QD.quantize_per_tensor(x, scale, zp, lo, hi, qdt)
                o = torch.zeros_like(exp)
                return Call(
                    "quantized_decomposed::quantize_per_tensor.out",
                    [x, scale, zp, lo, hi, qdt, o, o],
                    [(o, exp)],
                )

            @case(f"q-per-tensor-T-{dt}-{qdt}-{lay}")
            def _(g, dt=dt, qdt=qdt, lay=lay):
                lo, hi = QRANGES[qdt]
                x = rnd((3, 5), dt, g, lay, -9, 9)
                scale, zp = 0.07, -2
                ts, tz = torch.tensor([scale], dtype=F64), torch.tensor([zp])
                exp = QD.quantize_per_tensor.tensor(x, ts, tz, lo, hi, qdt)
                o = torch.zeros_like(exp)
                return Call(
                    "quantized_decomposed::quantize_per_tensor.Tensor_out",
                    [x, ts, tz, lo, hi, qdt, o, o],
                    [(o, exp)],
                )

    for qdt in [torch.uint8, torch.int8, torch.int32]:

        @case(f"dq-per-tensor-{dt}-{qdt}")
        def _(g, dt=dt, qdt=qdt):
            lo, hi = QRANGES[qdt]
            q = torch.randint(max(lo, -300), min(hi, 300) + 1, (3, 6), generator=g).to(qdt)
            scale, zp = 0.0173, 5
            exp = QD.dequantize_per_tensor(q, scale, zp, lo, hi, qdt, out_dtype=dt)
            o = torch.zeros_like(exp)
            return Call(
                "quantized_decomposed::dequantize_per_tensor.out",
                [q, scale, zp, lo, hi, qdt, dt, o, o],
                [(o, exp)],
                tol=(0, 0),
            )

        @case(f"dq-per-tensor-T-{dt}-{qdt}")
        def _(g, dt=dt, qdt=qdt):
            lo, hi = QRANGES[qdt]
            q = torch.randint(max(lo, -300), min(hi, 300) + 1, (2, 5), generator=g).to(qdt)
            ts, tz = torch.tensor([0.031], dtype=F64), torch.tensor([-7])
            exp = QD.dequantize_per_tensor.tensor(q, ts, tz, lo, hi, qdt, out_dtype=dt)
            o = torch.zeros_like(exp)
            return Call(
                "quantized_decomposed::dequantize_per_tensor.Tensor_out",
                [q, ts, tz, lo, hi, qdt, dt, o, o],
                [(o, exp)],
                tol=(0, 0),
            )


@case("dq-per-tensor-default-dtype")
def _(g):
    q = torch.randint(-128, 128, (5,), generator=g).to(torch.int8)
    exp = QD.dequantize_per_tensor(q, 0.1, 1, -128, 127, torch.int8)
    o = torch.zeros_like(exp)
    return Call(
        "quantized_decomposed::dequantize_per_tensor.out",
        [q, 0.1, 1, -128, 127, torch.int8, None, o, o],
        [(o, exp)],
        tol=(0, 0),
    )


CASES.append(
    (
        "q-per-tensor-err-range",
        err(
            "quantized_decomposed::quantize_per_tensor.out",
            [
                torch.ones(3),
                0.1,
                0,
                -129,
                127,
                torch.int8,
                torch.zeros(3, dtype=torch.int8),
                torch.zeros(3, dtype=torch.int8),
            ],
        ),
    )
)
CASES.append(
    (
        "q-per-tensor-err-dtype",
        err(
            "quantized_decomposed::quantize_per_tensor.out",
            [
                torch.ones(3),
                0.1,
                0,
                -128,
                127,
                torch.uint8,
                torch.zeros(3, dtype=torch.int8),
                torch.zeros(3, dtype=torch.int8),
            ],
        ),
    )
)
CASES.append(
    (
        "dq-per-tensor-err-dtype",
        err(
            "quantized_decomposed::dequantize_per_tensor.out",
            [
                torch.ones(3, dtype=torch.int8),
                0.1,
                0,
                -128,
                127,
                torch.uint8,
                None,
                torch.zeros(3),
                torch.zeros(3),
            ],
        ),
    )
)

for sdt in [F32, F64]:
    for axis in [0, 1, -1]:
        for qdt in [torch.int8, torch.uint8]:

            @case(f"q-per-channel-{sdt}-{axis}-{qdt}")
            def _(g, sdt=sdt, axis=axis, qdt=qdt):
                lo, hi = QRANGES[qdt]
                x = rnd((4, 5, 3), F32, g, "t", -4, 4)
                n = x.shape[axis]
                s = (torch.rand(n, generator=g, dtype=F64) * 0.05 + 0.01).to(sdt)
                z = torch.randint(-3, 4, (n,), generator=g)
                exp = QD.quantize_per_channel(x, s, z, axis % 3, lo, hi, qdt)
                o = torch.zeros_like(exp)
                return Call(
                    "quantized_decomposed::quantize_per_channel.out",
                    [x, s, z, axis, lo, hi, qdt, o, o],
                    [(o, exp)],
                )

            @case(f"dq-per-channel-{sdt}-{axis}-{qdt}")
            def _(g, sdt=sdt, axis=axis, qdt=qdt):
                lo, hi = QRANGES[qdt]
                q = torch.randint(lo, hi + 1, (4, 5, 3), generator=g).to(qdt)
                n = q.shape[axis]
                s = (torch.rand(n, generator=g, dtype=F64) * 0.05 + 0.01).to(sdt)
                z = torch.randint(-3, 4, (n,), generator=g) if axis != 1 else None
                exp = QD.dequantize_per_channel(q, s, z, axis % 3, lo, hi, qdt)
                o = torch.zeros_like(exp)
                return Call(
                    "quantized_decomposed::dequantize_per_channel.out",
                    [q, s, z, axis, lo, hi, qdt, None, o, o],
                    [(o, exp)],
                    tol=(0, 0),
                )


CASES.append(
    (
        "q-per-channel-err-scales",
        err(
            "quantized_decomposed::quantize_per_channel.out",
            [
                torch.ones(3, 4),
                torch.ones(3),
                torch.zeros(3, dtype=torch.long),
                1,
                -128,
                127,
                torch.int8,
                torch.zeros(3, 4, dtype=torch.int8),
                torch.zeros(3, 4, dtype=torch.int8),
            ],
        ),
    )
)


def _per_token_qparams(x: torch.Tensor) -> Call:
    """choose_qparams_per_token_asymmetric.out on x, exact against the eager op."""
    es, ez = QD.choose_qparams_per_token_asymmetric(x, torch.int8)
    so, zo = torch.zeros_like(es), torch.zeros_like(ez)
    return Call(
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        [x, torch.int8, so, zo, [so, zo]],
        [(so, es), (zo, ez)],
        tol=(0, 0),
    )


for dt in [F32, F16, BF16]:
    for xs in [(2, 3, 8), (5, 16), (1, 1)]:

        @case(f"choose-qparams-per-token-{dt}-{xs}")
        def _(g, dt=dt, xs=xs):
            return _per_token_qparams(rnd(xs, dt, g, "c", -3, 5))

        @case(f"q-per-token-{dt}-{xs}")
        def _(g, dt=dt, xs=xs):
            x = rnd(xs, dt, g, "c", -3, 5)
            s, z = QD.choose_qparams_per_token_asymmetric(x.float(), torch.int8)
            exp = QD.quantize_per_token(x, s, z, -128, 127, torch.int8)
            o = torch.zeros_like(exp)
            return Call(
                "quantized_decomposed::quantize_per_token.out",
                [x, s, z, -128, 127, torch.int8, o, o],
                [(o, exp)],
            )

        @case(f"dq-per-token-{dt}-{xs}")
        def _(g, dt=dt, xs=xs):
            q = torch.randint(-128, 128, xs, generator=g).to(torch.int8)
            s, z = QD.choose_qparams_per_token_asymmetric(rnd(xs, F32, g), torch.int8)
            exp = QD.dequantize_per_token(q, s, z, -128, 127, torch.int8, dt)
            o = torch.zeros_like(exp)
            return Call(
                "quantized_decomposed::dequantize_per_token.out",
                [q, s, z, -128, 127, torch.int8, dt, o, o],
                [(o, exp)],
                tol=(0, 0),
            )


def _choose_call(x: torch.Tensor, qmin: int, qmax: int, qdt: torch.dtype) -> Call:
    """choose_qparams.Tensor_out of x against eager, exactly."""
    es, ez = QD.choose_qparams.tensor(x, qmin, qmax, 1e-7, qdt)
    so, zo = torch.zeros(1, dtype=F64), torch.zeros(1, dtype=torch.int64)
    return Call(
        "quantized_decomposed::choose_qparams.Tensor_out",
        [x, qmin, qmax, 1e-7, qdt, so, zo, [so, zo]],
        [(so, es), (zo, ez)],
        tol=(0, 0),
    )


for dt in [F32, F16, BF16]:
    for qmin, qmax, qdt in [(-128, 127, torch.int8), (0, 255, torch.uint8), (0, 15, torch.uint8)]:
        for lo, hi in [(-3, 5), (1, 4), (-6, -2)]:

            @case(f"choose-qparams-{dt}-{qmin}-{qmax}-{lo}-{hi}")
            def _(g, dt=dt, qmin=qmin, qmax=qmax, qdt=qdt, lo=lo, hi=hi):
                return _choose_call(rnd((3, 7), dt, g, "t", lo, hi), qmin, qmax, qdt)


# Infinite inputs: the zero point's quotient is NaN; torch's integer cast of it on x86 is the
# result to match (the kernels used to cast NaN to an integer: undefined behaviour in C).
for qmin, qmax, qdt in [(-128, 127, torch.int8), (0, 255, torch.uint8)]:

    @case(f"choose-qparams-neg-inf-{qmin}-{qmax}")
    def _(g, qmin=qmin, qmax=qmax, qdt=qdt):
        x = torch.tensor([[-float("inf"), 1.0, 2.0], [0.5, -1.0, 3.0]])
        return _choose_call(x, qmin, qmax, qdt)


@case("choose-qparams-per-token-inf")
def _(g):
    x = torch.tensor([[float("inf"), 1.0, -2.0], [-float("inf"), 0.5, 1.0], [0.25, -1.0, 3.0]])
    return _per_token_qparams(x)


def emb_ref(wq, bits, scales, zps, idx, out_dtype):
    """Dequantized rows for the packed embedding formats (see quant_embed_mm.c)."""
    if bits == 8:
        q = wq.float()
    elif bits == 4:
        q = torch.stack([(wq >> 4).float() - 8, (wq & 15).float() - 8], -1).flatten(-2)
    else:
        q = torch.stack([((wq >> (2 * k)) & 3).float() - 2 for k in range(4)], -1).flatten(-2)
    V, D = q.shape
    s = scales.float().reshape(V, -1)
    G = s.shape[1]
    s = s.repeat_interleave(D // G, dim=1)
    z = (
        torch.zeros_like(s)
        if zps is None
        else zps.float().reshape(V, -1).repeat_interleave(D // G, dim=1)
    )
    deq = (q - z) * s
    return deq[idx.long()].to(out_dtype)


for bits in [8, 4, 2]:
    opname = {8: "byte", 4: "4bit", 2: "2bit"}[bits]
    for groups in [1, 2, 0]:
        for has_zp in [False, True]:
            for variant in ["out", "dtype_out"]:
                for odt in [F32, F16]:

                    @case(f"embedding-{opname}-{groups}-{has_zp}-{variant}-{odt}")
                    def _(
                        g,
                        bits=bits,
                        opname=opname,
                        groups=groups,
                        has_zp=has_zp,
                        variant=variant,
                        odt=odt,
                    ):
                        V, D = 11, 16
                        if bits == 8:
                            w = torch.randint(-128, 128, (V, D), generator=g).to(torch.int8)
                            qmin, qmax = -128, 127
                        else:
                            w = torch.randint(0, 256, (V, D * bits // 8), generator=g).to(
                                torch.uint8
                            )
                            qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
                        sshape = (V,) if groups == 0 else (V, groups)
                        s = (torch.rand(sshape, generator=g) * 0.1 + 0.01).to(odt)
                        z = torch.randint(-2, 3, sshape, generator=g).to(odt) if has_zp else None
                        idx = torch.randint(0, V, (2, 3), generator=g)
                        exp = emb_ref(w, bits, s, z, idx, odt)
                        o = torch.zeros_like(exp)
                        op = f"quantized_decomposed::embedding_{opname}.{variant}"
                        args = [w, s, z, qmin, qmax, idx]
                        if variant == "dtype_out":
                            args.append(odt)
                        return Call(op, args + [o, o], [(o, exp)])


CASES.append(
    (
        "embedding-4bit-err-groups",
        err(
            "quantized_decomposed::embedding_4bit.out",
            [
                torch.zeros(4, 4, dtype=torch.uint8),
                torch.ones(4, 3),
                None,
                -8,
                7,
                torch.tensor([1]),
                torch.zeros(1, 8),
                torch.zeros(1, 8),
            ],
        ),
    )
)
CASES.append(
    (
        "embedding-byte-err-index",
        err(
            "quantized_decomposed::embedding_byte.out",
            [
                torch.zeros(4, 4, dtype=torch.int8),
                torch.ones(4),
                None,
                -128,
                127,
                torch.tensor([4]),
                torch.zeros(1, 4),
                torch.zeros(1, 4),
            ],
        ),
    )
)
CASES.append(
    (
        "embedding-byte-err-dtype",
        err(
            "quantized_decomposed::embedding_byte.dtype_out",
            [
                torch.zeros(4, 4, dtype=torch.int8),
                torch.ones(4),
                None,
                -128,
                127,
                torch.tensor([1]),
                F16,
                torch.zeros(1, 4),
                torch.zeros(1, 4),
            ],
        ),
    )
)

for dt in [F32, F16]:
    for M, K, N in [(3, 8, 5), (1, 64, 300), (0, 4, 2)]:

        @case(f"mixed-mm-{dt}-{M}-{K}-{N}")
        def _(g, dt=dt, M=M, K=K, N=N):
            x = rnd((M, K), dt, g)
            w = torch.randint(-128, 128, (K, N), generator=g).to(torch.int8)
            s = (torch.rand(K, generator=g) * 0.05).to(dt)
            exp = (x.double() @ (w.double() * s.double()[:, None])).to(dt)
            tol = (1e-4, 1e-4) if dt == F32 else (1e-2, 1e-1)
            return simple("quantized_decomposed::mixed_mm.out", [x, w, s, None], exp, tol=tol)

        for groups in [0, 1, 4]:

            @case(f"mixed-linear-{dt}-{M}-{K}-{N}-{groups}")
            def _(g, dt=dt, M=M, K=K, N=N, groups=groups):
                x = rnd((M, K), dt, g)
                w = torch.randint(-128, 128, (N, K), generator=g).to(torch.int8)
                s = torch.rand((N,) if groups == 0 else (N, groups), generator=g) * 0.05
                s = s.to(dt)
                sf = (
                    s.double()
                    .reshape(N, -1)
                    .repeat_interleave(K // s.reshape(N, -1).shape[1], dim=1)
                )
                exp = (x.double() @ (w.double() * sf).t()).to(dt)
                tol = (1e-4, 1e-4) if dt == F32 else (1e-2, 1e-1)
                return simple(
                    "quantized_decomposed::mixed_linear.out", [x, w, s, None, dt], exp, tol=tol
                )


CASES.append(
    (
        "mixed-linear-err-weight-dtype",
        err(
            "quantized_decomposed::mixed_linear.out",
            [
                torch.ones(2, 3),
                torch.ones(4, 3),
                torch.ones(4),
                None,
                None,
                torch.ones(2, 4),
                torch.ones(2, 4),
            ],
        ),
    )
)


for qdt in [torch.uint8, torch.int8]:
    for lay in ["c", "t"]:

        @case(f"q-add-{qdt}-{lay}")
        def _(g, qdt=qdt, lay=lay):
            lo, hi = QRANGES[qdt]
            a = torch.randint(lo, hi + 1, (5, 7), generator=g).to(qdt)
            b = torch.randint(lo, hi + 1, (7, 5), generator=g).to(qdt).t()
            a = a.t().contiguous().t() if lay == "t" else a
            sa, za, sb, zb, so, zo = 0.02, 3, 0.05, -4, 0.07, 1
            x = (a.long() - za).double() * torch.tensor(sa, dtype=F32).double()
            y = (b.long() - zb).double() * torch.tensor(sb, dtype=F32).double()
            acc = x.float() + y.float()
            inv = 1.0 / torch.tensor(so, dtype=F32)
            exp = (torch.round(inv * acc) + zo).clamp(lo, hi).to(qdt)
            args = [a, sa, za, lo, hi, b, sb, zb, lo, hi, so, zo, lo, hi]
            o = torch.zeros(5, 7, dtype=qdt)
            return Call("quantized_decomposed::add.out", args + [o, o], [(o, exp)])


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)
