"""ETRecord from Ember's exporter (issue 32 item 2), opened with **stock** ExecuTorch's
Inspector next to an ETDump Ember's runtime wrote: ``ember.export(..., etrecord=path)`` /
``Program.save_etrecord``. For a portable CNN and a delegated (EmberCpuBackend) MLP the
Inspector resolves every instruction event to the graph nodes it came from (a delegate call to
every node lowered into it), with the user's source lines; its table is logged. On the portable
CNN the Inspector's ``calculate_numeric_gap`` compares Ember's intermediate outputs with the
graph run in eager PyTorch. About 15 s (two exports, the Inspector import)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import MLP, SmallCNN
from etdump_cli import EMBER, needs_cli

import ember

devtools = pytest.importorskip("executorch.devtools")
from executorch.devtools.etrecord import parse_etrecord  # noqa: E402

log = logging.getLogger(__name__)

CONFTEST = "tests/python/conftest.py"


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("etrecord")
    torch.manual_seed(0)
    out: dict[str, Any] = {}
    for kind, model, x, backend in [
        ("cnn", SmallCNN().eval(), torch.randn(1, 3, 8, 8), None),
        ("mlp", MLP().eval(), torch.randn(2, 16), "auto"),  # default path: EmberCpuBackend
    ]:
        rec = d / f"{kind}.etrecord"
        prog = ember.export(model, (x,), backend=backend, etrecord=rec)
        out[kind] = (model, prog, x, rec, d)
    return out


def _inspector(prog: ember.Program, x: torch.Tensor, rec: Path, d: Path, debug: bool) -> Any:
    etdp, dbin = d / "run.etdp", d / "run.debug.bin"
    prog.run(x, etdump=etdp, etdump_debug=dbin if debug else None)
    kw = {"debug_buffer_path": str(dbin)} if debug else {}
    with pytest.warns(Warning) if not debug else contextlib.nullcontext():
        return devtools.Inspector(etdump_path=str(etdp), etrecord=str(rec), **kw)


def _table(inspector: Any) -> str:
    buf = io.StringIO()
    inspector.print_data_tabular(file=buf)
    return buf.getvalue()


def test_layout(programs: dict[str, Any]) -> None:
    """The zip's entries and maps, as ExecuTorch's own parser reads them."""
    _, prog, _, rec, _ = programs["mlp"]
    names = zipfile.ZipFile(rec).namelist()
    assert names[0] == "ETRECORD_V0"
    base = "edge_dialect_exported_program/forward"
    for suffix in ("", "_state_dict", "_constants", "_example_inputs"):
        assert base + suffix in names
    et = parse_etrecord(str(rec))
    debug = prog.debug_info("forward")
    assert [d.kernel for d in debug] == ["delegate::EmberCpuBackend"]
    handles = et._debug_handle_map["forward"]["0"]
    lowered = [d.node for d in prog._irs["forward"].partition_report if d.delegated]
    by_handle = {
        n.meta["debug_handle"]: n.name
        for n in et.edge_dialect_program.graph.nodes
        if "debug_handle" in n.meta
    }
    assert [by_handle[h] for h in handles] == lowered  # every node lowered into the delegate
    assert et._delegate_map["forward"]["0"]["name"] == "EmberCpuBackend"
    assert et._instruction_id_to_num_outs_map["forward"] == {"0": 1}
    torch.testing.assert_close(et._representative_inputs[0], programs["mlp"][2])
    # the graph keeps the user's source lines
    traces = [n.meta.get("stack_trace") or "" for n in et.edge_dialect_program.graph.nodes]
    assert any(CONFTEST in t for t in traces)


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_stock_inspector_names_events(programs: dict[str, Any], kind: str) -> None:
    _, prog, x, rec, d = programs[kind]
    inspector = _inspector(prog, x, rec, d, debug=False)
    block = next(b for b in inspector.event_blocks if b.name == "Execute")
    debug = prog.debug_info("forward")
    inner = [e for e in block.events if e.is_delegated_op]
    events = [e for e in block.events if e.name != "Method::execute" and not e.is_delegated_op]
    assert [e.name for e in events] == [
        "DELEGATE_CALL" if i.kernel.startswith("delegate::") else i.kernel for i in debug
    ]
    report = getattr(prog._irs["forward"], "partition_report", None) or []
    for e, i in zip(events, debug, strict=True):
        if i.kernel.startswith("delegate::"):
            nodes = [r.node for r in report if r.delegated]
            assert e.delegate_backend_name == "EmberCpuBackend"
            assert len(e.op_types) == len(nodes) > 1
            assert set(e.stack_traces) == {f"{n}_" for n in nodes}  # Inspector's node names
            # the events of the delegate's operators: each mapped to the nodes it computes,
            # together all of the call's nodes, each once
            mine = [x for x in inner if x._instruction_id == i.index]
            assert mine and all(x.delegate_backend_name == "EmberCpuBackend" for x in mine)
            assert all(x.op_types and x.perf_data is not None for x in mine)
            seen = [n for x in mine for n in x.stack_traces]
            assert sorted(seen) == sorted(f"{n}_" for n in nodes)
        else:
            # one node per instruction: its operator and its FX node (Inspector adds "_")
            assert list(e.stack_traces) == [f"{i.node}_"]
            op = e.op_types[0].split(".")[0]
            assert op in e.name or (op == "slice" and "slice_copy" in e.name), (op, e.name)
        assert any(CONFTEST in (t or "") for t in e.stack_traces.values()), e.stack_traces
    df = inspector.to_dataframe()
    rows = df[df.event_block_name == "Execute"]
    assert len(rows) == len(debug) + 1 + len(inner)
    table = _table(inspector)
    log.info("stock Inspector, Ember ETDump + ETRecord (%s):\n%s", kind, table)
    srcs = [
        (r.event_name, next(iter((r.stack_traces or {}).values()), "").splitlines()[:2])
        for r in rows.itertuples()
    ]
    log.info("%s: source lines per event:\n%s", kind, "\n".join(f"  {s}" for s in srcs))
    assert ("gemm #0" if kind == "mlp" else "aten::convolution.out") in table


def test_numeric_gap_delegated(programs: dict[str, Any]) -> None:
    """calculate_numeric_gap across an EmberCpuBackend delegate: each of its operators' outputs
    (debug events inside the call) against the graph's, per operator."""
    _, prog, x, rec, d = programs["mlp"]
    inspector = _inspector(prog, x, rec, d, debug=True)
    gap = inspector.calculate_numeric_gap("MSE")
    log.info(
        "calculate_numeric_gap across the delegate (MSE):\n%s",
        gap[["aot_ops", "runtime_ops", "gap"]],
    )
    assert len(gap) >= 2 and all(any(" #" in n for n in ops) for ops in gap.runtime_ops)
    compared = {op for ops in gap.aot_ops for op in ops}
    assert {"addmm", "relu"} & compared
    assert all(g[0] < 1e-8 for g in gap.gap)


def test_numeric_gap_portable(programs: dict[str, Any]) -> None:
    """The Inspector's intermediate-output comparison on Ember's debug events (portable CNN)."""
    _, prog, x, rec, d = programs["cnn"]
    inspector = _inspector(prog, x, rec, d, debug=True)
    gap = inspector.calculate_numeric_gap("MSE")
    log.info("calculate_numeric_gap (MSE):\n%s", gap[["aot_ops", "runtime_ops", "gap"]])
    kernels = {i.node for i in prog.debug_info("forward")}
    compared = {op for ops in gap.aot_ops for op in ops}
    assert compared <= kernels and {"convolution", "relu", "addmm"} <= compared
    assert all(g[0] < 1e-8 for g in gap.gap)


def test_save_etrecord(programs: dict[str, Any], tmp_path: Path) -> None:
    """Program.save_etrecord: ExecuTorch's graph schema 5.4, one entry per instruction."""
    _, prog, x, _, _ = programs["cnn"]
    rec = prog.save_etrecord(tmp_path / "m.etrecord", (x,))
    et = parse_etrecord(str(rec))
    assert len(et._debug_handle_map["forward"]) == len(prog.debug_info("forward"))
    doc = json.loads(zipfile.ZipFile(rec).read("edge_dialect_exported_program/forward"))
    assert doc["schema_version"] == {"major": 5, "minor": 4}
    with pytest.raises(ValueError, match="ember.export"):
        ember.load(prog.buffer).save_etrecord(tmp_path / "x.etrecord")


@needs_cli
def test_cli_etdump_with_etrecord(programs: dict[str, Any], tmp_path: Path) -> None:
    """The ETRecord with an ETDump from `ember run` on the saved .pte (three iterations)."""
    _, prog, _, rec, _ = programs["cnn"]
    pte = prog.save(tmp_path / "m.pte")
    out = tmp_path / "m.etdp"
    r = subprocess.run(
        [str(EMBER), "run", str(pte), "--iters", "3", "--etdump", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    with pytest.warns(Warning):
        inspector = devtools.Inspector(etdump_path=str(out), etrecord=str(rec))
    block = next(b for b in inspector.event_blocks if b.name == "Execute")
    assert all(e.stack_traces for e in block.events if e.name != "Method::execute")
    assert len(block.events[0].perf_data.raw) == 3
