"""Weight-quantized linear layers (ember::linear_q4 / linear_q8, kernels/quantized/linear_q*.c) and
4/8-bit embeddings (python/ember/quant/llm.py).

* the portable C kernel against the Python reference (same block order: f32-rounding close);
* every SIMD micro-kernel this CPU has against the portable kernel at tile edges (M, N not
  multiples of the 4x4 / 4x2 tiles, K around the 32/64-byte weight chunks), 1 and 2 threads;
* weight quantization (packing, nibble order, range), the modules, quantize_linears and
  quantize_embeddings, the error messages of bad arguments;
* export: an nn.Sequential of quantized Linear layers (and an embedding model) exported with
  ember.export and run on Ember's runtime matches the Python reference.

Run: PYTHONPATH=python .venv/bin/python -m pytest tests/python/kernels/test_linear_q.py
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn

import ember
from ember.quant import QuantizationError
from ember.quant import llm as Q

Q.register_ops()

CASES_Q4 = [(4, g) for g in Q.GROUP_SIZES]
CASES_Q8 = [(8, 0)] + [(8, g) for g in Q.GROUP_SIZES]


def _lib() -> Any:
    try:
        from ember import _lib

        L = _lib.lib()
    except (ImportError, OSError) as e:  # pragma: no cover
        pytest.skip(f"C runtime not built: {e}")
    if not hasattr(L, "em_linear_q_force_isa"):
        pytest.skip("libember.so predates the linear_q kernels")
    L.em_linear_q_force_isa.argtypes = [ctypes.c_char_p]
    L.em_linear_q_force_isa.restype = ctypes.c_int
    L.em_linear_q_isa.restype = ctypes.c_char_p
    L.em_threadpool_create.argtypes = [ctypes.c_int]
    L.em_threadpool_create.restype = ctypes.c_void_p
    L.em_threadpool_destroy.argtypes = [ctypes.c_void_p]
    return L


@contextmanager
def _isa(name: str) -> Iterator[None]:
    L = _lib()
    if L.em_linear_q_force_isa(name.encode()) != 0:
        pytest.skip(f"{name} micro-kernels not available on this CPU/build")
    try:
        yield
    finally:
        L.em_linear_q_force_isa(None)


def _call(name: str, args: Sequence[Any], threads: int = 1) -> None:
    """ember._lib.call_kernel with a thread pool of `threads`."""
    from ember import _lib as B

    L = _lib()
    entry = L.em_find_kernel(name.encode())
    assert entry, f"{name} not registered"
    vb = B.ValueBuilder()
    evs = [vb.value(a) for a in args]
    argv = (ctypes.POINTER(B.EmEValue) * len(evs))(*[ctypes.pointer(v) for v in evs])
    nbytes = 16 << 20
    buf = ctypes.create_string_buffer(nbytes)
    temp = B.EmAllocator()
    L.em_allocator_init(ctypes.byref(temp), buf, nbytes)
    pool = L.em_threadpool_create(threads) if threads > 1 else None
    ctx = B.EmKernelCtx()
    ctx.temp = ctypes.pointer(temp)
    ctx.pool = pool
    ctx.op_name = name.encode()
    L.em_clear_last_error()
    try:
        st = B.KERNEL_FN(entry.contents.fn)(ctypes.byref(ctx), argv)
    finally:
        if pool:
            L.em_threadpool_destroy(pool)
    if st != 0:
        raise RuntimeError(f"{name} failed: {B.status_message(st)}")


def _make(bits: int, gs: int, m: int | tuple[int, ...], n: int, k: int, seed: int, bias: bool):
    g = torch.Generator().manual_seed(seed)
    lead = m if isinstance(m, tuple) else (m,)
    x = torch.randn(*lead, k, generator=g) * 2
    if k >= 64:
        x[..., 32:64] = 0  # an all-zero activation block (scale 0)
    w = torch.randn(n, k, generator=g) * 0.1
    q, s = Q.quantize_weight_q4(w, gs) if bits == 4 else Q.quantize_weight_q8(w, gs)
    b = torch.randn(n, generator=g) if bias else None
    return x, q, s, b


def _run_c(bits: int, x, q, s, gs: int, b, threads: int = 1, off=None) -> torch.Tensor:  # noqa: ANN001
    out = torch.full((*x.shape[:-1], q.shape[0]), float("nan"))
    _call(f"ember::linear_q{bits}.out", [x, q, s, gs, b, off, out, out], threads)
    return out


def _ref(bits: int, x, q, s, gs: int, b, off=None) -> torch.Tensor:  # noqa: ANN001
    return (Q.linear_q4_ref if bits == 4 else Q.linear_q8_ref)(x, q, s, gs, b, off)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    scale = max(want.abs().max().item(), 1e-3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale)


# ---- portable kernel vs Python reference -------------------------------------------------------


@pytest.mark.parametrize("bits,gs", CASES_Q4 + CASES_Q8)
@pytest.mark.parametrize("bias", [True, False])
def test_portable_matches_reference(bits: int, gs: int, bias: bool) -> None:
    with _isa("portable"):
        for i, (m, n, k) in enumerate([(1, 7, 128), ((2, 3), 5, 256), (5, 33, 384), (1, 1, 128)]):
            x, q, s, b = _make(bits, gs, m, n, k, 10 * i + bits + gs, bias)
            _close(_run_c(bits, x, q, s, gs, b), _ref(bits, x, q, s, gs, b))


def test_reference_is_the_documented_arithmetic() -> None:
    # Independent float64 formula: per-block dot of the quantized values, block-scaled.
    x, q, s, b = _make(4, 64, 3, 6, 128, 1, True)
    qa, sa = Q.quantize_activations(x)
    qw = Q.unpack_q4(q).double()
    want = torch.zeros(3, 6, dtype=torch.float64)
    for blk in range(4):
        sl = slice(32 * blk, 32 * blk + 32)
        dot = qa[:, sl].double() @ qw[:, sl].t()
        want += dot * sa[:, blk, None].double() * s[None, :, blk // 2].double()
    _close(Q.linear_q4_ref(x, q, s, 64, b), (want + b.double()).float())
    # Activation quantization: scale = amax/127, |qa| <= 127, reconstruction within scale/2.
    amax = x.reshape(3, 4, 32).abs().amax(-1)
    assert torch.equal(sa, amax / 127.0)
    assert qa.abs().max() <= 127
    err = (qa.float().reshape(3, 4, 32) * sa[..., None] - x.reshape(3, 4, 32)).abs()
    assert (err <= sa[..., None] * 0.5 + 1e-6).all()


# ---- SIMD micro-kernels vs portable ------------------------------------------------------------

SIMD = ["avx2", "avx512vnni"]
# K around the 32- and 64-byte weight chunks (q4: K/2 bytes per row, q8: K bytes).
SHAPES = [
    (1, 1, 128),
    (1, 5, 576),
    (3, 4, 256),
    (4, 7, 384),
    (5, 9, 640),
    (9, 17, 128),
    (8, 3, 1152),
]


@pytest.mark.parametrize("isa", SIMD)
@pytest.mark.parametrize("bits,gs", CASES_Q4 + CASES_Q8)
def test_simd_matches_portable(isa: str, bits: int, gs: int) -> None:
    # (13, 70, 1152), (7, 45, 2176): the prefill route (M >= 4) with partial 32-column tiles and
    # K split into slabs
    extra = [(2, 3, 32), (6, 5, 96), (3, 6, 160), (1, 3, 64), (2, 2, 192), (13, 70, 1152)]
    extra += [(7, 45, 2176)]
    shapes = [sh for sh in SHAPES + extra if sh[2] % (gs or 32) == 0]
    for i, (m, n, k) in enumerate(shapes):
        x, q, s, b = _make(bits, gs, m, n, k, 100 + i, bias=i % 2 == 0)
        with _isa("portable"):
            want = _run_c(bits, x, q, s, gs, b)
        with _isa(isa):
            for threads in (1, 2):
                _close(_run_c(bits, x, q, s, gs, b, threads), want)


@pytest.mark.parametrize("isa", ["portable", *SIMD])
def test_extreme_values(isa: str) -> None:
    # Saturated codes everywhere: q4 weights all -8 or 7, q8 weights +-127, activations +-127.
    k, n = 256, 5
    x = torch.where(torch.arange(k) % 3 == 0, 50.0, -50.0).repeat(2, 1)
    q4 = torch.tensor([[0x0F if (r + j) % 2 else 0xF0 for j in range(k // 2)] for r in range(n)],
                      dtype=torch.uint8)  # fmt: skip
    s4 = torch.full((n, k // 32), 0.25)
    q8 = torch.where(torch.rand(n, k) > 0.5, 127, -127).to(torch.int8)
    s8 = torch.full((n,), 0.5)
    with _isa(isa):
        _close(_run_c(4, x, q4, s4, 32, None), Q.linear_q4_ref(x, q4, s4, 32))
        _close(_run_c(8, x, q8, s8, 0, None), Q.linear_q8_ref(x, q8, s8, 0))


@pytest.mark.parametrize("isa", ["portable", *SIMD])
def test_activation_rounding_is_half_even(isa: str) -> None:
    # amax 127 -> a_scale 1, so x * (1 / a_scale) hits exact ties; one-hot int8 weights (scale 1)
    # read the quantized activations back: y[n] = qa[n].
    ties = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 126.5, -126.5, 4.4, -4.6, 127.0]
    x = torch.zeros(1, 32)
    x[0, : len(ties)] = torch.tensor(ties)
    w = torch.eye(32, dtype=torch.int8)
    q = w.to(torch.int16) + 8
    w4 = ((q[:, 0::2] << 4) | q[:, 1::2]).to(torch.uint8)  # the same one-hot weights, 4-bit
    want = torch.round(torch.tensor(ties))
    with _isa(isa):
        got = _run_c(8, x, w, torch.ones(32), 0, None)
        got4 = _run_c(4, x, w4, torch.ones(32, 1), 32, None)
    assert torch.equal(got[0, : len(ties)], want) and torch.equal(got4[0, : len(ties)], want)
    assert torch.equal(Q.quantize_activations(x)[0][0, : len(ties)].float(), want)


def test_non_finite_input_gives_non_finite_rows_only() -> None:
    x = torch.randn(3, 128)
    x[1, 5], x[2, 70] = float("inf"), float("nan")
    q, s = Q.quantize_weight_q4(torch.randn(4, 128), 32)
    for isa in ["portable", *SIMD]:
        try:
            with _isa(isa):
                y = _run_c(4, x, q, s, 32, None)
        except pytest.skip.Exception:
            continue
        assert torch.isfinite(y[0]).all() and not torch.isfinite(y[1:]).any()


def test_zero_rows_give_bias_and_empty_input() -> None:
    x = torch.zeros(2, 128)
    q, s = Q.quantize_weight_q4(torch.randn(4, 128), 32)
    b = torch.randn(4)
    assert torch.equal(_run_c(4, x, q, s, 32, b), b.expand(2, 4))
    out = torch.empty(0, 4)
    _call("ember::linear_q4.out", [torch.empty(0, 128), q, s, 32, None, None, out, out])


# ---- errors ------------------------------------------------------------------------------------


def test_kernel_errors_name_what_is_wrong() -> None:
    x = torch.randn(2, 128)
    q, s = Q.quantize_weight_q4(torch.randn(4, 128), 32)
    q8, s8 = Q.quantize_weight_q8(torch.randn(4, 128), 0)
    bad = [
        ("linear_q4", [x, q, s, 48, None], "group_size"),
        ("linear_q4", [x, q, s, 0, None], "group_size"),
        ("linear_q4", [x, q.view(torch.int8), s, 32, None], "uint8"),
        ("linear_q4", [x.double(), q, s, 32, None], "float32"),
        ("linear_q4", [x, q, s.double(), 32, None], "scales"),
        ("linear_q4", [x, q, s[:, :2].contiguous(), 32, None], "scales"),
        ("linear_q4", [x[:, :64].contiguous(), q, s, 32, None], "features"),
        ("linear_q4", [x, q, s, 32, torch.randn(3)], "bias"),
        ("linear_q8", [x, q8.view(torch.uint8), s8, 0, None], "int8"),
        ("linear_q8", [x, q8, s8, 32, None], "scales"),
        ("linear_q8", [x[:, :96].contiguous(), q8[:, :96].contiguous(), s8, 64, None], "multiple"),
    ]
    for op, args, words in bad:
        out = torch.empty(2, 4)
        with pytest.raises(RuntimeError, match=words):
            _call(f"ember::{op}.out", [*args, None, out, out])
        with pytest.raises(QuantizationError, match=words):
            getattr(torch.ops.ember, op)(*args)


def test_quantize_weight_errors() -> None:
    with pytest.raises(QuantizationError, match="group_size"):
        Q.quantize_weight_q4(torch.randn(4, 128), 16)
    with pytest.raises(QuantizationError, match="multiple"):
        Q.quantize_weight_q4(torch.randn(4, 96), 64)
    with pytest.raises(QuantizationError, match="2-D float"):
        Q.quantize_weight_q8(torch.randn(4, 4, 32))
    with pytest.raises(QuantizationError, match="scheme"):
        Q.quantize_linears(nn.Sequential(nn.Linear(32, 4)), "3w32")


# ---- weight quantization, modules, model rewrites ----------------------------------------------


def test_q4_packing_and_range() -> None:
    w = torch.randn(6, 128)
    w[0, 5] = 3.0  # positive extreme of group 0 maps to -8 with a negative scale
    packed, s = Q.quantize_weight_q4(w, 32)
    assert packed.dtype == torch.uint8 and packed.shape == (6, 64) and s.shape == (6, 4)
    q = Q.unpack_q4(packed)
    assert q.min() >= -8 and q.max() <= 7 and q[0, 5] == -8
    # Element 2j is the high nibble, 2j+1 the low one, each stored q + 8.
    assert torch.equal((packed[:, 3] >> 4).to(torch.int8) - 8, q[:, 6])
    assert torch.equal((packed[:, 3] & 15).to(torch.int8) - 8, q[:, 7])
    err = (q.float().reshape(6, 4, 32) * s[..., None]).reshape(6, 128) - w
    step = s.abs().repeat_interleave(32, 1)
    # Within half a step, except values clamped to 7 on the side opposite the extreme (one step).
    assert (err.abs() <= torch.where(q == 7, step, step * 0.5) + 1e-6).all()
    q8, s8 = Q.quantize_weight_q8(w, 0)
    assert s8.shape == (6,) and q8.abs().max() == 127
    assert ((q8.float() * s8[:, None] - w).abs() <= s8[:, None] * 0.5 + 1e-6).all()


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 64)
        self.wq = nn.Linear(64, 96)
        self.wo = nn.Linear(96, 64, bias=False)
        self.lm_head = nn.Linear(64, 50, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens)
        h = h + self.wo(torch.relu(self.wq(h)))
        return self.lm_head(h)


def test_quantize_linears_and_embeddings() -> None:
    torch.manual_seed(0)
    m = _Tiny().eval()
    tokens = torch.tensor([[3, 7, 11, 49]])
    ref = m(tokens)
    Q.quantize_linears(m, "4w32", skip=["lm_*"])
    Q.quantize_embeddings(m, bits=4, group_size=32)
    assert isinstance(m.wq, Q.LinearQ4) and isinstance(m.wo, Q.LinearQ4)
    assert isinstance(m.lm_head, nn.Linear) and isinstance(m.emb, Q.EmbeddingQ4)
    assert m.wo.bias is None and m.wq.bias is not None
    got = m(tokens)
    assert (got - ref).abs().max() < 0.1 * ref.abs().max()
    m8 = _Tiny().eval()
    Q.quantize_linears(m8, "8w")
    Q.quantize_embeddings(m8, bits=8)
    assert isinstance(m8.lm_head, Q.LinearQ8) and isinstance(m8.emb, Q.EmbeddingQ8)
    # A group size that does not divide in_features falls back to one that does.
    m128 = Q.quantize_linears(_Tiny(), "4w128")
    assert m128.wq.group_size == 64 and m128.wo.group_size == 32
    with pytest.raises(QuantizationError, match="skip"):
        Q.quantize_linears(nn.Sequential(nn.Linear(40, 8)), "8w")


# ---- export and run on Ember's runtime ---------------------------------------------------------


def _runtime(model: nn.Module, example: tuple[torch.Tensor, ...], tmp_path, threads: int = 1):  # noqa: ANN001, ANN202
    _lib()
    from ember.runtime import RuntimeProgram

    path = tmp_path / "model.pte"
    ember.export(model, example).save(path)
    return RuntimeProgram(path, threads=threads)


def _close_model(got: torch.Tensor, want: torch.Tensor) -> None:
    """Across layers: the SIMD kernels' f32 summation order can move a next layer's activation
    across a rounding boundary (one int8 step in a block, ~1/127 of that block's contribution),
    so compare at 1 % of the output range; a wrong kernel is off by the range itself."""
    scale = max(want.abs().max().item(), 1e-3)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2 * scale)


@pytest.mark.parametrize("scheme", sorted(Q.SCHEMES))
def test_sequential_exports_and_runs(scheme: str, tmp_path) -> None:  # noqa: ANN001
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(128, 96), nn.SiLU(), nn.Linear(96, 64, bias=False),
                          nn.ReLU(), nn.Linear(64, 10)).eval()  # fmt: skip
    Q.quantize_linears(model, scheme)
    x = torch.randn(3, 128)
    inputs = [torch.randn(3, 128, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    with _isa("portable"):  # same block order as the reference: f32-rounding close
        rt = _runtime(model, (x,), tmp_path)
        for xi in inputs:
            _close(rt.run("forward", [xi])[0], model(xi))
    for threads in (1, 2):  # the CPU's micro-kernels
        rt = _runtime(model, (x,), tmp_path, threads)
        for xi in inputs:
            _close_model(rt.run("forward", [xi])[0], model(xi))


def test_embedding_model_exports_and_runs(tmp_path) -> None:  # noqa: ANN001
    torch.manual_seed(2)
    for bits, scheme in ((4, "4w64"), (8, "8w")):
        m = _Tiny().eval()
        Q.quantize_linears(m, scheme)
        Q.quantize_embeddings(m, bits=bits, group_size=32 if bits == 4 else 0)
        tokens = torch.tensor([[1, 4, 9, 16, 25]])
        with _isa("portable"):
            _close(_runtime(m, (tokens,), tmp_path).run("forward", [tokens])[0], m(tokens))
        _close_model(_runtime(m, (tokens,), tmp_path).run("forward", [tokens])[0], m(tokens))


def test_tied_embedding_and_head_share_one_packed_weight() -> None:
    # SmolLM2 ties lm_head to the embedding: with the same bits and group size both quantize to
    # byte-identical tensors (embedding_4bit's layout is linear_q4's), which the exporter stores
    # once (constants are deduplicated by content).
    def model(tied: bool) -> nn.Module:
        torch.manual_seed(3)
        m = _Tiny()
        m.emb = nn.Embedding(1024, 64)
        m.lm_head = nn.Linear(64, 1024, bias=False)
        if tied:
            m.lm_head.weight = m.emb.weight
        Q.quantize_linears(m, "4w32s")  # symmetric: embedding_4bit's layout and arithmetic
        Q.quantize_embeddings(m, bits=4, group_size=32)
        return m.eval()

    tied, untied = model(True), model(False)
    assert torch.equal(tied.emb.weight, tied.lm_head.weight)
    assert torch.equal(tied.emb.scales, tied.lm_head.scales)
    tokens = torch.tensor([[5, 6, 7]])
    n_tied = ember.export(tied, (tokens,)).nbytes
    n_untied = ember.export(untied, (tokens,)).nbytes
    shared = tied.emb.weight.numel() + tied.emb.scales.numel() * 4
    assert n_untied - n_tied >= 0.9 * shared


# ---- affine weights (per-group offsets) ----------------------------------------------------------


def _offsets(s: torch.Tensor, seed: int) -> torch.Tensor:
    return torch.randn(s.shape, generator=torch.Generator().manual_seed(seed)) * 0.05


@pytest.mark.parametrize("bits,gs", CASES_Q4 + CASES_Q8)
@pytest.mark.parametrize("bias", [True, False])
def test_offsets_portable_matches_reference(bits: int, gs: int, bias: bool) -> None:
    with _isa("portable"):
        for i, (m, n, k) in enumerate([(1, 7, 128), ((2, 3), 5, 256), (5, 33, 384)]):
            x, q, s, b = _make(bits, gs, m, n, k, 7 * i + bits + gs, bias)
            off = _offsets(s, i)
            want = _ref(bits, x, q, s, gs, b, off)
            _close(_run_c(bits, x, q, s, gs, b, off=off), want)
            # the offsets' term is really there: it differs from the symmetric result
            assert (want - _ref(bits, x, q, s, gs, b)).abs().max() > 1e-3


@pytest.mark.parametrize("isa", SIMD)
@pytest.mark.parametrize("bits,gs", CASES_Q4 + CASES_Q8)
def test_offsets_simd_matches_portable(isa: str, bits: int, gs: int) -> None:
    shapes = [(1, 13, 128), (6, 5, 96), (3, 17, 256), (9, 33, 384), (12, 40, 1280), (2, 70, 640)]
    shapes += [(1, 70, 1152), (1, 3, 96)]  # M = 1: the decode kernel adds the offsets itself
    for i, (m, n, k) in enumerate(sh for sh in shapes if sh[2] % (gs or 32) == 0):
        x, q, s, b = _make(bits, gs, m, n, k, 300 + i, bias=i % 2 == 0)
        off = _offsets(s, i)
        with _isa("portable"):
            want = _run_c(bits, x, q, s, gs, b, off=off)
        with _isa(isa):
            for threads in (1, 2):
                _close(_run_c(bits, x, q, s, gs, b, threads, off=off), want)


def test_affine_q4_reproduces_a_q4_1_grid() -> None:
    """Weights already on an affine 4-bit grid (llama.cpp Q4_1: w = d * code + min, every group
    using codes 0 and 15) come back to f32 rounding, and the linear layer matches f32 math."""
    g = torch.Generator().manual_seed(5)
    n, k, gs = 6, 128, 32
    codes = torch.randint(0, 16, (n, k // gs, gs), generator=g)
    codes[..., 0], codes[..., 1] = 0, 15
    d = torch.rand(n, k // gs, 1, generator=g) * 0.02 + 0.001
    lo = torch.randn(n, k // gs, 1, generator=g) * 0.05
    w = (codes * d + lo).reshape(n, k)
    packed, scales, offsets = Q.quantize_weight_q4_affine(w, gs)
    deq = Q.unpack_q4(packed).float().reshape(n, -1, gs) * scales[..., None] + offsets[..., None]
    torch.testing.assert_close(deq.reshape(n, k), w, rtol=0, atol=1e-6)
    lin = torch.nn.Linear(k, n, bias=False)
    lin.weight.data = w
    x = torch.randn(3, k, generator=g)
    y = Q.LinearQ4(lin, gs, affine=True)(x)
    torch.testing.assert_close(y, x @ w.t(), rtol=2e-2, atol=2e-2)


def test_offsets_errors() -> None:
    x = torch.randn(2, 128)
    q, s = Q.quantize_weight_q4(torch.randn(4, 128), 32)
    out = torch.empty(2, 4)
    with pytest.raises(RuntimeError, match="offsets"):
        _call("ember::linear_q4.out", [x, q, s, 32, None, s[:, :2].contiguous(), out, out])
    with pytest.raises(RuntimeError, match="offsets"):
        _call("ember::linear_q4.out", [x, q, s, 32, None, s.double(), out, out])
    with pytest.raises(QuantizationError, match="offsets"):
        torch.ops.ember.linear_q4(x, q, s, 32, None, s[:, :2].contiguous())


# ---- f16 scales and offsets ----------------------------------------------------------------------


def _make_half(bits: int, gs: int, m: int, n: int, k: int, seed: int, affine: bool):  # noqa: ANN202
    """Inputs with f16 scales (and, affine, f16 offsets); the scales span f16's subnormals and
    large values too, so a wrong conversion shows."""
    x, q, s, b = _make(bits, gs, m, n, k, seed, bias=seed % 2 == 0)
    g = torch.Generator().manual_seed(seed)
    s16 = s.to(torch.float16)
    flat = s16.view(-1)
    if flat.numel() >= 4:
        flat[0], flat[1] = 3.0e-7, -6.0e-8  # subnormal in f16
        flat[2], flat[3] = 0.0, 1.5e3
    off = (torch.randn(s.shape, generator=g) * 0.05).to(torch.float16) if affine else None
    return x, q, s16, b, off


@pytest.mark.parametrize("bits,gs", CASES_Q4 + CASES_Q8)
@pytest.mark.parametrize("affine", [False, True])
def test_f16_scales_portable_matches_reference(bits: int, gs: int, affine: bool) -> None:
    with _isa("portable"):
        for i, (m, n, k) in enumerate([(1, 7, 128), (2, 5, 256), (5, 33, 384)]):
            x, q, s16, b, off = _make_half(bits, gs, m, n, k, 11 * i + bits + gs, affine)
            want = _ref(bits, x, q, s16, gs, b, off)
            _close(_run_c(bits, x, q, s16, gs, b, off=off), want)
            # f16 scales mean exactly their f32 values
            off32 = off.float() if off is not None else None
            torch.testing.assert_close(want, _ref(bits, x, q, s16.float(), gs, b, off32),
                                       rtol=0, atol=0)  # fmt: skip


@pytest.mark.parametrize("isa", SIMD)
@pytest.mark.parametrize("bits,gs", [(4, 32), (4, 64), (4, 128), (8, 0), (8, 32), (8, 64)])
@pytest.mark.parametrize("affine", [False, True])
def test_f16_scales_simd_matches_portable(isa: str, bits: int, gs: int, affine: bool) -> None:
    # M = 1 (decode, offsets fused on AVX-512), M >= 4 (prefill tiles), columns split into the
    # driver's conversion chunks (K / group up to 1024 scales a row: chunks of 4 columns, fewer
    # than a micro-kernel's tile), tile edges (N = 70, 45, 9), odd K
    shapes = [(1, 70, 1152), (1, 9, 8192), (2, 13, 32768), (6, 45, 2176), (13, 70, 1152),
              (1, 3, 96), (5, 17, 4096)]  # fmt: skip
    for i, (m, n, k) in enumerate(sh for sh in shapes if sh[2] % (gs or 32) == 0):
        x, q, s16, b, off = _make_half(bits, gs, m, n, k, 500 + i, affine)
        with _isa("portable"):
            want = _run_c(bits, x, q, s16, gs, b, off=off)
        with _isa(isa):
            for threads in (1, 2):
                _close(_run_c(bits, x, q, s16, gs, b, threads, off=off), want)


def test_f16_scales_errors() -> None:
    x = torch.randn(2, 128)
    q, s = Q.quantize_weight_q4(torch.randn(4, 128), 32, half=True)
    out = torch.empty(2, 4)
    assert s.dtype == torch.float16
    with pytest.raises(RuntimeError, match="offsets"):  # f32 offsets with f16 scales
        _call("ember::linear_q4.out", [x, q, s, 32, None, s.float(), out, out])
    with pytest.raises(QuantizationError, match="offsets"):
        torch.ops.ember.linear_q4(x, q, s, 32, None, s.float())
    with pytest.raises(RuntimeError, match="float32 or float16"):
        _call("ember::linear_q4.out", [x, q, s.bfloat16(), 32, None, None, out, out])
    k = 32 * 4097  # more scales a row than the driver converts at a time
    xk, qk = torch.randn(1, k), torch.full((1, k // 2), 0x88, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="K / group_size"):
        _call("ember::linear_q4.out", [xk, qk, torch.ones(1, k // 32).half(), 32, None, None,
                                       torch.empty(1, 1), torch.empty(1, 1)])  # fmt: skip


@pytest.mark.parametrize("affine", [False, True])
def test_half_quantizers_round_against_the_stored_scales(affine: bool) -> None:
    w = torch.randn(8, 256) * 0.02
    if affine:
        packed, s16, o16 = Q.quantize_weight_q4_affine(w, 32, half=True)
        assert s16.dtype == o16.dtype == torch.float16
        deq = Q.unpack_q4(packed).float().reshape(8, 8, 32) * s16.float()[..., None]
        deq = deq + o16.float()[..., None]
    else:
        packed, s16 = Q.quantize_weight_q4(w, 32, half=True)
        assert s16.dtype == torch.float16
        deq = Q.unpack_q4(packed).float().reshape(8, 8, 32) * s16.float()[..., None]
    step = s16.float().abs()[..., None]
    err = (deq - w.reshape(8, 8, 32)).abs()
    # every weight within half a step of the stored grid (plus the f16 rounding of the range
    # ends, at most a few hundredths of a step), one step where the symmetric clamp at 7 bites
    q = Q.unpack_q4(packed).reshape(8, 8, 32)
    bound = torch.where(q == 7, step, step * 0.5) if not affine else step * 0.5
    assert (err <= bound * 1.05 + 1e-7).all()


@pytest.mark.parametrize("scheme", ["4w32h", "4w32sh"])
def test_half_schemes_store_f16(scheme: str) -> None:
    m = Q.quantize_linears(nn.Sequential(nn.Linear(64, 8)), scheme)
    assert m[0].scales.dtype == torch.float16
    assert (m[0].offsets is not None) == (scheme == "4w32h")
    if m[0].offsets is not None:
        assert m[0].offsets.dtype == torch.float16


# ---- decode rows streamed in pairs (p->pairs, AVX-512) -------------------------------------------


@contextmanager
def _pairs(mode: int) -> Iterator[None]:
    L = _lib()
    L.em_linear_q_force_pairs.argtypes = [ctypes.c_int]
    L.em_linear_q_force_pairs.restype = ctypes.c_int
    assert L.em_linear_q_force_pairs(mode) == 0
    try:
        yield
    finally:
        L.em_linear_q_force_pairs(-1)


@pytest.mark.parametrize("bits,gs", [(4, 32), (4, 64), (4, 128), (8, 0), (8, 32), (8, 128)])
@pytest.mark.parametrize("scales", ["f32", "f32+off", "f16", "f16+off"])
def test_decode_pairs_same_bits_as_eight_rows(bits: int, gs: int, scales: str) -> None:
    # M = 1: the tile's rows streamed two at a time give the very bits of the eight-row tile (same
    # arithmetic per column, same order) and the portable kernel's result. N odd (a pair of one
    # row), N < 8 (a short tile), N past a tile; K with a short last chunk (q4 K = 96: 48 bytes),
    # K = 8192 (unfolded: rows past the automatic choice's limit); 1 and 2 threads.
    shapes = [(1, 13, 1152), (1, 3, 96), (1, 8, 2048), (1, 21, 8192), (1, 1, 128), (1, 70, 640)]
    half, affine = scales.startswith("f16"), scales.endswith("+off")
    L = _lib()
    L.em_linear_q_force_pairs.argtypes = [ctypes.c_int]
    assert L.em_linear_q_force_pairs(2) != 0  # only -1, 0, 1
    for i, (m, n, k) in enumerate(sh for sh in shapes if sh[2] % (gs or 32) == 0):
        if half:
            x, q, s, b, off = _make_half(bits, gs, m, n, k, 700 + i, affine)
        else:
            x, q, s, b = _make(bits, gs, m, n, k, 700 + i, bias=i % 2 == 0)
            off = _offsets(s, i) if affine else None
        with _isa("portable"):
            want = _run_c(bits, x, q, s, gs, b, off=off)
        with _isa("avx512vnni"):
            for threads in (1, 2):
                with _pairs(0):
                    rows8 = _run_c(bits, x, q, s, gs, b, threads, off=off)
                with _pairs(1):
                    pairs = _run_c(bits, x, q, s, gs, b, threads, off=off)
                assert torch.equal(pairs, rows8), (bits, gs, scales, n, k, threads)
                _close(pairs, want)
