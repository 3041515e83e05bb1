"""The all-f32 fast paths of the portable kernels against eager PyTorch and the generic loops.

ew_map (kernels/portable/elementwise_util.c) runs all-f32 elementwise ops by rows when the
innermost merged dim is contiguous or broadcast in every operand; sum/mean of f32 over a
contiguous run take a plain loop (reduce_sum.c). These tests cover the layouts that choose
between the paths: same shapes, Scalars, 0-dim and 1-element tensors, row (`x * weight`),
column (`x * rsqrt(mean)`), outer-product and middle-dim broadcasts, rows shorter than,
equal to and longer than the row minimum (8), empty tensors and sizes above the threading
threshold. Each result is compared

- with eager PyTorch: bit for bit where ATen computes the same single rounding (add/sub with
  alpha +-1, mul, div, neg, abs, relu, clamp), within TOL otherwise;
- with the generic strided loop, reached by passing the same values in a transposed layout:
  bit for bit for elementwise ops, within one f32 ulp for the reductions (they reassociate the
  double accumulation).

Run: PYTHONPATH=python .venv/bin/python -m pytest tests/python/kernels/test_kernels_f32_fast.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ember._lib import Out, call_kernel

A = torch.ops.aten
TOL = (2e-5, 2e-6)

SHAPES = [
    ((4, 33), (4, 33)),  # same shape: one run
    ((4, 33), (33,)),  # a row vector (x * weight)
    ((4, 33), (4, 1)),  # a column (x * rsqrt(mean))
    ((4, 1), (1, 33)),  # outer product: a repeats along the row, b does not
    ((1, 33), (4, 33)),
    ((2, 3, 5, 16), (2, 1, 5, 16)),  # a broadcast middle dim
    ((2, 3, 5, 16), (3, 1, 1)),
    ((5, 7), (7,)),  # rows shorter than the row minimum: generic
    ((5, 8), (8,)),
    ((5, 9), (9,)),
    ((4, 33), ()),  # 0-dim tensor
    ((4, 33), (1,)),  # 1-element tensor
    ((3, 1), (1,)),
    ((0, 8), (8,)),  # empty
    ((200, 200), (200,)),  # above the threading threshold
]


def rnd(g: torch.Generator, shape: tuple[int, ...], specials: bool = True) -> torch.Tensor:
    """Values in [-4, 4) with NaN, +-inf, +-0 and a denormal mixed in (when large enough)."""
    t = torch.rand(shape, generator=g) * 8 - 4
    if specials and t.numel() >= 8:
        flat = t.view(-1)
        idx = torch.randperm(flat.numel(), generator=g)[:6]
        flat[idx] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40])
    return t


def strided(t: torch.Tensor) -> torch.Tensor:
    """The same values with the last two dims stored transposed (forces the generic walk)."""
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
        return t
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, NaN where the other is NaN, identical bits elsewhere (so -0 != +0)."""
    if a.shape != b.shape:
        return False
    na, nb = torch.isnan(a), torch.isnan(b)
    if not torch.equal(na, nb):
        return False
    return torch.equal(a[~na].view(torch.int32), b[~nb].view(torch.int32))


def run(
    op: str, args: list[Any], shape: tuple[int, ...], dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    o = Out(torch.empty(shape, dtype=dtype))
    call_kernel(op, [*args, o, o])
    return o.t


BINARY = [
    # (name, kernel, extra args after the operands, eager, exact vs eager)
    ("add", "aten::add.out", [1], lambda a, b: a + b, True),
    ("add-a-1", "aten::add.out", [-1], lambda a, b: torch.add(a, b, alpha=-1), True),
    ("add-a2.5", "aten::add.out", [2.5], lambda a, b: torch.add(a, b, alpha=2.5), False),
    ("sub", "aten::sub.out", [1], lambda a, b: a - b, True),
    ("sub-a3", "aten::sub.out", [3], lambda a, b: torch.sub(a, b, alpha=3), False),
    ("mul", "aten::mul.out", [], lambda a, b: a * b, True),
    ("div", "aten::div.out", [], lambda a, b: a / b, True),
    ("pow", "aten::pow.Tensor_Tensor_out", [], torch.pow, False),
]


@pytest.mark.parametrize("spec", BINARY, ids=[s[0] for s in BINARY])
@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
def test_binary(spec: tuple, shapes: tuple) -> None:
    name, kernel, extra, fn, exact = spec
    g = torch.Generator().manual_seed(hash((name, shapes)) & 0xFFFF)
    a, b = rnd(g, shapes[0]), rnd(g, shapes[1])
    want = fn(a, b)
    for x, y in ((a, b), (b, a)):  # each operand on either side
        want = fn(x, y)
        got = run(kernel, [x, y, *extra], tuple(want.shape))
        if exact:
            assert bits_equal(got, want), f"{name}: {got} != {want}"
        else:
            torch.testing.assert_close(got, want, rtol=TOL[0], atol=TOL[1], equal_nan=True)
        generic = run(kernel, [strided(x), strided(y), *extra], tuple(want.shape))
        assert bits_equal(got, generic), f"{name}: fast path {got} != generic {generic}"


SCALAR = [
    ("add.Scalar", "aten::add.Scalar_out", lambda a, s: a + s, [1], True),
    ("add.Scalar-a2", "aten::add.Scalar_out", lambda a, s: torch.add(a, s, alpha=2), [2], False),
    ("sub.Scalar", "aten::sub.Scalar_out", lambda a, s: a - s, [1], True),
    ("rsub.Scalar", "aten::rsub.Scalar_out", lambda a, s: s - a, [1], True),
    ("mul.Scalar", "aten::mul.Scalar_out", lambda a, s: a * s, [], True),
    ("div.Scalar", "aten::div.Scalar_out", lambda a, s: a / s, [], True),
    ("pow.Scalar", "aten::pow.Tensor_Scalar_out", torch.pow, [], False),
]


@pytest.mark.parametrize("spec", SCALAR, ids=[s[0] for s in SCALAR])
@pytest.mark.parametrize("s", [0.1, 3, -2.5, True, 2, 2.0, 0.5])
@pytest.mark.parametrize("shape", [(4, 33), (5, 7), (1,), (), (0, 3)])
def test_scalar(spec: tuple, s: Any, shape: tuple[int, ...]) -> None:
    name, kernel, fn, extra, exact = spec
    if isinstance(s, bool) and name.startswith(("sub", "rsub")):
        pytest.skip("subtraction with a bool operand is an error (covered elsewhere)")
    g = torch.Generator().manual_seed(len(name) * 31 + len(shape))
    a = rnd(g, shape)
    if name == "pow.Scalar" and s == 0.5:  # C pow(-inf, .5) = inf, pow(-0, .5) = +0; ATen: sqrt
        a[torch.isinf(a) | (a == 0)] = 1.0
    want = fn(a, s)
    got = run(kernel, [a, s, *extra], tuple(want.shape))
    if exact:
        assert bits_equal(got, want), f"{name}: {got} != {want}"
    else:
        torch.testing.assert_close(got, want, rtol=TOL[0], atol=TOL[1], equal_nan=True)
    generic = run(kernel, [strided(a), s, *extra], tuple(want.shape))
    assert bits_equal(got, generic)


UNARY = [
    # (kernel, extra args, eager, exact vs eager)
    ("aten::neg.out", [], torch.neg, True),
    ("aten::abs.out", [], torch.abs, True),
    ("aten::relu.out", [], torch.relu, True),
    ("aten::clamp.out", [-1.5, 2], lambda x: torch.clamp(x, -1.5, 2), True),
    ("aten::hardtanh.out", [-1, 1], lambda x: torch.nn.functional.hardtanh(x), True),
    ("aten::sigmoid.out", [], torch.sigmoid, False),
    ("aten::silu.out", [], torch.nn.functional.silu, False),
    ("aten::tanh.out", [], torch.tanh, False),
    ("aten::leaky_relu.out", [0.1], lambda x: torch.nn.functional.leaky_relu(x, 0.1), False),
    ("aten::gelu.out", ["none"], torch.nn.functional.gelu, False),
    ("aten::exp.out", [], torch.exp, False),
    ("aten::rsqrt.out", [], torch.rsqrt, False),
    ("aten::sin.out", [], torch.sin, False),
]


@pytest.mark.parametrize("spec", UNARY, ids=[s[0].split("::")[1] for s in UNARY])
@pytest.mark.parametrize("shape", [(4, 33), (5, 7), (2, 3, 16), (1,), (), (0, 4), (200, 200)])
def test_unary(spec: tuple, shape: tuple[int, ...]) -> None:
    kernel, extra, fn, exact = spec
    g = torch.Generator().manual_seed(len(kernel) + 7 * len(shape))
    a = rnd(g, shape)
    if "gelu" in kernel:  # eager f32 gelu(+inf) is NaN (its vector path), f64 gives inf
        a[torch.isinf(a)] = 0.0
    want = fn(a)
    got = run(kernel, [a, *extra], tuple(want.shape))
    if exact:
        assert bits_equal(got, want), f"{kernel}: {got} != {want}"
    else:
        torch.testing.assert_close(got, want, rtol=TOL[0], atol=TOL[1], equal_nan=True)
    generic = run(kernel, [strided(a), *extra], tuple(want.shape))
    assert bits_equal(got, generic)


REDUCE = [
    ((4, 33), [-1], True),
    ((4, 33), [-1], False),
    ((2, 3, 16), [-1, -2], True),
    ((2, 3, 16), [1, 2], False),
    ((5, 3), [-1], False),  # runs shorter than the unroll by 4
    ((7, 1), [-1], True),  # a size-1 reduced dim
    ((6,), None, False),  # all dims
    ((), None, False),  # 0-dim
    ((3, 1000), [-1], True),
    ((3, 5), [0], True),  # not the last dim: generic
]


@pytest.mark.parametrize("kind", ["mean", "sum"])
@pytest.mark.parametrize("spec", REDUCE, ids=[f"{s[0]}-{s[1]}-{s[2]}" for s in REDUCE])
def test_reduce(kind: str, spec: tuple) -> None:
    shape, dims, keep = spec
    g = torch.Generator().manual_seed(len(shape) * 13 + (len(dims) if dims else 0))
    a = rnd(g, shape, specials=False)
    if kind == "mean":
        want = torch.mean(a, dims, keepdim=keep) if dims else torch.mean(a)
        kernel, args = "aten::mean.out", [a, dims, keep, None]
    else:
        want = torch.sum(a, dims, keepdim=keep) if dims else torch.sum(a)
        kernel, args = "aten::sum.IntList_out", [a, dims, keep, None]
    got = run(kernel, args, tuple(want.shape))
    torch.testing.assert_close(got, want, rtol=TOL[0] * 4, atol=TOL[1] * 4)
    generic = run(kernel, [strided(a), *args[1:]], tuple(want.shape))
    torch.testing.assert_close(got, generic, rtol=1.2e-7, atol=1e-30)


def test_pow_square_exact() -> None:
    """x ** 2 (RMSNorm's pow) takes a * a: bit-identical to eager, which squares too."""
    g = torch.Generator().manual_seed(5)
    a = torch.cat([rnd(g, (4, 33)).view(-1), torch.tensor([1e-30, 3e19, -1e-45, 1.5e-20])])
    got = run("aten::pow.Tensor_Scalar_out", [a, 2.0], tuple(a.shape))
    assert bits_equal(got, torch.pow(a, 2.0))


def test_reduce_specials() -> None:
    """NaN and infinities propagate through the fast sum like the generic one."""
    a = torch.tensor([[1.0, float("nan"), 2.0, 3.0, 4.0], [float("inf"), 1.0, 2.0, 3.0, 4.0]])
    got = run("aten::sum.IntList_out", [a, [-1], False, None], (2,))
    assert torch.isnan(got[0]) and got[1] == float("inf")
    a = torch.tensor([[float("inf"), -float("inf"), 1.0, 1.0, 1.0]])
    got = run("aten::mean.out", [a, [-1], False, None], (1,))
    assert torch.isnan(got[0])


COPY_DTYPES = [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool]


def _vals(g: torch.Generator, shape: tuple[int, ...], dt: torch.dtype) -> torch.Tensor:
    return (torch.rand(shape, generator=g) * 9).to(dt)


@pytest.mark.parametrize("dt", COPY_DTYPES, ids=str)
def test_same_dtype_copies(dt: torch.dtype) -> None:
    """ew_copy_cast moves same-dtype data between layouts with em_shape_copy: broadcasts,
    transposes, channels-last in and out, exactly as eager."""
    g = torch.Generator().manual_seed(11)
    x = _vals(g, (2, 3, 4), dt)
    for src_shape in [(3, 1), (4,), (1, 3, 4), (2, 3, 4), ()]:
        src = _vals(g, src_shape, dt)
        got = run("aten::copy.out", [x, src, False], (2, 3, 4), dt)
        assert torch.equal(got, A.copy.default(x, src)), src_shape
    t = _vals(g, (40, 33), dt).t()  # a transposed input: tiled copy
    assert torch.equal(run("aten::clone.out", [t, None], (33, 40), dt), t.contiguous())
    x = _vals(g, (2, 3, 4, 5), dt)
    o = torch.zeros(2, 3, 4, 5, dtype=dt).contiguous(memory_format=torch.channels_last)
    call_kernel("dim_order_ops::_to_dim_order_copy.out", [x, False, [0, 2, 3, 1], o, o])
    assert torch.equal(o, x)
    cl = _vals(g, (2, 3, 4, 5), dt).contiguous(memory_format=torch.channels_last)
    src = _vals(g, (4, 1), dt)
    ref = cl.clone().copy_(src)
    call_kernel("aten::copy_", [cl, src, False, cl])
    assert torch.equal(cl, ref)


def call_pooled(name: str, args: list[Any], n_threads: int) -> None:
    """call_kernel with a thread pool of n_threads in the kernel context (call_kernel has none)."""
    import ctypes

    from ember import _lib

    L = _lib.lib()
    L.em_threadpool_create.restype = ctypes.c_void_p
    L.em_threadpool_create.argtypes = [ctypes.c_int]
    L.em_threadpool_destroy.argtypes = [ctypes.c_void_p]
    e = L.em_find_kernel(name.encode()).contents
    vb = _lib.ValueBuilder()
    evs = [vb.value(a) for a in args]
    argv = (ctypes.POINTER(_lib.EmEValue) * len(evs))(*[ctypes.pointer(v) for v in evs])
    buf = ctypes.create_string_buffer(1 << 16)
    temp = _lib.EmAllocator()
    L.em_allocator_init(ctypes.byref(temp), buf, 1 << 16)
    ctx = _lib.EmKernelCtx()
    ctx.temp = ctypes.pointer(temp)
    pool = L.em_threadpool_create(n_threads)
    ctx.pool = pool
    ctx.op_name = name.encode()
    try:
        st = _lib.KERNEL_FN(e.fn)(ctypes.byref(ctx), argv)
    finally:
        L.em_threadpool_destroy(pool)
    assert st == 0, f"{name} failed with status {st}"


POOLED = [
    # kernel, operand shapes, extra args: sizes past the threading thresholds (2^18 elements for
    # the memory-bound row ops, 32768 for the others) with rows that chunks split in the middle
    ("aten::mul.out", [(700, 401), (401,)], []),
    ("aten::add.out", [(701, 400), (701, 1)], [1]),
    ("aten::sigmoid.out", [(301, 111)], []),
    ("aten::pow.Tensor_Tensor_out", [(300, 111), (111,)], []),
    ("aten::silu.out", [(3, 17, 777)], []),
]


@pytest.mark.parametrize("spec", POOLED, ids=[s[0].split("::")[1] for s in POOLED])
@pytest.mark.parametrize("n_threads", [2, 3])
def test_threaded_rows(spec: tuple, n_threads: int) -> None:
    """Row chunks split across a pool give the serial result bit for bit."""
    kernel, shapes, extra = spec
    g = torch.Generator().manual_seed(3)
    ins = [rnd(g, s) for s in shapes]
    oshape = torch.broadcast_shapes(*shapes)
    serial = run(kernel, [*ins, *extra], tuple(oshape))
    o = Out(torch.full(oshape, 7.0))
    call_pooled(kernel, [*ins, *extra, o, o], n_threads)
    assert bits_equal(o.t, serial)


WHERE_SHAPES = [
    # (cond, self, other): the attention-mask pattern and the other dense / one-element mixes
    ((1, 1, 13, 13), (), ()),
    ((1, 1, 197, 197), (), ()),
    ((4, 33), (4, 33), (4, 33)),
    ((4, 33), (4, 33), ()),
    ((4, 33), (1,), (4, 33)),
    ((33,), (4, 33), (1, 1)),  # cond broadcasts: generic
    ((4, 33), (33,), ()),  # self broadcasts as a row: generic
    ((1,), (4, 33), (4, 33)),
    ((), (), ()),
    ((0, 5), (), ()),
    ((2, 1, 1), (), (1, 1, 1, 1)),  # a one-element operand with more dims than the rest
]


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=[f"{c}-{a}-{b}" for c, a, b in WHERE_SHAPES])
def test_where(shapes: tuple) -> None:
    """where.self_out on f32: bit for bit against eager and against the generic loop (same
    values passed transposed), NaN / +-0 / inf chosen through unchanged."""
    cs, as_, bs = shapes
    g = torch.Generator().manual_seed(hash(shapes) & 0xFFFF)
    c = torch.rand(cs, generator=g) < 0.5
    a, b = rnd(g, as_), rnd(g, bs)
    if a.dim() == 0:
        a = torch.tensor(-0.0)
    if b.dim() == 0:
        b = torch.tensor(-3.4028234663852886e38)
    want = torch.where(c, a, b)
    got = run("aten::where.self_out", [c, a, b], tuple(want.shape))
    assert bits_equal(got, want), f"{got} != {want}"
    generic = run("aten::where.self_out", [strided(c), strided(a), strided(b)], tuple(want.shape))
    assert bits_equal(got, generic)
    # a uint8 condition selects the same way
    got_u8 = run("aten::where.self_out", [c.to(torch.uint8), a, b], tuple(want.shape))
    assert bits_equal(got_u8, want)


def test_where_resizes_out_and_refuses_bad_shapes() -> None:
    c = torch.ones(1, 1, 6, 6, dtype=torch.bool).tril()
    a, b = torch.tensor(0.0), torch.tensor(-1e9)
    o = Out(torch.empty(1, 1, 8, 8))  # a dynamic out of capacity 64, resized to [1, 1, 6, 6]
    call_kernel("aten::where.self_out", [c, a, b, o, o])
    assert o.sizes == [1, 1, 6, 6]
    assert bits_equal(o.view(), torch.where(c, a, b))
    with pytest.raises(RuntimeError, match="broadcast"):
        run("aten::where.self_out", [torch.ones(3, 5, dtype=torch.bool), a, torch.ones(4)], (3, 5))
