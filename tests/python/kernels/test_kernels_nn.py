"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch.

One table (CASES) drives one parametrized test. Each case is a builder that,
given a seeded generator, returns the kernel name, its boxed arguments (out
tensors included, in the runtime's arg convention: schema args then returns),
and the expected values of the out tensors. Integer and bool results must
match exactly; floating results within a per-dtype tolerance (TOL). Error
cases must raise RuntimeError (never crash).

Run: PYTHONPATH=python .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn.py
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn.functional as F

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
CASES: list[tuple[str, Builder]] = []


def case(name: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        CASES.append((name, fn))
        return fn

    return deco


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


@pytest.mark.parametrize("name,builder", CASES, ids=[c[0] for c in CASES])
def test_kernel(name: str, builder: Builder) -> None:
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    c = builder(g)
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


# ---------------------------------------------------------------------------------------------
# mm / bmm / addmm / linear
# ---------------------------------------------------------------------------------------------

MM_DTYPES = [F32, F64, F16, BF16, torch.int32, torch.int64, torch.int8, torch.uint8, torch.int16]


def mm_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point:
        return (a.double() @ b.double()).to(a.dtype)
    return (a.long() @ b.long()).to(a.dtype)


for dt in MM_DTYPES:
    for m, k, n in [(3, 5, 4), (7, 33, 19), (0, 3, 4), (3, 0, 4), (1, 1, 1)]:

        @case(f"mm-{dt}-{m}x{k}x{n}")
        def _(g, dt=dt, m=m, k=k, n=n):
            a, b = rnd((m, k), dt, g), rnd((k, n), dt, g)
            return simple("aten::mm.out", [a, b], mm_ref(a, b))


for lay_a, lay_b in [("t", "c"), ("c", "t"), ("s", "s"), ("t", "t")]:

    @case(f"mm-f32-layout-{lay_a}{lay_b}")
    def _(g, lay_a=lay_a, lay_b=lay_b):
        a, b = rnd((37, 70), F32, g, lay_a), rnd((70, 29), F32, g, lay_b)
        return simple("aten::mm.out", [a, b], mm_ref(a, b))


# GEMM tile edges: micro-tile 6x16, KC 256, MC 144 (below, at, above and multiples), and the
# matrix-vector path (m <= 4 with a contiguous B column).
for m, k, n in [
    (5, 255, 15),
    (6, 256, 16),
    (7, 257, 17),
    (12, 512, 32),
    (145, 20, 33),
    (1, 300, 70),
    (4, 9, 5),
    (2, 1, 40),
]:
    for lay_b in ["c", "t"]:

        @case(f"mm-f32-tiles-{m}x{k}x{n}-{lay_b}")
        def _(g, m=m, k=k, n=n, lay_b=lay_b):
            a, b = rnd((m, k), F32, g), rnd((k, n), F32, g, lay_b)
            return simple("aten::mm.out", [a, b], mm_ref(a, b), tol=(1e-5, 1e-4))


@case("mm-f32-small-scratch")
def _(g):
    # 96 KiB of scratch: the GEMM must shrink its blocks (NC/KC/MC) rather than fail.
    a, b = rnd((200, 700), F32, g, "t"), rnd((700, 900), F32, g)
    c = simple("aten::mm.out", [a, b], mm_ref(a, b), tol=(1e-4, 1e-4))
    c.temp_bytes = 96 << 10
    return c


@case("mm-f32-big")
def _(g):
    a, b = rnd((150, 300), F32, g), rnd((300, 3100), F32, g)
    return simple("aten::mm.out", [a, b], mm_ref(a, b), tol=(1e-4, 1e-4))


@case("mm-f32-dynamic-out")
def _(g):
    a, b = rnd((5, 6), F32, g), rnd((6, 7), F32, g)
    return simple("aten::mm.out", [a, b], mm_ref(a, b), dynamic=True)


@case("mm-f32-out-transposed")
def _(g):
    a, b = rnd((5, 6), F32, g), rnd((6, 7), F32, g)
    o = torch.zeros(7, 5).t()
    return Call("aten::mm.out", [a, b, o, o], [(o, mm_ref(a, b))])


CASES.append(
    (
        "mm-err-shape",
        err(
            "aten::mm.out", [torch.ones(2, 3), torch.ones(4, 2), torch.ones(2, 2), torch.ones(2, 2)]
        ),
    )
)
CASES.append(
    (
        "mm-err-dtype",
        err(
            "aten::mm.out",
            [torch.ones(2, 3), torch.ones(3, 2).double(), torch.ones(2, 2), torch.ones(2, 2)],
        ),
    )
)
CASES.append(
    (
        "mm-err-rank",
        err(
            "aten::mm.out",
            [torch.ones(2, 3, 1), torch.ones(3, 2), torch.ones(2, 2), torch.ones(2, 2)],
        ),
    )
)
CASES.append(
    (
        "mm-err-outshape",
        err(
            "aten::mm.out", [torch.ones(2, 3), torch.ones(3, 2), torch.ones(3, 3), torch.ones(3, 3)]
        ),
    )
)
CASES.append(
    (
        "mm-err-bool",
        err(
            "aten::mm.out",
            [
                torch.ones(2, 3, dtype=torch.bool),
                torch.ones(3, 2, dtype=torch.bool),
                torch.ones(2, 2, dtype=torch.bool),
                torch.ones(2, 2, dtype=torch.bool),
            ],
        ),
    )
)

for dt in [F32, F64, BF16, torch.int32]:
    for lay in ["c", "t"]:

        @case(f"bmm-{dt}-{lay}")
        def _(g, dt=dt, lay=lay):
            a, b = rnd((3, 9, 17), dt, g, lay), rnd((3, 17, 5), dt, g)
            exp = torch.stack([mm_ref(a[i], b[i]) for i in range(3)])
            return simple("aten::bmm.out", [a, b], exp)


for dt in [F32, F16]:

    @case(f"bmm-many-batches-small-scratch-{dt}")
    def _(g, dt=dt):
        # Per-batch GEMM scratch must be released: 300 batches x ~40 KiB > the 1 MiB given.
        a, b = rnd((300, 40, 48), dt, g), rnd((300, 48, 40), dt, g)
        exp = torch.stack([mm_ref(a[i], b[i]) for i in range(300)])
        c = simple("aten::bmm.out", [a, b], exp, tol=(1e-5, 1e-5) if dt == F32 else None)
        c.temp_bytes = 1 << 20
        return c


@case("bmm-empty-batch")
def _(g):
    a, b = rnd((0, 2, 3), F32, g), rnd((0, 3, 4), F32, g)
    return simple("aten::bmm.out", [a, b], torch.zeros(0, 2, 4))


CASES.append(
    (
        "bmm-err-batch",
        err(
            "aten::bmm.out",
            [torch.ones(2, 2, 3), torch.ones(3, 3, 2), torch.ones(2, 2, 2), torch.ones(2, 2, 2)],
        ),
    )
)

for dt in [F32, F64, F16, torch.int64, torch.int32]:
    for self_shape in [(4, 6), (6,), (1, 6), (4, 1), ()]:
        for beta, alpha in [(1, 1), (0, 2), (2, -1)]:

            @case(f"addmm-{dt}-{self_shape}-{beta}-{alpha}")
            def _(g, dt=dt, self_shape=self_shape, beta=beta, alpha=alpha):
                s, a, b = rnd(self_shape, dt, g), rnd((4, 5), dt, g), rnd((5, 6), dt, g)
                if beta == 0 and dt.is_floating_point:
                    s = s.clone()
                    s.view(-1)[0] = float("nan")  # beta 0 ignores self, NaNs included
                rd = ref_in(dt) if dt.is_floating_point else torch.int64
                exp = alpha * (a.to(rd) @ b.to(rd))
                if beta != 0:
                    exp = exp + beta * s.to(rd)
                exp = exp.to(dt)
                bb = float(beta) if dt.is_floating_point else beta
                aa = float(alpha) if dt.is_floating_point else alpha
                return simple("aten::addmm.out", [s, a, b, bb, aa], exp)


CASES.append(
    (
        "addmm-err-float-alpha-int",
        err(
            "aten::addmm.out",
            [
                torch.ones(2, 2, dtype=torch.int32),
                torch.ones(2, 3, dtype=torch.int32),
                torch.ones(3, 2, dtype=torch.int32),
                1,
                0.5,
                torch.ones(2, 2, dtype=torch.int32),
                torch.ones(2, 2, dtype=torch.int32),
            ],
        ),
    )
)
CASES.append(
    (
        "addmm-err-self-bcast",
        err(
            "aten::addmm.out",
            [
                torch.ones(3),
                torch.ones(2, 3),
                torch.ones(3, 2),
                1,
                1,
                torch.ones(2, 2),
                torch.ones(2, 2),
            ],
        ),
    )
)

for dt in [F32, F64, F16, BF16, torch.int32]:
    for xshape in [(5, 8), (2, 3, 8), (8,), (0, 8), (2, 0, 8)]:
        for has_bias in [True, False]:

            @case(f"linear-{dt}-{xshape}-{has_bias}")
            def _(g, dt=dt, xshape=xshape, has_bias=has_bias):
                x, w = rnd(xshape, dt, g), rnd((6, 8), dt, g)
                b = rnd((6,), dt, g) if has_bias else None
                rd = ref_in(dt) if dt.is_floating_point else torch.int64
                exp = x.to(rd) @ w.to(rd).t()
                if b is not None:
                    exp = exp + b.to(rd)
                tol = (3e-2, 3e-2) if dt in (F16, BF16) else None
                return simple("aten::linear.out", [x, w, b], exp.to(dt), tol=tol)


for lay in ["t", "s"]:

    @case(f"linear-f32-layout-{lay}")
    def _(g, lay=lay):
        x = (
            rnd((4, 3, 10), F32, g, lay).transpose(0, 2)
            if lay == "t"
            else rnd((10, 3, 4), F32, g, "s")
        )
        w, b = rnd((7, 4), F32, g, "t" if lay == "t" else "c"), rnd((7,), F32, g)
        return simple(
            "aten::linear.out", [x, w, b], F.linear(x.double(), w.double(), b.double()).float()
        )


CASES.append(
    (
        "linear-err-features",
        err(
            "aten::linear.out",
            [torch.ones(2, 3), torch.ones(4, 5), None, torch.ones(2, 4), torch.ones(2, 4)],
        ),
    )
)
CASES.append(
    (
        "linear-err-bias",
        err(
            "aten::linear.out",
            [torch.ones(2, 5), torch.ones(4, 5), torch.ones(3), torch.ones(2, 4), torch.ones(2, 4)],
        ),
    )
)


# ---------------------------------------------------------------------------------------------
# convolution
# ---------------------------------------------------------------------------------------------


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


def conv_case(
    name,
    xs,
    ws,
    stride,
    pad,
    dil,
    transposed=False,
    opad=None,
    groups=1,
    bias=True,
    dts=(F32,),
    layouts=("c",),
    tol=None,
):
    S = len(xs) - 2
    opad = opad if opad is not None else [0] * S
    for dt in dts:
        for lay in layouts:

            @case(f"conv-{name}-{dt}-{lay}")
            def _(g, dt=dt, lay=lay):
                xl = lay if lay in ("cl", "s") else "c"
                wl = "cl" if lay in ("cl", "wcl") else "c"
                x, w = rnd(xs, dt, g, xl), rnd(ws, dt, g, wl)
                cout = ws[1] * groups if transposed else ws[0]
                b = rnd((cout,), dt, g) if bias else None
                exp = conv_ref(x, w, b, stride, pad, dil, transposed, opad, groups)
                t = tol
                if t is None and dt in (F16, BF16):
                    t = (3e-2, 5e-2)
                if t is None and dt == F32:
                    t = (1e-4, 1e-4)
                return simple(
                    "aten::convolution.out",
                    [x, w, b, stride, pad, dil, transposed, opad, groups],
                    exp,
                    layout="cl" if lay == "cl" else "c",
                    tol=t,
                )


ALLDT = (F32, F64, F16, BF16, torch.int32, torch.int64)
conv_case(
    "2d-basic",
    (2, 4, 9, 8),
    (6, 4, 3, 3),
    [1, 1],
    [1, 1],
    [1, 1],
    dts=ALLDT,
    layouts=("c", "cl", "wcl", "s"),
)
conv_case(
    "2d-strided-dilated",
    (2, 4, 11, 10),
    (6, 2, 3, 2),
    [2, 1],
    [1, 0],
    [1, 2],
    groups=2,
    layouts=("c", "cl"),
    dts=(F32, F64),
)
conv_case("2d-nobias", (1, 3, 7, 7), (5, 3, 3, 3), [2, 2], [0, 0], [1, 1], bias=False)
conv_case(
    "2d-depthwise",
    (2, 6, 10, 9),
    (6, 1, 3, 3),
    [1, 1],
    [1, 1],
    [1, 1],
    groups=6,
    layouts=("c", "cl"),
    dts=(F32, F64),
)
conv_case("2d-depthwise-mult", (1, 4, 8, 8), (8, 1, 5, 5), [2, 2], [2, 2], [1, 1], groups=4)
conv_case(
    "2d-1x1",
    (2, 16, 7, 6),
    (8, 16, 1, 1),
    [1, 1],
    [0, 0],
    [1, 1],
    layouts=("c", "cl"),
    dts=(F32, F64, BF16),
)
conv_case("2d-1x1-strided", (2, 16, 7, 6), (8, 16, 1, 1), [2, 2], [0, 0], [1, 1])
conv_case("2d-pad-big", (1, 2, 3, 3), (3, 2, 3, 3), [1, 1], [3, 2], [1, 1])
conv_case(
    "2d-resnet-stem", (1, 3, 64, 64), (16, 3, 7, 7), [2, 2], [3, 3], [1, 1], layouts=("c", "cl")
)
conv_case(
    "2d-big-chunked", (1, 64, 56, 56), (64, 64, 3, 3), [1, 1], [1, 1], [1, 1], tol=(1e-4, 2e-4)
)
conv_case("1d", (2, 4, 13), (6, 4, 3), [1], [1], [1], dts=(F32, F64, torch.int32))
conv_case("1d-strided-grouped", (2, 4, 20), (8, 2, 4), [3], [2], [2], groups=2)
conv_case(
    "3d",
    (1, 2, 5, 6, 7),
    (3, 2, 2, 3, 2),
    [1, 2, 1],
    [1, 1, 0],
    [1, 1, 2],
    layouts=("c", "cl"),
    dts=(F32, F64),
)
conv_case(
    "2d-transposed",
    (2, 4, 5, 6),
    (4, 3, 3, 3),
    [2, 2],
    [1, 1],
    [1, 1],
    transposed=True,
    opad=[1, 0],
    dts=ALLDT,
    layouts=("c", "cl"),
)
conv_case(
    "2d-transposed-grouped-dilated",
    (1, 4, 5, 5),
    (4, 2, 3, 2),
    [2, 3],
    [0, 1],
    [2, 1],
    transposed=True,
    opad=[1, 2],
    groups=2,
    dts=(F32, F64),
    layouts=("c", "cl", "wcl"),
)
conv_case("2d-transposed-1x1", (1, 8, 4, 4), (8, 4, 1, 1), [1, 1], [0, 0], [1, 1], transposed=True)
conv_case(
    "1d-transposed", (2, 3, 7), (3, 5, 4), [2], [1], [1], transposed=True, opad=[1], dts=(F32, F64)
)
conv_case(
    "3d-transposed",
    (1, 2, 3, 4, 3),
    (2, 3, 2, 2, 3),
    [2, 1, 2],
    [0, 1, 1],
    [1, 1, 1],
    transposed=True,
    opad=[1, 0, 1],
    dts=(F32, F64),
)
conv_case("2d-empty-batch", (0, 3, 5, 5), (4, 3, 3, 3), [1, 1], [0, 0], [1, 1])


def conv_err(name, xs, ws, bs, stride, pad, dil, transposed, opad, groups, outs):
    CASES.append(
        (
            f"conv-err-{name}",
            err(
                "aten::convolution.out",
                [
                    torch.ones(xs),
                    torch.ones(ws),
                    None if bs is None else torch.ones(bs),
                    stride,
                    pad,
                    dil,
                    transposed,
                    opad,
                    groups,
                    torch.ones(outs),
                    torch.ones(outs),
                ],
            ),
        )
    )


conv_err(
    "cin", (1, 3, 5, 5), (2, 4, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, (1, 2, 3, 3)
)
conv_err(
    "groups",
    (1, 4, 5, 5),
    (3, 2, 3, 3),
    None,
    [1, 1],
    [0, 0],
    [1, 1],
    False,
    [0, 0],
    2,
    (1, 3, 3, 3),
)
conv_err(
    "bias", (1, 4, 5, 5), (2, 4, 3, 3), (3,), [1, 1], [0, 0], [1, 1], False, [0, 0], 1, (1, 2, 3, 3)
)
conv_err(
    "kernel-too-big",
    (1, 4, 2, 2),
    (2, 4, 3, 3),
    None,
    [1, 1],
    [0, 0],
    [1, 1],
    False,
    [0, 0],
    1,
    (1, 2, 1, 1),
)
conv_err(
    "opad", (1, 4, 5, 5), (4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], True, [1, 1], 1, (1, 2, 8, 8)
)
conv_err(
    "stride0",
    (1, 4, 5, 5),
    (2, 4, 3, 3),
    None,
    [0, 1],
    [0, 0],
    [1, 1],
    False,
    [0, 0],
    1,
    (1, 2, 3, 3),
)
conv_err("rank", (4, 5, 5), (2, 4, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, (2, 3, 3))
conv_err(
    "outshape",
    (1, 4, 5, 5),
    (2, 4, 3, 3),
    None,
    [1, 1],
    [0, 0],
    [1, 1],
    False,
    [0, 0],
    1,
    (1, 2, 4, 4),
)


# ---------------------------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------------------------

POOL_DT = (F32, F64, F16, BF16, torch.int32, torch.int64, torch.uint8)


def maxpool_case(name, xs, k, s, p, d, ceil, dts=POOL_DT, layouts=("c",), nan=False):
    for dt in dts:
        for lay in layouts:

            @case(f"maxpool-{name}-{dt}-{lay}")
            def _(g, dt=dt, lay=lay):
                x = rnd(xs, dt, g, lay, -50, 50)
                if nan and dt.is_floating_point:
                    x = x.clone()
                    x.view(-1)[3] = float("nan")
                    x.view(-1)[1] = float("nan")
                ev, ei = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, ceil)
                o, oi = out_like(ev, lay), out_like(ei, lay)
                return Call(
                    "aten::max_pool2d_with_indices.out",
                    [x, k, s, p, d, ceil, o, oi, [o, oi]],
                    [(o, ev), (oi, ei)],
                )


maxpool_case("basic", (2, 3, 8, 9), [2, 2], [2, 2], [0, 0], [1, 1], False, layouts=("c", "cl"))
maxpool_case(
    "resnet", (1, 4, 16, 16), [3, 3], [2, 2], [1, 1], [1, 1], False, dts=(F32,), layouts=("c", "cl")
)
maxpool_case("ceil", (1, 2, 7, 8), [3, 2], [2, 3], [1, 1], [1, 1], True, dts=(F32, torch.int64))
maxpool_case("dilated", (1, 2, 9, 10), [2, 3], [1, 2], [1, 1], [2, 2], False, dts=(F32,))
maxpool_case("3d-input", (3, 7, 6), [2, 2], [], [0, 0], [1, 1], False, dts=(F32, torch.int8))
maxpool_case("nan", (1, 1, 4, 4), [2, 2], [2, 2], [0, 0], [1, 1], False, dts=(F32,), nan=True)
maxpool_case("empty-batch", (0, 2, 4, 4), [2, 2], [2, 2], [0, 0], [1, 1], False, dts=(F32,))
CASES.append(
    (
        "maxpool-err-pad",
        err(
            "aten::max_pool2d_with_indices.out",
            [
                torch.ones(1, 1, 4, 4),
                [2, 2],
                [2, 2],
                [2, 2],
                [1, 1],
                False,
                torch.ones(1, 1, 2, 2),
                torch.ones(1, 1, 2, 2, dtype=torch.long),
                [torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2, dtype=torch.long)],
            ],
        ),
    )
)
CASES.append(
    (
        "maxpool-err-idx-dtype",
        err(
            "aten::max_pool2d_with_indices.out",
            [
                torch.ones(1, 1, 4, 4),
                [2, 2],
                [2, 2],
                [0, 0],
                [1, 1],
                False,
                torch.ones(1, 1, 2, 2),
                torch.ones(1, 1, 2, 2),
                [torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2)],
            ],
        ),
    )
)
CASES.append(
    (
        "maxpool-err-too-small",
        err(
            "aten::max_pool2d_with_indices.out",
            [
                torch.ones(1, 1, 1, 1),
                [3, 3],
                [1, 1],
                [0, 0],
                [1, 1],
                False,
                torch.ones(1, 1, 1, 1),
                torch.ones(1, 1, 1, 1, dtype=torch.long),
                [torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1, dtype=torch.long)],
            ],
        ),
    )
)


@case("maxpool-backward")
def _(g):
    x = rnd((2, 3, 7, 7), F32, g)
    k, s, p, d = [3, 3], [2, 2], [1, 1], [1, 1]
    _, idx = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, False)
    go = rnd(idx.shape, F32, g)
    exp = torch.ops.aten.max_pool2d_with_indices_backward(go, x, k, s, p, d, False, idx)
    return simple(
        "aten::max_pool2d_with_indices_backward.grad_input", [go, x, k, s, p, d, False, idx], exp
    )


def avgpool_case(
    name, xs, k, s, p, ceil, incl, div, dts=(F32, F64, F16, BF16, torch.int64), layouts=("c",)
):
    for dt in dts:
        for lay in layouts:

            @case(f"avgpool-{name}-{dt}-{lay}")
            def _(g, dt=dt, lay=lay):
                x = rnd(xs, dt, g, lay, -50, 50)
                rd = F64 if dt.is_floating_point else dt
                exp = torch.ops.aten.avg_pool2d(x.to(rd), k, s, p, ceil, incl, div).to(dt)
                return simple("aten::avg_pool2d.out", [x, k, s, p, ceil, incl, div], exp, lay)


avgpool_case("basic", (2, 3, 8, 9), [2, 2], [2, 2], [0, 0], False, True, None, layouts=("c", "cl"))
avgpool_case("pad-include", (1, 2, 7, 7), [3, 3], [2, 2], [1, 1], False, True, None)
avgpool_case("pad-exclude", (1, 2, 7, 7), [3, 3], [2, 2], [1, 1], False, False, None)
avgpool_case("ceil", (1, 2, 8, 7), [3, 2], [2, 2], [1, 1], True, False, None)
avgpool_case("ceil-include", (1, 2, 8, 7), [3, 3], [2, 2], [1, 0], True, True, None)
avgpool_case("divisor", (1, 2, 6, 6), [2, 3], [1, 2], [1, 1], False, True, 5)
avgpool_case("3d-input", (3, 6, 5), [2, 2], [], [0, 0], False, True, None, dts=(F32,))
CASES.append(
    (
        "avgpool-err-div0",
        err(
            "aten::avg_pool2d.out",
            [
                torch.ones(1, 1, 4, 4),
                [2, 2],
                [2, 2],
                [0, 0],
                False,
                True,
                0,
                torch.ones(1, 1, 2, 2),
                torch.ones(1, 1, 2, 2),
            ],
        ),
    )
)
CASES.append(
    (
        "avgpool-err-rank",
        err(
            "aten::avg_pool2d.out",
            [
                torch.ones(4, 4),
                [2, 2],
                [2, 2],
                [0, 0],
                False,
                True,
                None,
                torch.ones(2, 2),
                torch.ones(2, 2),
            ],
        ),
    )
)

for dt in FLOATS:
    for xs, os_ in [
        ((2, 3, 7, 9), [3, 4]),
        ((1, 4, 8, 8), [1, 1]),
        ((3, 5, 5), [5, 5]),
        ((1, 2, 4, 4), [7, 6]),
    ]:
        for lay in ("c", "cl"):

            @case(f"adaptive-avg-{dt}-{xs}-{os_}-{lay}")
            def _(g, dt=dt, xs=xs, os_=os_, lay=lay):
                x = rnd(xs, dt, g, lay)
                exp = torch.ops.aten._adaptive_avg_pool2d(x.double(), os_).to(dt)
                return simple(
                    "aten::_adaptive_avg_pool2d.out", [x, os_], exp, lay if len(xs) == 4 else "c"
                )


CASES.append(
    (
        "adaptive-avg-err-int",
        err(
            "aten::_adaptive_avg_pool2d.out",
            [
                torch.ones(1, 1, 4, 4, dtype=torch.int32),
                [2, 2],
                torch.ones(1, 1, 2, 2, dtype=torch.int32),
                torch.ones(1, 1, 2, 2, dtype=torch.int32),
            ],
        ),
    )
)


# ---------------------------------------------------------------------------------------------
# normalization
# ---------------------------------------------------------------------------------------------

NORM_TOL = {F32: (1e-5, 1e-5), F64: (1e-10, 1e-10), F16: (1e-2, 2e-2), BF16: (2e-2, 5e-2)}


def opt(t, dt):
    return None if t is None else t.to(dt)


for dt in FLOATS:
    for xs, lay in [
        ((2, 3, 5, 4), "c"),
        ((2, 3, 5, 4), "cl"),
        ((4, 3), "c"),
        ((2, 3, 7), "c"),
        ((0, 3, 2, 2), "c"),
        ((2, 3, 4, 3), "s"),
    ]:
        for affine in [True, False]:

            @case(f"bn-infer-{dt}-{xs}-{lay}-{affine}")
            def _(g, dt=dt, xs=xs, lay=lay, affine=affine):
                C = xs[1]
                x = rnd(xs, dt, g, lay)
                w = rnd((C,), dt, g) if affine else None
                b = rnd((C,), dt, g) if affine else None
                rm, rv = rnd((C,), dt, g), rnd((C,), dt, g, lo=0.5, hi=2.0)
                exp = torch.ops.aten._native_batch_norm_legit_no_training(
                    x.double(), opt(w, F64), opt(b, F64), rm.double(), rv.double(), 0.1, 1e-5
                )[0]
                o = out_like(exp.to(dt), lay if lay == "cl" else "c")
                m1o, m2o = torch.ones(0, dtype=dt), torch.ones(0, dtype=dt)
                return Call(
                    "aten::_native_batch_norm_legit_no_training.out",
                    [x, w, b, rm, rv, 0.1, 1e-5, o, m1o, m2o, [o, m1o, m2o]],
                    [(o, exp.to(dt)), (m1o, torch.empty(0, dtype=dt))],
                    NORM_TOL[dt],
                )


for dt in [F32, F64, BF16]:
    for training in [True, False]:
        for xs in [(4, 3, 5, 2), (6, 2)]:

            @case(f"bn-legit-{dt}-{training}-{xs}")
            def _(g, dt=dt, training=training, xs=xs):
                C = xs[1]
                x, w, b = rnd(xs, dt, g), rnd((C,), dt, g), rnd((C,), dt, g)
                rm, rv = rnd((C,), F32, g), rnd((C,), F32, g, lo=0.5, hi=2.0)
                rm2, rv2 = rm.double().clone(), rv.double().clone()
                y, sm, si = torch.ops.aten._native_batch_norm_legit(
                    x.double(), w.double(), b.double(), rm2, rv2, training, 0.1, 1e-5
                )
                n = 0 if not training else C
                o = out_like(y.to(dt))
                smo, sio = torch.zeros(n, dtype=F32), torch.zeros(n, dtype=F32)
                return Call(
                    "aten::_native_batch_norm_legit.out",
                    [x, w, b, rm, rv, training, 0.1, 1e-5, o, smo, sio, [o, smo, sio]],
                    [
                        (o, y.to(dt)),
                        (smo, sm.float()[:n]),
                        (sio, si.float()[:n]),
                        (rm, rm2.float()),
                        (rv, rv2.float()),
                    ],
                    NORM_TOL[dt],
                )


@case("bn-no-stats")
def _(g):
    x, w, b = rnd((3, 4, 6), F32, g), rnd((4,), F32, g), rnd((4,), F32, g)
    y, sm, si = torch.ops.aten._native_batch_norm_legit.no_stats(
        x.double(), w.double(), b.double(), True, 0.1, 1e-5
    )
    o, smo, sio = torch.zeros(3, 4, 6), torch.zeros(4), torch.zeros(4)
    return Call(
        "aten::_native_batch_norm_legit.no_stats_out",
        [x, w, b, True, 0.1, 1e-5, o, smo, sio, [o, smo, sio]],
        [(o, y.float()), (smo, sm.float()), (sio, si.float())],
    )


CASES.append(
    (
        "bn-no-stats-err-eval",
        err(
            "aten::_native_batch_norm_legit.no_stats_out",
            [
                torch.ones(2, 3),
                None,
                None,
                False,
                0.1,
                1e-5,
                torch.ones(2, 3),
                torch.ones(3),
                torch.ones(3),
                [torch.ones(2, 3), torch.ones(3), torch.ones(3)],
            ],
        ),
    )
)
CASES.append(
    (
        "bn-err-weight",
        err(
            "aten::_native_batch_norm_legit_no_training.out",
            [
                torch.ones(2, 3),
                torch.ones(4),
                None,
                torch.ones(3),
                torch.ones(3),
                0.1,
                1e-5,
                torch.ones(2, 3),
                torch.ones(0),
                torch.ones(0),
                [torch.ones(2, 3), torch.ones(0), torch.ones(0)],
            ],
        ),
    )
)
CASES.append(
    (
        "bn-err-int",
        err(
            "aten::_native_batch_norm_legit_no_training.out",
            [
                torch.ones(2, 3, dtype=torch.int32),
                None,
                None,
                torch.ones(3),
                torch.ones(3),
                0.1,
                1e-5,
                torch.ones(2, 3, dtype=torch.int32),
                torch.ones(0),
                torch.ones(0),
                [torch.ones(2, 3, dtype=torch.int32), torch.ones(0), torch.ones(0)],
            ],
        ),
    )
)

for dt in FLOATS:
    for xs, ns in [
        ((2, 3, 8), [8]),
        ((4, 6, 5), [6, 5]),
        ((7,), [7]),
        ((2, 0, 4), [4]),
        ((3, 4, 5), [3, 4, 5]),
    ]:
        for affine in [True, False]:
            for lay in ["c", "t"]:

                @case(f"layernorm-{dt}-{xs}-{ns}-{affine}-{lay}")
                def _(g, dt=dt, xs=xs, ns=ns, affine=affine, lay=lay):
                    x = rnd(xs, dt, g, lay)
                    n = math.prod(ns)
                    w = rnd(ns, dt, g) if affine else None
                    b = rnd(ns, dt, g) if affine else None
                    y, mean, rstd = torch.ops.aten.native_layer_norm(
                        x.double(), ns, opt(w, F64), opt(b, F64), 1e-5
                    )
                    o, mo, ro = (out_like(y.to(dt)), out_like(mean.to(dt)), out_like(rstd.to(dt)))
                    del n
                    return Call(
                        "aten::native_layer_norm.out",
                        [x, ns, w, b, 1e-5, o, mo, ro, [o, mo, ro]],
                        [(o, y.to(dt)), (mo, mean.to(dt)), (ro, rstd.to(dt))],
                        NORM_TOL[dt],
                    )


CASES.append(
    (
        "layernorm-err-shape",
        err(
            "aten::native_layer_norm.out",
            [
                torch.ones(2, 3),
                [4],
                None,
                None,
                1e-5,
                torch.ones(2, 3),
                torch.ones(2, 1),
                torch.ones(2, 1),
                [torch.ones(2, 3), torch.ones(2, 1), torch.ones(2, 1)],
            ],
        ),
    )
)

for dt in FLOATS:
    for xs, G in [((2, 6, 4, 3), 3), ((3, 4, 5), 2), ((2, 4), 4), ((1, 8, 2, 2, 2), 1)]:
        for lay in ["c", "cl"]:

            @case(f"groupnorm-{dt}-{xs}-{G}-{lay}")
            def _(g, dt=dt, xs=xs, G=G, lay=lay):
                x = rnd(xs, dt, g, lay)
                N, C = xs[0], xs[1]
                hw = math.prod(xs[2:])
                w, b = rnd((C,), dt, g), rnd((C,), dt, g)
                y, mean, rstd = torch.ops.aten.native_group_norm(
                    x.double(), w.double(), b.double(), N, C, hw, G, 1e-5
                )
                o, mo, ro = out_like(y.to(dt)), out_like(mean.to(dt)), out_like(rstd.to(dt))
                return Call(
                    "aten::native_group_norm.out",
                    [x, w, b, N, C, hw, G, 1e-5, o, mo, ro, [o, mo, ro]],
                    [(o, y.to(dt)), (mo, mean.to(dt)), (ro, rstd.to(dt))],
                    NORM_TOL[dt],
                )


CASES.append(
    (
        "groupnorm-err-groups",
        err(
            "aten::native_group_norm.out",
            [
                torch.ones(2, 6, 4),
                None,
                None,
                2,
                6,
                4,
                4,
                1e-5,
                torch.ones(2, 6, 4),
                torch.ones(2, 4),
                torch.ones(2, 4),
                [torch.ones(2, 6, 4), torch.ones(2, 4), torch.ones(2, 4)],
            ],
        ),
    )
)


# ---------------------------------------------------------------------------------------------
# padding
# ---------------------------------------------------------------------------------------------

ALL_DT = [F32, F64, F16, BF16, torch.bool] + INTS

for dt in ALL_DT:
    for xs, pad, lay in [
        ((2, 3, 4), [1, 2], "c"),
        ((2, 3, 4, 5), [1, 0, 2, 3], "cl"),
        ((3, 4), [1, 1, 0, 2], "t"),
        ((2, 5, 6), [-1, 2, 1, -2], "c"),
        ((4,), [], "c"),
        ((0, 3), [1, 1], "c"),
    ]:

        @case(f"constant-pad-{dt}-{xs}-{pad}-{lay}")
        def _(g, dt=dt, xs=xs, pad=pad, lay=lay):
            x = rnd(xs, dt, g, lay)
            value = True if dt == torch.bool else (3 if not dt.is_floating_point else -1.5)
            exp = torch.ops.aten.constant_pad_nd(x, pad, value)
            return simple("aten::constant_pad_nd.out", [x, pad, value], exp)


@case("constant-pad-i64-exact")
def _(g):
    x = torch.tensor([[1, 2]], dtype=torch.int64)
    v = 2**62 + 1
    return simple(
        "aten::constant_pad_nd.out", [x, [1, 1], v], torch.ops.aten.constant_pad_nd(x, [1, 1], v)
    )


CASES.append(
    (
        "constant-pad-err-too-many",
        err(
            "aten::constant_pad_nd.out",
            [torch.ones(3), [1, 1, 1, 1], 0.0, torch.ones(5), torch.ones(5)],
        ),
    )
)
CASES.append(
    (
        "constant-pad-err-negative",
        err(
            "aten::constant_pad_nd.out",
            [torch.ones(3), [-2, -2], 0.0, torch.ones(1), torch.ones(1)],
        ),
    )
)

for kind in ["reflection", "replication"]:
    for nd, xs, pad in [
        (1, (2, 3, 6), [2, 3]),
        (1, (3, 5), [4, 0]),
        (2, (2, 3, 5, 6), [1, 2, 3, 0]),
        (2, (3, 4, 4), [3, 3, 1, 1]),
        (3, (1, 2, 3, 4, 5), [1, 2, 0, 2, 1, 1]),
        (3, (2, 3, 3, 3), [2, 1, 1, 2, 0, 1]),
    ]:
        for dt in [F32, torch.int64, BF16, torch.uint8]:

            @case(f"{kind}-pad{nd}d-{dt}-{xs}-{pad}")
            def _(g, kind=kind, nd=nd, xs=xs, pad=pad, dt=dt):
                x = rnd(xs, dt, g, "cl" if len(xs) in (4, 5) else "c")
                fn = getattr(torch.ops.aten, f"{kind}_pad{nd}d")
                try:
                    exp = fn(x, pad)
                except RuntimeError:
                    exp = fn(x.double(), pad).to(dt)  # some dtypes lack an eager kernel
                return simple(f"aten::{kind}_pad{nd}d.out", [x, pad], exp)


CASES.append(
    (
        "reflection-pad-err-size",
        err(
            "aten::reflection_pad1d.out",
            [torch.ones(2, 3), [3, 0], torch.ones(2, 6), torch.ones(2, 6)],
        ),
    )
)
CASES.append(
    (
        "reflection-pad-err-rank",
        err(
            "aten::reflection_pad2d.out",
            [torch.ones(3), [1, 1, 1, 1], torch.ones(5), torch.ones(5)],
        ),
    )
)

# ---------------------------------------------------------------------------------------------
# upsample / grid sample / pixel shuffle
# ---------------------------------------------------------------------------------------------

for dt in [F32, F64, F16, BF16, torch.uint8]:
    for xs, osz, sc, lay in [
        ((2, 3, 4, 5), [8, 10], None, "c"),
        ((1, 2, 5, 3), [7, 4], None, "cl"),
        ((1, 2, 6, 6), [4, 3], None, "c"),
        ((1, 2, 3, 4), None, [2.5, 1.7], "c"),
        ((1, 1, 4, 4), None, [0.5, 0.75], "c"),
    ]:

        @case(f"upsample-nearest-{dt}-{xs}-{osz}-{sc}-{lay}")
        def _(g, dt=dt, xs=xs, osz=osz, sc=sc, lay=lay):
            x = rnd(xs, dt, g, lay)
            exp = torch.ops.aten.upsample_nearest2d.vec(x, osz, sc)
            return simple("aten::upsample_nearest2d.vec_out", [x, osz, sc], exp, lay)


for dt in FLOATS:
    for xs, osz, sc, lay in [
        ((2, 3, 4, 5), [8, 10], None, "c"),
        ((1, 2, 5, 3), [7, 4], None, "cl"),
        ((1, 2, 6, 6), [4, 3], None, "c"),
        ((1, 2, 3, 4), None, [2.5, 1.7], "c"),
        ((1, 1, 4, 4), [1, 1], None, "c"),
    ]:
        for align in [False, True]:

            @case(f"upsample-bilinear-{dt}-{xs}-{osz}-{sc}-{align}-{lay}")
            def _(g, dt=dt, xs=xs, osz=osz, sc=sc, lay=lay, align=align):
                x = rnd(xs, dt, g, lay)
                exp = torch.ops.aten.upsample_bilinear2d.vec(x, osz, align, sc)
                tol = (1e-5, 1e-5) if dt == F32 else None
                return simple(
                    "aten::upsample_bilinear2d.vec_out", [x, osz, align, sc], exp, lay, tol=tol
                )


CASES.append(
    (
        "upsample-err-both",
        err(
            "aten::upsample_nearest2d.vec_out",
            [
                torch.ones(1, 1, 2, 2),
                [4, 4],
                [2.0, 2.0],
                torch.ones(1, 1, 4, 4),
                torch.ones(1, 1, 4, 4),
            ],
        ),
    )
)
CASES.append(
    (
        "upsample-err-rank",
        err(
            "aten::upsample_bilinear2d.vec_out",
            [torch.ones(1, 2, 2), [4, 4], False, None, torch.ones(1, 4, 4), torch.ones(1, 4, 4)],
        ),
    )
)

for dt in [F32, F64]:
    for mode in [0, 1, 2]:
        for pad in [0, 1, 2]:
            for align in [False, True]:

                @case(f"grid-sampler-{dt}-{mode}-{pad}-{align}")
                def _(g, dt=dt, mode=mode, pad=pad, align=align):
                    x = rnd((2, 3, 5, 6), dt, g)
                    grid = rnd((2, 4, 7, 2), dt, g, lo=-1.3, hi=1.3)
                    exp = torch.ops.aten.grid_sampler_2d(x, grid, mode, pad, align)
                    return simple(
                        "aten::grid_sampler_2d.out",
                        [x, grid, mode, pad, align],
                        exp,
                        tol=(1e-5, 1e-5),
                    )


@case("grid-sampler-bf16-cl")
def _(g):
    x = rnd((1, 3, 5, 6), BF16, g, "cl")
    grid = rnd((1, 4, 7, 2), BF16, g, lo=-1.1, hi=1.1)
    exp = torch.ops.aten.grid_sampler_2d(x.float(), grid.float(), 0, 0, False).bfloat16()
    return simple("aten::grid_sampler_2d.out", [x, grid, 0, 0, False], exp)


CASES.append(
    (
        "grid-sampler-err-mode",
        err(
            "aten::grid_sampler_2d.out",
            [
                torch.ones(1, 1, 2, 2),
                torch.zeros(1, 2, 2, 2),
                3,
                0,
                False,
                torch.ones(1, 1, 2, 2),
                torch.ones(1, 1, 2, 2),
            ],
        ),
    )
)

for dt in [F32, torch.int64, torch.bool, BF16]:
    for xs, r in [((2, 8, 3, 4), 2), ((9, 2, 2), 3), ((2, 2, 4, 2, 3), 2)]:
        for lay in ["c", "cl"]:

            @case(f"pixel-shuffle-{dt}-{xs}-{r}-{lay}")
            def _(g, dt=dt, xs=xs, r=r, lay=lay):
                x = rnd(xs, dt, g, lay)
                exp = torch.pixel_shuffle(x.contiguous(), r)
                return simple("aten::pixel_shuffle.out", [x, r], exp, lay)

            @case(f"pixel-unshuffle-{dt}-{xs}-{r}-{lay}")
            def _(g, dt=dt, xs=xs, r=r, lay=lay):
                x = torch.pixel_shuffle(rnd(xs, dt, g), r)
                if lay == "cl" and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
                return simple("aten::pixel_unshuffle.out", [x, r], torch.pixel_unshuffle(x, r), lay)


CASES.append(
    (
        "pixel-shuffle-err-channels",
        err(
            "aten::pixel_shuffle.out",
            [torch.ones(1, 3, 2, 2), 2, torch.ones(1, 1, 4, 4), torch.ones(1, 1, 4, 4)],
        ),
    )
)

# ---------------------------------------------------------------------------------------------
# embedding / distances
# ---------------------------------------------------------------------------------------------

for dt in [F32, F16, BF16, torch.int64, torch.uint8]:
    for ishape in [(5,), (2, 3), (), (0,)]:
        for idt in [torch.int64, torch.int32]:
            for lay in ["c", "t"]:

                @case(f"embedding-{dt}-{ishape}-{idt}-{lay}")
                def _(g, dt=dt, ishape=ishape, idt=idt, lay=lay):
                    w = rnd((10, 6), dt, g, lay)
                    idx = torch.randint(0, 10, ishape, generator=g).to(idt)
                    return simple(
                        "aten::embedding.out",
                        [w, idx, -1, False, False],
                        torch.ops.aten.embedding(w, idx.long()),
                    )


CASES.append(
    (
        "embedding-err-range",
        err(
            "aten::embedding.out",
            [
                torch.ones(4, 2),
                torch.tensor([1, 4]),
                -1,
                False,
                False,
                torch.ones(2, 2),
                torch.ones(2, 2),
            ],
        ),
    )
)
CASES.append(
    (
        "embedding-err-negative",
        err(
            "aten::embedding.out",
            [
                torch.ones(4, 2),
                torch.tensor([-1]),
                -1,
                False,
                False,
                torch.ones(1, 2),
                torch.ones(1, 2),
            ],
        ),
    )
)
CASES.append(
    (
        "embedding-err-float-idx",
        err(
            "aten::embedding.out",
            [
                torch.ones(4, 2),
                torch.tensor([1.0]),
                -1,
                False,
                False,
                torch.ones(1, 2),
                torch.ones(1, 2),
            ],
        ),
    )
)

for dt in [F32, F64]:
    for p in [0.0, 1.0, 2.0, 3.0, 0.5, float("inf")]:
        for s1, s2 in [
            ((5, 4), (6, 4)),
            ((2, 3, 4), (1, 5, 4)),
            ((3, 0), (2, 0)),
            ((30, 3), (28, 3)),
        ]:

            @case(f"cdist-{dt}-{p}-{s1}-{s2}")
            def _(g, dt=dt, p=p, s1=s1, s2=s2):
                a, b = rnd(s1, dt, g), rnd(s2, dt, g)
                if s1[-1] and p == 0.0 and s1[:-2] == s2[:-2]:
                    b = b.clone()
                    b[..., 0, :] = a[..., 0, :] if a.dim() == b.dim() else b[..., 0, :]
                exp = torch.ops.aten._cdist_forward(a.double(), b.double(), p, None).to(dt)
                return simple("aten::_cdist_forward.out", [a, b, p, None], exp, tol=(1e-5, 1e-5))

        @case(f"pdist-{dt}-{p}")
        def _(g, dt=dt, p=p):
            a = rnd((6, 5), dt, g, "t")
            exp = torch.ops.aten._pdist_forward(a.contiguous().double(), p).to(dt)
            return simple("aten::_pdist_forward.out", [a, p], exp, tol=(1e-5, 1e-5))


CASES.append(
    (
        "cdist-err-cols",
        err(
            "aten::_cdist_forward.out",
            [torch.ones(2, 3), torch.ones(2, 4), 2.0, None, torch.ones(2, 2), torch.ones(2, 2)],
        ),
    )
)
CASES.append(
    (
        "pdist-err-int",
        err(
            "aten::_pdist_forward.out",
            [
                torch.ones(3, 2, dtype=torch.int32),
                2.0,
                torch.ones(3, dtype=torch.int32),
                torch.ones(3, dtype=torch.int32),
            ],
        ),
    )
)


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

for dt in [F32, F16, BF16]:
    for xs in [(2, 3, 8), (5, 16), (1, 1)]:

        @case(f"choose-qparams-per-token-{dt}-{xs}")
        def _(g, dt=dt, xs=xs):
            x = rnd(xs, dt, g, "c", -3, 5)
            es, ez = QD.choose_qparams_per_token_asymmetric(x, torch.int8)
            so, zo = torch.zeros_like(es), torch.zeros_like(ez)
            return Call(
                "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
                [x, torch.int8, so, zo, [so, zo]],
                [(so, es), (zo, ez)],
                tol=(0, 0),
            )

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


for dt in [F32, F16, BF16]:
    for qmin, qmax, qdt in [(-128, 127, torch.int8), (0, 255, torch.uint8), (0, 15, torch.uint8)]:
        for lo, hi in [(-3, 5), (1, 4), (-6, -2)]:

            @case(f"choose-qparams-{dt}-{qmin}-{qmax}-{lo}-{hi}")
            def _(g, dt=dt, qmin=qmin, qmax=qmax, qdt=qdt, lo=lo, hi=hi):
                x = rnd((3, 7), dt, g, "t", lo, hi)
                es, ez = QD.choose_qparams.tensor(x, qmin, qmax, 1e-7, qdt)
                so, zo = torch.zeros(1, dtype=F64), torch.zeros(1, dtype=torch.int64)
                return Call(
                    "quantized_decomposed::choose_qparams.Tensor_out",
                    [x, qmin, qmax, 1e-7, qdt, so, zo, [so, zo]],
                    [(so, es), (zo, ez)],
                    tol=(0, 0),
                )


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


# ---------------------------------------------------------------------------------------------
# llama:: custom ops (reference: eager SDPA over the sliced cache, written in torch)
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# backward ops
# ---------------------------------------------------------------------------------------------

for dt in [F32, F64]:
    for name, xs, ws, stride, pad, dil, tr, opad, groups in [
        ("2d", (2, 4, 7, 6), (6, 2, 3, 2), [2, 1], [1, 0], [1, 2], False, [0, 0], 2),
        ("1d", (2, 3, 9), (4, 3, 3), [1], [1], [1], False, [0], 1),
        ("2d-transposed", (1, 4, 4, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 0], 1),
        (
            "3d",
            (1, 2, 4, 4, 3),
            (2, 2, 2, 2, 2),
            [1, 1, 1],
            [0, 1, 0],
            [1, 1, 1],
            False,
            [0, 0, 0],
            1,
        ),
    ]:
        for mask in [[True, True, True], [True, False, False], [False, True, True]]:

            @case(f"conv-backward-{name}-{dt}-{mask}")
            def _(
                g,
                dt=dt,
                xs=xs,
                ws=ws,
                stride=stride,
                pad=pad,
                dil=dil,
                tr=tr,
                opad=opad,
                groups=groups,
                mask=mask,
            ):
                x, w = rnd(xs, dt, g, "cl" if len(xs) == 4 else "c"), rnd(ws, dt, g)
                cout = ws[1] * groups if tr else ws[0]
                y = torch.ops.aten.convolution(
                    x.double(), w.double(), None, stride, pad, dil, tr, opad, groups
                )
                go = rnd(y.shape, dt, g)
                gi, gw, gb = torch.ops.aten.convolution_backward(
                    go.double(),
                    x.double(),
                    w.double(),
                    [cout],
                    stride,
                    pad,
                    dil,
                    tr,
                    opad,
                    groups,
                    mask,
                )
                o0, o1, o2 = (
                    torch.zeros(xs, dtype=dt),
                    torch.zeros(ws, dtype=dt),
                    torch.zeros(cout, dtype=dt),
                )
                exp = []
                for o, e, m in [(o0, gi, mask[0]), (o1, gw, mask[1]), (o2, gb, mask[2])]:
                    exp.append((o, e.to(dt) if m else torch.zeros_like(o)))
                return Call(
                    "aten::convolution_backward.out",
                    [
                        go,
                        x,
                        w,
                        [cout],
                        stride,
                        pad,
                        dil,
                        tr,
                        opad,
                        groups,
                        mask,
                        o0,
                        o1,
                        o2,
                        [o0, o1, o2],
                    ],
                    exp,
                    tol=(1e-5, 1e-5) if dt == F32 else None,
                )


CASES.append(
    (
        "conv-backward-err-shape",
        err(
            "aten::convolution_backward.out",
            [
                torch.ones(1, 2, 4, 4),
                torch.ones(1, 3, 5, 5),
                torch.ones(2, 3, 3, 3),
                None,
                [1, 1],
                [0, 0],
                [1, 1],
                False,
                [0, 0],
                1,
                [True, True, True],
                torch.ones(1, 3, 5, 5),
                torch.ones(2, 3, 3, 3),
                torch.ones(2),
                [torch.ones(1, 3, 5, 5), torch.ones(2, 3, 3, 3), torch.ones(2)],
            ],
        ),
    )
)

for dt in [F32, F64, BF16]:
    for xs, osz, sc in [
        ((1, 2, 9, 11), [4, 5], None),
        ((2, 3, 4, 5), [9, 7], None),
        ((1, 1, 8, 8), [3, 3], (2.5, 2.5)),
        ((1, 2, 6, 6), [1, 1], None),
    ]:
        for align in [False, True]:

            @case(f"upsample-bilinear-aa-{dt}-{xs}-{osz}-{sc}-{align}")
            def _(g, dt=dt, xs=xs, osz=osz, sc=sc, align=align):
                x = rnd(xs, dt, g, "cl")
                sh, sw = sc if sc else (None, None)
                exp = torch.ops.aten._upsample_bilinear2d_aa(x.double(), osz, align, sh, sw)
                return simple(
                    "aten::_upsample_bilinear2d_aa.out", [x, osz, align, sh, sw], exp.to(dt)
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


# Small scratch (an MCU-sized temp arena): chunked buffers and GEMM blocks must shrink to fit.
@case("conv-small-scratch")
def _(g):
    x, w = rnd((1, 16, 30, 30), F32, g), rnd((24, 16, 3, 3), F32, g)
    exp = conv_ref(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    c = simple(
        "aten::convolution.out",
        [x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1],
        exp,
        tol=(1e-4, 1e-4),
    )
    c.temp_bytes = 64 << 10
    return c


@case("conv-transposed-small-scratch")
def _(g):
    x, w = rnd((1, 8, 20, 20), F32, g), rnd((8, 12, 3, 3), F32, g)
    exp = conv_ref(x, w, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1)
    c = simple(
        "aten::convolution.out",
        [x, w, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1],
        exp,
        tol=(1e-4, 1e-4),
    )
    c.temp_bytes = 64 << 10
    return c


@case("custom-sdpa-small-scratch")
def _(g):
    q, k, v = (
        rnd((1, 64, 2, 32), F32, g),
        rnd((1, 200, 2, 32), F32, g),
        rnd((1, 200, 2, 32), F32, g),
    )
    c = simple(
        "llama::custom_sdpa.out",
        [q, k, v, 100, None, 0.0, True, None],
        sdpa_ref(q, k, v, 100, None, True, None),
        tol=(1e-4, 1e-5),
    )
    c.temp_bytes = 48 << 10
    return c


@case("mixed-linear-small-scratch")
def _(g):
    x = rnd((8, 256), F32, g)
    w = torch.randint(-128, 128, (300, 256), generator=g).to(torch.int8)
    s = torch.rand(300, generator=g) * 0.05
    exp = (x.double() @ (w.double() * s.double()[:, None]).t()).float()
    c = simple(
        "quantized_decomposed::mixed_linear.out", [x, w, s, None, F32], exp, tol=(1e-4, 1e-4)
    )
    c.temp_bytes = 64 << 10
    return c


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


# ---------------------------------------------------------------------------------------------
# more error cases (bad shapes, dtypes, arguments must raise, never crash)
# ---------------------------------------------------------------------------------------------

I8, U8, I64 = torch.int8, torch.uint8, torch.int64
MORE_ERRORS = [
    (
        "maxpool-backward-err-index",
        "aten::max_pool2d_with_indices_backward.grad_input",
        [
            torch.ones(1, 1, 2, 2),
            torch.ones(1, 1, 4, 4),
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            False,
            torch.full((1, 1, 2, 2), 16, dtype=I64),
            torch.zeros(1, 1, 4, 4),
            torch.zeros(1, 1, 4, 4),
        ],
    ),
    (
        "maxpool-backward-err-shape",
        "aten::max_pool2d_with_indices_backward.grad_input",
        [
            torch.ones(1, 1, 3, 3),
            torch.ones(1, 1, 4, 4),
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            False,
            torch.zeros(1, 1, 3, 3, dtype=I64),
            torch.zeros(1, 1, 4, 4),
            torch.zeros(1, 1, 4, 4),
        ],
    ),
    (
        "constant-pad-err-dtype",
        "aten::constant_pad_nd.out",
        [torch.ones(3), [1, 1], 0.0, torch.ones(5, dtype=F64), torch.ones(5, dtype=F64)],
    ),
    (
        "upsample-aa-err-size",
        "aten::_upsample_bilinear2d_aa.out",
        [
            torch.ones(1, 1, 4, 4),
            [0, 2],
            False,
            None,
            None,
            torch.ones(1, 1, 1, 2),
            torch.ones(1, 1, 1, 2),
        ],
    ),
    (
        "pixel-unshuffle-err-spatial",
        "aten::pixel_unshuffle.out",
        [torch.ones(1, 1, 3, 4), 2, torch.ones(1, 4, 1, 2), torch.ones(1, 4, 1, 2)],
    ),
    (
        "dq-per-channel-err-axis",
        "quantized_decomposed::dequantize_per_channel.out",
        [
            torch.zeros(2, 3, dtype=I8),
            torch.ones(3),
            None,
            2,
            -128,
            127,
            I8,
            None,
            torch.zeros(2, 3),
            torch.zeros(2, 3),
        ],
    ),
    (
        "q-per-token-err-scales",
        "quantized_decomposed::quantize_per_token.out",
        [
            torch.ones(2, 3),
            torch.ones(3, 1, dtype=F64),
            torch.zeros(3, 1, dtype=I64),
            -128,
            127,
            I8,
            torch.zeros(2, 3, dtype=I8),
            torch.zeros(2, 3, dtype=I8),
        ],
    ),
    (
        "choose-qparams-err-empty",
        "quantized_decomposed::choose_qparams.Tensor_out",
        [
            torch.ones(0),
            -128,
            127,
            1e-7,
            I8,
            torch.zeros(1, dtype=F64),
            torch.zeros(1, dtype=I64),
            [torch.zeros(1, dtype=F64), torch.zeros(1, dtype=I64)],
        ],
    ),
    (
        "mixed-mm-err-shape",
        "quantized_decomposed::mixed_mm.out",
        [
            torch.ones(2, 3),
            torch.zeros(4, 5, dtype=I8),
            torch.ones(4),
            None,
            torch.ones(2, 5),
            torch.ones(2, 5),
        ],
    ),
    (
        "q-add-err-dtype",
        "quantized_decomposed::add.out",
        [
            torch.zeros(3, dtype=U8),
            0.1,
            0,
            0,
            255,
            torch.zeros(3, dtype=I8),
            0.1,
            0,
            0,
            255,
            0.1,
            0,
            0,
            255,
            torch.zeros(3, dtype=U8),
            torch.zeros(3, dtype=U8),
        ],
    ),
    (
        "sdpa-kv-cache-err-seq-len",
        "llama::sdpa_with_kv_cache.out",
        [
            torch.ones(1, 2, 2, 4),
            torch.ones(1, 2, 2, 4),
            torch.ones(1, 2, 2, 4),
            torch.ones(1, 6, 2, 4),
            torch.ones(1, 6, 2, 4),
            0,
            3,
            None,
            0.0,
            True,
            None,
            torch.ones(1, 2, 2, 4),
            torch.ones(1, 2, 2, 4),
        ],
    ),
    (
        "custom-sdpa-err-dtype",
        "llama::custom_sdpa.out",
        [
            torch.ones(1, 1, 2, 4, dtype=I64),
            torch.ones(1, 4, 2, 4, dtype=I64),
            torch.ones(1, 4, 2, 4, dtype=I64),
            0,
            None,
            0.0,
            True,
            None,
            torch.ones(1, 1, 2, 4, dtype=I64),
            torch.ones(1, 1, 2, 4, dtype=I64),
        ],
    ),
    (
        "groupnorm-err-shape",
        "aten::native_group_norm.out",
        [
            torch.ones(2, 6, 4),
            None,
            None,
            2,
            6,
            5,
            3,
            1e-5,
            torch.ones(2, 6, 4),
            torch.ones(2, 3),
            torch.ones(2, 3),
            [torch.ones(2, 6, 4), torch.ones(2, 3), torch.ones(2, 3)],
        ],
    ),
    (
        "cdist-err-batch",
        "aten::_cdist_forward.out",
        [
            torch.ones(2, 3, 4),
            torch.ones(3, 5, 4),
            2.0,
            None,
            torch.ones(2, 3, 5),
            torch.ones(2, 3, 5),
        ],
    ),
    (
        "embedding-err-weight-rank",
        "aten::embedding.out",
        [torch.ones(4), torch.tensor([1]), -1, False, False, torch.ones(1, 1), torch.ones(1, 1)],
    ),
]
for name, op, args in MORE_ERRORS:
    CASES.append((name, err(op, args)))


@case("constant-pad-0dim")
def _(g):
    x = torch.tensor(3.5)
    return simple("aten::constant_pad_nd.out", [x, [], 1.0], torch.ops.aten.constant_pad_nd(x, []))


def _nn_ops() -> list[tuple[str, int]]:
    """(name, n_args) of every entry in ops_nn.def."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "kernels/portable/ops_nn.def").read_text()
    return [(m[0], int(m[1])) for m in re.findall(r'EM_OP\("([^"]+)",\s*\w+,\s*(-?\d+)', text)]


# Garbage arguments (all None; all ints; tensors where scalars belong) must raise, not crash.
for _op, _n in _nn_ops():
    CASES.append((f"garbage-none-{_op}", err(_op, [None] * _n)))
    CASES.append((f"garbage-int-{_op}", err(_op, [1] * _n)))
    if _op != "aten::mm.out":  # all-[2, 2] tensors is a valid mm call
        CASES.append((f"garbage-tensor-{_op}", err(_op, [torch.ones(2, 2)] * _n)))


for dt in [BF16, F16]:
    for m in [1, 3, 9]:

        @case(f"linear-half-column-blocks-{dt}-{m}")
        def _(g, dt=dt, m=m):
            # f16/bf16 weights are widened in column blocks sized to the scratch (here ~4).
            x, w, b = rnd((m, 64), dt, g), rnd((300, 64), dt, g), rnd((300,), dt, g)
            exp = (x.double() @ w.double().t() + b.double()).to(dt)
            c = simple("aten::linear.out", [x, w, b], exp, tol=(3e-2, 5e-2))
            c.temp_bytes = 64 << 10
            return c


# The same kernels with a thread pool in the context (GEMM tiles and packing, matrix-vector
# columns, depthwise channels run in parallel).
_THREADED = [
    (
        "mm",
        lambda g: (lambda a, b: simple("aten::mm.out", [a, b], mm_ref(a, b), tol=(1e-4, 1e-4)))(
            rnd((100, 300), F32, g, "t"), rnd((300, 700), F32, g)
        ),
    ),
    (
        "linear-gemv",
        lambda g: (
            lambda x, w: simple(
                "aten::linear.out",
                [x, w, None],
                (x.double() @ w.double().t()).float(),
                tol=(1e-4, 1e-4),
            )
        )(rnd((3, 500), F32, g), rnd((70, 500), F32, g)),
    ),
    (
        "conv",
        lambda g: (
            lambda x, w: simple(
                "aten::convolution.out",
                [x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1],
                conv_ref(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
                tol=(1e-4, 1e-4),
            )
        )(rnd((2, 16, 20, 20), F32, g), rnd((32, 16, 3, 3), F32, g)),
    ),
    (
        "conv-depthwise",
        lambda g: (
            lambda x, w: simple(
                "aten::convolution.out",
                [x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 16],
                conv_ref(x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 16),
                tol=(1e-4, 1e-4),
            )
        )(rnd((2, 16, 21, 20), F32, g, "cl"), rnd((16, 1, 3, 3), F32, g)),
    ),
    (
        "sdpa",
        lambda g: (
            lambda q, k, v: simple(
                "llama::custom_sdpa.out",
                [q, k, v, 30, None, 0.0, True, None],
                sdpa_ref(q, k, v, 30, None, True, None),
                tol=(1e-4, 1e-5),
            )
        )(rnd((1, 50, 4, 32), F32, g), rnd((1, 80, 2, 32), F32, g), rnd((1, 80, 2, 32), F32, g)),
    ),
]
for _name, _build in _THREADED:

    @case(f"threaded-{_name}")
    def _(g, _build=_build):
        c = _build(g)
        c.threads = True
        c.temp_bytes = 32 << 20
        return c
