"""Shared helpers of the portable neural-network kernel tests (test_kernels_nn_*.py, the kernels
of kernels/portable/ops_nn.def against eager PyTorch).

Each test file holds one table (CASES, a kernel_cases.CaseList) that drives one parametrized
test. Each case is a builder that, given a seeded generator, returns a ``Call``: the kernel
name, its boxed arguments (out tensors included, in the runtime's arg convention: schema args
then returns), and the expected values of the out tensors. Integer and bool results must match
exactly; floating results within a per-dtype tolerance (TOL). Error cases must raise
RuntimeError (never crash). ``run_case`` runs one case; the references used by more than one
file (mm_ref, conv_ref, sdpa_ref) are here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from kernel_cases import seeded

from ember._lib import Out, call_kernel

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [F16, BF16, F32, F64]

# (rtol, atol) per result dtype.
TOL = {F32: (1e-5, 1e-5), F64: (1e-10, 1e-10), F16: (1e-2, 1e-2), BF16: (2e-2, 2e-2)}


@dataclass
class Call:
    op: str
    args: list[Any]
    expect: list[tuple[Any, torch.Tensor]] = field(default_factory=list)
    tol: tuple[float, float] | None = None  # overrides TOL
    error: bool = False
    temp_bytes: int = 0  # kernel scratch; 0 = by operator (call_kernel zero-fills it per call)
    threads: bool = False  # run with a 4-thread pool in the kernel context


# Scratch per call: GEMM-based kernels pack operands and build im2col chunks (<= 8 MiB).
HEAVY_TEMP = {
    "aten::convolution.out": 24 << 20,
    "aten::mm.out": 8 << 20,
    "aten::bmm.out": 8 << 20,
    "aten::addmm.out": 8 << 20,
    "aten::linear.out": 8 << 20,
    "llama::custom_sdpa.out": 8 << 20,
    "quantized_decomposed::mixed_linear.out": 8 << 20,
    "quantized_decomposed::mixed_mm.out": 8 << 20,
}

Builder = Callable[[torch.Generator], Call]


def rnd(
    shape: tuple[int, ...] | list[int],
    dtype: torch.dtype,
    g: torch.Generator,
    layout: str = "c",
    lo: float = -2.0,
    hi: float = 2.0,
) -> torch.Tensor:
    """Random tensor; layout 'c' contiguous, 'cl' channels-last, 't' permuted (dims reversed),
    's' sliced (every other element of a wider last dim)."""
    shape = list(shape)
    if layout == "s":
        wide = shape[:-1] + [shape[-1] * 2] if shape else shape
        return rnd(wide, dtype, g, "c", lo, hi)[..., ::2] if shape else rnd(shape, dtype, g)
    if layout == "t":
        rev = shape[::-1]
        return rnd(rev, dtype, g, "c", lo, hi).permute(*reversed(range(len(shape))))
    if dtype.is_floating_point:
        t = torch.rand(shape, generator=g, dtype=F64) * (hi - lo) + lo
        t = t.to(dtype)
    elif dtype == torch.bool:
        t = torch.rand(shape, generator=g) > 0.5
    else:
        info = torch.iinfo(dtype)
        a, b = max(int(lo * 4), info.min), min(int(hi * 4), info.max)
        if dtype == torch.uint8:
            a, b = 0, max(b, 8)
        t = torch.randint(a, b + 1, shape, generator=g, dtype=torch.int64).to(dtype)
    if layout == "cl":
        if t.dim() == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        elif t.dim() == 5:
            t = t.contiguous(memory_format=torch.channels_last_3d)
    return t


def out_like(exp: torch.Tensor, layout: str = "c") -> torch.Tensor:
    o = torch.full_like(exp, 7) if exp.dtype != torch.bool else torch.zeros_like(exp)
    o = o.contiguous()
    if layout == "cl" and exp.dim() == 4:
        o = o.contiguous(memory_format=torch.channels_last)
    return o


def check(got: torch.Tensor, exp: torch.Tensor, tol: tuple[float, float] | None) -> None:
    assert tuple(got.shape) == tuple(exp.shape), f"shape {tuple(got.shape)} != {tuple(exp.shape)}"
    assert got.dtype == exp.dtype, f"dtype {got.dtype} != {exp.dtype}"
    if exp.dtype.is_floating_point:
        rtol, atol = tol or TOL[exp.dtype]
        torch.testing.assert_close(got, exp, rtol=rtol, atol=atol, equal_nan=True)
    else:
        assert torch.equal(got, exp), f"mismatch:\n{got}\n!=\n{exp}"


_POOL: list[int] = []


def call_with_pool(op: str, args: list[Any], temp_bytes: int) -> None:
    """call_kernel with ctx->pool set to a shared 4-thread pool (exercises parallel loops)."""
    import ctypes

    import ember._lib as E

    L = E.lib()
    if not _POOL:
        L.em_threadpool_create.restype = ctypes.c_void_p
        L.em_threadpool_create.argtypes = [ctypes.c_int]
        _POOL.append(L.em_threadpool_create(4))
    entry = L.em_find_kernel(op.encode())
    assert entry, op
    vb = E.ValueBuilder()
    evs = [vb.value(a) for a in args]
    argv = (ctypes.POINTER(E.EmEValue) * len(evs))(*[ctypes.pointer(v) for v in evs])
    buf = ctypes.create_string_buffer(temp_bytes)
    temp = E.EmAllocator()
    L.em_allocator_init(ctypes.byref(temp), buf, temp_bytes)
    ctx = E.EmKernelCtx()
    ctx.temp = ctypes.pointer(temp)
    ctx.pool = _POOL[0]
    ctx.op_name = op.encode()
    st = E.KERNEL_FN(entry.contents.fn)(ctypes.byref(ctx), argv)
    if st != 0:
        raise RuntimeError(f"{op} failed: {E.status_message(st)}")


def run_case(name: str, builder: Builder) -> None:
    """Builds case ``name`` with its seeded generator, runs it and checks the outs."""
    c = builder(seeded(name))
    temp = c.temp_bytes or HEAVY_TEMP.get(c.op, 1 << 20)
    if c.error:
        with pytest.raises(RuntimeError):
            call_kernel(c.op, c.args, temp_bytes=temp)
        return
    if c.threads:
        call_with_pool(c.op, c.args, temp)
    else:
        call_kernel(c.op, c.args, temp_bytes=temp)
    for got, exp in c.expect:
        if isinstance(got, Out):
            got = got.view()
        elif callable(got):
            got = got()
        check(got, exp, c.tol)


def simple(
    op: str,
    inputs: list[Any],
    exp: torch.Tensor,
    layout: str = "c",
    tol: tuple[float, float] | None = None,
    dynamic: bool = False,
) -> Call:
    """A single-output out-variant: args = inputs + [out, out]."""
    o = out_like(exp, layout)
    if dynamic:
        big = torch.full([d + 1 for d in exp.shape], 3, dtype=exp.dtype)
        oo = Out(big)
        # call_kernel builds one runtime tensor per argument, so the trailing return's Out.sizes
        # is not the resized one: read the resized (contiguous) result from the storage.
        got = lambda: big.reshape(-1)[: exp.numel()].view(exp.shape)  # noqa: E731
        return Call(op, inputs + [oo, oo], [(got, exp)], tol)
    return Call(op, inputs + [o, o], [(o, exp)], tol)


def err(op: str, args: list[Any]) -> Builder:
    return lambda g: Call(op, args, error=True)


def ref_in(dtype: torch.dtype) -> torch.dtype:
    """Dtype eager PyTorch computes a reference in (f64 for floats so rounding is the kernel's)."""
    return F64 if dtype.is_floating_point else dtype


def mm_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point:
        return (a.double() @ b.double()).to(a.dtype)
    return (a.long() @ b.long()).to(a.dtype)


def conv_ref(x, w, b, stride, pad, dil, transposed, opad, groups):
    dt = x.dtype
    rd = F64
    y = torch.ops.aten.convolution(
        x.to(rd),
        w.to(rd),
        None if b is None else b.to(rd),
        stride,
        pad,
        dil,
        transposed,
        opad,
        groups,
    )
    if dt.is_floating_point:
        return y.to(dt)
    return y.round().long().to(dt)


def sdpa_ref(q, k, v, start, mask, causal, scale):
    """q [B,S,Hq,D]; k/v caches [B,L,Hkv,D]; attends rows [0, start+S)."""
    B, S, Hq, D = q.shape
    n = start + S
    kk, vv = k[:, :n].double(), v[:, :n].double()
    rep = Hq // k.shape[2]
    kk = kk.repeat_interleave(rep, dim=2).transpose(1, 2)  # [B,Hq,n,D]
    vv = vv.repeat_interleave(rep, dim=2).transpose(1, 2)
    qq = q.double().transpose(1, 2)  # [B,Hq,S,D]
    sc = qq @ kk.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(D))
    if causal:
        pos = torch.arange(S)[:, None] + start
        sc = sc.masked_fill(torch.arange(n)[None, :] > pos, float("-inf"))
    if mask is not None:
        m = mask[:, :n]
        sc = sc + (
            m.double()
            if m.dtype != torch.bool
            else torch.zeros(m.shape, dtype=F64).masked_fill(~m, float("-inf"))
        )
    return (sc.softmax(-1) @ vv).transpose(1, 2).to(q.dtype)
