"""Weight-quantized linear layers and embeddings for LLMs (4-bit and 8-bit weights, f32 I/O).

Operators (namespace ``ember``, each with a functional and an ``.out`` overload; C kernels in
``kernels/quantized/linear_q4.c`` and ``linear_q8.c``)::

    linear_q4(Tensor input, Tensor weight, Tensor scales, int group_size, Tensor? bias,
              Tensor? offsets=None) -> Tensor
    linear_q8(... the same ...) -> Tensor

Weights (``N`` outputs, ``K`` inputs):

* ``linear_q4``: ``weight`` uint8 ``[N, K/2]``, two 4-bit values per byte, symmetric
  ``q in [-8, 7]`` stored as ``q + 8``: element ``2j`` of a row in the HIGH nibble of byte ``j``,
  element ``2j + 1`` in the LOW nibble -- the layout of ExecuTorch's
  ``quantized_decomposed::embedding_4bit`` (so a tied embedding can share the packed tensor).
  ``scales`` f32 or f16 ``[N, K/group_size]``, ``group_size`` in {32, 64, 128}.
* ``linear_q8``: ``weight`` int8 ``[N, K]``; ``group_size`` 0 means per output channel
  (``scales`` f32 ``[N]``), otherwise {32, 64, 128} with ``scales`` ``[N, K/group_size]``.

Semantics (identical in the Python reference, the portable C kernel and the SIMD kernels):
the input ``[..., K]`` is flattened to rows ``[M, K]`` and each row is quantized dynamically in
blocks of 32 to int8, symmetric::

    a_scale[m, b] = max_{k in b} |x[m, k]| / 127                        (f32 division)
    qa[m, k]      = round_half_even(x[m, k] * (1 / a_scale[m, b]))      (0 when a_scale == 0)
    y[m, n]       = sum_b (a_scale[m, b] * w_scale[n, g(b)]) * sum_{k in b} qa[m, k] * qw[n, k]
                    (+ sum_g offsets[n, g] * S[m, g])     with offsets
                    (+ bias[n])
    S[m, g]       = sum_{b in g} a_scale[m, b] * sum_{k in b} qa[m, k]   (blocks in order, f32)

``offsets`` (the dtype and shape of ``scales``) make the weights affine,
``w = w_scale * q + offset`` per group — 4-bit weights quantized between each group's min and
max, as llama.cpp's Q4_1, represent a group's range with all 16 codes; ``None`` is the symmetric
form.

f16 ``scales`` / ``offsets`` mean exactly their f32 values in the formula above (the kernels
convert them); they halve the per-group overhead: with groups of 32, symmetric 4-bit weights
take 4.5 bits per weight (llama.cpp's Q4_0), affine 5 (Q4_1), against 5 / 6 with f32.

with ``g(b) = 32 b / group_size``; the per-block integer dot product is exact and the float sum
runs over blocks in order (the SIMD kernels sum in another order: agreement to f32 rounding).
``K`` must be a multiple of the group size (and of 32).

Python API: :func:`quantize_weight_q4`, :func:`quantize_weight_q8`, the modules
:class:`LinearQ4`, :class:`LinearQ8`, :class:`EmbeddingQ4`, :class:`EmbeddingQ8`, and the model
rewrites :func:`quantize_linears` and :func:`quantize_embeddings`::

    quantize_linears(model, "4w32", skip=["lm_head"])
    quantize_embeddings(model, bits=8)
    prog = ember.export(model, (tokens,))
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable

import torch
from torch import nn

from ember.quant import QuantizationError

log = logging.getLogger(__name__)

__all__ = [
    "ACT_BLOCK",
    "EmbeddingQ4",
    "EmbeddingQ8",
    "GROUP_SIZES",
    "LinearQ4",
    "LinearQ8",
    "SCHEMES",
    "linear_q4_ref",
    "linear_q8_ref",
    "quantize_activations",
    "quantize_embeddings",
    "quantize_linears",
    "quantize_weight_q4",
    "quantize_weight_q4_affine",
    "quantize_weight_q8",
    "register_ops",
    "unpack_q4",
]

ACT_BLOCK = 32
GROUP_SIZES = (32, 64, 128)
# name -> (bits, group size, affine, f16 scales): "4wG" are affine (min/max) 4-bit groups, "4wGs"
# symmetric, both with f32 scales (and offsets); "4wGh" / "4wGsh" the same with f16 ones.
SCHEMES = {
    "4w32": (4, 32, True, False), "4w64": (4, 64, True, False), "4w128": (4, 128, True, False),
    "4w32s": (4, 32, False, False), "4w64s": (4, 64, False, False),
    "4w128s": (4, 128, False, False),
    "4w32h": (4, 32, True, True), "4w64h": (4, 64, True, True), "4w128h": (4, 128, True, True),
    "4w32sh": (4, 32, False, True), "4w64sh": (4, 64, False, True),
    "4w128sh": (4, 128, False, True),
    "8w": (8, 0, False, False),
}  # fmt: skip

_LIBS: list[torch.library.Library] = []

_ARGS = (
    "Tensor input, Tensor weight, Tensor scales, int group_size, Tensor? bias, Tensor? offsets=None"
)
_EMB_ARGS = (
    "Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, "
    "int weight_quant_max, Tensor indices"
)


# ---- quantization of weights and activations ---------------------------------------------------


def _check_group(k: int, group_size: int, allow_channel: bool) -> None:
    ok = group_size in GROUP_SIZES or (allow_channel and group_size == 0)
    if not ok:
        allowed = ", ".join(map(str, GROUP_SIZES)) + (
            " or 0 (per channel)" if allow_channel else ""
        )
        raise QuantizationError(f"group_size must be {allowed}, got {group_size}")
    if k % ACT_BLOCK or (group_size and k % group_size):
        raise QuantizationError(
            f"in_features {k} must be a multiple of the group size {group_size or ACT_BLOCK} "
            f"(and of the activation block {ACT_BLOCK})"
        )


def quantize_weight_q4_affine(
    w: torch.Tensor, group_size: int, half: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Affine 4-bit groupwise weights of ``w`` [N, K]: (packed uint8 [N, K/2], scales f32 [N, G],
    offsets f32 [N, G]) with ``w ~ scale * q + offset``, q in [-8, 7].

    Each group's 16 codes span its [min, max]: scale = (max - min) / 15, code 0 (q = -8) is the
    minimum, so offset = min + 8 * scale. A group already on such a grid (llama.cpp's Q4_1) is
    reproduced up to f32 rounding. ``half``: scales and offsets are rounded to f16 first and the
    codes chosen against the rounded values (each weight to its nearest representable one).
    """
    if w.dim() != 2 or not w.is_floating_point():
        raise QuantizationError(
            f"weight must be a 2-D float tensor, got {tuple(w.shape)} {w.dtype}"
        )
    n, k = w.shape
    _check_group(k, group_size, allow_channel=False)
    wg = w.detach().float().reshape(n, k // group_size, group_size)
    lo, hi = wg.amin(dim=-1), wg.amax(dim=-1)
    scales = (hi - lo) / 15.0
    offsets = lo + 8.0 * scales
    if half:
        scales, offsets = _to_f16(scales), _to_f16(offsets)
        lo = offsets.float() - 8.0 * scales.float()  # code 0 of the stored grid
    sf = scales.float()
    inv = torch.where(sf > 0, 1.0 / sf, torch.zeros_like(sf))
    code = torch.clamp(torch.round((wg - lo[..., None]) * inv[..., None]), 0, 15)
    q = code.to(torch.int16).reshape(n, k)
    packed = ((q[:, 0::2] << 4) | q[:, 1::2]).to(torch.uint8)
    return packed.contiguous(), scales.contiguous(), offsets.contiguous()


def _to_f16(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to f16 (nearest), magnitudes past f16's range clamped to its largest."""
    big = torch.finfo(torch.float16).max
    return t.clamp(-big, big).to(torch.float16)


def quantize_weight_q4(
    w: torch.Tensor, group_size: int, half: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric 4-bit groupwise weights of ``w`` [N, K]: (packed uint8 [N, K/2], f32 [N, G]).

    Each group's scale maps its value of largest magnitude onto -8 exactly (the scale is negative
    when that value is positive), so the whole code range [-8, 7] is used. ``half``: f16 scales
    (rounded to nearest; the codes are chosen against the rounded scale).
    """
    if w.dim() != 2 or not w.is_floating_point():
        raise QuantizationError(
            f"weight must be a 2-D float tensor, got {tuple(w.shape)} {w.dtype}"
        )
    n, k = w.shape
    _check_group(k, group_size, allow_channel=False)
    wg = w.detach().float().reshape(n, k // group_size, group_size)
    idx = wg.abs().argmax(dim=-1, keepdim=True)
    extreme = torch.gather(wg, -1, idx).squeeze(-1)
    scales = extreme / -8.0
    if half:
        scales = _to_f16(scales)
    sf = scales.float()
    inv = torch.where(sf != 0, 1.0 / sf, torch.zeros_like(sf))
    q = torch.clamp(torch.round(wg * inv[..., None]), -8, 7).to(torch.int16).reshape(n, k) + 8
    packed = ((q[:, 0::2] << 4) | q[:, 1::2]).to(torch.uint8)
    return packed.contiguous(), scales.contiguous()


def unpack_q4(packed: torch.Tensor) -> torch.Tensor:
    """The int8 values [N, K] in [-8, 7] of a packed 4-bit weight [N, K/2] (high nibble first)."""
    p = packed.to(torch.int16)
    q = torch.stack([(p >> 4) & 15, p & 15], dim=-1).reshape(p.shape[0], -1) - 8
    return q.to(torch.int8)


def quantize_weight_q8(w: torch.Tensor, group_size: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 weights of ``w`` [N, K]: (int8 [N, K], f32 scales [N] or [N, K/group]).

    ``group_size`` 0 gives one scale per output channel; q = round(w / scale) in [-127, 127].
    """
    if w.dim() != 2 or not w.is_floating_point():
        raise QuantizationError(
            f"weight must be a 2-D float tensor, got {tuple(w.shape)} {w.dtype}"
        )
    n, k = w.shape
    _check_group(k, group_size, allow_channel=True)
    gs = group_size or k
    wg = w.detach().float().reshape(n, k // gs, gs)
    amax = wg.abs().amax(dim=-1)
    scales = amax / 127.0
    inv = torch.where(scales > 0, 1.0 / scales, torch.zeros_like(scales))
    q = torch.clamp(torch.round(wg * inv[..., None]), -127, 127).to(torch.int8).reshape(n, k)
    return q.contiguous(), (scales[:, 0] if group_size == 0 else scales).contiguous()


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic int8 quantization of f32 rows [M, K] in blocks of 32: (qa [M, K], scale [M, K/32]).

    Exactly the kernels' arithmetic: scale = amax / 127 and qa = round_half_even(x * (1 / scale)),
    all in f32; an all-zero block has scale 0 and qa 0.
    """
    m, k = x.shape
    xb = x.float().reshape(m, k // ACT_BLOCK, ACT_BLOCK)
    scale = xb.abs().amax(dim=-1) / 127.0
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    qa = torch.clamp(torch.round(xb * inv[..., None]), -127, 127).to(torch.int8)
    return qa.reshape(m, k), scale


# ---- reference implementations -----------------------------------------------------------------


def _validate(
    x: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, group_size: int,
    bias: torch.Tensor | None, bits: int, offsets: torch.Tensor | None = None,
) -> tuple[int, int]:  # fmt: skip
    op = f"ember::linear_q{bits}"
    if x.dtype != torch.float32 or x.dim() < 1:
        raise QuantizationError(f"{op}: input must be float32 [..., K], got {x.dtype}")
    want = torch.uint8 if bits == 4 else torch.int8
    if w.dtype != want or w.dim() != 2:
        raise QuantizationError(
            f"{op}: weight must be a 2-D {want} tensor, got {tuple(w.shape)} {w.dtype}"
        )
    n = w.shape[0]
    k = w.shape[1] * (2 if bits == 4 else 1)
    if x.shape[-1] != k:
        raise QuantizationError(f"{op}: input has {x.shape[-1]} features, the weight holds {k}")
    _check_group(k, group_size, allow_channel=bits == 8)
    if scales.dtype not in (torch.float32, torch.float16):
        raise QuantizationError(f"{op}: scales must be float32 or float16, got {scales.dtype}")
    want_shape = (n,) if group_size == 0 else (n, k // group_size)
    if tuple(scales.shape) != want_shape:
        raise QuantizationError(
            f"{op}: scales must have shape {list(want_shape)}, got {list(scales.shape)}"
        )
    if bias is not None and (bias.dtype != torch.float32 or tuple(bias.shape) != (n,)):
        raise QuantizationError(
            f"{op}: bias must be float32 [{n}], got {bias.dtype} {list(bias.shape)}"
        )
    if offsets is not None and (
        offsets.dtype != scales.dtype or tuple(offsets.shape) != tuple(scales.shape)
    ):
        raise QuantizationError(
            f"{op}: offsets must have the dtype and shape of scales ({scales.dtype} "
            f"{list(scales.shape)}), got {offsets.dtype} {list(offsets.shape)}"
        )
    return n, k


def _linear_blocks(
    x: torch.Tensor, qw: torch.Tensor, scales: torch.Tensor, group_size: int,
    bias: torch.Tensor | None, offsets: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    n, k = qw.shape
    lead = x.shape[:-1]
    qa, sa = quantize_activations(x.reshape(-1, k))
    m = qa.shape[0]
    ws = scales.float().reshape(n, -1)
    qaf, qwf = qa.float(), qw.float()
    y = torch.zeros(m, n, dtype=torch.float32)
    for b in range(k // ACT_BLOCK):
        sl = slice(b * ACT_BLOCK, (b + 1) * ACT_BLOCK)
        dot = qaf[:, sl] @ qwf[:, sl].t()  # exact: |dot| <= 32 * 127 * 128 < 2^24
        g = (b * ACT_BLOCK) // group_size if group_size else 0
        y = y + dot * (sa[:, b, None] * ws[None, :, g])
    if offsets is not None:
        og = offsets.float().reshape(n, -1)
        gsz = group_size or k
        ssum = qaf.reshape(m, k // ACT_BLOCK, ACT_BLOCK).sum(dim=-1)  # exact integers
        off = torch.zeros(m, n, dtype=torch.float32)
        for gi in range(og.shape[1]):
            sg = torch.zeros(m, dtype=torch.float32)
            for b in range(gi * gsz // ACT_BLOCK, (gi + 1) * gsz // ACT_BLOCK):
                sg = sg + sa[:, b] * ssum[:, b]
            off = off + sg[:, None] * og[None, :, gi]
        y = y + off
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, n)


def linear_q4_ref(
    x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, group_size: int,
    bias: torch.Tensor | None = None, offsets: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Reference of ``ember::linear_q4`` (see the module docstring for the arithmetic)."""
    _validate(x, weight, scales, group_size, bias, 4, offsets)
    return _linear_blocks(x, unpack_q4(weight), scales, group_size, bias, offsets)


def linear_q8_ref(
    x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, group_size: int,
    bias: torch.Tensor | None = None, offsets: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Reference of ``ember::linear_q8`` (see the module docstring for the arithmetic)."""
    _validate(x, weight, scales, group_size, bias, 8, offsets)
    return _linear_blocks(x, weight, scales, group_size, bias, offsets)


def _embedding_ref(
    weight: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor | None, qmin: int,
    qmax: int, indices: torch.Tensor, bits: int,
) -> torch.Tensor:  # fmt: skip
    q = unpack_q4(weight) if bits == 4 else weight.to(torch.int16)
    s = scales.float().reshape(scales.shape[0], -1)
    groups = s.shape[1]
    d = q.shape[1]
    if d % groups:
        raise QuantizationError(f"{groups} scale groups do not divide the embedding dim {d}")
    qf = q.float().reshape(q.shape[0], groups, d // groups)
    if zero_points is not None:
        qf = qf - zero_points.float().reshape(q.shape[0], groups, 1)
    w = (qf * s[..., None]).reshape(q.shape[0], d)
    return w[indices.long()]


# ---- operator registration ---------------------------------------------------------------------


def _out_impl(fn):  # noqa: ANN001, ANN202
    def run(*args, out):  # noqa: ANN001, ANN002, ANN202
        out.copy_(fn(*args))
        return out

    return run


def _fake_linear(bits: int):  # noqa: ANN202
    def fake(x, w, scales, group_size, bias, offsets=None):  # noqa: ANN001, ANN202
        n, _ = _validate(x, w, scales, group_size, bias, bits, offsets)
        return x.new_empty((*x.shape[:-1], n))

    return fake


def register_ops() -> None:
    """Defines ``ember::linear_q4`` / ``linear_q8`` (+ ``.out``) and, where no one has yet,
    ExecuTorch's ``quantized_decomposed::embedding_byte`` / ``embedding_4bit`` (+ ``.out``, same
    schemas as ExecuTorch's ``exir/passes/_quant_patterns_and_replacements.py``). Idempotent."""
    if _LIBS:
        return
    lib = torch.library.Library("ember", "FRAGMENT")
    for bits, ref in ((4, linear_q4_ref), (8, linear_q8_ref)):
        name = f"linear_q{bits}"
        lib.define(f"{name}({_ARGS}) -> Tensor")
        lib.define(f"{name}.out({_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")
        lib.impl(name, ref, "CompositeExplicitAutograd")
        lib.impl(f"{name}.out", _out_impl(ref), "CompositeExplicitAutograd")

        torch.library.register_fake(f"ember::{name}", _fake_linear(bits), lib=lib)
    _LIBS.append(lib)

    qd = torch.ops.quantized_decomposed
    qlib = torch.library.Library("quantized_decomposed", "FRAGMENT")
    for name, bits in (("embedding_byte", 8), ("embedding_4bit", 4)):
        if hasattr(qd, name):
            continue

        def ref(w, s, z, qmin, qmax, idx, bits=bits):  # noqa: ANN001, ANN202
            return _embedding_ref(w, s, z, qmin, qmax, idx, bits)

        qlib.define(f"{name}({_EMB_ARGS}) -> Tensor")
        qlib.define(f"{name}.out({_EMB_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")
        qlib.impl(name, ref, "CompositeExplicitAutograd")
        qlib.impl(f"{name}.out", _out_impl(ref), "CompositeExplicitAutograd")

        def fake_emb(w, s, z, qmin, qmax, idx, bits=bits):  # noqa: ANN001, ANN202
            d = w.shape[1] * (2 if bits == 4 else 1)
            return s.new_empty((*idx.shape, d), dtype=torch.float32)

        torch.library.register_fake(f"quantized_decomposed::{name}", fake_emb, lib=qlib)
    _LIBS.append(qlib)


# ---- modules -----------------------------------------------------------------------------------


class LinearQ4(nn.Module):
    """``nn.Linear`` with 4-bit groupwise weights; f32 in and out (``ember::linear_q4``)."""

    def __init__(
        self, lin: nn.Linear, group_size: int, affine: bool = False, half: bool = False
    ) -> None:
        super().__init__()
        register_ops()
        offsets = None
        if affine:
            packed, scales, offsets = quantize_weight_q4_affine(lin.weight, group_size, half)
        else:
            packed, scales = quantize_weight_q4(lin.weight, group_size, half)
        self.register_buffer("weight", packed)
        self.register_buffer("scales", scales)
        self.register_buffer("offsets", offsets)
        b = lin.bias.detach().float().clone() if lin.bias is not None else None
        self.register_buffer("bias", b)
        self.group_size = group_size
        self.in_features, self.out_features = lin.in_features, lin.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.linear_q4(
            x, self.weight, self.scales, self.group_size, self.bias, self.offsets
        )

    def extra_repr(self) -> str:
        kind = "affine" if self.offsets is not None else "symmetric"
        dt = "f16" if self.scales.dtype == torch.float16 else "f32"
        return (
            f"in={self.in_features}, out={self.out_features}, 4-bit {kind}, group "
            f"{self.group_size}, {dt} scales"
        )


class LinearQ8(nn.Module):
    """``nn.Linear`` with int8 weights (per channel, or groupwise); f32 in and out."""

    def __init__(self, lin: nn.Linear, group_size: int = 0) -> None:
        super().__init__()
        register_ops()
        q, scales = quantize_weight_q8(lin.weight, group_size)
        self.register_buffer("weight", q)
        self.register_buffer("scales", scales)
        b = lin.bias.detach().float().clone() if lin.bias is not None else None
        self.register_buffer("bias", b)
        self.group_size = group_size
        self.in_features, self.out_features = lin.in_features, lin.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.linear_q8(x, self.weight, self.scales, self.group_size, self.bias)

    def extra_repr(self) -> str:
        g = f"group {self.group_size}" if self.group_size else "per channel"
        return f"in={self.in_features}, out={self.out_features}, 8-bit, {g}"


class EmbeddingQ4(nn.Module):
    """``nn.Embedding`` with 4-bit groupwise rows (``quantized_decomposed::embedding_4bit``)."""

    def __init__(self, emb: nn.Embedding, group_size: int, half: bool = False) -> None:
        super().__init__()
        register_ops()
        packed, scales = quantize_weight_q4(emb.weight, group_size, half)
        self.register_buffer("weight", packed)
        self.register_buffer("scales", scales)
        self.group_size = group_size

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed
        return qd.embedding_4bit(self.weight, self.scales, None, -8, 7, indices)


class EmbeddingQ8(nn.Module):
    """``nn.Embedding`` with int8 rows (``quantized_decomposed::embedding_byte``)."""

    def __init__(self, emb: nn.Embedding, group_size: int = 0) -> None:
        super().__init__()
        register_ops()
        q, scales = quantize_weight_q8(emb.weight, group_size)
        self.register_buffer("weight", q)
        self.register_buffer("scales", scales)
        self.group_size = group_size

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        qd = torch.ops.quantized_decomposed
        return qd.embedding_byte(self.weight, self.scales, None, -127, 127, indices)


# ---- model rewrites ----------------------------------------------------------------------------


def _replace(model: nn.Module, kind: type, make, skip: Iterable[str]) -> int:  # noqa: ANN001
    patterns = list(skip)
    targets = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, kind) and name and not any(fnmatch.fnmatch(name, p) for p in patterns)
    ]
    for name, m in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, make(m))
        log.debug("quantized %s", name)
    return len(targets)


def quantize_linears(model: nn.Module, scheme: str, skip: Iterable[str] = ()) -> nn.Module:
    """Replaces (in place) every ``nn.Linear`` of `model` by :class:`LinearQ4` / :class:`LinearQ8`.

    `scheme` is ``"4w32"``, ``"4w64"``, ``"4w128"`` (4-bit affine groups of that size: each
    group's min..max in 16 codes, like llama.cpp's Q4_1), ``"4w32s"``, ``"4w64s"``, ``"4w128s"``
    (4-bit symmetric, like Q4_0), the same with f16 scales (and offsets) ``"4w32h"`` ...
    ``"4w128sh"`` (:data:`SCHEMES`), or ``"8w"`` (int8 per output channel). A layer whose
    in_features the group size does not divide gets the largest group size that does (logged;
    SmolLM2's 576 takes 64 under ``"4w128"``); in_features must be a multiple of 32.
    `skip` holds module names or fnmatch patterns (``"lm_head"``, ``"layers.0.*"``) to leave in
    f32. Returns `model`.
    """
    if scheme not in SCHEMES:
        raise QuantizationError(f"unknown scheme {scheme!r}; use one of {sorted(SCHEMES)}")
    if isinstance(model, nn.Linear):
        raise QuantizationError("quantize_linears rewrites submodules: wrap the Linear in a module")
    bits, gs, affine, half = SCHEMES[scheme]

    def make(lin: nn.Linear) -> nn.Module:
        k = lin.in_features
        if k % ACT_BLOCK:
            raise QuantizationError(
                f"{lin!r}: in_features {k} is not a multiple of {ACT_BLOCK}; add it to `skip`"
            )
        g = gs
        if bits == 4 and k % g:
            g = max(c for c in GROUP_SIZES if k % c == 0)
            log.warning("%r: in_features %d is not a multiple of %d; using groups of %d",
                        lin, k, gs, g)  # fmt: skip
        return LinearQ4(lin, g, affine, half) if bits == 4 else LinearQ8(lin, g)

    n = _replace(model, nn.Linear, make, skip)
    log.info("quantize_linears(%s): %d linear layers", scheme, n)
    return model


def quantize_embeddings(
    model: nn.Module, bits: int, group_size: int = 0, skip: Iterable[str] = (), half: bool = False
) -> nn.Module:
    """Replaces (in place) every ``nn.Embedding`` by :class:`EmbeddingQ4` (``bits=4``; group size
    32/64/128, default 32; ``half``: f16 scales) or :class:`EmbeddingQ8` (``bits=8``; 0 = per
    row). Returns `model`."""
    if bits == 4:
        gs = group_size or 32
        make = lambda m: EmbeddingQ4(m, gs, half)  # noqa: E731
    elif bits == 8:
        make = lambda m: EmbeddingQ8(m, group_size)  # noqa: E731
    else:
        raise QuantizationError(f"embedding bits must be 4 or 8, got {bits}")
    n = _replace(model, nn.Embedding, make, skip)
    log.info("quantize_embeddings(%d bits): %d embeddings", bits, n)
    return model
