"""EmberVulkanBackend blob writer: a run's operators -> the bytes of backends/vulkan/emv_format.h.

:func:`build_blob` takes the lowered operators of a run (:class:`ember.backends.cpu.lowering.Op`,
the kinds of :data:`KINDS`), the run's input and output tensors, and returns the blob. Every
tensor lives in one arena at an element offset, tensors no operator uses together sharing space
(:meth:`_Tensors.offsets`); a copy whose source is a tensor is an alias (its output shares the
source's storage); constants are appended after the operators and uploaded once at init.

``storage`` (:data:`STORAGE`) chooses each tensor's element type (blob version 3: per tensor):
``"f32"`` stores every tensor as f32; ``"f16"`` is mixed storage: IEEE halves for the weight
matrices of convolutions and linears (rounded to nearest even here; one beyond f16's range
raises Unsupported, so its operator stays portable) and for the activations, except the
activations of ``keep_f32`` (ids of TensorSpec roots: what the partitioner's rule keeps f32,
:func:`ember.backends.vulkan.partition.f32_activations`); the other constants (biases, norm
parameters, scalars) stay f32.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from ember.backends.cpu.blob import ACT, BIN
from ember.backends.cpu.lowering import Const, Op, Unsupported
from ember.passes.ir import TensorSpec

MAGIC, VERSION = 0x4B564D45, 3
HEADER_WORDS = 8  # emv_header
TENSOR_WORDS = 8  # emv_tensor
# storage types (emv_format.h EMV_STORAGE_*): name -> (code, numpy element type)
STORAGE = {"f32": (0, "<f4"), "f16": (1, "<f2")}
F32, F16 = STORAGE["f32"][0], STORAGE["f16"][0]
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
        self.rows: list[tuple[int, tuple[int, ...]]] = []  # block, shape
        self.storage: dict[int, int] = {}  # id(root or Const) -> block
        self.size: list[int] = []  # per block: elements
        self.span: list[list[int]] = []  # per block: [first, last] operator using it
        self.const: dict[int, np.ndarray] = {}  # block -> a constant's values (f32)
        self.mat: dict[int, bool] = {}  # constant block -> every use is a conv/linear weight
        self.roots: dict[int, set[int]] = {}  # activation block -> ids of the roots it stores
        self.now = -1  # the operator being written (-1: the inputs, before every operator)
        self.keep: list[Any] = []  # keeps keyed objects alive (ids stay unique)

    def _block(self, key: int, n: int, forever: bool = False) -> int:
        if key not in self.storage:
            self.storage[key] = len(self.size)
            self.size.append(max(n, 1))
            self.span.append([-1, FOREVER] if forever else [self.now, self.now])
        return self.storage[key]

    def storages(self, storage: str, keep_f32: set[int]) -> list[int]:
        """Each block's storage code: everything f32 for ``"f32"``; for ``"f16"`` (mixed) f16
        for the conv / linear weight matrices and for the activations whose roots are not in
        ``keep_f32``, f32 for the other constants and those activations."""
        if storage == "f32":
            return [F32] * len(self.size)
        return [
            (F16 if self.mat[b] else F32)
            if b in self.const
            else (F32 if self.roots.get(b, set()) & keep_f32 else F16)
            for b in range(len(self.size))
        ]

    def _touch(self, block: int) -> None:
        sp = self.span[block]
        sp[0], sp[1] = min(sp[0], self.now), max(sp[1], self.now)

    def of(self, v: Any, io: bool = False, mat: bool = False) -> int:
        """The tensor index of a TensorSpec or Const (added on first use); marks its storage
        used by the current operator. ``io``: a delegate input or output, whose shape only
        counts by its element count (one above 4-d is written as 1-d: no operator reads it as
        such, only its views). ``mat``: this use is a conv / linear weight matrix (a constant
        every use of which is one may be stored as f16)."""
        if id(v) in self.index:
            block = self.rows[self.index[id(v)]][0]
            self._touch(block)
            if block in self.mat:
                self.mat[block] &= mat
            return self.index[id(v)]
        self.keep.append(v)
        if isinstance(v, Const):
            arr = np.ascontiguousarray(v.arr, dtype=np.float32)
            shape = tuple(int(d) for d in arr.shape)
            block = self._block(id(v), arr.size, forever=True)
            self.const[block], self.mat[block] = arr.reshape(-1), mat
            return self._add(v, block, shape)
        if not isinstance(v, TensorSpec):
            raise Unsupported(f"operand {type(v).__name__}")
        r = v.root()
        self.keep.append(r)
        block = self._block(id(r), math.prod(r.shape))
        self.roots.setdefault(block, set()).add(id(r))
        self._touch(block)
        shape = tuple(int(d) for d in v.shape)
        if io and len(shape) > MAX_DIMS:
            shape = (math.prod(shape),)
        return self._add(v, block, shape)

    def view_of(self, spec: TensorSpec, shape: tuple[int, ...]) -> int:
        """A further tensor entry with ``spec``'s storage and ``shape`` (same element count)."""
        self.of(spec)
        key = object()
        self.keep.append(key)
        return self._add(key, self.storage[id(spec.root())], shape)

    def alias(self, out: TensorSpec, src: Any) -> None:
        """``out`` (not yet stored) shares ``src``'s storage."""
        r = out.root()
        if id(r) in self.storage:
            raise Unsupported("copy into a tensor already stored")
        self.of(src)
        key = id(src) if isinstance(src, Const) else id(src.root())
        self.keep.append(r)
        self.storage[id(r)] = self.storage[key]
        if self.storage[key] in self.mat:  # a constant seen through a copy: keep it f32
            self.mat[self.storage[key]] = False
        else:  # one block, one storage: f32 if any of its roots is kept f32
            self.roots[self.storage[key]].add(id(r))

    def _add(self, v: Any, block: int, shape: tuple[int, ...]) -> int:
        if len(shape) > MAX_DIMS:
            raise Unsupported(f"rank {len(shape)} tensor (the backend takes up to 4-d)")
        if any(d < 1 for d in shape) or math.prod(shape) >= 2**31:
            raise Unsupported("empty or too large tensor")
        self.index[id(v)] = len(self.rows)
        self.rows.append((block, shape))
        return self.index[id(v)]

    def offsets(self, nbytes: list[int]) -> list[int]:
        """Each block's arena offset in bytes (``nbytes``: each block's size, a multiple of 4,
        so every offset is 4-byte aligned): first fit in order of first use, sharing space
        between blocks no operator uses together (an operator's inputs and outputs overlap in
        time, so they never share)."""
        placed: list[tuple[int, int, int, int]] = []  # offset, size, first, last
        off = [0] * len(self.size)
        for b in sorted(range(len(self.size)), key=lambda b: (self.span[b][0], -nbytes[b])):
            f, la, n = self.span[b][0], self.span[b][1], nbytes[b]
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
        x, w, b = op.ins
        ins = [T.of(x), T.of(w, mat=True), None if b is None else T.of(b)]
        return [_op("linear", ins, out, [*op.ip[:6], a], fp)]
    if k == "conv2d":
        at = op.attrs
        a, fp = _act(op)
        w = T.of(Const(np.asarray(at["w"], dtype=np.float32)), mat=True)
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
    """The size of a blob's device arena in bytes (its header's arena_bytes)."""
    return int(struct.unpack_from("<I", blob, 24)[0])


def tensor_table(blob: bytes) -> tuple[list[tuple[int, int, int, int]], list[int], list[int]]:
    """A blob's tensors as (byte offset, weight byte offset or NONE, elements, storage code),
    and its input and output tensor indices (for tests and reports; no validation)."""
    n_t, _, n_in, n_out = struct.unpack_from("<4I", blob, 8)
    rows = []
    for i in range(n_t):
        off, w, nd, *sizes, st = struct.unpack_from("<8I", blob, 4 * (HEADER_WORDS + 8 * i))
        rows.append((off, w, math.prod(sizes[:nd]), st))
    at = 4 * (HEADER_WORDS + TENSOR_WORDS * n_t)
    io = list(struct.unpack_from(f"<{n_in + n_out}I", blob, at))
    return rows, io[:n_in], io[n_in:]


def build_blob(
    ops: list[Op],
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    storage: str = "f32",
    keep_f32: set[int] | None = None,
) -> bytes:
    """The blob of ``ops`` reading ``inputs`` and producing ``outputs`` (delegate argument
    order), its tensors stored as ``storage`` says (:data:`STORAGE`; ``"f16"``: mixed, with the
    activations whose root ids are in ``keep_f32`` kept f32). Raises Unsupported for what the
    format cannot express."""
    if storage not in STORAGE:
        raise ValueError(f"storage {storage!r}")
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
    codes = T.storages(storage, keep_f32 or set())
    esize = [2 if c == F16 else 4 for c in codes]
    off = T.offsets([(max(n, 1) * e + 3) & ~3 for n, e in zip(T.size, esize, strict=True)])
    # the weights: f32 constants first, then f16 ones (each aligned to its element size)
    wparts: list[bytes] = []
    woff: dict[int, int] = {}
    nw = 0
    for want in (F32, F16):
        for b, arr in T.const.items():
            if codes[b] != want:
                continue
            with np.errstate(over="ignore"):
                h = arr.astype(STORAGE["f16" if want == F16 else "f32"][1])
            if bool((np.isinf(h) & np.isfinite(arr)).any()):
                raise Unsupported("a weight matrix beyond f16's range (f16 storage)")
            woff[b] = nw
            wparts.append(h.tobytes())
            nw += len(wparts[-1])
    rows = [(off[b], woff.get(b, NONE), shape, codes[b]) for b, shape in T.rows]
    # arena_bytes is the end of the last tensor (emv_format.h)
    top = max(o + math.prod(shape) * (2 if c == F16 else 4) for o, _, shape, c in rows)
    n = (len(T.rows), len(body), len(in_idx), len(out_idx))
    head = struct.pack("<8I", MAGIC, VERSION, *n, top, nw)
    tens = b"".join(
        struct.pack("<7I", o, w, len(shape), *shape, *([0] * (MAX_DIMS - len(shape))))
        + struct.pack("<I", c)
        for o, w, shape, c in rows
    )
    args = struct.pack(f"<{len(in_idx) + len(out_idx)}I", *in_idx, *out_idx)
    return head + tens + args + b"".join(body) + b"".join(wparts)
