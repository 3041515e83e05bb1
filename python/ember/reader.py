"""The one Python reader of ``.pte`` files: what the exporter, the budget report and the build
tools need back from the ExecuTorch Program flatbuffer (docs/pte-format.md sections 1-3).

Per execution plan: its name, the pytree strings of its inputs and outputs, the operators
(``namespace::op.overload``), KernelCall instructions with their argument value indices, every value
(tag; for tensors dtype, sizes, dim order, planned or not), the inputs/outputs, the delegate ids and
the planned buffer sizes (``non_const_buffer_sizes``). FlatBuffers rules: vtables may sit before or
after their table, absent fields take their defaults. It is not a verifier: the C runtime verifies
the files it executes. Every out-of-range read raises :class:`PteError`; :func:`read_plans` (for
:class:`ember.Program`) raises :class:`ember.errors.SerializationError`.

Standard library only: tools/selective_build.py, mcu/gen_model.py and the tests load it through
tools/pte_summary.py without importing the ``ember`` package (and torch).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

if __package__:
    from ember import dtypes as _dtypes
    from ember.errors import SerializationError
else:  # loaded by path by the stdlib-only tools (tools/ember_tree.py), without the package
    import _ember_tree_dtypes as _dtypes  # type: ignore[import-not-found,no-redef]

    SerializationError = ValueError  # type: ignore[assignment,misc]

# ScalarType names (as em_dtype_name() prints them) and element sizes: the one dtype table.
DTYPE_NAMES: dict[int, str] = _dtypes.NAMES
DTYPE_SIZES: dict[int, int] = _dtypes.SIZES

# KernelTypes union tags.
TAG_NAMES = {0: "None", 1: "Null", 2: "Int", 3: "Bool", 4: "Double", 5: "Tensor", 6: "String",
             7: "IntList", 8: "DoubleList", 9: "BoolList", 10: "TensorList",
             11: "OptionalTensorList"}  # fmt: skip
TAG_TENSOR = 5


class PteError(ValueError):
    """The bytes are not a readable ET12 program."""


@dataclass
class TensorInfo:
    dtype: int
    sizes: list[int]
    dim_order: list[int]
    planned: bool  # has allocation_info (memory-planned)
    memory_id: int
    constant: bool  # data_buffer_idx > 0

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_SIZES.get(self.dtype, 0)


@dataclass
class Value:
    tag: int
    tensor: TensorInfo | None = None
    scalar: object = None


@dataclass
class KernelCall:
    op_index: int
    args: list[int]


@dataclass
class Plan:
    name: str
    operators: list[str] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    kernel_calls: list[KernelCall] = field(default_factory=list)
    n_delegate_calls: int = 0
    delegates: list[str] = field(default_factory=list)
    arena_sizes: list[int] = field(default_factory=list)  # memory_id 1.. (index 0 dropped)
    non_const_buffer_sizes: list[int] = field(default_factory=list)  # as stored (index 0 kept)
    encoded_inp_str: str = ""  # container_meta_type: the inputs' and outputs' pytree strings
    encoded_out_str: str = ""

    def op_dtypes(self) -> dict[str, set[int]]:
        """For each operator, the dtypes of every tensor argument of its calls."""
        out: dict[str, set[int]] = {op: set() for op in self.operators}
        for kc in self.kernel_calls:
            if not 0 <= kc.op_index < len(self.operators):
                raise PteError(f"KernelCall op_index {kc.op_index} out of range")
            ds = out[self.operators[kc.op_index]]
            for a in kc.args:
                for t in self._tensors_of(a):
                    ds.add(t.dtype)
        return out

    def op_primary_dtypes(self) -> dict[str, set[int]]:
        """For each operator, the dtypes of its primary tensor: the first tensor argument of each
        call (the convention of the dtype masks in ops.def, see python/ember/oplist.py)."""
        out: dict[str, set[int]] = {op: set() for op in self.operators}
        for kc in self.kernel_calls:
            if 0 <= kc.op_index < len(self.operators):
                for a in kc.args:
                    ts = self._tensors_of(a)
                    if ts:
                        out[self.operators[kc.op_index]].add(ts[0].dtype)
                        break
        return out

    def _tensors_of(self, idx: int) -> list[TensorInfo]:
        if not 0 <= idx < len(self.values):
            return []
        v = self.values[idx]
        if v.tensor is not None:
            return [v.tensor]
        if v.tag in (10, 11) and isinstance(v.scalar, list):
            return [
                t
                for i in v.scalar
                if 0 <= i < len(self.values)
                for t in ([self.values[i].tensor] if self.values[i].tensor else [])
            ]
        return []


class _Fb:
    """Bounds-checked FlatBuffers table access (vtables before or after their table)."""

    def __init__(self, buf: bytes, strict: bool = False) -> None:
        self.b = buf
        self.errors = "strict" if strict else "replace"  # invalid UTF-8 in a string

    def _unpack(self, fmt: str, p: int):
        if p < 0 or p + struct.calcsize(fmt) > len(self.b):
            raise PteError(f"read of {fmt} at {p} is outside the file ({len(self.b)} bytes)")
        return struct.unpack_from(fmt, self.b, p)[0]

    def u32(self, p: int) -> int:
        return self._unpack("<I", p)

    def field(self, t: int, slot: int) -> int:
        vt = t - self._unpack("<i", t)
        vt_len = self._unpack("<H", vt)
        o = 4 + 2 * slot
        if o + 2 > vt_len:
            return 0
        off = self._unpack("<H", vt + o)
        return t + off if off else 0

    def scalar(self, t: int, slot: int, fmt: str, default=0):
        a = self.field(t, slot)
        return self._unpack(fmt, a) if a else default

    def ref(self, t: int, slot: int) -> int:
        a = self.field(t, slot)
        return a + self.u32(a) if a else 0

    def string(self, t: int, slot: int) -> str:
        p = self.ref(t, slot)
        if not p:
            return ""
        n = self.u32(p)
        if p + 4 + n > len(self.b):
            raise PteError("string runs past the end of the file")
        try:
            return self.b[p + 4 : p + 4 + n].decode("utf-8", errors=self.errors)
        except UnicodeDecodeError as e:
            raise PteError(f"string is not UTF-8: {e}") from e

    def vec(self, t: int, slot: int, fmt: str) -> list:
        p = self.ref(t, slot)
        if not p:
            return []
        n = self.u32(p)
        size = struct.calcsize("<" + fmt)
        if p + 4 + n * size > len(self.b):
            raise PteError("vector runs past the end of the file")
        return list(struct.unpack_from(f"<{n}{fmt}", self.b, p + 4))

    def vec_tables(self, t: int, slot: int) -> list[int]:
        p = self.ref(t, slot)
        if not p:
            return []
        n = self.u32(p)
        return [p + 4 + 4 * i + self.u32(p + 4 + 4 * i) for i in range(n)]


def _value(fb: _Fb, ev: int) -> Value:
    tag = fb.scalar(ev, 0, "<B")
    val = fb.ref(ev, 1)
    v = Value(tag)
    if not val:
        return v
    if tag == TAG_TENSOR:
        alloc = fb.ref(val, 6)
        v.tensor = TensorInfo(
            dtype=fb.scalar(val, 0, "<b"),
            sizes=fb.vec(val, 2, "i"),
            dim_order=fb.vec(val, 3, "B"),
            planned=bool(alloc),
            memory_id=fb.scalar(alloc, 0, "<I") if alloc else 0,
            constant=fb.scalar(val, 5, "<I") > 0,
        )
    elif tag == 2:
        v.scalar = fb.scalar(val, 0, "<q")
    elif tag == 3:
        v.scalar = bool(fb.scalar(val, 0, "<B"))
    elif tag == 4:
        v.scalar = fb.scalar(val, 0, "<d", 0.0)
    elif tag in (7, 10, 11):
        v.scalar = fb.vec(val, 0, "q" if tag == 7 else "i")
    return v


def read_program(buf: bytes, detail: bool = True, strict: bool = False) -> list[Plan]:
    """Every execution plan of the `.pte` in ``buf`` (``detail=False``: only the names, pytree
    strings and buffer sizes; ``strict``: a string that is not UTF-8 is an error)."""
    if len(buf) < 8 or buf[4:8] != b"ET12":
        raise PteError("not an ExecuTorch ET12 program (bad identifier)")
    fb = _Fb(buf, strict)
    plans = []
    try:
        root = fb.u32(0)
        for pt in fb.vec_tables(root, 1):
            p = Plan(fb.string(pt, 0))
            try:
                cmt = fb.ref(pt, 1)
                if cmt:
                    p.encoded_inp_str, p.encoded_out_str = fb.string(cmt, 0), fb.string(cmt, 1)
            except (PteError, struct.error):
                if strict:  # for ember.Program; the build tools do not need the pytree strings
                    raise
            p.non_const_buffer_sizes = fb.vec(pt, 8, "q")
            p.arena_sizes = p.non_const_buffer_sizes[1:]
            plans.append(p)
            if not detail:
                continue
            for op in fb.vec_tables(pt, 6):
                name, overload = fb.string(op, 0), fb.string(op, 1)
                p.operators.append(f"{name}.{overload}" if overload else name)
            p.values = [_value(fb, ev) for ev in fb.vec_tables(pt, 2)]
            p.inputs = fb.vec(pt, 3, "i")
            p.outputs = fb.vec(pt, 4, "i")
            for chain in fb.vec_tables(pt, 5):
                for ins in fb.vec_tables(chain, 2):
                    kind = fb.scalar(ins, 0, "<B")
                    body = fb.ref(ins, 1)
                    if kind == 1 and body:
                        kc = KernelCall(fb.scalar(body, 0, "<i"), fb.vec(body, 1, "i"))
                        p.kernel_calls.append(kc)
                    elif kind == 2:
                        p.n_delegate_calls += 1
            p.delegates = [fb.string(d, 0) for d in fb.vec_tables(pt, 7)]
    except (struct.error, RecursionError, IndexError) as e:
        raise PteError(f"malformed program: {e}") from e
    return plans


def read_file(path: str) -> list[Plan]:
    """Every execution plan of the `.pte` file at ``path``."""
    with open(path, "rb") as f:
        return read_program(f.read())


# -- what ember.Program needs back ----------------------------------------------------------------
PlanSummary = Plan  # name, encoded_inp_str, encoded_out_str, non_const_buffer_sizes


def read_plans(buf: bytes) -> list[Plan]:
    """The execution plans' names, pytree strings and buffer sizes, for :class:`ember.Program`;
    a malformed file raises :class:`ember.errors.SerializationError`."""
    try:
        return read_program(buf, detail=False, strict=True)
    except PteError as e:
        raise SerializationError(str(e)) from e
