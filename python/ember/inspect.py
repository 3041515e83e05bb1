"""``ember.inspect``: read an ETDump (Ember's runtime's or stock ExecuTorch's) in Ember's Python.

:func:`read_etdump` decodes the size-prefixed ``ED00`` flatbuffer (ExecuTorch 1.5's
``etdump_schema_flatcc.fbs``) into dataclasses: runs, profile events, allocation events and debug
events, whose tensors are read from the debug buffer file when one is given. :func:`inspect`
joins it with a program (an :class:`ember.Program` or a ``.pte`` path) into an
:class:`Inspection`: the per-instruction table (median time over runs, share, calls, delegated
or not, source line when the program carries it), an aggregate by operator kind, a Chrome
trace-event JSON (:meth:`Inspection.to_chrome_trace`, opens in Perfetto), a PNG of time by
operator kind (:meth:`Inspection.plot`, when matplotlib is importable) and the comparison of the
recorded intermediate outputs with eager PyTorch (:meth:`Inspection.compare_with_eager`), which
names the first operator that drifts. With an ETRecord (:func:`read_etrecord`: the zip
``ember.export(..., etrecord=path)`` writes, read with zipfile and json, the graph's JSON parsed
for node names, targets, ``debug_handle`` and ``stack_trace``) every row, an instruction or an
event inside a delegate call, names its FX nodes, their operator types and the user's source line,
and delegate calls their backend. ExecuTorch is not imported. CLI (also ``ember-inspect``)::

    python -m ember.inspect out.etdp [--program m.pte] [--etrecord m.etrecord]
        [--debug-buffer f] [--chrome t.json] [--plot p.png]

The flatbuffer access is :class:`ember.reader._Fb` (the ``.pte`` reader's), see docs/devtools.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import struct
import zipfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from ember import dtypes as _dtypes
from ember.reader import PteError, _Fb

log = logging.getLogger(__name__)

IDENTIFIER = b"ED00"
VALUE_TYPES = ("Null", "Int", "Bool", "Float", "Double", "Tensor", "TensorList", "String")
# Names ExecuTorch gives the non-kernel instructions (Ember's runtime writes the same).
_INSTR_NAMES = {3: "executorch::move", 4: "executorch::jump_false", 5: "executorch::free"}
# Stock ExecuTorch's wrapper events around a kernel / delegate call.
_WRAPPERS = ("OPERATOR_CALL", "DELEGATE_CALL")
PathLike = str | os.PathLike[str]


class EtdumpError(ValueError):
    """The bytes are not a readable ETDump."""


class EtrecordError(ValueError):
    """The file is not a readable ETRecord."""


# -- the file -------------------------------------------------------------------------------------
@dataclass
class TensorMeta:
    """A tensor a debug event describes: where its bytes lie in the debug buffer."""

    scalar_type: int
    sizes: list[int]
    strides: list[int]
    offset: int

    @property
    def dtype_name(self) -> str:
        return _dtypes.NAMES.get(self.scalar_type, f"dtype{self.scalar_type}")


@dataclass
class DebugValue:
    """An ETDump ``Value``: ``kind`` is one of :data:`VALUE_TYPES`."""

    kind: str
    tensors: list[TensorMeta] = field(default_factory=list)  # Tensor: one; TensorList: several
    scalar: float | int | bool | None = None
    output: bool = False  # stock ExecuTorch marks the program outputs


@dataclass
class ProfileEvent:
    name: str
    chain_index: int
    instruction_id: int
    delegate_debug_id_int: int
    delegate_debug_id_str: str
    delegate_debug_metadata: bytes
    start_time: int
    end_time: int

    @property
    def duration(self) -> int:
        return max(0, self.end_time - self.start_time)


@dataclass
class DebugEvent:
    chain_index: int
    instruction_id: int
    delegate_debug_id_int: int
    delegate_debug_id_str: str
    name: str
    value: DebugValue | None
    tensors: list[Any] = field(default_factory=list)  # torch tensors, with a debug buffer


@dataclass
class AllocationEvent:
    allocator_id: int
    allocation_size: int


Event = ProfileEvent | DebugEvent | AllocationEvent


@dataclass
class RunData:
    name: str
    bundled_input_index: int
    allocators: list[str]
    events: list[Event]

    @property
    def profile_events(self) -> list[ProfileEvent]:
        return [e for e in self.events if isinstance(e, ProfileEvent)]

    @property
    def debug_events(self) -> list[DebugEvent]:
        return [e for e in self.events if isinstance(e, DebugEvent)]


@dataclass
class ETDump:
    version: int
    runs: list[RunData]


def _value(fb: _Fb, v: int) -> DebugValue:
    kind_code = fb.scalar(v, 0, "<b")
    kind = VALUE_TYPES[kind_code] if 0 <= kind_code < len(VALUE_TYPES) else f"?{kind_code}"
    out = DebugValue(kind, output=bool(fb.scalar(v, 7, "<B")))

    def tensor(t: int) -> TensorMeta:
        return TensorMeta(fb.scalar(t, 0, "<b"), fb.vec(t, 1, "q"), fb.vec(t, 2, "q"),
                          fb.scalar(t, 3, "<q"))  # fmt: skip

    if kind == "Tensor" and fb.ref(v, 1):
        out.tensors = [tensor(fb.ref(v, 1))]
    elif kind == "TensorList" and fb.ref(v, 2):
        out.tensors = [tensor(t) for t in fb.vec_tables(fb.ref(v, 2), 0)]
    else:
        slot, fmt = {"Int": (3, "<q"), "Float": (4, "<f"), "Double": (5, "<d"),
                     "Bool": (6, "<B")}.get(kind, (0, ""))  # fmt: skip
        if fmt and fb.ref(v, slot):
            out.scalar = fb.scalar(fb.ref(v, slot), 0, fmt)
            out.scalar = bool(out.scalar) if kind == "Bool" else out.scalar
    return out


def _event(fb: _Fb, ev: int) -> Event | None:
    if p := fb.ref(ev, 0):
        return ProfileEvent(
            fb.string(p, 0), fb.scalar(p, 1, "<i"), fb.scalar(p, 2, "<i", -1),
            fb.scalar(p, 3, "<i", -1), fb.string(p, 4), bytes(fb.vec(p, 5, "B")),
            fb.scalar(p, 6, "<Q"), fb.scalar(p, 7, "<Q"),
        )  # fmt: skip
    if a := fb.ref(ev, 1):
        return AllocationEvent(fb.scalar(a, 0, "<i"), fb.scalar(a, 1, "<Q"))
    if d := fb.ref(ev, 2):
        val = fb.ref(d, 2)
        chain = fb.scalar(d, 0, "<Q")
        return DebugEvent(
            chain if chain < 1 << 63 else chain - (1 << 64), fb.scalar(d, 1, "<i", -1),
            fb.scalar(d, 3, "<i", -1), fb.string(d, 4), fb.string(d, 5),
            _value(fb, val) if val else None,
        )  # fmt: skip
    return None


def _read_tensor(buf: bytes, t: TensorMeta) -> Any:
    import torch

    dtype_name = next((d.torch for d in _dtypes.TABLE if d.code == t.scalar_type), None)
    if dtype_name is None or not hasattr(torch, dtype_name):
        raise EtdumpError(f"debug tensor of scalar type {t.scalar_type} has no torch dtype")
    dtype = getattr(torch, dtype_name)
    numel = 1
    for s in t.sizes:
        numel *= s
    n = numel * _dtypes.SIZES[t.scalar_type]
    if numel == 0:  # stock ExecuTorch gives these offset -1
        return torch.empty(t.sizes, dtype=dtype)
    if t.offset < 0 or t.offset + n > len(buf):
        raise EtdumpError(f"debug tensor at {t.offset} (+{n}) is outside the debug buffer")
    raw = bytearray(buf[t.offset : t.offset + n])
    return torch.frombuffer(raw, dtype=dtype).reshape(t.sizes)  # dense, as the Inspector reads


def read_etdump(data: bytes | PathLike, debug_buffer: bytes | PathLike | None = None) -> ETDump:
    """Decode an ETDump (bytes or a path); with ``debug_buffer`` (bytes or a path) the debug
    events' tensors are read into ``DebugEvent.tensors``. Raises :class:`EtdumpError`."""
    buf = data if isinstance(data, bytes) else Path(data).read_bytes()
    if len(buf) < 12 or buf[8:12] != IDENTIFIER:
        raise EtdumpError("not a size-prefixed ETDump (no ED00 identifier at byte 8)")
    fb = _Fb(buf)
    try:
        root = 4 + fb.u32(4)
        runs = []
        for r in fb.vec_tables(root, 1):
            events = [e for ev in fb.vec_tables(r, 3) if (e := _event(fb, ev)) is not None]
            allocators = [fb.string(a, 0) for a in fb.vec_tables(r, 2)]
            runs.append(RunData(fb.string(r, 0), fb.scalar(r, 1, "<i", -1), allocators, events))
        dump = ETDump(fb.scalar(root, 0, "<I"), runs)
    except (PteError, struct.error, IndexError) as e:
        raise EtdumpError(f"malformed ETDump: {e}") from e
    if debug_buffer is not None:
        dbg = debug_buffer if isinstance(debug_buffer, bytes) else Path(debug_buffer).read_bytes()
        for run in dump.runs:
            for d in run.debug_events:
                if d.value is not None:
                    d.tensors = [_read_tensor(dbg, t) for t in d.value.tensors]
    return dump


# -- the program ----------------------------------------------------------------------------------
@dataclass
class Instruction:
    """One instruction of a method, as the program names it."""

    index: int
    name: str  # operator, delegate id, or executorch::move / jump_false / free
    delegated: bool
    node: str | None = None
    source: str | None = None  # the user's line (export-time programs only)


def program_instructions(pte: bytes, method: str = "forward") -> list[Instruction]:
    """The instructions of chain 0 of ``method`` in a ``.pte`` (read with ember.reader's
    flatbuffer access)."""
    fb = _Fb(pte)
    root = fb.u32(0)
    for pt in fb.vec_tables(root, 1):
        if fb.string(pt, 0) != method:
            continue
        ops = []
        for op in fb.vec_tables(pt, 6):
            name, overload = fb.string(op, 0), fb.string(op, 1)
            ops.append(f"{name}.{overload}" if overload else name)
        delegates = [fb.string(d, 0) for d in fb.vec_tables(pt, 7)]
        chains = fb.vec_tables(pt, 5)
        out = []
        for i, ins in enumerate(fb.vec_tables(chains[0], 2) if chains else []):
            kind, body = fb.scalar(ins, 0, "<B"), fb.ref(ins, 1)
            at = fb.scalar(body, 0, "<i") if body else -1
            if kind == 1:
                out.append(Instruction(i, ops[at] if 0 <= at < len(ops) else "?", False))
            elif kind == 2:
                out.append(Instruction(i, delegates[at] if 0 <= at < len(delegates) else "?", True))
            else:
                out.append(Instruction(i, _INSTR_NAMES.get(kind, f"instruction{kind}"), False))
        return out
    raise EtdumpError(f"the program has no method '{method}'")


def _source_line(stack_trace: str | None) -> str | None:
    from ember.errors import user_source_line

    node = SimpleNamespace(meta={"stack_trace": stack_trace})
    return user_source_line(cast(Any, node)) if stack_trace else None


def kind_of(name: str) -> str:
    """The operator kind of an event name: ``aten::convolution.out`` -> ``convolution``."""
    base = name.removeprefix("native_call_").split("::")[-1]
    return base.split(".")[0] or name


# -- the ETRecord ---------------------------------------------------------------------------------
@dataclass
class GraphNode:
    """A node of the ETRecord's graph that has a debug handle."""

    name: str  # the FX node's name
    op_type: str  # as ExecuTorch's Inspector names it (the target's ``__name__``): addmm.default
    handle: int
    source: str | None  # the user's line: the stack trace's first frame outside torch / ember


@dataclass
class DelegateRecord:
    """A delegate call of the ETRecord's ``delegate_map``."""

    backend: str
    ids: dict[str, list[int]]  # delegate debug id of an event inside the call -> debug handles


@dataclass
class EtrecordMethod:
    """What an ETRecord says about one method: its graph's nodes by debug handle and the
    handles of each instruction and of each delegate debug id."""

    method: str
    nodes: dict[int, list[GraphNode]]  # debug handle -> nodes, in graph order
    instructions: dict[int, list[int]]  # instruction index -> debug handles
    delegates: dict[int, DelegateRecord]  # instruction index -> the delegate call's record

    def nodes_of(self, handles: Iterable[int]) -> list[GraphNode]:
        """The nodes of ``handles``, each once, in the handles' order."""
        out: dict[str, GraphNode] = {}
        for h in handles:
            for n in self.nodes.get(h, []):
                out.setdefault(n.name, n)
        return list(out.values())


def _handles(v: Any) -> list[int]:
    """A debug handle or several: an int, a list, or their string forms ("3", "[3, 4]")."""
    if isinstance(v, bool) or v is None:
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, (list, tuple)):
        return [h for x in v for h in _handles(x)]
    if isinstance(v, str):
        parts = v.strip("()[] ").replace(",", " ").split()
        return [int(x) for x in parts if x.lstrip("-").isdigit()]
    return []


def _op_type(target: str) -> str:
    """``torch.ops.aten.addmm.default`` -> ``addmm.default`` (an OpOverload's ``__name__``)."""
    parts = target.split(".")
    return ".".join(parts[-2:]) if target.startswith("torch.ops.") else parts[-1]


def _graph_node_name(node: dict[str, Any]) -> str:
    if node.get("name"):
        return str(node["name"])
    for out in node.get("outputs", []):
        t = out.get("as_tensor") or next(iter(out.get("as_tensors") or []), None)
        if isinstance(t, dict) and t.get("name"):
            return str(t["name"])
    return str(node.get("target", "?"))


def read_etrecord(path: PathLike, method: str = "forward") -> EtrecordMethod:
    """Read ``method``'s part of an ETRecord zip (ExecuTorch 1.5's layout, as
    :mod:`ember.etrecord` writes it) with zipfile and json: the graph
    (``edge_dialect_exported_program/<method>``, torch.export's JSON) for its nodes' names,
    targets, ``debug_handle`` and ``stack_trace``; ``debug_handle_map`` and ``delegate_map``.
    Raises :class:`EtrecordError`."""
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            entry = f"edge_dialect_exported_program/{method}"
            entry = entry if entry in names else "edge_dialect_exported_program"
            if entry not in names:
                raise EtrecordError(f"{path}: no graph of method '{method}' in the ETRecord")
            doc = json.loads(z.read(entry))
            maps = {
                k: json.loads(z.read(k)).get(method, {}) if k in names else {}
                for k in ("debug_handle_map", "delegate_map")
            }
    except (OSError, zipfile.BadZipFile, KeyError, json.JSONDecodeError, AttributeError) as e:
        raise EtrecordError(f"{path}: not a readable ETRecord: {e}") from e
    nodes: dict[int, list[GraphNode]] = defaultdict(list)
    try:
        for n in doc["graph_module"]["graph"]["nodes"]:
            meta = n.get("metadata") or {}
            source = _source_line(meta.get("stack_trace"))
            for h in _handles(meta.get("debug_handle")):
                op = _op_type(str(n.get("target", "")))
                nodes[h].append(GraphNode(_graph_node_name(n), op, h, source))
        instructions = {int(i): _handles(v) for i, v in maps["debug_handle_map"].items()}
        delegates = {
            int(i): DelegateRecord(
                str(d.get("name", "")),
                {str(k): _handles(v) for k, v in (d.get("delegate_map") or {}).items()},
            )
            for i, d in maps["delegate_map"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise EtrecordError(f"{path}: unexpected ETRecord contents: {e}") from e
    return EtrecordMethod(method, dict(nodes), instructions, delegates)


# -- the table ------------------------------------------------------------------------------------
@dataclass
class OpRow:
    """One instruction (or one event inside a delegate) over every execute run."""

    chain: int
    instruction: int
    name: str
    kind: str
    delegated: bool  # a delegate call, or an event from inside a delegate
    calls: int  # over all runs
    runs: int  # runs in which it ran
    samples_ns: list[int]  # per run: the time of all its calls in that run
    source: str | None = None
    node: str | None = None
    inside_delegate: bool = False  # a delegate's own event: inside its call, not in the shares
    share: float = 0.0  # percent of the instructions' total median time
    delegate_id: str | None = None  # the event's delegate debug id (inside a delegate)
    # from an ETRecord: the FX nodes the row computes, their operator types, their user lines
    nodes: list[str] = field(default_factory=list)
    op_types: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    backend: str | None = None  # the delegate's backend (a delegate call or an event inside)

    @property
    def median_ns(self) -> float:
        return float(statistics.median(self.samples_ns)) if self.samples_ns else 0.0

    @property
    def calls_per_run(self) -> float:
        return self.calls / self.runs if self.runs else 0.0


@dataclass
class KindRow:
    kind: str
    median_ns: float  # sum of its rows' medians
    calls: int
    share: float


@dataclass
class OpCompare:
    """An instruction's recorded output against eager PyTorch's value of its FX node."""

    instruction: int
    name: str
    node: str
    source: str | None
    max_abs: float
    max_rel: float
    ok: bool


@dataclass
class EagerComparison:
    rows: list[OpCompare]
    first_drift: OpCompare | None

    def __str__(self) -> str:
        if self.first_drift is None:
            return f"{len(self.rows)} operators compared with eager: none drifts"
        d = self.first_drift
        return (
            f"first drift: instruction {d.instruction} ({d.name}) node '{d.node}' "
            f"max abs {d.max_abs:.3g} rel {d.max_rel:.3g}"
            + (f"\n  at {d.source}" if d.source else "")
        )


def _is_instruction(e: ProfileEvent) -> bool:
    return e.chain_index >= 0 and e.instruction_id >= 0


def _delegate_key(e: ProfileEvent | DebugEvent) -> str | None:
    if e.delegate_debug_id_int != -1:
        return str(e.delegate_debug_id_int)
    return e.delegate_debug_id_str or None


class Inspection:
    """An ETDump joined with its program: see :func:`inspect`."""

    def __init__(
        self,
        etdump: ETDump,
        program: Any = None,
        method: str = "forward",
        etrecord: EtrecordMethod | None = None,
    ) -> None:
        self.etdump = etdump
        self.program = program  # an ember.Program, or None
        self.method = method
        self.etrecord = etrecord
        self.instructions: list[Instruction] = []
        if program is not None:
            self.instructions = program_instructions(program.buffer, method)
            for d in program.debug_info(method):
                if 0 <= d.index < len(self.instructions):
                    ins = self.instructions[d.index]
                    ins.node, ins.source = d.node, _source_line(d.stack_trace)
        self.runs = [r for r in etdump.runs if any(_is_instruction(e) for e in r.profile_events)]
        self.rows = self._rows()
        self.method_events = self._method_events()

    def _rows(self) -> list[OpRow]:
        rows: dict[tuple[int, int, str | None], OpRow] = {}
        for run in self.runs:
            per: dict[tuple[int, int, str | None], list[ProfileEvent]] = defaultdict(list)
            for e in run.profile_events:
                if _is_instruction(e) or _delegate_key(e) is not None:
                    per[(e.chain_index, e.instruction_id, _delegate_key(e))].append(e)
            for key, evs in per.items():
                wrappers = [e for e in evs if e.name in _WRAPPERS]
                inner = [e for e in evs if e.name not in _WRAPPERS]
                timed = wrappers or inner  # stock ExecuTorch: OPERATOR_CALL encloses the kernel
                calls = len(inner) if inner else len(evs)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = self._new_row(key, inner or evs)
                row.calls += calls
                row.runs += 1
                row.samples_ns.append(sum(e.duration for e in timed))
        out = sorted(rows.values(), key=lambda r: (r.chain, r.instruction, r.inside_delegate))
        for r in out:
            self._resolve(r)
        total = sum(r.median_ns for r in out if not r.inside_delegate)
        for r in out:
            r.share = 100.0 * r.median_ns / total if total and not r.inside_delegate else 0.0
        return out

    def _new_row(self, key: tuple[int, int, str | None], evs: list[ProfileEvent]) -> OpRow:
        chain, index, delegate = key
        name = evs[0].name.removeprefix("native_call_")
        ins = (
            self.instructions[index] if chain == 0 and 0 <= index < len(self.instructions) else None
        )
        if delegate is not None:
            owner = ins.name if ins is not None else "delegate"
            return OpRow(chain, index, name or delegate, owner, True, 0, 0, [],
                         inside_delegate=True, delegate_id=delegate)  # fmt: skip
        if ins is not None:
            return OpRow(chain, index, ins.name, ins.name if ins.delegated else kind_of(ins.name),
                         ins.delegated, 0, 0, [], ins.source, ins.node)  # fmt: skip
        return OpRow(chain, index, name, kind_of(name), name == "DELEGATE_CALL", 0, 0, [])

    def graph_nodes(
        self, chain: int, instruction: int, delegate: str | None = None
    ) -> tuple[str | None, list[GraphNode]]:
        """With an ETRecord: the backend (delegate calls) and the graph nodes of instruction
        ``instruction`` of chain ``chain``, or of the event with delegate debug id ``delegate``
        inside that delegate call."""
        rec = self.etrecord
        if rec is None or chain != 0:
            return None, []
        d = rec.delegates.get(instruction)
        if delegate is None:
            handles = rec.instructions.get(instruction, [])
        else:
            handles = d.ids.get(delegate, []) if d is not None else []
        return (d.backend if d is not None else None), rec.nodes_of(handles)

    def _resolve(self, row: OpRow) -> None:
        backend, nodes = self.graph_nodes(row.chain, row.instruction, row.delegate_id)
        if backend is not None:
            row.backend, row.delegated = backend, True
            if not row.inside_delegate and row.name == "DELEGATE_CALL":  # no program names it
                row.name = row.kind = backend
            elif row.inside_delegate and row.kind == "delegate":
                row.kind = backend
        row.nodes = [n.name for n in nodes]
        row.op_types = [n.op_type for n in nodes]
        row.sources = list(dict.fromkeys(n.source for n in nodes if n.source))
        row.source = row.sources[0] if row.sources else row.source
        if row.node is None and len(nodes) == 1:
            row.node = nodes[0].name

    def _method_events(self) -> dict[str, float]:
        samples: dict[str, list[int]] = defaultdict(list)
        for run in self.etdump.runs:
            for e in run.profile_events:
                if not _is_instruction(e) and _delegate_key(e) is None:
                    samples[e.name].append(e.duration)
        return {k: float(statistics.median(v)) for k, v in samples.items()}

    # -- views ------------------------------------------------------------------------------------
    def by_kind(self) -> list[KindRow]:
        """The instructions' median times summed per operator kind, largest first."""
        acc: dict[str, KindRow] = {}
        for r in self.rows:
            if r.inside_delegate:
                continue
            k = acc.setdefault(r.kind, KindRow(r.kind, 0.0, 0, 0.0))
            k.median_ns += r.median_ns
            k.calls += r.calls
            k.share += r.share
        return sorted(acc.values(), key=lambda k: -k.median_ns)

    def table(self) -> str:
        """The per-operator table and the aggregate by kind, as text."""
        n = len(self.runs)
        has_source = any(r.source for r in self.rows)
        w = max([len(r.name) + 4 for r in self.rows] + [len(k.kind) for k in self.by_kind()] + [8])
        head = f"{'calls':>6} {'median us':>10} {'share':>7}"
        nodes = {id(r): _nodes_text(r.nodes) for r in self.rows} if self.etrecord else {}
        nw = max([len(t) for t in nodes.values()] + [5]) + 2 if nodes else 0
        lines = [
            f"{n} execute run(s); times are medians over runs"
            + ("" if has_source else "; source lines: none (the program carries none)"),
            f"{'#':>4} {'operator':<{w}} {head}  deleg.  "
            + (f"{'nodes':<{nw}}" if nw else "")
            + "source",
        ]
        for r in self.rows:
            idx = f"{r.instruction}" if r.chain == 0 else f"{r.chain}:{r.instruction}"
            name = ("  > " + r.name) if r.inside_delegate else r.name
            share = f"{r.share:6.2f}%" if not r.inside_delegate else "      -"
            lines.append(
                f"{idx:>4} {name:<{w}} {r.calls:>6} {r.median_ns / 1e3:>10.3f} {share}  "
                f"{'yes' if r.delegated else 'no':<6}  "
                + (f"{nodes[id(r)]:<{nw}}" if nw else "")
                + (r.source or "-")
            )
        lines.append(f"{'by kind':<{w + 5}} {head}")
        for k in self.by_kind():
            lines.append(
                f"{k.kind:<{w + 5}} {k.calls:>6} {k.median_ns / 1e3:>10.3f} {k.share:6.2f}%"
            )
        for name, ns in self.method_events.items():
            lines.append(f"{name}: median {ns / 1e3:.3f} us")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def chrome_trace(self) -> dict[str, Any]:
        """Every profile event as a Chrome trace-event ("X", complete) event: pid 0, tid 0 for
        the runtime's events, tid 1 for events from inside delegates; ts and dur in µs from the
        first event."""
        events = [(i, r, e) for i, r in enumerate(self.etdump.runs) for e in r.profile_events]
        t0 = min((e.start_time for _, _, e in events), default=0)
        out = []
        for i, run, e in events:
            args: dict[str, Any] = {"run": i, "run_name": run.name, "chain": e.chain_index,
                                    "instruction": e.instruction_id}  # fmt: skip
            delegate = _delegate_key(e)
            if delegate is not None:
                args["delegate_debug_id"] = delegate
            if e.chain_index == 0 and 0 <= e.instruction_id < len(self.instructions):
                args["op"] = self.instructions[e.instruction_id].name
            backend, nodes = self.graph_nodes(e.chain_index, e.instruction_id, delegate)
            if backend is not None:
                args["backend"] = backend
            if nodes:
                args["nodes"] = [n.name for n in nodes]
                args["op_types"] = [n.op_type for n in nodes]
            out.append({"name": e.name or delegate or "?", "ph": "X",
                        "ts": (e.start_time - t0) / 1e3, "dur": e.duration / 1e3, "pid": 0,
                        "tid": 0 if delegate is None else 1, "args": args})  # fmt: skip
        out.sort(key=lambda ev: (ev["tid"], ev["ts"], -ev["dur"]))
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def to_chrome_trace(self, path: PathLike) -> Path:
        """Write :meth:`chrome_trace` as JSON (opens in Perfetto / chrome://tracing)."""
        p = Path(path)
        p.write_text(json.dumps(self.chrome_trace()))
        return p

    def plot(self, path: PathLike) -> Path | None:
        """A PNG bar chart of the median time by operator kind; None (logged) when matplotlib
        is not importable."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            log.info("matplotlib is not installed: no plot written")
            return None
        kinds = self.by_kind()
        fig, ax = plt.subplots(figsize=(8, 0.4 * len(kinds) + 1.5))
        ax.barh([k.kind for k in kinds][::-1], [k.median_ns / 1e3 for k in kinds][::-1])
        ax.set_xlabel("median time per run (us)")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return Path(path)

    # -- intermediate outputs ---------------------------------------------------------------------
    def debug_tensors(self, run: int = 0) -> dict[int, list[Any]]:
        """Instruction index (chain 0) -> the output tensors its debug events recorded in execute
        run ``run`` (Ember: one event, a Tensor or TensorList; stock ExecuTorch: one event per
        output tensor). Program outputs (``output`` set) are left out."""
        out: dict[int, list[Any]] = defaultdict(list)
        for d in self.runs[run].debug_events:
            if d.chain_index == 0 and _delegate_key(d) is None and d.tensors:
                if not (d.value is not None and d.value.output):
                    out[d.instruction_id].extend(d.tensors)
        return dict(out)

    def compare_with_eager(
        self, inputs: Any, *, rtol: float = 1e-4, atol: float = 1e-5, run: int = 0
    ) -> EagerComparison:
        """Each recorded kernel output (debug events, read with a debug buffer) against eager
        PyTorch's value of the instruction's FX node (``ember.compare``'s interpretation of the
        exported graph); ``first_drift`` is the first instruction beyond the tolerance. Needs an
        export-time :class:`ember.Program` (its instruction-to-node map); ``run`` indexes the
        execute runs."""
        from ember.compare import _close, _errors, eager_intermediates

        prog = self.program
        debug = prog.debug_info(self.method) if prog is not None else []
        ep = prog._exported.get(self.method) if prog is not None else None
        if not debug or ep is None:
            raise ValueError("compare_with_eager needs an export-time ember.Program")
        recorded = self.debug_tensors(run)
        if not recorded:
            raise ValueError("no debug tensors in this run (record with a debug buffer)")
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        ref = eager_intermediates(ep, prog.flatten_inputs(inputs, self.method))
        rows = []
        for d in sorted(debug, key=lambda d: d.index):
            if d.node not in ref or d.index not in recorded:
                continue
            want = ref[d.node]
            wants = list(want) if isinstance(want, (list, tuple)) else [want]
            worst = (0.0, 0.0)
            ok = True
            for got, exp in zip(recorded[d.index], wants, strict=False):
                a, r = _errors(got, exp)
                ok &= _close(a, r, rtol, atol)
                worst = max(worst, (a, r))
            ins = self.instructions[d.index]
            rows.append(OpCompare(d.index, ins.name, d.node, ins.source, *worst, ok))
        return EagerComparison(rows, next((r for r in rows if not r.ok), None))


def inspect(
    etdump: ETDump | bytes | PathLike,
    program: Any = None,
    *,
    debug_buffer: bytes | PathLike | None = None,
    method: str = "forward",
    etrecord: EtrecordMethod | PathLike | None = None,
) -> Inspection:
    """Join an ETDump (an :class:`ETDump`, bytes or a path) with ``program`` (an
    :class:`ember.Program`, a ``.pte`` path or bytes, or None) and ``etrecord`` (a path or
    :func:`read_etrecord`'s result: names each row's graph nodes and source lines) into an
    :class:`Inspection`."""
    dump = etdump if isinstance(etdump, ETDump) else read_etdump(etdump, debug_buffer)
    if isinstance(program, (str, os.PathLike, bytes)):
        from ember.program import load

        program = load(program)
    if etrecord is not None and not isinstance(etrecord, EtrecordMethod):
        etrecord = read_etrecord(etrecord, method)
    return Inspection(dump, program, method, etrecord)


def _nodes_text(nodes: list[str], most: int = 3) -> str:
    """At most ``most`` node names, then how many more."""
    if not nodes:
        return "-"
    more = f" +{len(nodes) - most}" if len(nodes) > most else ""
    return ",".join(nodes[:most]) + more


def main(argv: list[str] | None = None) -> int:
    """``python -m ember.inspect out.etdp [--program m.pte] [--etrecord m.etrecord]
    [--debug-buffer f] [--chrome t.json] [--plot p.png]``: prints the per-operator table."""
    ap = argparse.ArgumentParser(prog="python -m ember.inspect", description=main.__doc__)
    ap.add_argument("etdump")
    ap.add_argument("--program", help="the .pte that was run (names the instructions)")
    ap.add_argument("--etrecord", help="the program's ETRecord (names each row's graph nodes)")
    ap.add_argument("--method", default="forward")
    ap.add_argument("--debug-buffer", help="the debug buffer file written with the ETDump")
    ap.add_argument("--chrome", help="write a Chrome trace-event JSON here")
    ap.add_argument("--plot", help="write a PNG of time by operator kind (needs matplotlib)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        ins = inspect(args.etdump, args.program, debug_buffer=args.debug_buffer,
                      method=args.method, etrecord=args.etrecord)  # fmt: skip
    except (OSError, ValueError) as e:
        log.error("%s", e)
        return 1
    print(ins.table())  # noqa: T201 - the CLI's output
    if args.chrome:
        log.info("Chrome trace -> %s", ins.to_chrome_trace(args.chrome))
    if args.plot and ins.plot(args.plot) is not None:
        log.info("plot -> %s", args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
