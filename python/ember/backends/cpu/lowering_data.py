"""EmberCpuBackend lowering of data movement, reductions, lookups and resampling: splits /
chunks / unbinds, selects, flips, cats of any number of inputs, constant pads, means / sums /
vector norms over any dims, embeddings and nearest / bilinear upsampling. Each returns one
:class:`Op`, or a ``parts`` op whose ``attrs["parts"]`` are the several backend ops it becomes
(``fusion._expand_parts``, the first pass over a run). Called by :func:`.lowering.lower`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ember.backends.cpu import blob as B
from ember.backends.cpu.lowering_base import (
    F32_CODE,
    INF,
    Const,
    Op,
    Unsupported,
    _f32,
    _f32x,
    _ints,
    _num,
    _operand,
    _t,
)
from ember.passes.ir import CONSTANT, MUTABLE, Arg, KernelInstr, TensorSpec


def _lower_norm(x: TensorSpec, a: list[Arg], out: TensorSpec) -> Op:
    """linalg_vector_norm of ord 1 or 2 over adjacent dims: |x| or x * x, its sum (the mean op's
    EMC_MEAN_SUM), for ord 2 the square root; within f32 rounding of ATen's."""
    order = _num(a[1])
    nd = len(x.shape)
    dims = sorted({d % nd for d in _ints(a[2])}) if a[2].kind == "intlist" and nd else []
    dims = dims or list(range(nd))
    if order not in (1.0, 2.0) or (a[4].kind != "null" and a[4].value != F32_CODE):
        raise Unsupported(f"vector norm of order {order}")
    if not dims or dims != list(range(dims[0], dims[-1] + 1)):
        raise Unsupported("vector norm over non-adjacent dims")
    outer = math.prod(x.shape[: dims[0]])
    cols = math.prod(x.shape[dims[0] : dims[-1] + 1])
    inner = math.prod(x.shape[dims[-1] + 1 :])
    if cols == 0:
        raise Unsupported("empty vector norm")
    sq = TensorSpec(f"{out.name}.terms", x.dtype, tuple(x.shape))
    terms = (
        Op("unary", [x], [sq], act="abs")
        if order == 1.0
        else Op("binary", [x, x], [sq], ip=[B.BIN["mul"]], fp=[-INF, INF])
    )
    if order == 1.0:
        return Op("parts", [x], [out], attrs=dict(parts=[terms, _sum(sq, out, outer, cols, inner)]))
    total = TensorSpec(f"{out.name}.sum", x.dtype, tuple(out.shape))
    root = Op("unary", [total], [out], act="sqrt")
    return Op(
        "parts", [x], [out], attrs=dict(parts=[terms, _sum(sq, total, outer, cols, inner), root])
    )


REDUCE_MAX, REDUCE_MIN = 2, 3  # emc_reduce: EMC_MEAN_SUM's max and min


def _reduce(x: TensorSpec, out: TensorSpec, dims: list[int], is_sum: int) -> Op:
    """A mean (sum: ``is_sum`` 1; max / min: REDUCE_MAX / MIN) over ``dims`` (sorted): one
    ``mean`` (``extreme``) op per run of adjacent dims, the last run first (a mean of means over
    equal counts is the mean, a max of maxes the max), each into a new tensor but the last."""
    kind = "extreme" if is_sum >= REDUCE_MAX else "mean"
    groups: list[list[int]] = []
    for d in dims:
        if groups and d == groups[-1][-1] + 1:
            groups[-1].append(d)
        else:
            groups.append([d])
    shape, src, ops = list(x.shape), x, []
    for i, g in enumerate(reversed(groups)):
        outer, inner = math.prod(shape[: g[0]]), math.prod(shape[g[-1] + 1 :])
        cols = math.prod(shape[g[0] : g[-1] + 1])
        shape = shape[: g[0]] + shape[g[-1] + 1 :]
        dst = out if i == len(groups) - 1 else TensorSpec(f"{out.name}.r{i}", x.dtype, tuple(shape))
        ops.append(Op(kind, [src], [dst], ip=[outer, cols, inner, is_sum]))
        src = dst
    return ops[0] if len(ops) == 1 else Op("parts", [x], [out], attrs=dict(parts=ops))


def _sum(x: TensorSpec, out: TensorSpec, outer: int, cols: int, inner: int) -> Op:
    return Op("mean", [x], [out], ip=[outer, cols, inner, 1])


def _scale_of(a: Arg, i: int, n_in: int, n_out: int) -> np.float32:
    """ATen's area_pixel_compute_scale without align_corners: 1 / the given scale factor, else
    in / out, in f32."""
    if a.kind == "doublelist" and a.value and float(a.value[i]) > 0:
        return np.float32(1.0 / float(a.value[i]))
    return np.float32(n_in) / np.float32(n_out)


def _nearest_taps(n_in: int, n_out: int, scale: np.float32) -> np.ndarray:
    """Each output index's source (ATen's nearest_idx, f32 arithmetic) as taps (i, i, 1, 0)."""
    t = np.zeros((n_out, 4), dtype=np.float32)
    for o in range(n_out):
        if n_out == n_in:
            i = o
        elif n_out == 2 * n_in:
            i = o >> 1
        else:
            i = min(int(np.floor(np.float32(o) * scale)), n_in - 1)
        t[o] = (i, i, 1.0, 0.0)
    return t


def _linear_taps(n_in: int, n_out: int, align: bool, scale: np.float32) -> np.ndarray:
    """Each output index's two sources and weights (ATen's compute_source_index_and_lambda, f32
    arithmetic)."""
    f = np.float32
    if align:
        scale = f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0.0)
    t = np.zeros((n_out, 4), dtype=np.float32)
    for o in range(n_out):
        if n_out == n_in:
            t[o] = (o, o, 1.0, 0.0)
            continue
        r = scale * f(o) if align else max(scale * (f(o) + f(0.5)) - f(0.5), f(0.0))
        i0 = min(int(np.floor(r)), n_in - 1)
        l1 = min(max(f(r - f(i0)), f(0.0)), f(1.0))
        t[o] = (i0, i0 + (1 if i0 < n_in - 1 else 0), f(1.0) - l1, l1)
    return t


def _lower_resize(ins: KernelInstr, out: TensorSpec) -> Op:
    """upsample_nearest2d / upsample_bilinear2d (EMC_OP_RESIZE): the taps of every output row
    and column computed here, with ATen's coordinate rules."""
    a = ins.args
    x = _f32x(a[0])
    if len(x.shape) != 4 or len(out.shape) != 4:
        raise Unsupported("resize of a tensor that is not 4-d")
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    if min(h, w, oh, ow) < 1 or max(h, w, oh, ow) >= 1 << 24:
        raise Unsupported("resize sizes")
    if ins.kernel == "aten::upsample_nearest2d.vec_out":
        sc = a[2]
        rows = _nearest_taps(h, oh, _scale_of(sc, 0, h, oh))
        cols = _nearest_taps(w, ow, _scale_of(sc, 1, w, ow))
        nearest = 1
    else:
        align, sc = bool(a[2].value), a[3]
        rows = _linear_taps(h, oh, align, _scale_of(sc, 0, h, oh))
        cols = _linear_taps(w, ow, align, _scale_of(sc, 1, w, ow))
        nearest = 0
    return Op(
        "resize",
        [x, Const(rows.reshape(-1)), Const(cols.reshape(-1))],
        [out],
        ip=[n * c, h, w, oh, ow, nearest],
    )


def _lower_adaptive_avg(x: TensorSpec, out: TensorSpec, oh: int, ow: int) -> Op:
    """_adaptive_avg_pool2d with uneven windows as EMC_OP_RESIZE's adaptive average mode: each
    output row's and column's window [floor(i * n / o), ceil((i + 1) * n / o)) as ATen's, its
    last index inclusive in the taps."""
    n, c, h, w = x.shape
    if min(oh, ow) < 1 or tuple(out.shape) != (n, c, oh, ow):
        raise Unsupported("adaptive pool sizes")

    def windows(size: int, o: int) -> np.ndarray:
        t = np.zeros((o, 4), dtype=np.float32)
        for i in range(o):
            t[i, :2] = (i * size // o, -(-(i + 1) * size // o) - 1)
        return t.reshape(-1)

    return Op(
        "resize",
        [x, Const(windows(h, oh)), Const(windows(w, ow))],
        [out],
        ip=[n * c, h, w, oh, ow, 2],  # EMC_RESIZE_MODE_ADAPTIVE_AVG
    )


# Operators that take elements of x at offsets fixed at export (constant indices, strides).
GATHERS = ("aten::index.Tensor_out", "aten::gather.out", "aten::as_strided_copy.out")
MAX_GATHER = 1 << 24  # offsets are stored as f32: exact up to 2^24


def _lower_gather(ins: KernelInstr, out: TensorSpec) -> Op:
    """``index`` with constant indices (an unfold's patches), ``gather`` with a constant index,
    ``as_strided``: ATen's own operator applied at export to the element numbers of x gives
    each output element's source, so negative and broadcast indices, masks and strides mean
    exactly what they mean to ATen. A view of all of x in order is a copy; else EMC_OP_GATHER
    with those offsets."""
    k, a = ins.kernel, ins.args
    x = _f32x(a[0])
    n = math.prod(x.shape)
    if n > MAX_GATHER or math.prod(out.shape) > MAX_GATHER:
        raise Unsupported("gather of more than 2^24 elements")
    src = torch.arange(n, dtype=torch.int64).reshape(x.shape)

    def const(t: Any) -> torch.Tensor:
        if not isinstance(t, TensorSpec) or t.root().kind != CONSTANT or t.data is None:
            raise Unsupported("indices that are not constants")
        return t.data

    try:
        if k == "aten::index.Tensor_out":
            if a[1].kind not in ("tensorlist", "opt_tensorlist"):
                raise Unsupported("index arguments")
            idx = [None if t is None else const(t) for t in a[1].value]
            offsets = torch.ops.aten.index.Tensor(src, idx)
        elif k == "aten::gather.out":
            offsets = torch.gather(src, int(a[1].value), const(_t(a[2])))
        else:
            off = 0 if a[3].kind == "null" else int(a[3].value)
            offsets = torch.as_strided(src.reshape(-1), _ints(a[1]), _ints(a[2]), off)
    except (RuntimeError, IndexError, ValueError, TypeError) as e:
        raise Unsupported(f"indices ATen refuses: {e}") from e
    if tuple(offsets.shape) != tuple(out.shape):
        raise Unsupported("gather output shape")
    flat = offsets.reshape(-1)
    if flat.numel() == n and torch.equal(flat, torch.arange(n)):
        return Op("copy", [x], [out])
    return Op("gather", [x, Const(flat.to(torch.float32).numpy())], [out])


def _lower_embedding(a: list[Arg], out: TensorSpec) -> Op:
    """embedding(weight, indices): the table's rows (EMC_OP_EMBEDDING); the indices an int64 /
    int32 activation the delegate takes as an input (checked against the table at run time)."""
    w, ix = _t(a[0]), _t(a[1])
    if not _f32(w) or len(w.shape) != 2:
        raise Unsupported("embedding table is not a 2-d f32 tensor")
    if ix.dtype not in (torch.int64, torch.int32) or ix.dynamic or ix.root().kind == CONSTANT:
        raise Unsupported("embedding indices are not an int64 / int32 activation")
    if ix.root().kind == MUTABLE or ix.root().move_target:
        raise Unsupported("embedding indices are mutable or a control-flow tensor")
    if math.prod(out.shape) != math.prod(ix.shape) * w.shape[1]:
        raise Unsupported("embedding output shape")
    return Op("embedding", [_operand(w), ix], [out], ip=[w.shape[0], w.shape[1]])


def _cat(xs: list[Any], out: TensorSpec, dim: int) -> Op:
    """A cat of ``xs`` along ``dim``: one ``cat`` op of up to 4 inputs (EMC_OP_CAT's); more
    become a ``parts`` op of cats of up to 4 (an unrolled RNN's time steps), each group's
    result a new tensor read by the cat of the groups (concatenation is associative)."""
    outer = math.prod(out.shape[:dim])

    def rows(x: Any) -> int:
        return math.prod((x.arr if isinstance(x, Const) else x).shape[dim:])

    if len(xs) <= 4:
        return Op("cat", xs, [out], ip=[outer, len(xs), *[rows(x) for x in xs]])
    parts, groups = [], []
    for g in range(0, len(xs), 4):
        grp = xs[g : g + 4]
        if len(grp) == 1:
            groups.append(grp[0])
            continue
        shape = list(out.shape)
        shape[dim] = sum((x.arr if isinstance(x, Const) else x).shape[dim] for x in grp)
        tmp = TensorSpec(f"{out.name}.cat{g // 4}", out.dtype, tuple(shape))
        parts.append(_cat(grp, tmp, dim))
        groups.append(tmp)
    top = _cat(groups, out, dim)
    parts.extend(top.attrs.get("parts") or [top])
    return Op("parts", xs, [out], attrs=dict(parts=parts))


def _slice(x: TensorSpec, out: TensorSpec, dim: int, start: int, step: int, length: int) -> Op:
    """``out`` = x's elements ``start, start + step, ...`` (``length`` of them) along ``dim``."""
    return Op(
        "slice",
        [x],
        [out],
        ip=[
            math.prod(x.shape[:dim]),
            x.shape[dim],
            math.prod(x.shape[dim + 1 :]),
            start,
            step,
            length,
        ],
    )


# Operators with several outputs, each a contiguous piece of the input along one dim.
SPLITS = (
    "aten::split_with_sizes_copy.out",
    "aten::split_copy.Tensor_out",
    "aten::unbind_copy.int_out",
)


def _lower_split(ins: KernelInstr) -> Op:
    """A split / chunk / unbind: one ``parts`` op whose ``attrs["parts"]`` are the slices it
    becomes (``fusion._expand_parts``, the first pass over a run)."""
    k, a = ins.kernel, ins.args
    outs = [t for o in ins.outputs for t in o.tensors()]
    if not outs or not all(o.kind in ("tensorlist", "tensor") for o in ins.outputs):
        raise Unsupported("no tensor output")
    x = _f32x(a[0])
    for t in outs:
        if not _f32(t) or t.root().kind == MUTABLE:
            raise Unsupported("split output is not a static f32 tensor")
    if x.dynamic or x.root().kind == MUTABLE or x.root().move_target or not x.shape:
        raise Unsupported("dynamic, mutable or control-flow tensor")
    nd = len(x.shape)
    if k == "aten::unbind_copy.int_out":
        dim = int(a[1].value) % nd
        sizes = [1] * x.shape[dim]
    elif k == "aten::split_copy.Tensor_out":
        dim, step = int(a[2].value) % nd, int(a[1].value)
        if step < 1:
            raise Unsupported("split size")
        sizes = [min(step, x.shape[dim] - s) for s in range(0, x.shape[dim], step)] or [0]
    else:
        dim, sizes = int(a[2].value) % nd, _ints(a[1])
    if len(sizes) != len(outs) or sum(sizes) != x.shape[dim] or min(sizes) < 1:
        raise Unsupported("split sizes")
    parts, start = [], 0
    for o, size in zip(outs, sizes, strict=True):
        if math.prod(o.shape) * x.shape[dim] != math.prod(x.shape) * size:
            raise Unsupported("split output shape")
        parts.append(_slice(x, o, dim, start, 1, size))
        start += size
    return Op("parts", [x], outs, attrs=dict(parts=parts))


def _lower_pad(x: TensorSpec, a: list[Arg], out: TensorSpec) -> Op:
    """A constant pad, none negative (a crop), of at most two adjacent dims (unpadded dims of
    size 1 aside), as EMC_OP_PAD: [outer, h, w] -> [outer, top + h + bottom, left + w + right]
    (TensorFlow's "same" padding in EfficientNet: an asymmetric pad before each strided conv).
    Unpadded dims after the padded ones join the inner one as whole rows: Swin's pad of H and W
    in [B, H, W, C] is a pad of [B, H, W * C] by C elements a column."""
    pad = _ints(a[1])
    value = _num(a[2])
    nd = len(x.shape)
    if value is None or len(pad) % 2 or not 0 < len(pad) // 2 <= nd or min(pad) < 0:
        raise Unsupported("pad with a crop or of more dims than the tensor has")
    lohi = [(0, 0)] * (nd - len(pad) // 2) + [
        (pad[2 * j], pad[2 * j + 1]) for j in reversed(range(len(pad) // 2))
    ]
    padded = [d for d in range(nd) if lohi[d] != (0, 0)]
    if not padded:
        return Op("copy", [x], [out])
    i0, i1 = padded[0], padded[-1]
    if len(padded) > 2 or any(x.shape[d] != 1 for d in range(i0 + 1, i1) if d not in padded):
        raise Unsupported("pad of more than two adjacent dims")
    rows = math.prod(x.shape[i1 + 1 :])  # unpadded trailing dims: whole rows of the inner dim
    w, (left, right) = x.shape[i1] * rows, (lohi[i1][0] * rows, lohi[i1][1] * rows)
    h, (top, bottom) = (x.shape[i0], lohi[i0]) if i0 != i1 else (1, (0, 0))
    outer = math.prod(x.shape[:i0]) if i0 != i1 else math.prod(x.shape[:i1])
    if math.prod(out.shape) != outer * (h + top + bottom) * (w + left + right):
        raise Unsupported("pad shape")
    return Op(
        "pad",
        [x],
        [out],
        ip=[outer, h, w, top, bottom, left, right],
        fp=[-INF, INF, value],
        attrs=dict(last_two=i1 == nd - 1 and (i0 == nd - 2 or i0 == i1)),  # a map's H and W
    )


def _lower_var(x: TensorSpec, a: list[Arg], out: TensorSpec) -> Op:
    """``aten::var.correction`` (``x.var()`` / ``x.std()``, a hand-written layer norm, AdaIN's
    statistics) in two passes: the mean over ``dims``, then the mean of the squared deviations
    from it, times n / (n - correction)."""
    nd = len(x.shape)
    dims = sorted({d % nd for d in _ints(a[1])}) if nd and a[1].kind == "intlist" else []
    dims = dims or list(range(nd))
    corr = 1.0 if a[2].kind == "null" else _num(a[2])
    n = math.prod(x.shape[d] for d in dims) if nd else 1
    if corr is None or not nd or n - corr <= 0:
        raise Unsupported("variance of a 0-d tensor, of fewer values than the correction")
    kept = tuple(1 if d in dims else s for d, s in enumerate(x.shape))
    mean = TensorSpec(f"{out.name}.mean", x.dtype, kept)
    dev = TensorSpec(f"{out.name}.dev", x.dtype, tuple(x.shape))
    sq = TensorSpec(f"{out.name}.sq", x.dtype, tuple(x.shape))
    scale = n / (n - corr)
    tail = out if scale == 1.0 else TensorSpec(f"{out.name}.biased", x.dtype, tuple(out.shape))
    parts = [
        _reduce(x, mean, dims, 0),
        Op("binary", [x, mean], [dev], ip=[B.BIN["sub"]], fp=[-INF, INF]),
        Op("binary", [dev, dev], [sq], ip=[B.BIN["mul"]], fp=[-INF, INF]),
        _reduce(sq, tail, dims, 0),
    ]
    if tail is not out:
        parts.append(Op("binary", [tail, None], [out], ip=[B.BIN["mul"]], fp=[-INF, INF, scale]))
    flat: list[Op] = []
    for p in parts:
        flat.extend(p.attrs["parts"] if p.kind == "parts" else [p])
    return Op("parts", [x], [out], attrs=dict(parts=flat))


MAX_SELECT_RUNS = 8  # index_select runs taken as slices; more: a gather


def _lower_index_select(ins: KernelInstr, out: TensorSpec) -> Op:
    """``index_select`` by a constant index (``torch.roll``'s rotation, a channel reorder): the
    index's runs of consecutive entries as slices of x concatenated along ``dim`` (a roll is two),
    or, for more runs, a gather."""
    a = ins.args
    x = _f32x(a[0])
    nd = len(x.shape)
    t = _t(a[2])
    if not nd or t.root().kind != CONSTANT or t.data is None:
        raise Unsupported("index_select by indices that are not constants")
    dim = int(a[1].value) % nd
    idx = [int(v) % x.shape[dim] for v in t.data.reshape(-1).tolist()]
    if len(idx) != out.shape[dim]:
        raise Unsupported("index_select output shape")
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    if len(runs) > MAX_SELECT_RUNS:
        n = math.prod(x.shape)
        if n > MAX_GATHER or math.prod(out.shape) > MAX_GATHER:
            raise Unsupported("gather of more than 2^24 elements")
        src = torch.arange(n, dtype=torch.int64).reshape(x.shape)
        flat = torch.index_select(src, dim, torch.tensor(idx)).reshape(-1)
        return Op("gather", [x, Const(flat.to(torch.float32).numpy())], [out])
    if len(runs) == 1:
        return _slice(x, out, dim, runs[0][0], 1, runs[0][1])
    parts, pieces = [], []
    for j, (start, length) in enumerate(runs):
        shape = list(x.shape)
        shape[dim] = length
        piece = TensorSpec(f"{out.name}.run{j}", x.dtype, tuple(shape))
        parts.append(_slice(x, piece, dim, start, 1, length))
        pieces.append(piece)
    cat = _cat(pieces, out, dim)
    parts.extend(cat.attrs.get("parts") or [cat])
    return Op("parts", [x], [out], attrs=dict(parts=parts))
