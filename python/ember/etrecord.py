"""ETRecord: what ExecuTorch's Inspector needs from the exporter to name an ETDump's events.

An ETRecord (ExecuTorch 1.5's layout, read by ``executorch.devtools.etrecord.parse_etrecord``)
is a zip with named entries:

- ``ETRECORD_V0``: an empty marker;
- ``edge_dialect_exported_program/<method>`` plus ``..._state_dict``, ``..._constants`` and
  ``..._example_inputs``: the method's graph as torch.export's serializer writes it (JSON, then
  the tensors as ``torch.save`` bytes), each call node carrying ``debug_handle`` in its metadata;
- ``debug_handle_map``: JSON ``{method: {instruction index: handle or [handles]}}``;
- ``delegate_map``: JSON ``{method: {instruction index: {"name": backend id, "delegate_map":
  {delegate debug id: [handles]}}}}`` for delegate calls: the ids EmberCpuBackend gives the
  profile events of its operators (``"conv2d #3"``, a chain ``"conv2d+conv2d #3-4"``) and the
  handles of the nodes each computes;
- ``instruction_id_to_num_outs_map``: JSON ``{method: {instruction index: outputs}}``, for
  delegate calls only (as ExecuTorch's emitter writes it: the Inspector reads an entry as the
  number of graph outputs a call's debug handles stand for);
- ``representative_inputs`` (optional): ``torch.save`` of the method's flat inputs, which the
  Inspector's ``calculate_numeric_gap`` runs the graph on.

Ember's graph is the method's Core-ATen ``ExportedProgram`` (after decomposition, before the
out-variant passes): every ``call_function`` node gets a handle (1, 2, ... in graph order), a
kernel instruction maps to its node's handle and a delegate call to the handles of every node
lowered into it (from the partitioner's report). ETDump events carry the instruction index, so
the Inspector resolves each event to its nodes, their names and the user's source lines.
"""

from __future__ import annotations

import io
import json
import logging
import operator
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch._export.serde.serialize import serialize as _serialize_ep

log = logging.getLogger(__name__)

IDENTIFIER = "ETRECORD_V0"
EDGE_PROGRAM = "edge_dialect_exported_program"
DEBUG_HANDLE_MAP = "debug_handle_map"
DELEGATE_MAP = "delegate_map"
NUM_OUTS_MAP = "instruction_id_to_num_outs_map"
REPRESENTATIVE_INPUTS = "representative_inputs"


@dataclass
class MethodRecord:
    """The debug-handle maps of one method (instruction index -> handles)."""

    handles: dict[str, int] = field(default_factory=dict)  # node name -> debug handle
    instr_handles: dict[int, int | list[int]] = field(default_factory=dict)
    delegates: dict[int, str] = field(default_factory=dict)  # instruction -> backend id
    # instruction -> {delegate debug id: handles} for the events inside a delegate call
    delegate_ids: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    num_outs: dict[int, int] = field(default_factory=dict)


def assign_handles(ep: torch.export.ExportedProgram) -> dict[str, int]:
    """A debug handle (1, 2, ...) for every ``call_function`` node of ``ep`` but ``getitem``,
    by node name."""
    out: dict[str, int] = {}
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            out[node.name] = len(out) + 1
    return out


def _delegated_groups(report: Sequence[Any] | None) -> list[list[str]]:
    """The node names lowered into each delegate, in delegate order: the partitioner's report
    lists consecutive delegated instructions with one reason per delegate."""
    groups: list[list[str]] = []
    last: str | None = None
    for d in report or []:
        if not getattr(d, "delegated", False):
            last = None
            continue
        if d.why != last:
            groups.append([])
            last = d.why
        if d.node:
            groups[-1].append(d.node)
    return groups


def method_record(ep: torch.export.ExportedProgram, debug: Sequence[Any], ir: Any) -> MethodRecord:
    """The maps of one method from its graph, its emitted instructions' debug records
    (:class:`ember.emit.InstrDebug`) and its IR (for the partitioner's report)."""
    rec = MethodRecord(handles=assign_handles(ep))
    groups = _delegated_groups(getattr(ir, "partition_report", None))
    k = 0
    for d in debug:
        if d.kernel.startswith("delegate::"):
            names = groups[k] if k < len(groups) else []
            k += 1
            rec.instr_handles[d.index] = [rec.handles[n] for n in names if n in rec.handles]
            rec.delegates[d.index] = d.kernel.removeprefix("delegate::")
            ids = getattr(d, "delegate_ids", None) or {}
            rec.delegate_ids[d.index] = {
                k: hs
                for k, ns in ids.items()
                if (hs := [rec.handles[n] for n in ns if n in rec.handles])
            }
            rec.num_outs[d.index] = max(1, len(d.out_values))
        elif d.node is not None and d.node in rec.handles:
            rec.instr_handles[d.index] = rec.handles[d.node]
    if k != len(groups):
        log.warning("etrecord: %d delegate calls but %d delegated groups", k, len(groups))
    return rec


# ExecuTorch 1.5 reads the graph with its own copy of torch.export's schema, version 5.4
# (executorch/exir/serde/schema.py): the fields newer torch adds are left out, and the newer
# Argument kinds have no 5.4 form (an optional tensor is written as the tensor or as None).
ET_SCHEMA_VERSION = {"major": 5, "minor": 4}
_NEWER_FIELDS = frozenset(
    {
        "torch_version",  # ExportedProgram
        "guards_code",  # ExportedProgram
        "sym_float_values",  # Graph
        "treespec_namedtuple_fields",  # GraphModule
        "forward_arg_names",  # ModuleCallSignature
        "is_hop_single_tensor_return",  # Node
    }
)
_NEWER_ARGUMENTS = frozenset(
    {
        "as_float_lists",
        "as_sym_float",
        "as_sym_floats",
        "as_nested_tensors",
        "as_int_lists",
        "as_complex",
        "as_string_to_argument",
        "parameter_mutation",  # an OutputSpec kind
    }
)


def _plain_expr(expr: str) -> str:
    """A symbolic size as schema 5.4 writes it (``s27``, ``1536*s27``): newer torch writes sympy's
    constructor form (``Symbol('s27', positive=True, integer=True)``), which ExecuTorch 1.5's
    deserializer does not match with the range constraints (keyed ``s27``) of a dynamic dim."""
    if "(" not in expr:
        return expr
    import sympy

    try:
        return str(sympy.sympify(expr))
    except (sympy.SympifyError, TypeError, ValueError, SyntaxError):
        return expr


def _to_et_schema(x: Any) -> Any:
    """torch.export's serialized program (a JSON tree) in ExecuTorch 1.5's schema 5.4."""
    if isinstance(x, list):
        return [_to_et_schema(v) for v in x]
    if not isinstance(x, dict):
        return x
    if len(x) == 1:
        ((tag, value),) = x.items()
        if tag in _NEWER_ARGUMENTS:
            raise ValueError(f"etrecord: '{tag}' has no form in ExecuTorch 1.5's graph schema")
        if tag == "as_optional_tensor":
            return _to_et_schema(value)  # {"as_tensor": ...} or {"as_none": ...}
    out = {k: _to_et_schema(v) for k, v in x.items() if k not in _NEWER_FIELDS}
    if isinstance(out.get("expr_str"), str):
        out["expr_str"] = _plain_expr(out["expr_str"])
    if {"name", "arg", "kind"} <= out.keys():  # NamedArgument
        del out["kind"]
    if {"graph", "signature", "module_call_graph"} <= out.keys():  # GraphModule
        out.pop("metadata", None)
    return out


def _serialized(ep: torch.export.ExportedProgram, handles: dict[str, int]) -> tuple[bytes, ...]:
    """torch.export's serialization of ``ep`` (program JSON, state dict, constants, example
    inputs) with ``debug_handle`` added to each call node's metadata. The serializer stores a
    node under its FX name and leaves ``getitem`` nodes out (they become the outputs of the
    node they read)."""
    art = _serialize_ep(ep)
    doc = _to_et_schema(json.loads(art.exported_program))
    doc["schema_version"] = dict(ET_SCHEMA_VERSION)
    doc["dialect"] = "ATEN"
    for node in doc["graph_module"]["graph"]["nodes"]:
        h = handles.get(node.get("name", ""))
        if h is not None:
            node.setdefault("metadata", {})["debug_handle"] = str(h)
    return json.dumps(doc).encode(), art.state_dict, art.constants, art.example_inputs


def write_etrecord(
    path: str | os.PathLike,
    exported: dict[str, torch.export.ExportedProgram],
    debug: dict[str, Sequence[Any]],
    irs: dict[str, Any],
    representative_inputs: Sequence[Any] | None = None,
) -> Path:
    """Writes the ETRecord of a program's methods to ``path``: ``exported`` / ``debug`` /
    ``irs`` by method name as :class:`ember.Program` keeps them; ``representative_inputs`` the
    flat inputs of ``forward`` for the Inspector's ``calculate_numeric_gap``."""
    if not exported:
        raise ValueError("write_etrecord: no exported graphs (only export-time programs have them)")
    # A method with no instruction (a constant: an LLM's get_vocab_size...) has nothing to
    # profile; ExecuTorch keeps such methods out of the edge programs too, and its Inspector
    # reads an ETRecord of one edge program (several come back as a dict it cannot walk).
    runnable = {k: v for k, v in exported.items() if debug.get(k)}
    if runnable and len(runnable) < len(exported):
        log.info("etrecord: constant methods left out: %s", sorted(set(exported) - set(runnable)))
        exported = runnable
    handle_map: dict[str, dict[str, Any]] = {}
    delegate_map: dict[str, dict[str, Any]] = {}
    outs_map: dict[str, dict[str, int]] = {}
    out = Path(path)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(IDENTIFIER, "")
        for name, ep in exported.items():
            rec = method_record(ep, debug.get(name, []), irs.get(name))
            body, state, consts, ex = _serialized(ep, rec.handles)
            base = f"{EDGE_PROGRAM}/{name}"
            z.writestr(base, body)
            z.writestr(f"{base}_state_dict", state)
            z.writestr(f"{base}_constants", consts)
            z.writestr(f"{base}_example_inputs", ex)
            handle_map[name] = {str(i): h for i, h in rec.instr_handles.items()}
            delegate_map[name] = {
                str(i): {"name": b, "delegate_map": rec.delegate_ids.get(i, {})}
                for i, b in rec.delegates.items()
            }
            outs_map[name] = {str(i): n for i, n in rec.num_outs.items()}
            log.info(
                "etrecord: %s: %d nodes with handles, %d instructions mapped, %d delegate calls",
                name,
                len(rec.handles),
                len(rec.instr_handles),
                len(rec.delegates),
            )
        z.writestr(DEBUG_HANDLE_MAP, json.dumps(handle_map))
        z.writestr(DELEGATE_MAP, json.dumps(delegate_map))
        z.writestr(NUM_OUTS_MAP, json.dumps(outs_map))
        if representative_inputs is not None:
            buf = io.BytesIO()
            torch.save(list(representative_inputs), buf)
            z.writestr(REPRESENTATIVE_INPUTS, buf.getvalue())
    return out
