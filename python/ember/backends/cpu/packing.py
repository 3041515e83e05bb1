"""EmberCpuBackend packing: the run's operators -> the EMC blob (:func:`build_blob`): conv
weights in the micro-kernels' layouts (direct, transposed, Winograd F(m x m, 3 x 3), bf16 pairs
for the AMX path), GEMM panels, the tensor table and the arena plan (``blob.py``).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np
import torch

from ember.backends.cpu import blob as B
from ember.backends.cpu.fusion import _depthwise
from ember.backends.cpu.lowering import Const, Op
from ember.passes.ir import (
    TensorSpec,
)

log = logging.getLogger(__name__)


# ---- building the blob ------------------------------------------------------------------------
class PackedConv(NamedTuple):
    """How a conv is stored and run: packed weights and the ip[] choices that go with them."""

    packed: np.ndarray
    depthwise: bool
    scratch: int  # arena bytes while it runs
    transposed: bool = False
    wino: int = 0  # Winograd tile m (0: direct)
    wino_slots: int = 0
    pairs: np.ndarray | None = None  # the weights again as bf16 pairs (EMC_CONV_PAIRS)
    q8_table: np.ndarray | None = None  # an int8 conv's channel table (EMC_CONV_Q8)
    at_load: bool = False  # packed holds plain [Co, Cin, 3, 3] weights (EMC_CONV_WINO_AT_LOAD)
    q8_wino: int = 0  # an int8 conv's Winograd alternative (EMC_CONV_Q8_WINO)


def _pack_conv_q8(op: Op, out: TensorSpec, wino: int = 0) -> PackedConv:
    """An int8 conv (EMC_CONV_Q8): int8 weights with depth order (ky, kx, channel), channels
    padded to a multiple of 4 (zeros), in [ceil(Co/6)][K/4][6][4] panels (as the f32 words the
    blob stores); the table of Co f32 scales (s_in * s_w) then Co int32 corrections
    (zp * sum_k w); and the scratch: u8 im2col panels, then the channels-last padded image.

    ``wino`` (a tile m): the conv also carries its Winograd F(m x m) alternative
    (EMC_CONV_Q8_WINO) — the table a third part, the weights' own scales s_w, and the slots and
    scratch of that Winograd conv — which the runtime runs instead, from filters it transforms at
    init, when its ``q8_winograd`` option asks. By default it runs in int8: faster on Zen 5
    (int8 ResNet-18 8.4 -> 6.4 ms) and, since the fast quantizer and packer, on Zen 4 (11.8
    against 13.9 ms; the 64 -> 64 conv on 56x56 0.67-0.77 ms against 1.08-1.16 in F(4x4))."""
    wq, sw = op.attrs["wq"]
    q8 = op.attrs["q8"]
    co, cin, kh, kw = wq.shape
    cp = -(-cin // 4) * 4
    kg = kh * kw * cp
    kq = kg // 4
    mp = -(-co // B.MR)
    w = np.zeros((mp * B.MR, kh, kw, cp), dtype=np.int8)
    w[:co, :, :, :cin] = wq.transpose(0, 2, 3, 1)
    panels = np.ascontiguousarray(w.reshape(mp, B.MR, kq, 4).transpose(0, 2, 1, 3))
    scales = (np.float32(q8["scale"]) * sw.astype(np.float32)).astype(np.float32)
    corr = (q8["zp"] * wq.reshape(co, -1).astype(np.int64).sum(1)).astype(np.int32)
    table = np.concatenate([scales, corr.view(np.float32)])
    npix = out.shape[2] * out.shape[3]
    h, w_ = op.ins[0].shape[2], op.ins[0].shape[3]
    ph, pw = op.attrs["pad"]
    scratch = -(-npix // B.NR_PANEL) * kq * 64 + (h + 2 * ph) * (w_ + 2 * pw) * cp
    packed = panels.reshape(-1).view(np.float32)
    if not wino:
        return PackedConv(packed, False, scratch, q8_table=table)
    slots = _wino_slots(wino, out.shape[2], out.shape[3])
    scratch = max(scratch, _wino_scratch(wino, slots, cin, co, transposed=False))
    table = np.concatenate([table, sw.astype(np.float32)])
    return PackedConv(packed, False, scratch, wino_slots=slots, q8_table=table, q8_wino=wino)


def _pack_dwconv_q8(op: Op, out: TensorSpec) -> PackedConv:
    """An int8 depthwise conv (EMC_CONV_Q8 with EMC_CONV_DEPTHWISE, u8 in and out): its int8
    weights as f32 values [kh * kw][cw] (cw = channels rounded up to 16, zeros past them), and
    the table [scale | corr | bias], cw f32 words each (scale s_in * s_w[c], corr zp * sum of
    the channel's weights, the bias folded in); the scratch holds the zero-point padded u8
    image when the conv pads."""
    wq, sw = op.attrs["wq"]
    q8 = op.attrs["q8"]
    co, _, kh, kw = wq.shape
    cw, cp = -(-co // 16) * 16, -(-co // 4) * 4
    w = np.zeros((kh * kw, cw), dtype=np.float32)
    w[:, :co] = wq.reshape(co, kh * kw).T.astype(np.float32)
    table = np.zeros((3, cw), dtype=np.float32)
    table[0, :co] = np.float32(q8["scale"]) * sw.astype(np.float32)
    table[1, :co] = (q8["zp"] * wq.reshape(co, -1).astype(np.int64).sum(1)).astype(np.float32)
    b = op.attrs["b"]
    if b is not None:
        table[2, :co] = np.asarray(b, dtype=np.float32).reshape(-1)
    ph, pw = op.attrs["pad"]
    eh, ew = op.attrs.get("pad_extra", (0, 0))  # zero rows / columns more after than before
    h, w_ = op.ins[0].shape[2], op.ins[0].shape[3]
    scratch = (h + 2 * ph + eh) * (w_ + 2 * pw + ew) * cp if ph or pw or eh or ew else 0
    return PackedConv(w.reshape(-1), True, scratch, q8_table=table.reshape(-1))


def _pack_conv(
    op: Op, x: TensorSpec, out: TensorSpec, pairs: bool = False, pack: str = "load"
) -> PackedConv:
    """``pack="load"``: a Winograd conv stores its plain weights and the runtime transforms
    them at init (EMC_CONV_WINO_AT_LOAD); ``"export"``: the file stores the transform."""
    at_load = pack == "load"
    if op.attrs.get("q8dw"):
        return _pack_dwconv_q8(op, out)
    if "q8" in op.attrs:  # (where a Winograd F(4x4) applies, with it as the alternative)
        return _pack_conv_q8(
            op, out, 4 if _winograd_tile(op, out.shape[2], out.shape[3]) == 4 else 0
        )
    w = op.attrs["w"]
    g = op.attrs["groups"]
    co, cg, kh, kw = w.shape
    if _depthwise(op):
        return PackedConv(w.reshape(co, kh * kw), True, 0)
    mg, kg = co // g, cg * kh * kw
    oh, ow = out.shape[2], out.shape[3]
    npix = oh * ow
    small = WINO_SMALL if WINO_SMALL is not None else not pairs
    if small and _winograd_small(op, oh, ow):
        # Transposed F(2x2): per element xi, C^T[tiles, co] = V[xi]^T @ U[xi]^T with U^T in
        # 16-column B panels; the scratch also holds each xi's C^T, transposed into place.
        return PackedConv(
            w if at_load else _winograd_filters(w, 2, transposed=True),
            False,
            _wino_scratch(2, 1, cg, co, transposed=True),
            transposed=True,
            wino=2,
            wino_slots=1,
            at_load=at_load,
        )
    m = _winograd_tile(op, oh, ow)
    if m:
        slots = _wino_slots(m, oh, ow)
        scratch = _wino_scratch(m, slots, cg, co, transposed=False)
        filters = w if at_load else _winograd_filters(w, m)
        return PackedConv(filters, False, scratch, wino=m, wino_slots=slots, at_load=at_load)
    scratch = kg * (-(-npix // B.NR_PANEL) * B.NR_PANEL) * 4  # B operand in 16-column panels
    with_pairs = pairs and g == 1 and _conv_pairs(co, npix, kg)
    if g == 1 and _conv_transposed(co, npix, kg):
        # C^T[npix, co] = im2col^T @ W^T: weights as 16-column B panels, the im2col as 6-row A
        # panels in the scratch, then C^T (transposed into the output after the GEMM). With
        # pairs, the AMX runtime runs it untransposed from them (the scratch fits either).
        packed = B.pack_b_panels(np.ascontiguousarray(w.reshape(co, kg).T))
        t_scratch = (_align(-(-npix // B.MR) * B.MR * kg * 4) + npix * co * 4) + 64
        return PackedConv(
            packed,
            False,
            max(scratch, t_scratch),
            transposed=True,
            pairs=_bf16_pairs(w.reshape(co, kg)) if with_pairs else None,
        )
    packed = np.concatenate(
        [B.pack_a_panels(w[i * mg : (i + 1) * mg].reshape(mg, kg)) for i in range(g)]
    )
    if not with_pairs:
        return PackedConv(packed, False, scratch)
    return PackedConv(packed, False, scratch, pairs=_bf16_pairs(w.reshape(co, kg)))


# ---- bf16 pairs for the AMX path ----------------------------------------------------------------
def _conv_pairs(co: int, npix: int, kg: int) -> bool:
    """Whether a direct conv also stores its weights as bf16 pairs (EMC_CONV_PAIRS): every conv
    with enough work for the AMX path's tiles (its thresholds: 64+ rows and depth, 2M
    multiply-adds). The AMX path then reads the weights in place instead of splitting them at run
    time, which on small maps (ResNet's 7x7 layers: each weight serves 49 products) costs more
    than the tiles do. Measured (one run each, interleaved): pairs on maps under 64 pixels,
    ResNet-18 1.26x / 1.18x faster at 1 / 2 threads; under 256, a further 1.06x / 1.06x on
    ResNet-18 and 1.04x / 1.01x on ResNet-50; on every map, a further 1.03x / 1.0x and 1.10x /
    1.06x (ResNet-50's 56x56 and 28x28 1x1 convs). The file grows by the pairs: ResNet-18 by
    35 MB, ResNet-50 by 80 MB, MobileNetV2 / V3-Small by 5.5 / 0.7 MB (only their wider 1x1
    convs qualify). Shallower convs (depth 16-63: MobileNets' expansions) qualify with 4M+
    multiply-adds: MobileNetV2's 16 -> 96 on 112x112, 24 -> 144 on 56x56 and 32 -> 192 on 28x28
    ran 1.15-1.5x faster on the tiles, the model 1.06x (interleaved, 1 and 2 threads); with 2M+,
    MobileNetV3-Small's 16 -> 72 on 56x56 and 48 -> 288 on 14x14 gained a few microseconds and
    the model lost 2 %."""
    if co < 64 or kg < 16:
        return False
    return co * npix * kg >= (1 << 21 if kg >= 64 else 1 << 22)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """The bf16 nearest each f32 of x (ties to even), as uint32 in the low 16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)


def _bf16_pairs(w: np.ndarray) -> np.ndarray:
    """[M, K] -> EMC_CONV_PAIRS words (as float32 bit patterns): hi = bf16(w), lo = bf16(w - hi),
    word = hi | lo << 16; rows padded to 32 and K to 16 with zeros, in [M / 16][K / 16] tiles of
    [16 rows][16 k]."""
    m, k = w.shape
    mp, kp = -(-m // 32) * 32, -(-k // 16) * 16
    x = np.zeros((mp, kp), dtype=np.float32)
    x[:m, :k] = w
    hi = _bf16_bits(x)
    lo = _bf16_bits(x - (hi << 16).view(np.float32))
    words = hi | (lo << 16)
    tiles = words.reshape(mp // 16, 16, kp // 16, 16).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(tiles).reshape(-1).view(np.float32)


# ---- Winograd F(m x m, 3 x 3) ---------------------------------------------------------------
WINO_TILES = 64  # tiles per block (EM_WINO_MAX_TILES): one 64-column GEMM strip
WINO_MAX_SLOTS = 4  # blocks in flight at once (scratch slots)
# Transposed F(2x2) for wide convs on maps of 9 to 64 tiles (_winograd_small). None (the
# default): on when the file carries no bf16 pairs (a target without AMX), off when it does.
# With the AMX path, ResNet-18 / ResNet-50 ran 6 % / 11 % faster at 1 thread and 4 % / 7 % at 2
# with those layers direct (the filters it streams are 16 / 9 the bytes, and the AMX tiles take
# the direct GEMM at over the FMA peak). On the FMA path (Zen 4, no AMX) they ran 8-11 % / 0-1 %
# faster as Winograd (paired, bench/ab_quantiles.sh, 1 and 2 threads). True / False force it.
WINO_SMALL: bool | None = None
# Filter transforms G (Lavin & Gray; F(4, 3) on the points 0, +-1, +-2, infinity).
_WINO_G = {
    2: np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
    4: np.array(
        [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ]
    ),
}


def _winograd_tile(op: Op, oh: int, ow: int) -> int:
    """The Winograd tile m for a conv, or 0 to run it as a direct GEMM.

    Only 3x3, stride 1, undilated, ungrouped convs with enough channels (an RGB stem stays
    direct). F(4x4) (4x fewer multiplies) when the map has at least 48 tiles of 4x4 (28x28 and
    up: each block of 64 tiles is a full GEMM strip), else F(2x2) (2.25x) with at least 48 tiles
    of 2x2 (14x14); smaller maps stay direct: with a handful of tiles the GEMMs become
    matrix-vector products that stream the (m + 2)^2 / 9 times larger transformed filters. F(4x4)
    costs some accuracy (~1e-5 of the largest output on one random layer, against ~4e-7 for
    F(2x2); still ~4e-7 on ResNet-18's logits).
    """
    if not _winograd_shape(op, 16):
        return 0
    for m in (4, 2):
        if -(-oh // m) * -(-ow // m) >= 48:
            return m
    return 0


def _wino_slots(m: int, oh: int, ow: int) -> int:
    """Scratch slots: one per thread that runs its own range of tiles, block by block (up to
    WINO_MAX_SLOTS threads with a whole block each); more threads than slots split each
    block's phases instead, in one slot."""
    tiles = -(-oh // m) * -(-ow // m)
    return max(1, min(WINO_MAX_SLOTS, tiles // WINO_TILES))


def _winograd_filters(w: np.ndarray, m: int, transposed: bool = False) -> np.ndarray:
    """[co, ci, 3, 3] -> the (m + 2)^2 matrices (G g G^T)[p, q] of [co, ci], each in A panels
    (transposed: each [ci, co] in 16-column B panels). In double, t = G g then u = t G^T, each
    sum left to right: the operations of the runtime's transform at load
    (backends/cpu/cpu_wino_pack.c), so both give the same bits."""
    g = _WINO_G[m]
    a = m + 2
    x = w.astype(np.float64)
    t = [[(g[p, 0] * x[:, :, 0, j] + g[p, 1] * x[:, :, 1, j]) + g[p, 2] * x[:, :, 2, j]
          for j in range(3)] for p in range(a)]  # fmt: skip
    u = np.stack(
        [
            (t[p][0] * g[q, 0] + t[p][1] * g[q, 1]) + t[p][2] * g[q, 2]
            for p in range(a)
            for q in range(a)
        ]
    ).astype(np.float32)  # [a * a, co, ci]
    if transposed:
        return np.concatenate(
            [B.pack_b_panels(np.ascontiguousarray(u[xi].T)) for xi in range(a * a)]
        )
    return np.concatenate([B.pack_a_panels(u[xi]) for xi in range(a * a)])


def _winograd_shape(op: Op, min_channels: int) -> bool:
    """A 3x3, stride 1, undilated, ungrouped conv with min_channels or more in and out."""
    a = op.attrs
    co, cg, kh, kw = a["w"].shape
    return (
        (kh, kw) == (3, 3)
        and a["groups"] == 1
        and tuple(a["stride"]) == (1, 1)
        and tuple(a["dil"]) == (1, 1)
        and min(cg, co) >= min_channels
    )


def _wino_scratch(m: int, slots: int, cg: int, co: int, transposed: bool) -> int:
    """Scratch bytes of a Winograd conv (the runtime's wino_slot_floats per slot, + alignment):
    [(m+2)^2][cg][64] transformed inputs and [(m+2)^2][co][64] products a slot; transposed, also
    [(m+2)^2][64][co] for the GEMMs' C^T."""
    a = m + 2
    return 64 + slots * a * a * (cg + co * (2 if transposed else 1)) * WINO_TILES * 4


def _winograd_small(op: Op, oh: int, ow: int) -> bool:
    """Whether a wide 3x3 conv on a small map (9 to 64 tiles of 2x2: ResNet's 7x7 layer, 16
    tiles, and its 14x14 layer, 49) runs as a transposed F(2x2): each element's GEMM is then
    C^T[tiles, co] = V^T @ U^T, the tiles the 6-row side and the output channels whole 16-lane
    vectors. On 7x7 maps the untransposed GEMMs would be matrix-vector products (_winograd_tile
    leaves them direct); transposed they do 1.7x fewer multiplies than the direct conv (49
    outputs cost 64 in 2x2 tiles) for 16 / 9 more filter bytes streamed. On 14x14 maps the
    untransposed F(2x2) computes 49 tiles as a 64-column strip; transposed they are 54 rows of
    6-row tiles (16 % fewer multiplies): Zen 4, paired, that conv 1.77 -> 1.58 ms at 1 thread
    and 1.01 -> 0.84 at 2, ResNet-18 3 % / 1-3 % faster, ResNet-50 1-2 % / 0-1 %. For wide
    layers only (>= 256 channels in and out), where the direct GEMM is also weight-bound."""
    return _winograd_shape(op, 256) and 9 <= -(-oh // 2) * -(-ow // 2) <= WINO_TILES


def _align(n: int) -> int:
    return -(-n // 64) * 64


def _conv_transposed(co: int, npix: int, kg: int) -> bool:
    """Whether a conv runs as C^T = im2col^T @ W^T (pixels as the 6-row broadcast side, output
    channels as the vector side): for few pixels (7x7 maps), whose 16-lane vectors are partly
    idle (49 pixels fill 49 of 64 lanes), while output channels come in multiples of 16. The
    kernels' cost is per 16-lane vector and per whole 6-row tile. C^T must then be transposed
    into the output, about 1 ns per element on this Xeon against 2 * kg FMAs per element of the
    GEMM (~120 GFLOP/s), so it pays only for deep K (measured: 1x1 convs with K <= 160 on 7x7 and
    14x14 maps ran 1.1-2x slower; 14x14 maps, 196 of 208 lanes used, gain too little). It pays
    for 512+ output channels too (ResNet's 7x7 layers), now that the untransposed kernel
    prefetches its C tile: run in one process alternately with untransposed files on an
    FMA-only Xeon, ResNet-18 ran 3 % faster at 1 and 2 threads and ResNet-50 3 % / 2 %."""
    if npix > 64 or kg < 256:
        return False
    if npix <= 16:  # one 16-pixel panel: 6 accumulators a tile, ~70 % of the FMA peak against ~95
        return True
    used_n = npix / (-(-npix // 16) * 16) * co / (-(-co // B.MR) * B.MR)
    used_t = npix / (-(-npix // B.MR) * B.MR) * co / (-(-co // 16) * 16)
    return used_t > used_n * 1.05


def build_blob(
    ops: list[Op],
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    pairs: bool = False,
    op_info: list[tuple[str, list[str]]] | None = None,
    pack: str = "load",
) -> tuple[bytes, int]:
    """The blob of ``ops`` and its arena size (``pack``: where Winograd filters are
    transformed, :func:`_pack_conv`). ``op_info``, when given, receives each blob
    operator's kind and FX nodes, in blob order (a copy dropped as an alias gives its nodes to
    the operator before it, or after it when it is first)."""
    g = B.Graph()
    g.n_inputs, g.n_outputs = len(inputs), len(outputs)
    in_idx = {id(r): i for i, r in enumerate(inputs)}
    out_idx = {id(r): i for i, r in enumerate(outputs)}
    ids: dict[int, int] = {}
    # A copy (clone, expand or dtype no-op of a contiguous tensor) whose result is not a delegate
    # output is dropped: its result becomes a second shape over the source's storage (nothing
    # in the backend writes a tensor after producing it, so the two can never differ).
    alias: dict[int, TensorSpec] = {}
    for op in ops:
        if op.kind == "copy" and isinstance(op.ins[0], TensorSpec):
            o = op.outs[0]
            if o.root() is o and id(o) not in out_idx:
                alias[id(o)] = op.ins[0]
    kept = [op for op in ops if not (op.kind == "copy" and id(op.outs[0]) in alias)]
    if op_info is not None:
        info = [(op.kind, list(op.nodes)) for op in kept]
        kept_ids = {id(op) for op in kept}
        k = -1
        for op in ops:
            if id(op) in kept_ids:
                k += 1
            elif info:
                info[max(k, 0)][1].extend(op.nodes)
        op_info.extend(info)
    ops = kept

    def tid(v: Any) -> int:
        if v is None:
            return -1
        if isinstance(v, Const):
            return g.const(v.arr, v.key)
        if id(v) in ids:
            return ids[id(v)]
        r = v.root()
        while id(r) in alias:
            r = alias[id(r)].root()
        shape = tuple(v.shape)
        if id(r) in out_idx:
            bt = B.BTensor(B.OUTPUT, shape, index=out_idx[id(r)])
        elif id(r) in in_idx:
            dt = {torch.int64: B.DTYPE_I64, torch.int32: B.DTYPE_I32}.get(v.dtype, B.DTYPE_F32)
            bt = B.BTensor(B.INPUT, shape, index=in_idx[id(r)], dtype=dt)
        else:
            bt = B.BTensor(B.ARENA, shape, root=id(r))
        ids[id(v)] = g.add(bt)
        return ids[id(v)]

    for op in ops:
        if op.kind == "conv2d":
            x, out = op.ins[0], op.outs[0]
            pc = _pack_conv(op, x, out, pairs, pack)
            a = op.attrs
            # The conv ip[] slots, in the order of backends/cpu/emc_format.h's EMC_CONV_* enum
            # (the C side reads them through emc_conv_params_of); the layout is the format.
            ip = [
                a["groups"],
                a["w"].shape[2],
                a["w"].shape[3],
                *a["stride"],
                *(q + (e << 16) for q, e in zip(a["pad"], a.get("pad_extra", (0, 0)), strict=True)),
                *a["dil"],
                int(pc.depthwise),
                0,
                0,
                int(pc.transposed),
                pc.wino,
                pc.wino_slots,
                0 if pc.pairs is None else g.const(pc.pairs) + 1,
            ]
            scale = -1 if a.get("in_scale") is None else tid(a["in_scale"])
            ip.append(scale + 1)  # EMC_CONV_IN_SCALE
            fp = list(op.fp)
            if pc.q8_table is not None:  # EMC_CONV_Q8, _ZP, _LO, _HI; fp[EMC_CONV_FP_Q8_INV]
                q8 = a["q8"]
                ip += [g.const(pc.q8_table) + 1, q8["zp"], q8["lo"], q8["hi"]]
                fp = (fp + [0.0] * 8)[:8]
                fp[2] = q8["inv"]
            else:
                ip += [0, 0, 0, 0]
            ip.append(int(pc.at_load))  # EMC_CONV_WINO_AT_LOAD
            ip.append(pc.q8_wino)  # EMC_CONV_Q8_WINO
            ip.append(int(a.get("q8_in", False)) | 2 * int(a.get("q8_out", False)))  # _Q8_U8
            b = None if a.get("q8dw") else a["b"]  # (an int8 depthwise conv's is in its table)
            res = tid(op.ins[1]) if len(op.ins) > 1 else -1
            bop = B.BOp(
                "conv2d",
                [tid(x), g.const(pc.packed), -1 if b is None else g.const(b), res],
                [tid(o) for o in op.outs],
                ip=ip,
                fp=fp,
                act=op.act,
                scratch=pc.scratch,
                reads=[scale] if scale >= 0 else [],
            )
        elif op.kind == "dqlinear":  # EMC_DQL_*: M, K, N, 1 + the channel table's id, quantized
            ip = list(op.ip)
            ip[3] = g.const(op.attrs["table"]) + 1
            bop = B.BOp(
                "dqlinear",
                [tid(i) for i in op.ins],
                [tid(o) for o in op.outs],
                ip=ip,
                fp=list(op.fp),
                act=op.act,
            )
        else:
            ip = list(op.ip)
            if op.kind == "binary" and "q8add" in op.attrs:  # EMC_BINARY_Q8, _Q8_TABLE
                ip[2] = g.const(op.attrs["q8add"]) + 1
            if op.kind == "unary" and "q8lut" in op.attrs:  # EMC_UNARY_Q8, _Q8_TABLE
                ip[1] = g.const(op.attrs["q8lut"]) + 1
            if op.kind == "unary" and "pre" in op.attrs:  # EMC_UNARY_PRE, _PRE_TIMES_X
                ip = (ip + [0, 0, 0, 0])[:4] if len(ip) < 4 else ip
                ip[2], ip[3] = op.attrs["pre"][0] + 1, op.attrs["pre"][1]
            bop = B.BOp(
                op.kind,
                [tid(i) for i in op.ins],
                [tid(o) for o in op.outs],
                ip=ip,
                fp=list(op.fp),
                act=op.act,
            )
        g.ops.append(bop)
    data = g.serialize()
    return data, g.arena_nbytes
