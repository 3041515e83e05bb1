"""EmberCpuBackend lowering of transposed convolutions (``aten::convolution`` with
``transposed=True``; a transposed conv1d arrives here as a 2-d one of height 1,
``ember.passes.conv1d``). Each becomes a ``parts`` op of ordinary backend ops, so the conv paths
the packer picks (im2col GEMM, Winograd, depthwise, direct 1x1) run it:

- kernel = stride, no padding, dilation, groups or output padding (U-Net's 2x2 upsampling): one
  1x1 conv to Co * kh * kw channels and a permute that moves each tap next to its pixel;
- any other (DCGAN's 4x4 / stride 2 / pad 1, a decoder's 3x3 / stride 2 with output padding,
  groups, dilation, stride 1): the sub-pixel split. Output rows ``oy = s * q + r`` of one phase
  ``r`` take only the taps ``ky`` with ``ky * d = r + p (mod s)``, so each of the ``sy * sx``
  phases is an ordinary stride-1 conv of the input (those taps, flipped, dilated by
  ``d / gcd(d, s)``, padded or cropped on each side as the phase needs) giving a
  ``ceil(OH / sy) x ceil(OW / sx)`` map; the phases' maps, concatenated, are interleaved by one
  permute ``[N, sy, sx, Co, Hq, Wq] -> [N, Co, Hq, sy, Wq, sx]`` and cropped to ``OH x OW``.
  The same multiply-adds as the transposed conv, no scatter, no zero taps.

Called by :func:`.lowering.lower`. A phase no tap reaches (a kernel shorter than the stride) is
the bias alone, stored as a constant map up to ``CONST_PHASE_MAX`` elements; past that, and for
an empty output, :class:`Unsupported` (the conv stays portable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.backends.cpu.lowering_base import INF, Const, Op, Unsupported
from ember.backends.cpu.lowering_data import _cat, _slice
from ember.passes.ir import TensorSpec

# Elements of the largest phase map stored as a constant (a phase no tap reaches is the bias).
CONST_PHASE_MAX = 1 << 16


@dataclass(frozen=True)
class Phase:
    """One output phase of a transposed conv along one axis: the taps it takes (in the order the
    ordinary conv applies them), the zero rows it needs before and after the input (negative:
    rows cropped) and the dilation between its taps in input rows."""

    taps: tuple[int, ...]
    before: int
    after: int
    dil: int


def phases(k: int, s: int, p: int, d: int, n_in: int, n_out: int) -> list[Phase]:
    """The ``s`` phases of a transposed conv along one axis (kernel ``k``, stride ``s``, padding
    ``p``, dilation ``d``, ``n_in`` -> ``n_out``), each an ordinary stride-1 conv giving
    ``ceil(n_out / s)`` outputs: phase ``r``'s output ``q`` is the transposed conv's output
    ``s * q + r`` (past ``n_out`` for the last ``q`` of some phases: cropped after). A phase with
    no tap gets ``taps == ()``."""
    g = math.gcd(d, s)
    step, dq = s // g, d // g  # taps of one phase: ky0, ky0 + step, ...; input rows dq apart
    nq = -(-n_out // s)
    out: list[Phase] = []
    for r in range(s):
        c = (r + p) % s
        ky0 = next((ky for ky in range(min(step, k)) if ky * d % s == c), None)
        if ky0 is None:
            out.append(Phase((), 0, 0, 1))
            continue
        taps = list(range(ky0, k, step))
        nj = len(taps)
        lead = (r + p - ky0 * d) // s  # exact: ky0 * d = r + p (mod s)
        # output q, tap j (ky = taps[j]) reads input row q + lead - j * dq: as an ordinary conv
        # (tap m = nj - 1 - j reads padded row q + m * dq), the input padded by `before`.
        before = (nj - 1) * dq - lead
        after = nq - n_in - before + (nj - 1) * dq
        out.append(Phase(tuple(reversed(taps)), before, after, dq))
    return out


def _reads(f: Phase, n_in: int) -> bool:
    """Whether phase f reads any of the axis' n_in input rows (not when its crops meet)."""
    return bool(f.taps) and n_in - max(0, -f.before) - max(0, -f.after) >= 1


def _pad_crop(x: TensorSpec, ty: Phase, tx: Phase, name: str) -> tuple[TensorSpec, list[Op]]:
    """x cropped where a phase's padding is negative, then padded where the phase's two sides
    differ (the symmetric part is the conv's own padding, :func:`_conv_pad`)."""
    ops: list[Op] = []
    cur = x
    for axis, f in ((2, ty), (3, tx)):  # crops first (a phase's negative padding)
        lo, hi = max(0, -f.before), max(0, -f.after)
        if lo or hi:
            shape = list(cur.shape)
            shape[axis] -= lo + hi
            if shape[axis] < 1:
                raise Unsupported("transposed conv: a phase reads no input row")
            y = TensorSpec(f"{name}.crop{axis}", x.dtype, tuple(shape))
            ops.append(_slice(cur, y, axis, lo, 1, shape[axis]))
            cur = y
    n, c, h, w = cur.shape
    py, px = _conv_pad(ty, tx)
    top, bottom = max(0, ty.before) - py, max(0, ty.after) - py
    left, right = max(0, tx.before) - px, max(0, tx.after) - px
    if top or bottom or left or right:
        y = TensorSpec(f"{name}.pad", x.dtype, (n, c, h + top + bottom, w + left + right))
        ops.append(
            Op(
                "pad",
                [cur],
                [y],
                ip=[n * c, h, w, top, bottom, left, right],
                fp=[-INF, INF, 0.0],
                attrs=dict(last_two=True),
            )
        )
        cur = y
    return cur, ops


def _conv_pad(ty: Phase, tx: Phase) -> tuple[int, int]:
    """The padding a phase's conv does itself: the part both sides of an axis share."""
    return max(0, min(ty.before, ty.after)), max(0, min(tx.before, tx.after))


@dataclass(frozen=True)
class ConvGeom:
    """A convolution's stride, padding and dilation (one entry an axis) and groups."""

    stride: list[int]
    pad: list[int]
    dil: list[int]
    groups: int


def lower_subpixel(
    x: TensorSpec, w: np.ndarray, b: np.ndarray | None, out: TensorSpec, g: ConvGeom
) -> Op:
    """Any transposed conv as ``sy * sx`` ordinary convs, a cat, a permute and a crop (the
    module's docstring). ``w`` is the transposed conv's weight, [Ci, Co / groups, kh, kw]."""
    stride, pad, dil, groups = g.stride, g.pad, g.dil, g.groups
    ci, cog, kh, kw = w.shape
    n, c, h, wd = x.shape
    sy, sx = stride
    co, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    if c != ci or ci % groups or co != cog * groups or out.shape[0] != n:
        raise Unsupported("transposed conv channels")
    py_, px_ = phases(kh, sy, pad[0], dil[0], h, oh), phases(kw, sx, pad[1], dil[1], wd, ow)
    hq, wq = -(-oh // sy), -(-ow // sx)
    if oh < 1 or ow < 1:
        raise Unsupported("transposed conv with an empty output")
    py_ = [f if _reads(f, h) else Phase((), 0, 0, 1) for f in py_]
    px_ = [f if _reads(f, wd) else Phase((), 0, 0, 1) for f in px_]
    if any(not f.taps for f in py_ + px_) and n * co * hq * wq > CONST_PHASE_MAX:
        raise Unsupported("transposed conv with a large phase no tap reaches (kernel < stride)")
    cig = ci // groups
    wg = w.astype(np.float32).reshape(groups, cig, cog, kh, kw)
    bias = None if b is None else b.astype(np.float32)
    f32 = x.dtype
    parts: list[Op] = []
    maps: list[TensorSpec | Const] = []
    padded: dict[tuple[int, ...], TensorSpec] = {}
    for ry, ty in enumerate(py_):
        for rx, tx in enumerate(px_):
            if not ty.taps or not tx.taps:  # the bias alone, stored
                fill = np.zeros((n, co, hq, wq), np.float32)
                if bias is not None:
                    fill += bias.reshape(1, co, 1, 1)
                maps.append(Const(fill))
                continue
            key = (ty.before, ty.after, tx.before, tx.after)
            if key not in padded:
                src, ops = _pad_crop(x, ty, tx, f"{out.name}.in{len(padded)}")
                parts.extend(ops)
                padded[key] = src
            taps = wg[:, :, :, list(ty.taps)][:, :, :, :, list(tx.taps)]
            wp = np.ascontiguousarray(taps.transpose(0, 2, 1, 3, 4)).reshape(
                co, cig, len(ty.taps), len(tx.taps)
            )
            y = out if sy * sx == 1 else TensorSpec(f"{out.name}.ph{ry}_{rx}", f32, (n, co, hq, wq))
            attrs = dict(
                w=wp,
                b=bias,
                stride=[1, 1],
                pad=list(_conv_pad(ty, tx)),
                dil=[ty.dil, tx.dil],
                groups=groups,
            )
            parts.append(Op("conv2d", [padded[key]], [y], attrs=attrs))
            maps.append(y)
    if maps and maps[0] is out:  # stride 1: the one phase is the output
        return Op("parts", [x], [out], attrs=dict(parts=parts))
    full = (n, co, hq * sy, wq * sx)
    inter = out if full == tuple(out.shape) else TensorSpec(f"{out.name}.full", f32, full)
    cat = TensorSpec(f"{out.name}.phases", f32, (n, sy * sx * co, hq, wq))
    cat_op = _cat(maps, cat, 1)
    parts.extend(cat_op.attrs.get("parts") or [cat_op])
    six = TensorSpec(f"{out.name}.phases6", f32, (n, sy, sx, co, hq, wq))
    moved = TensorSpec(f"{out.name}.moved", f32, (n, co, hq, sy, wq, sx))
    parts += [
        Op("copy", [cat], [six]),
        Op("permute", [six], [moved], ip=[0, 3, 4, 1, 5, 2]),
        Op("copy", [moved], [inter]),
    ]
    cur = inter
    if hq * sy != oh:
        y = out if wq * sx == ow else TensorSpec(f"{out.name}.croph", f32, (n, co, oh, wq * sx))
        parts.append(_slice(cur, y, 2, 0, 1, oh))
        cur = y
    if wq * sx != ow:
        parts.append(_slice(cur, out, 3, 0, 1, ow))
    return Op("parts", [x], [out], attrs=dict(parts=parts))


def _lower_conv_transpose(
    x: TensorSpec,
    w: np.ndarray,
    b: np.ndarray | None,
    out: TensorSpec,
    stride: list[int],
    pad: list[int],
    dil: list[int],
    outpad: list[int],
    groups: int,
) -> Op:
    """A transposed conv (weight [Ci, Co / groups, kh, kw]) as backend ops. Its kernel equal to
    its stride, without padding, dilation or groups (the 2x / 4x upsampling of U-Nets and DPT):
    every output pixel is one input pixel's product with one kernel tap, so it is a 1x1 conv to
    Co * kh * kw channels, then the taps moved next to their pixels: [N, Co, kh, kw, H, W] ->
    [N, Co, H, kh, W, kw] (a permute between two views, which the packer keeps as shapes over one
    storage). Any other: :func:`lower_subpixel`."""
    ci, co, kh, kw = w.shape
    n, c, h, wd = x.shape
    oh = (h - 1) * stride[0] - 2 * pad[0] + dil[0] * (kh - 1) + outpad[0] + 1
    ow = (wd - 1) * stride[1] - 2 * pad[1] + dil[1] * (kw - 1) + outpad[1] + 1
    if len(out.shape) != 4 or tuple(out.shape) != (n, co * groups, oh, ow) or min(pad) < 0:
        raise Unsupported("transposed conv shape")
    # Along an axis of one input row, unpadded, the stride moves nothing: the kernel's taps are
    # the output rows, as with stride = kernel (DCGAN's first layer, a code of 1x1 to 4x4).
    stride = [
        k if size == 1 and p == 0 and o == 0 and d == 1 else st
        for k, size, p, o, d, st in zip((kh, kw), (h, wd), pad, outpad, dil, stride, strict=True)
    ]
    if (
        groups != 1
        or c != ci
        or [kh, kw] != stride
        or any(pad)
        or dil != [1, 1]
        or any(outpad)
        or tuple(out.shape) != (n, co, h * kh, wd * kw)
    ):
        return lower_subpixel(x, w, b, out, ConvGeom(stride, pad, dil, groups))
    taps = np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(co * kh * kw, ci, 1, 1))
    bias = None if b is None else np.repeat(b.astype(np.float32), kh * kw)
    f32 = x.dtype
    prod = TensorSpec(f"{out.name}.taps", f32, (n, co * kh * kw, h, wd))
    six = TensorSpec(f"{out.name}.taps6", f32, (n, co, kh, kw, h, wd))
    moved = TensorSpec(f"{out.name}.moved", f32, (n, co, h, kh, wd, kw))
    attrs = dict(w=taps.astype(np.float32), b=bias, stride=[1, 1], pad=[0, 0], dil=[1, 1], groups=1)
    parts = [
        Op("conv2d", [x], [prod], attrs=attrs),
        Op("copy", [prod], [six]),
        Op("permute", [six], [moved], ip=[0, 1, 4, 2, 5, 3]),
        Op("copy", [moved], [out]),
    ]
    return Op("parts", [x], [out], attrs=dict(parts=parts))
