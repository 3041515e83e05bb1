"""Serialization to the ExecuTorch ``.pte`` (ET12 + eh00) and ``.ptd`` (FT01 + FH01) formats.

Layout rules (``docs/pte-format.md`` sections 1-4 and 8):

- The flatbuffer is written back to front with ``flatbuffers.Builder``; every field the C++
  runtime dereferences without a null check is always written.
- ``.pte`` segments: segment 0 is the constant segment (each buffer padded to 16 bytes except
  the last; ``offsets[0]`` is the empty placeholder), then the mutable-data segment (no padding).
  Segments start at 128-byte multiples relative to ``segment_base_offset``. If there is no
  segment data at all the file is the bare flatbuffer; otherwise a 32-byte ``eh00`` header is
  inserted at byte 8.
- ``.ptd``: one 128-aligned segment per unique buffer, ``FH01`` header (40 bytes padded to 48)
  inserted at byte 8.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import flatbuffers

from ember import schema as S
from ember.errors import SerializationError

SEGMENT_ALIGNMENT = 128
CONSTANT_ALIGNMENT = 16
_EH_LEN = 32
_FH_LEN = 40
_FH_PADDED = 48


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _vec(b: flatbuffers.Builder, items: Sequence, size: int, prepend: str, align: int = 0) -> int:
    b.StartVector(size, len(items), align or size)
    fn = getattr(b, prepend)
    for x in reversed(items):
        fn(x)
    return b.EndVector()


def _vec_offsets(b: flatbuffers.Builder, offs: Sequence[int]) -> int:
    b.StartVector(4, len(offs), 4)
    for o in reversed(offs):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _table(b: flatbuffers.Builder, n_slots: int, slots: list[tuple[str, int, object]]) -> int:
    """Write a table: ``slots`` = [(Prepend*Slot method suffix, slot, value)], None skipped."""
    b.StartObject(n_slots)
    for kind, slot, v in slots:
        if v is None:
            continue
        if kind == "off":
            b.PrependUOffsetTRelativeSlot(slot, v, 0)
        else:
            getattr(b, f"Prepend{kind}Slot")(slot, v, 0 if kind != "Float64" else 0.0)
    return b.EndObject()


# -- Program ------------------------------------------------------------------------------------
def _write_tensor(b: flatbuffers.Builder, t: S.Tensor) -> int:
    sizes = _vec(b, t.sizes, 4, "PrependInt32")
    dim_order = _vec(b, t.dim_order, 1, "PrependUint8")
    alloc = None
    if t.allocation_info is not None:
        a = t.allocation_info
        alloc = _table(
            b,
            3,
            [
                ("Uint32", 0, a.memory_id),
                ("Uint32", 1, a.memory_offset_low),
                ("Uint32", 2, a.memory_offset_high),
            ],
        )
    extra = None
    if t.extra_tensor_info is not None:
        e = t.extra_tensor_info
        fqn = b.CreateString(e.fully_qualified_name) if e.fully_qualified_name else None
        extra = _table(
            b,
            3,
            [("Uint64", 0, e.mutable_data_segments_idx), ("off", 1, fqn), ("Int8", 2, e.location)],
        )
    return _table(
        b,
        10,
        [
            ("Int8", 0, t.scalar_type),
            ("off", 2, sizes),
            ("off", 3, dim_order),
            ("Bool", 4, t.requires_grad),
            ("Uint32", 5, t.data_buffer_idx),
            ("off", 6, alloc),
            ("Int8", 8, t.shape_dynamism),
            ("off", 9, extra),
        ],
    )


def _write_evalue(b: flatbuffers.Builder, v: S.EValue) -> int:
    tag = v.tag
    if tag == S.K_NULL:
        inner = _table(b, 0, [])
    elif tag == S.K_INT:
        inner = _table(b, 1, [("Int64", 0, int(v.val))])
    elif tag == S.K_BOOL:
        inner = _table(b, 1, [("Bool", 0, bool(v.val))])
    elif tag == S.K_DOUBLE:
        inner = _table(b, 1, [("Float64", 0, float(v.val))])
    elif tag == S.K_STRING:
        s = b.CreateString(str(v.val))
        inner = _table(b, 1, [("off", 0, s)])
    elif tag == S.K_TENSOR:
        inner = _write_tensor(b, v.val)
    elif tag == S.K_INTLIST:
        inner = _table(b, 1, [("off", 0, _vec(b, v.val, 8, "PrependInt64"))])
    elif tag == S.K_DOUBLELIST:
        inner = _table(b, 1, [("off", 0, _vec(b, v.val, 8, "PrependFloat64"))])
    elif tag == S.K_BOOLLIST:
        inner = _table(b, 1, [("off", 0, _vec(b, v.val, 1, "PrependBool"))])
    elif tag in (S.K_TENSORLIST, S.K_OPTTENSORLIST):
        inner = _table(b, 1, [("off", 0, _vec(b, v.val, 4, "PrependInt32"))])
    else:
        raise SerializationError(f"unknown EValue tag {tag}")
    return _table(b, 2, [("Uint8", 0, tag), ("off", 1, inner)])


def _write_instruction(b: flatbuffers.Builder, ins: S.Instruction) -> int:
    f = ins.fields
    if ins.tag in (S.I_KERNEL, S.I_DELEGATE):  # same layout: (index, args)
        args = _vec(b, f[1], 4, "PrependInt32")
        inner = _table(b, 2, [("Int32", 0, f[0]), ("off", 1, args)])
    elif ins.tag in (S.I_MOVE, S.I_JUMPFALSE):
        inner = _table(b, 2, [("Int32", 0, f[0]), ("Int32", 1, f[1])])
    elif ins.tag == S.I_FREE:
        inner = _table(b, 1, [("Int32", 0, f[0])])
    else:
        raise SerializationError(f"unknown instruction tag {ins.tag}")
    return _table(b, 2, [("Uint8", 0, ins.tag), ("off", 1, inner)])


def _write_delegate(b: flatbuffers.Builder, d: S.BackendDelegate) -> int:
    ident = b.CreateString(d.id)
    ref = _table(b, 2, [("Int8", 0, d.location), ("Uint32", 1, d.index)])
    specs = []
    for key, value in d.compile_specs:
        k, v = b.CreateString(key), _vec(b, list(value), 1, "PrependUint8")
        specs.append(_table(b, 2, [("off", 0, k), ("off", 1, v)]))
    specs_vec = _vec_offsets(b, specs)
    return _table(b, 3, [("off", 0, ident), ("off", 1, ref), ("off", 2, specs_vec)])


def _add_delegate_segments(plans: list[S.ExecutionPlan], blobs: list) -> None:
    """One segment per distinct delegate blob (docs/pte-format.md section 4), after the others."""
    seen: dict[bytes, int] = {}
    for p in plans:
        for d in p.delegates:
            if d.processed not in seen:
                seen[d.processed] = len(blobs)
                blobs.append(_Blob([d.processed], len(d.processed)))
            d.location, d.index = S.DATA_SEGMENT, seen[d.processed]


def _write_plan(b: flatbuffers.Builder, p: S.ExecutionPlan) -> int:
    name = b.CreateString(p.name)
    inp = b.CreateString(p.encoded_inp_str)
    out = b.CreateString(p.encoded_out_str)
    cmt = _table(b, 2, [("off", 0, inp), ("off", 1, out)])
    values = _vec_offsets(b, [_write_evalue(b, v) for v in p.values])
    inputs = _vec(b, p.inputs, 4, "PrependInt32")
    outputs = _vec(b, p.outputs, 4, "PrependInt32")
    instrs = _vec_offsets(b, [_write_instruction(b, i) for i in p.instructions])
    empty = _vec(b, [], 4, "PrependInt32")
    empty2 = _vec(b, [], 4, "PrependInt32")
    chain = _table(b, 4, [("off", 0, empty), ("off", 1, empty2), ("off", 2, instrs)])
    chains = _vec_offsets(b, [chain])
    ops = []
    for op in p.operators:
        n, ov = b.CreateString(op.name), b.CreateString(op.overload)
        ops.append(_table(b, 2, [("off", 0, n), ("off", 1, ov)]))
    operators = _vec_offsets(b, ops)
    delegates = _vec_offsets(b, [_write_delegate(b, d) for d in p.delegates])
    ncbs = _vec(b, p.non_const_buffer_sizes, 8, "PrependInt64")
    return _table(
        b,
        9,
        [
            ("off", 0, name),
            ("off", 1, cmt),
            ("off", 2, values),
            ("off", 3, inputs),
            ("off", 4, outputs),
            ("off", 5, chains),
            ("off", 6, operators),
            ("off", 7, delegates),
            ("off", 8, ncbs),
        ],
    )


def _write_subsegment(b: flatbuffers.Builder, s: S.SubsegmentOffsets) -> int:
    offs = _vec(b, s.offsets, 8, "PrependUint64")
    return _table(b, 2, [("Uint32", 0, s.segment_index), ("off", 1, offs)])


def program_flatbuffer(prog: S.Program) -> bytes:
    """The ``Program`` flatbuffer (identifier ``ET12``), without header or segments."""
    b = flatbuffers.Builder(4096)
    plans = _vec_offsets(b, [_write_plan(b, p) for p in prog.execution_plan])
    const_buf = _vec_offsets(b, [])
    delegate_data = _vec_offsets(b, [])
    segs = []
    for s in prog.segments:
        segs.append(_table(b, 2, [("Uint64", 0, s.offset), ("Uint64", 1, s.size)]))
    segments = _vec_offsets(b, segs)
    cseg = _write_subsegment(b, prog.constant_segment) if prog.constant_segment else None
    mseg = None
    if prog.mutable_data_segments:
        mseg = _vec_offsets(b, [_write_subsegment(b, m) for m in prog.mutable_data_segments])
    root = _table(
        b,
        7,
        [
            ("Uint32", 0, prog.version),
            ("off", 1, plans),
            ("off", 2, const_buf),
            ("off", 3, delegate_data),
            ("off", 4, segments),
            ("off", 5, cseg),
            ("off", 6, mseg),
        ],
    )
    b.Finish(root, file_identifier=b"ET12")
    return bytes(b.Output())


@dataclass
class _Blob:
    parts: list  # bytes-like pieces, in order
    size: int


def _constant_blob(buffers: Sequence, pad: int) -> tuple[_Blob, list[int]]:
    """Concatenate buffers[1:] (buffers[0] is the placeholder); return blob and offsets."""
    parts: list = []
    offsets = [0]
    cur = 0
    for i, buf in enumerate(buffers[1:]):
        if i > 0 and pad > 1:
            padded = align_up(cur, pad)
            if padded > cur:
                parts.append(bytes(padded - cur))
            cur = padded
        offsets.append(cur)
        mv = memoryview(buf).cast("B")
        parts.append(mv)
        cur += mv.nbytes
    return _Blob(parts, cur), offsets


def serialize_pte(
    plans: list[S.ExecutionPlan], constants: Sequence, mutables: Sequence | None = None
) -> bytes:
    """Assemble a complete ``.pte`` file.

    ``constants`` / ``mutables`` are the buffer tables that tensors' ``data_buffer_idx`` index
    (entry 0 of each is an unused placeholder).
    """
    return b"".join(serialize_pte_pieces(plans, constants, mutables))


def serialize_pte_pieces(
    plans: list[S.ExecutionPlan], constants: Sequence, mutables: Sequence | None = None
) -> list:
    """Like :func:`serialize_pte` but returns the file as a list of bytes-like pieces whose
    concatenation is the file (the weights are not copied; the first piece starts the
    flatbuffer and the first four pieces hold all of it)."""
    const_blob, const_offsets = _constant_blob(constants, CONSTANT_ALIGNMENT)
    blobs = [const_blob]
    prog = S.Program(execution_plan=plans)
    prog.constant_segment = S.SubsegmentOffsets(0, const_offsets)
    if mutables is not None and len(mutables) > 1:
        mut_blob, mut_offsets = _constant_blob(mutables, 1)
        blobs.append(mut_blob)
        prog.mutable_data_segments = [S.SubsegmentOffsets(1, mut_offsets)]
    _add_delegate_segments(plans, blobs)
    cur = 0
    for i, blob in enumerate(blobs):
        if i:
            cur = align_up(cur, SEGMENT_ALIGNMENT)
        prog.segments.append(S.DataSegment(cur, blob.size))
        cur += blob.size
    data_size = cur
    fb = program_flatbuffer(prog)
    if data_size == 0:
        return [fb]
    program_size = len(fb) + _EH_LEN
    base = align_up(program_size, SEGMENT_ALIGNMENT)
    header = b"eh00" + struct.pack("<IQQQ", _EH_LEN, program_size, base, data_size)
    root = struct.unpack_from("<I", fb, 0)[0]
    pieces: list = [struct.pack("<I", root + _EH_LEN), fb[4:8], header, fb[8:]]
    pos = program_size
    for seg, blob in zip(prog.segments, blobs, strict=True):
        pieces.append(bytes(base + seg.offset - pos))
        pos = base + seg.offset
        pieces.extend(blob.parts)
        pos += blob.size
    return pieces


# -- FlatTensor (.ptd) --------------------------------------------------------------------------
@dataclass
class PtdEntry:
    """One named tensor of a ``.ptd`` file."""

    key: str
    scalar_type: int
    sizes: list[int]
    data: object  # bytes-like


def serialize_ptd(entries: Sequence[PtdEntry]) -> bytes:
    """Assemble a ``.ptd`` (FlatTensor) file; identical buffers share one segment."""
    seg_of: dict[bytes, int] = {}
    seg_data: list = []
    seg_table: list[tuple[int, int]] = []
    named: list[tuple[PtdEntry, int]] = []
    cur = 0
    for e in entries:
        mv = memoryview(e.data).cast("B")
        h = hashlib.sha256(mv).digest()
        if h not in seg_of:
            cur = align_up(cur, SEGMENT_ALIGNMENT)
            seg_of[h] = len(seg_table)
            seg_table.append((cur, mv.nbytes))
            seg_data.append(mv)
            cur += mv.nbytes
        named.append((e, seg_of[h]))
    data_size = cur
    b = flatbuffers.Builder(1024)
    segs = [_table(b, 2, [("Uint64", 0, o), ("Uint64", 1, s)]) for o, s in seg_table]
    segments = _vec_offsets(b, segs)
    nds = []
    for e, si in named:
        key = b.CreateString(e.key)
        sizes = _vec(b, e.sizes, 4, "PrependInt32")
        dim_order = _vec(b, list(range(len(e.sizes))), 1, "PrependUint8")
        layout = _table(
            b, 3, [("Int8", 0, e.scalar_type), ("off", 1, sizes), ("off", 2, dim_order)]
        )
        nds.append(_table(b, 3, [("off", 0, key), ("Uint32", 1, si), ("off", 2, layout)]))
    named_vec = _vec_offsets(b, nds)
    root_t = _table(b, 3, [("Uint32", 0, 0), ("off", 1, segments), ("off", 2, named_vec)])
    b.Finish(root_t, file_identifier=b"FT01")
    fb = bytes(b.Output())
    base = align_up(len(fb) + _FH_PADDED, SEGMENT_ALIGNMENT)
    header = b"FH01" + struct.pack("<IQQQQ", _FH_LEN, _FH_PADDED, len(fb), base, data_size)
    header += bytes(_FH_PADDED - len(header))
    root = struct.unpack_from("<I", fb, 0)[0]
    out = bytearray()
    out += struct.pack("<I", root + _FH_PADDED) + fb[4:8] + header + fb[8:]
    for (off, _), mv in zip(seg_table, seg_data, strict=True):
        out += bytes(base + off - len(out))
        out += mv
    if len(out) < base:
        out += bytes(base - len(out))
    return bytes(out)


# -- BundledProgram ------------------------------------------------------------------------------
# ExecuTorch's BundledProgram (identifier BP08, docs/devtools.md): a program plus test cases.
# A bundled value is an :class:`BundledTensor`, or a Python int, bool or float.
BUNDLED_PROGRAM_VERSION = 2  # ExecuTorch 1.5 writes 2
_VU_TENSOR, _VU_INT, _VU_BOOL, _VU_DOUBLE = 1, 2, 3, 4


@dataclass
class BundledTensor:
    """A tensor of a bundled test case: ScalarType code, sizes and contiguous bytes."""

    scalar_type: int
    sizes: list[int]
    data: bytes


BundledValue = BundledTensor | int | bool | float
BundledCase = tuple[Sequence[BundledValue], Sequence[BundledValue]]


def _byte_vec(b: flatbuffers.Builder, data: bytes, align: int) -> int:
    b.StartVector(1, len(data), align)
    b.head = b.Head() - len(data)
    b.Bytes[b.head : b.head + len(data)] = data
    return b.EndVector()


def _write_bundled_value(b: flatbuffers.Builder, v: BundledValue) -> int:
    if isinstance(v, BundledTensor):
        data = _byte_vec(b, v.data, 16)
        sizes = _vec(b, v.sizes, 4, "PrependInt32")
        order = _vec(b, list(range(len(v.sizes))), 1, "PrependUint8")
        inner = _table(
            b,
            4,
            [("Int8", 0, v.scalar_type), ("off", 1, sizes), ("off", 2, data), ("off", 3, order)],
        )
        kind = _VU_TENSOR
    elif isinstance(v, bool):
        inner, kind = _table(b, 1, [("Bool", 0, v)]), _VU_BOOL
    elif isinstance(v, int):
        inner, kind = _table(b, 1, [("Int64", 0, v)]), _VU_INT
    elif isinstance(v, float):
        inner, kind = _table(b, 1, [("Float64", 0, v)]), _VU_DOUBLE
    else:
        raise SerializationError(f"a bundled value must be a tensor, int, bool or float: {v!r}")
    return _table(b, 2, [("Uint8", 0, kind), ("off", 1, inner)])


def serialize_bundled(program: bytes, suites: Sequence[tuple[str, Sequence[BundledCase]]]) -> bytes:
    """A BundledProgram flatbuffer (``BP08``) wrapping the ``.pte`` bytes ``program`` (aligned
    to 32) with one test suite per ``(method_name, [(inputs, expected_outputs), ...])``."""
    b = flatbuffers.Builder(len(program) + 4096)
    suite_offs = []
    for name, cases in suites:
        case_offs = []
        for inputs, expected in cases:
            ins = _vec_offsets(b, [_write_bundled_value(b, v) for v in inputs])
            outs = _vec_offsets(b, [_write_bundled_value(b, v) for v in expected])
            case_offs.append(_table(b, 2, [("off", 0, ins), ("off", 1, outs)]))
        cases_vec = _vec_offsets(b, case_offs)
        name_off = b.CreateString(name)
        suite_offs.append(_table(b, 2, [("off", 0, name_off), ("off", 1, cases_vec)]))
    suites_vec = _vec_offsets(b, suite_offs)
    prog = _byte_vec(b, bytes(program), 32)
    root = _table(
        b, 3, [("Uint32", 0, BUNDLED_PROGRAM_VERSION), ("off", 1, suites_vec), ("off", 2, prog)]
    )
    b.Finish(root, file_identifier=b"BP08")
    return bytes(b.Output())
