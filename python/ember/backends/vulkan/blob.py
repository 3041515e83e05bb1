"""EmberVulkanBackend blob writer: a run's operators -> the bytes of backends/vulkan/emv_format.h.

:func:`build_blob` takes the lowered operators of a run (:class:`ember.backends.cpu.lowering.Op`,
the kinds of :data:`KINDS`), the run's input and output tensors, and returns the blob. Every
tensor lives in one arena at an element offset, tensors no operator uses together sharing space
(:meth:`_Tensors.offsets`); a copy whose source is a tensor is an alias (its output shares the
source's storage); constants are appended after the operators and uploaded once at init.

``storage`` (:data:`STORAGE`) is the element type of the arena and the weights: ``"f32"``, or
``"f16"`` (IEEE halves, the weights rounded to nearest even here; a constant beyond f16's range
raises Unsupported, so its operator stays portable).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from ember.backends.cpu.blob import ACT, BIN
from ember.backends.cpu.lowering import Const, Op, Unsupported
from ember.passes.ir import TensorSpec

MAGIC, VERSION = 0x4B564D45, 2
HEADER_WORDS = 9  # emv_header
# storage types (emv_format.h EMV_STORAGE_*): name -> (code, numpy element type)
STORAGE = {"f32": (0, "<f4"), "f16": (1, "<f2")}
NONE = 0xFFFFFFFF
MAX_DIMS = 4
OPS = {
    "unary": 1,
    "binary": 2,
    "linear": 3,
    "conv2d": 4,
    "pool2d": 5,
    "softmax": 6,
    "layernorm": 7,
    "copy": 8,
    "mean": 9,
    "permute": 10,
    "slice": 11,
    "cat_part": 12,
    "fill": 13,
    "place": 14,
    "upsample": 15,
}
# The lowered kinds this writer takes (cat is written as one cat_part per operand).
KINDS = {
    "unary",
    "binary",
    "linear",
    "conv2d",
    "maxpool2d",
    "avgpool2d",
    "softmax",
    "layernorm",
    "copy",
    "mean",
    "permute",
    "slice",
    "cat",
    "pad",
    "channel_affine",
    "expand",
    "select",
    "upsample",
}
MAX_ACT = ACT["abs"]  # EMV_ACT_END - 1


FOREVER = 1 << 60


class _Tensors:
    """The blob's tensor table: one entry per TensorSpec (a view has its own shape and its
    root's storage) or Const; one storage block per root (shared by a copy's alias), each with
    the span of operators that use it; the weights section. :meth:`offsets` places the blocks in
    the arena, reusing the space of blocks whose spans do not overlap."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.rows: list[tuple[int, int, tuple[int, ...]]] = []  # block, weight, shape
        self.storage: dict[int, int] = {}  # id(root or Const) -> block
        self.size: list[int] = []  # per block: elements
        self.span: list[list[int]] = []  # per block: [first, last] operator using it
        self.now = -1  # the operator being written (-1: the inputs, before every operator)
        self.weights: list[np.ndarray] = []
        self.n_weights = 0
        self.keep: list[Any] = []  # keeps keyed objects alive (ids stay unique)

    def _block(self, key: int, n: int, forever: bool = False) -> int:
        if key not in self.storage:
            self.storage[key] = len(self.size)
            self.size.append(max(n, 1))
            self.span.append([-1, FOREVER] if forever else [self.now, self.now])
        return self.storage[key]

    def _touch(self, block: int) -> None:
        sp = self.span[block]
        sp[0], sp[1] = min(sp[0], self.now), max(sp[1], self.now)

    def of(self, v: Any, io: bool = False) -> int:
        """The tensor index of a TensorSpec or Const (added on first use); marks its storage
        used by the current operator. ``io``: a delegate input or output, whose shape only
        counts by its element count (one above 4-d is written as 1-d: no operator reads it as
        such, only its views)."""
        if id(v) in self.index:
            self._touch(self.rows[self.index[id(v)]][0])
            return self.index[id(v)]
        self.keep.append(v)
        if isinstance(v, Const):
            arr = np.ascontiguousarray(v.arr, dtype=np.float32)
            shape = tuple(int(d) for d in arr.shape)
            block = self._block(id(v), arr.size, forever=True)
            weight = self.n_weights
            self.weights.append(arr.reshape(-1))
            self.n_weights += arr.size
            return self._add(v, block, weight, shape)
        if not isinstance(v, TensorSpec):
            raise Unsupported(f"operand {type(v).__name__}")
        r = v.root()
        self.keep.append(r)
        block = self._block(id(r), math.prod(r.shape))
        self._touch(block)
        shape = tuple(int(d) for d in v.shape)
        if io and len(shape) > MAX_DIMS:
            shape = (math.prod(shape),)
        return self._add(v, block, NONE, shape)

    def view_of(self, spec: TensorSpec, shape: tuple[int, ...]) -> int:
        """A further tensor entry with ``spec``'s storage and ``shape`` (same element count)."""
        self.of(spec)
        key = object()
        self.keep.append(key)
        return self._add(key, self.storage[id(spec.root())], NONE, shape)

    def alias(self, out: TensorSpec, src: Any) -> None:
        """``out`` (not yet stored) shares ``src``'s storage."""
        r = out.root()
        if id(r) in self.storage:
            raise Unsupported("copy into a tensor already stored")
        self.of(src)
        key = id(src) if isinstance(src, Const) else id(src.root())
        self.keep.append(r)
        self.storage[id(r)] = self.storage[key]

    def _add(self, v: Any, block: int, weight: int, shape: tuple[int, ...]) -> int:
        if len(shape) > MAX_DIMS:
            raise Unsupported(f"rank {len(shape)} tensor (the backend takes up to 4-d)")
        if any(d < 1 for d in shape) or math.prod(shape) >= 2**31:
            raise Unsupported("empty or too large tensor")
        self.index[id(v)] = len(self.rows)
        self.rows.append((block, weight, shape))
        return self.index[id(v)]

    def offsets(self) -> list[int]:
        """Each block's arena offset (elements): first fit in order of first use, sharing space
        between blocks no operator uses together (an operator's inputs and outputs overlap in
        time, so they never share)."""
        placed: list[tuple[int, int, int, int]] = []  # offset, size, first, last
        off = [0] * len(self.size)
        for b in sorted(range(len(self.size)), key=lambda b: (self.span[b][0], -self.size[b])):
            f, la, n = self.span[b][0], self.span[b][1], self.size[b]
            busy = sorted((o, o + sz) for o, sz, f2, l2 in placed if not (l2 < f or la < f2))
            at = 0
            for lo, hi in busy:
                if at + n <= lo:
                    break
                at = max(at, hi)
            off[b] = at
            placed.append((at, n, f, la))
        return off


def _op(code: str, ins: list[int | None], out: int, ip: list[int], fp: list[float]) -> bytes:
    ii = [NONE if i is None else i for i in ins] + [NONE] * (3 - len(ins))
    ipp = [int(x) for x in ip] + [0] * (11 - len(ip))
    fpp = [float(x) for x in fp] + [0.0] * (4 - len(fp))
    if len(ipp) > 11 or len(fpp) > 4 or len(ii) > 3:
        raise Unsupported("operator parameters")
    return struct.pack("<5I11i4f", OPS[code], *ii, out, *ipp, *fpp)


def _act(op: Op) -> tuple[int, list[float]]:
    a = ACT.get(op.act, 99)
    if a > MAX_ACT:
        raise Unsupported(f"activation {op.act}")
    fp = [float(x) for x in op.fp[:2]] if op.act == "clamp" else [0.0, 0.0]
    return a, fp


def _pack_op(op: Op, T: _Tensors) -> list[bytes]:
    k = op.kind
    if k == "copy":
        src = op.ins[0]
        T.alias(op.outs[0], src)
        T.of(op.outs[0])
        return []
    out = T.of(op.outs[0])
    if k == "unary":
        a, fp = _act(op)
        return [_op("unary", [T.of(op.ins[0])], out, [a], fp)]
    if k == "binary":
        if op.act != "none":
            raise Unsupported("binary with a fused activation")
        x, y = op.ins[0], op.ins[1]
        if y is None:
            y = Const(np.array([op.fp[2]], dtype=np.float32))
        return [_op("binary", [T.of(x), T.of(y)], out, [op.ip[0]], [])]
    if k == "linear":
        a, fp = _act(op)
        return [
            _op(
                "linear",
                [T.of(i) if i is not None else None for i in op.ins],
                out,
                [*op.ip[:6], a],
                fp,
            )
        ]
    if k == "conv2d":
        at = op.attrs
        a, fp = _act(op)
        w = T.of(Const(np.asarray(at["w"], dtype=np.float32)))
        b = None if at["b"] is None else T.of(Const(np.asarray(at["b"], dtype=np.float32)))
        ip = [*at["stride"], *at["pad"], *at["dil"], at["groups"], a]
        return [_op("conv2d", [T.of(op.ins[0]), w, b], out, ip, fp)]
    if k in ("maxpool2d", "avgpool2d"):
        if op.act != "none":
            raise Unsupported("pool with a fused activation")
        kind = int(k == "avgpool2d")
        tail = [op.ip[8], op.ip[9]] if kind else [0, 0]
        return [_op("pool2d", [T.of(op.ins[0])], out, [kind, *op.ip[:8], *tail], [])]
    if k == "softmax":
        return [_op("softmax", [T.of(op.ins[0])], out, [op.ip[3]], [])]
    if k == "layernorm":
        ins = [T.of(i) if i is not None else None for i in op.ins]
        return [_op("layernorm", ins, out, [op.ip[1]], [op.fp[0]])]
    if k == "mean":  # ip[3]: 1 for a sum
        return [_op("mean", [T.of(op.ins[0])], out, op.ip[:4], [])]
    if k == "expand":
        one = T.of(Const(np.ones(1, dtype=np.float32)))
        return [_op("binary", [T.of(op.ins[0]), one], out, [BIN["mul"]], [])]
    if k == "select":  # a slice of one into the output seen with the dim kept
        x, at = op.ins[0], op.attrs
        shape = tuple(1 if d == at["dim"] else int(n) for d, n in enumerate(x.shape))
        kept = T.view_of(op.outs[0], shape)
        return [_op("slice", [T.of(x)], kept, [at["dim"], at["start"], at["step"]], [])]
    if k == "permute":
        return [_op("permute", [T.of(op.ins[0])], out, op.ip, [])]
    if k == "slice":
        at = op.attrs
        return [_op("slice", [T.of(op.ins[0])], out, [at["dim"], at["start"], at["step"]], [])]
    if k == "cat":
        dim, at, res = op.attrs["dim"], 0, []
        for x in op.ins:
            res.append(_op("cat_part", [T.of(x)], out, [dim, at], []))
            at += int(x.arr.shape[dim] if isinstance(x, Const) else x.shape[dim])
        return res
    if k == "channel_affine":  # batch norm not after a conv: y = x * scale[c] + shift[c]
        x, scale, shift = op.ins
        nd = len(x.shape)
        if nd < 2:
            raise Unsupported("channel affine of a rank < 2 tensor")
        shape = (int(x.shape[1]),) + (1,) * (nd - 2)
        sc = T.of(Const(np.asarray(scale.arr, dtype=np.float32).reshape(shape)))
        sh = T.of(Const(np.asarray(shift.arr, dtype=np.float32).reshape(shape)))
        # the add runs in place on the output: each invocation reads and writes its own element
        return [
            _op("binary", [T.of(x), sc], out, [BIN["mul"]], []),
            _op("binary", [out, sh], out, [BIN["add"]], []),
        ]
    if k == "upsample":  # ip: mode align_corners; fp: the f32 source scales of H and W
        return [_op("upsample", [T.of(op.ins[0])], out, op.ip[:2], op.fp[:2])]
    if k == "pad":
        x, at = op.ins[0], op.attrs["before"]
        value = T.of(Const(np.array([op.attrs["value"]], dtype=np.float32)))
        return [_op("fill", [value], out, [], []), _op("place", [T.of(x)], out, at, [])]
    raise Unsupported(f"{k} is not a Vulkan operator")


def arena_bytes(blob: bytes) -> int:
    """The size of a blob's device arena in bytes (arena_elems times its storage's size)."""
    elems, _, storage = struct.unpack_from("<3I", blob, 24)
    return int(elems) * (2 if storage == STORAGE["f16"][0] else 4)


def build_blob(
    ops: list[Op], inputs: list[TensorSpec], outputs: list[TensorSpec], storage: str = "f32"
) -> bytes:
    """The blob of ``ops`` reading ``inputs`` and producing ``outputs`` (delegate argument
    order), its tensors stored as ``storage`` (:data:`STORAGE`). Raises Unsupported for what
    the format cannot express."""
    code, etype = STORAGE[storage]
    T = _Tensors()
    in_idx = [T.of(s, io=True) for s in inputs]
    body: list[bytes] = []
    for t, op in enumerate(ops):
        T.now = t
        body += _pack_op(op, T)
    T.now = FOREVER
    out_idx = [T.of(s, io=True) for s in outputs]
    if not out_idx:
        raise Unsupported("a run with no outputs")
    off = T.offsets()
    rows = [(off[b], w, shape) for b, w, shape in T.rows]
    # arena_elems is the end of the last tensor (emv_format.h)
    top = max(o + math.prod(shape) for o, _, shape in rows)
    n = (len(T.rows), len(body), len(in_idx), len(out_idx))
    head = struct.pack("<9I", MAGIC, VERSION, *n, top, T.n_weights, code)
    tens = b"".join(
        struct.pack("<7I", off, w, len(shape), *shape, *([0] * (MAX_DIMS - len(shape))))
        + struct.pack("<I", 0)
        for off, w, shape in rows
    )
    args = struct.pack(f"<{len(in_idx) + len(out_idx)}I", *in_idx, *out_idx)
    w = np.concatenate(T.weights) if T.weights else np.zeros(0, np.float32)
    with np.errstate(over="ignore"):
        h = w.astype(etype)
    if bool((np.isinf(h) & np.isfinite(w)).any()):
        raise Unsupported(f"a constant beyond {storage}'s range ({storage} storage)")
    weights = h.tobytes()
    return head + tens + args + b"".join(body) + weights
