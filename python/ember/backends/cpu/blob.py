"""The EMC1 blob of EmberCpuBackend (mirrors ``backends/cpu/emc_format.h``).

:class:`Graph` collects tensors (delegate inputs/outputs, constants, arena tensors) and
operators; :meth:`Graph.serialize` plans the arena (greedy best fit over operator lifetimes,
64-byte aligned) and writes header, tensor table, operator table and 64-aligned constant data.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"EMC1"
# 4: residual in[3] of conv2d and gemm; 5: EMC_CONV_PAIRS; 6: EMC_CONV_IN_SCALE; 7: softmax
# input scale and mask; 8: int8 convs; 9: Winograd at load, per-token fake-quant;
# 10: EMC_CONV_Q8_WINO, EMC_CONV_Q8_U8; 11: EMC_ACT_HARDSWISH_FQ; 12: pad; 13: dynamic int8 linear;
# 14: asymmetric padding of int8 depthwise convs (extra after, in the pad slots' bits 16..30);
# 15: EMC_DQL_ROWQ (dynamic int8 linears' rows per tensor or under a static fake-quant's qparams);
# 16: EMC_UNARY_Q8; 17: EMC_OP_TENSOR_FQ (a per-tensor dynamic fake-quant of its own),
# EMC_ACT_LEAKY_RELU and EMC_ACT_ELU (their parameters in fp[3..5]), EMC_ACT_CUBE, EMC_SOFTMAX_SAFE;
# 18: EMC_OP_EMBEDDING and integer inputs (the tensor record's dtype), EMC_OP_RESIZE, EMC_OP_GATHER,
# EMC_SLICE_REVERSE (flip), EMC_MEAN_SUM (mean, sum, max, min), EMC_ACT_ERF / RECIPROCAL / SIGN /
# SOFTPLUS / MISH
# 19: constants stored as f16 / bf16 where exact (written as 19 only by a blob that has one)
VERSION = 18
VERSION_HALF_CONSTS = 19
DQL_PER_TOKEN, DQL_PER_TENSOR, DQL_STATIC = 0, 1, 2  # EMC_DQL_ROWQ
MAX_DIMS = 6
MR = 6
ALIGN = 64

INPUT, OUTPUT, CONST, ARENA = 0, 1, 2, 3

OP = {
    "conv2d": 1,
    "gemm": 2,
    "binary": 3,
    "unary": 4,
    "maxpool2d": 5,
    "avgpool2d": 6,
    "mean": 7,
    "softmax": 8,
    "layernorm": 9,
    "permute": 10,
    "copy": 11,
    "cat": 12,
    "slice": 13,
    "channel_affine": 14,
    "rmsnorm": 15,
    "tokenfq": 16,
    "pad": 17,
    "dqlinear": 18,
    "tensorfq": 19,
    "embedding": 20,
    "resize": 21,
    "gather": 22,
    "extreme": 7,  # a max or min over a dim: EMC_OP_MEAN with EMC_MEAN_SUM 2 / 3
}
# emc_dtype: a tensor record's element type (integers only for an embedding's index input)
DTYPE_F32, DTYPE_I64, DTYPE_I32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2, 3, 4
# A constant of at least this many elements is stored as 16-bit halves when that is exact.
HALF_MIN_ELEMS = 4096
BIN = {"add": 0, "sub": 1, "mul": 2, "div": 3, "rsub": 4}
ACT = {
    "none": 0,
    "clamp": 1,
    "hardswish": 2,
    "sigmoid": 3,
    "silu": 4,
    "gelu": 5,
    "gelu_tanh": 6,
    "tanh": 7,
    "hardsigmoid": 8,
    "exp": 9,
    "sqrt": 10,
    "rsqrt": 11,
    "neg": 12,
    "abs": 13,
    "fakequant": 14,
    "hardswish_fq": 15,
    "leaky_relu": 16,
    "elu": 17,
    "cube": 18,
    "erf": 19,
    "reciprocal": 20,
    "sign": 21,
    "softplus": 22,
    "mish": 23,
}
# Conv ip slots.
CONV_DEPTHWISE, CONV_SCRATCH_OFF, CONV_SCRATCH_NBYTES = 9, 10, 11
CONV_Q8 = 17  # EMC_CONV_Q8: 1 + the int8 conv's channel table id, 0 for an f32 conv
CONV_WINO_AT_LOAD = 21  # EMC_CONV_WINO_AT_LOAD: 1 when the runtime transforms the weights
CONV_Q8_WINO = 22  # EMC_CONV_Q8_WINO: an int8 conv's Winograd alternative (tile m), 0: none
CONV_Q8_U8 = 23  # EMC_CONV_Q8_U8: 1 u8 input, 2 u8 output (channels last)

_HEADER = struct.Struct("<4sIIIIIQQQQQ")
_TENSOR = struct.Struct("<IIQI6iI")
_OP = struct.Struct("<II4i2i24i8f")
assert _HEADER.size == 64 and _TENSOR.size == 48 and _OP.size == 160


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass
class BTensor:
    storage: int
    shape: tuple[int, ...]
    index: int = 0  # argument index
    data: np.ndarray | None = None  # constants
    root: object = None  # arena tensors sharing memory share a root key
    offset: int = 0
    dtype: int = DTYPE_F32  # emc_dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * 4


def half_bytes(a: np.ndarray) -> tuple[int, bytes] | None:
    """(emc_dtype, bytes) of f32 ``a`` stored as IEEE halves or bfloat16 when either holds every
    value bit for bit (the weights of a model in half precision, computed in f32: half the
    file), else None. Bitwise, so any bytes viewed as floats (NaN payloads, -0) survive."""
    bits = a.view(np.uint32)
    h = a.astype(np.float16)
    if np.array_equal(h.astype(np.float32).view(np.uint32), bits):
        return DTYPE_F16, h.astype("<f2").tobytes()
    if not np.any(bits & 0xFFFF):
        return DTYPE_BF16, (bits >> 16).astype("<u2").tobytes()
    return None


@dataclass
class BOp:
    kind: str
    ins: list[int]
    outs: list[int]
    ip: list[int] = field(default_factory=list)
    fp: list[float] = field(default_factory=list)
    act: str = "none"
    scratch: int = 0  # bytes of arena scratch needed while it runs (conv im2col)
    reads: list[int] = field(default_factory=list)  # tensors read through ip[] (their lifetimes)


def pack_a_panels(w: np.ndarray) -> np.ndarray:
    """[M, K] -> ceil(M/MR) panels of [K][MR] (rows past M are zero), flattened."""
    m, k = w.shape
    p = -(-m // MR)
    padded = np.zeros((p * MR, k), dtype=np.float32)
    padded[:m] = w
    return np.ascontiguousarray(padded.reshape(p, MR, k).transpose(0, 2, 1)).reshape(-1)


NR_PANEL = 16


def pack_b_panels(b: np.ndarray) -> np.ndarray:
    """[K, N] -> ceil(N/16) panels of [K][16] (columns past N are zero), flattened."""
    k, n = b.shape
    p = -(-n // NR_PANEL)
    padded = np.zeros((k, p * NR_PANEL), dtype=np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, p, NR_PANEL).transpose(1, 0, 2)).reshape(-1)


class Graph:
    def __init__(self) -> None:
        self.tensors: list[BTensor] = []
        self.ops: list[BOp] = []
        self.n_inputs = 0
        self.n_outputs = 0
        self._const_ids: dict[object, int] = {}
        self._content_ids: dict[tuple[tuple[int, ...], bytes], int] = {}

    def add(self, t: BTensor) -> int:
        if len(t.shape) > MAX_DIMS:
            raise ValueError(f"rank {len(t.shape)} > {MAX_DIMS}")
        self.tensors.append(t)
        return len(self.tensors) - 1

    def const(self, arr: np.ndarray, key: object = None) -> int:
        """The id of a constant tensor of ``arr``'s values: one per ``key`` and one per content
        (equal bytes and shape share one tensor: an unrolled RNN's steps each transpose the same
        weight, and each step's product would otherwise pack its own copy)."""
        if key is not None and key in self._const_ids:
            return self._const_ids[key]
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        shape = arr.shape if arr.ndim <= MAX_DIMS and arr.ndim > 0 else (arr.size,)
        content = (tuple(shape), hashlib.blake2b(arr.tobytes(), digest_size=20).digest())
        idx = self._content_ids.get(content)
        if idx is None:
            idx = self.add(BTensor(CONST, tuple(shape), data=arr.reshape(-1)))
            self._content_ids[content] = idx
        if key is not None:
            self._const_ids[key] = idx
        return idx

    # -- arena -------------------------------------------------------------------------------
    def _plan_arena(self) -> int:
        """Assign offsets to arena roots (and conv scratch); returns the arena size."""
        life: dict[object, list[int]] = {}
        size: dict[object, int] = {}
        for i, op in enumerate(self.ops):
            for t in op.ins + op.outs + op.reads:
                if t < 0:
                    continue
                bt = self.tensors[t]
                if bt.storage != ARENA:
                    continue
                lt = life.setdefault(bt.root, [i, i])
                lt[0], lt[1] = min(lt[0], i), max(lt[1], i)
                size[bt.root] = max(size.get(bt.root, 0), bt.nbytes)
            if op.scratch:
                key = ("scratch", i)
                life[key] = [i, i]
                size[key] = op.scratch
        self._extend_for_chains(life)
        order = sorted(life, key=lambda r: (-size[r], life[r][0]))
        placed: list[tuple[list[int], int, int]] = []
        offs: dict[object, int] = {}
        arena = 0
        for r in order:
            sz = align_up(max(size[r], 1), ALIGN)
            lo_r, hi_r = life[r]
            busy = sorted((o, o + s) for lt, o, s in placed if lt[0] <= hi_r and lo_r <= lt[1])
            best, best_gap, cur = None, None, 0
            for lo, hi in busy:
                gap = lo - cur
                if gap >= sz and (best_gap is None or gap < best_gap):
                    best, best_gap = cur, gap
                cur = max(cur, hi)
            off = best if best is not None else cur
            offs[r] = off
            placed.append((life[r], off, sz))
            arena = max(arena, off + sz)
        for t in self.tensors:
            if t.storage == ARENA:
                t.offset = offs.get(t.root, 0)
        for i, op in enumerate(self.ops):
            if op.scratch:
                op.ip[CONV_SCRATCH_OFF] = offs[("scratch", i)]
                op.ip[CONV_SCRATCH_NBYTES] = align_up(op.scratch, ALIGN)
        return arena

    def _extend_for_chains(self, life: dict[object, list[int]]) -> None:
        """The runtime may run a depthwise conv together with the conv that produces its input and
        the conv that reads its output (cpu_op_chain.c: emc_fuse_chain), band by band: then every
        tensor those convs touch is in use for the whole chain. Their lifetimes cover it, so
        no tensor of the chain shares memory with another (the runtime checks and otherwise
        runs the convs one by one). Likewise a product of planes and a value per plane that a
        conv alone reads (a squeeze-and-excitation scale before an int8 conv: emc_q8_pw_fuse_scale)
        may be computed inside that conv: the product's operands then live until the conv, so its
        scratch and output do not take their memory (as the input of a fake-quant that a conv
        alone reads, emc_q8_pw_fuse_fq: the conv quantizes it itself). And a table lookup of u8
        levels that alone reads an int8 conv's output may be done by that conv as it stores
        (emc_q8_pw_fuse_lut): the conv's input and scratch (and the input of a fake-quant before
        the conv) then live until the lookup, so its output does not take their memory. And the
        f32 planes of a lookup of u8 levels that only a plane mean and such a scaled conv read
        may never be written (emc_q8_lk_plan): both then read the lookup's u8 input, which lives
        until the conv. And attention's batched gemm of the scores, the softmax over them and the
        gemm of the probabilities by V run head by head (cpu_op_attn.c: emc_attn_fuse): every
        tensor the three touch then lives through all three."""
        n = len(self.ops)
        producer = {o: op for op in self.ops for o in op.outs if o >= 0}
        root = [t.root for t in self.tensors]
        for k in range(n - 2):
            g1, sm, g2 = self.ops[k : k + 3]
            if (
                g1.kind == "gemm"
                and sm.kind == "softmax"
                and g2.kind == "gemm"
                and root[sm.ins[0]] == root[g1.outs[0]]
                and root[g2.ins[0]] == root[sm.outs[0]]
            ):
                for o in (g1, sm, g2):
                    for t in o.ins + o.outs:
                        if t >= 0 and self.tensors[t].storage == ARENA:
                            lt = life[root[t]]
                            lt[0], lt[1] = min(lt[0], k), max(lt[1], k + 2)
        for k, op in enumerate(self.ops):
            prev = self.ops[k - 1] if k > 0 else None
            if (
                op.kind == "conv2d"
                and prev is not None
                and prev.kind in ("binary", "unary")
                and prev.outs[0] == op.ins[0]
            ):
                for t in prev.ins:
                    if t >= 0 and self.tensors[t].storage == ARENA:
                        lt = life[self.tensors[t].root]
                        lt[1] = max(lt[1], k)
                    src = producer.get(t) if prev.kind == "binary" else None
                    if src is not None and src.kind == "unary" and src.ip and src.ip[0] == 2:
                        for u in src.ins:  # a lookup into planes: its u8 levels (EMC_UNARY_Q8 2)
                            if u >= 0 and self.tensors[u].storage == ARENA:
                                lt = life[self.tensors[u].root]
                                lt[1] = max(lt[1], k)
            if (
                op.kind == "unary"
                and prev is not None
                and prev.kind == "conv2d"
                and prev.outs[0] == op.ins[0]
            ):
                for t in prev.ins:
                    if t >= 0 and self.tensors[t].storage == ARENA:
                        lt = life[self.tensors[t].root]
                        lt[1] = max(lt[1], k)
                if ("scratch", k - 1) in life:
                    life[("scratch", k - 1)][1] = max(life[("scratch", k - 1)][1], k)
                pp = self.ops[k - 2] if k > 1 else None
                if pp is not None and pp.kind == "unary" and pp.outs[0] == prev.ins[0]:
                    for t in pp.ins:  # a fake-quant the conv quantizes itself, the three fused
                        if t >= 0 and self.tensors[t].storage == ARENA:
                            lt = life[self.tensors[t].root]
                            lt[1] = max(lt[1], k)
            if op.kind != "conv2d" or not op.ip[CONV_DEPTHWISE]:
                continue
            lo, hi = k, k
            prev = self.ops[k - 1] if k > 0 else None
            if prev is not None and prev.kind == "conv2d" and prev.outs[0] == op.ins[0]:
                lo = k - 1
            nxt = self.ops[k + 1] if k + 1 < n else None
            if nxt is not None and nxt.kind == "conv2d" and nxt.ins[0] == op.outs[0]:
                hi = k + 1
            if lo == hi:
                continue
            for i in range(lo, hi + 1):
                for t in self.ops[i].ins + self.ops[i].outs:
                    if t < 0 or self.tensors[t].storage != ARENA:
                        continue
                    lt = life[self.tensors[t].root]
                    lt[0], lt[1] = min(lt[0], lo), max(lt[1], hi)

    # -- bytes -------------------------------------------------------------------------------
    def serialize(self) -> bytes:
        arena = self._plan_arena()
        data = bytearray()
        version = VERSION
        for t in self.tensors:
            if t.storage == CONST:
                data += bytes(align_up(len(data), ALIGN) - len(data))
                t.offset = len(data)
                a = np.ascontiguousarray(t.data, dtype=np.float32)
                half = half_bytes(a) if a.size >= HALF_MIN_ELEMS else None
                if half is not None:
                    t.dtype, raw = half
                    data += raw
                    version = VERSION_HALF_CONSTS
                else:
                    data += a.astype("<f4").tobytes()
        tensors_off = 64
        ops_off = tensors_off + len(self.tensors) * _TENSOR.size
        data_off = align_up(ops_off + len(self.ops) * _OP.size, ALIGN)
        out = bytearray(
            _HEADER.pack(
                MAGIC,
                version,
                len(self.tensors),
                len(self.ops),
                self.n_inputs,
                self.n_outputs,
                arena,
                tensors_off,
                ops_off,
                data_off,
                len(data),
            )
        )
        for t in self.tensors:
            sizes = list(t.shape) + [0] * (MAX_DIMS - len(t.shape))
            out += _TENSOR.pack(t.storage, t.index, t.offset, len(t.shape), *sizes, t.dtype)
        for op in self.ops:
            ins = (op.ins + [-1] * 4)[:4]
            outs = (op.outs + [-1] * 2)[:2]
            ip = (op.ip + [0] * 24)[:24]
            fp = (op.fp + [0.0] * 8)[:8]
            out += _OP.pack(OP[op.kind], ACT[op.act], *ins, *outs, *ip, *fp)
        out += bytes(data_off - len(out))
        out += data
        self.arena_nbytes = arena
        return bytes(out)


def conv_counts(blob: bytes) -> tuple[int, int]:
    """(conv2d operators, int8 ones: ip slot EMC_CONV_Q8 set) in an EMC blob, read from its
    header and operator table (for tests and reports)."""
    n_ops = struct.unpack_from("<I", blob, 12)[0]
    ops_off = struct.unpack_from("<Q", blob, 40)[0]
    convs = q8 = 0
    for i in range(n_ops):
        kind, _act, *_ = _OP.unpack_from(blob, ops_off + _OP.size * i)
        if kind == OP["conv2d"]:
            convs += 1
            ip = _OP.unpack_from(blob, ops_off + _OP.size * i)[8:32]
            q8 += ip[CONV_Q8] > 0
    return convs, q8
