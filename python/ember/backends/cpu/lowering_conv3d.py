"""EmberCpuBackend lowering of 3-d convolutions (``nn.Conv3d``: video and volumetric models) as
one 2-d convolution over the output's depth slices, so the conv paths the packer picks (im2col
GEMM, Winograd, depthwise) run them.

Output depth ``od`` reads input depths ``od * sd - pd + kd * dd`` for the ``kD`` depth taps: the
input, zero-padded along depth, is sliced once per tap (``OD`` depths each, stride ``sd``), the
slices are concatenated and permuted to ``[N * OD, C * kD, H, W]`` (each output depth an image
whose channels are the input's channels times the depth taps), and one conv2d with the weights
seen as ``[Co, C / groups * kD, kH, kW]`` gives ``[N * OD, Co, OH, OW]``, permuted back to
``[N, Co, OD, OH, OW]``. The same products as the 3-d conv; the input is copied ``kD / sd``
times. Called by :func:`.lowering.lower`.
"""

from __future__ import annotations

import math

import numpy as np

from ember.backends.cpu.lowering_base import INF, Op, Unsupported
from ember.backends.cpu.lowering_convt import ConvGeom
from ember.backends.cpu.lowering_data import _cat, _slice
from ember.passes.ir import TensorSpec


def lower_conv3d(
    x: TensorSpec, w: np.ndarray, b: np.ndarray | None, out: TensorSpec, g: ConvGeom
) -> Op:
    """``out = conv3d(x, w, b)`` (weight [Co, C / groups, kD, kH, kW]) as backend ops."""
    stride, pad, dil, groups = g.stride, g.pad, g.dil, g.groups
    n, c, d, h, wd = x.shape
    co, cg, kd, kh, kw = w.shape
    if len(out.shape) != 5 or min(stride) < 1 or min(dil) < 1 or min(pad) < 0 or c != cg * groups:
        raise Unsupported("conv3d shape")
    od = (d + 2 * pad[0] - dil[0] * (kd - 1) - 1) // stride[0] + 1
    if od < 1 or tuple(out.shape[:3]) != (n, co, od):
        raise Unsupported("conv3d output shape")
    oh, ow = out.shape[3], out.shape[4]
    f32, name = x.dtype, out.name
    parts: list[Op] = []
    src = x
    if pad[0]:
        src = TensorSpec(f"{name}.dpad", f32, (n, c, d + 2 * pad[0], h, wd))
        parts.append(
            Op(
                "pad",
                [x],
                [src],
                ip=[n * c, d, h * wd, pad[0], pad[0], 0, 0],
                fp=[-INF, INF, 0.0],
                attrs=dict(last_two=False),
            )
        )
    taps: list[TensorSpec] = []
    for t in range(kd):
        start = t * dil[0]
        if kd == 1 and stride[0] == 1 and od == src.shape[2]:
            taps.append(src)
            continue
        s = TensorSpec(f"{name}.tap{t}", f32, (n, c, od, h, wd))
        parts.append(_slice(src, s, 2, start, stride[0], od))
        taps.append(s)
    if kd > 1:
        stacked = TensorSpec(f"{name}.taps", f32, (n, c, kd * od, h, wd))
        cat = _cat(taps, stacked, 2)
        parts.extend(cat.attrs.get("parts") or [cat])
        six = TensorSpec(f"{name}.taps6", f32, (n, c, kd, od, h, wd))
        moved = TensorSpec(f"{name}.moved", f32, (n, od, c, kd, h, wd))
        parts.append(Op("copy", [stacked], [six]))
        parts.append(Op("permute", [six], [moved], ip=[0, 3, 1, 2, 4, 5]))
    else:
        moved = TensorSpec(f"{name}.moved", f32, (n, od, c, h, wd))
        parts.append(Op("permute", [taps[0]], [moved], ip=[0, 2, 1, 3, 4]))
    images = TensorSpec(f"{name}.images", f32, (n * od, c * kd, h, wd))
    prod = TensorSpec(f"{name}.prod", f32, (n * od, co, oh, ow))
    w2 = np.ascontiguousarray(w.astype(np.float32).reshape(co, cg * kd, kh, kw))
    attrs = dict(w=w2, b=b, stride=list(stride[1:]), pad=list(pad[1:]), dil=list(dil[1:]))
    attrs["groups"] = groups
    four = TensorSpec(f"{name}.prod4", f32, (n, od, co, oh * ow))
    back = TensorSpec(f"{name}.back", f32, (n, co, od, oh * ow))
    parts += [
        Op("copy", [moved], [images]),
        Op("conv2d", [images], [prod], attrs=attrs),
        Op("copy", [prod], [four]),
        Op("permute", [four], [back], ip=[0, 2, 1, 3]),
        Op("copy", [back], [out]),
    ]
    if math.prod(out.shape) != n * co * od * oh * ow:
        raise Unsupported("conv3d output shape")
    return Op("parts", [x], [out], attrs=dict(parts=parts))
