"""``ember.inspect`` (issue 32 item 4): Ember's own reader of ETDumps, with no ExecuTorch import.

On an ETDump written by Ember's runtime (a portable CNN, a delegated MLP) and on ETDumps written by
**stock** ExecuTorch's runtime (``executorch.runtime`` with ``enable_etdump=True``: the add.pte
fixture's, and one generated here for the CNN with a debug buffer): the table's instructions and
call counts are the program's, shares sum to 100 %, the Chrome trace is valid trace-event JSON,
debug tensors read back equal what the runtime computed, and ``compare_with_eager`` names the first
operator of a program whose kernel was broken on purpose. With an ETRecord (a model defined here,
portable and on EmberCpuBackend), every row names its FX nodes, their operator types as the stock
Inspector gives them and this file's source lines; ``Inspection.plot`` writes a PNG. About 15 s.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import MLP, SmallCNN
from etdump_cli import EMBER, needs_cli  # the `ember` CLI of this build
from executorch.devtools import Inspector

import ember
from ember import inspect as ei

log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A portable CNN, run once by Ember with a debug buffer."""
    d = tmp_path_factory.mktemp("inspect")
    torch.manual_seed(0)
    model = SmallCNN().eval()
    x = torch.randn(1, 3, 8, 8)
    program = ember.export(model, (x,), backend=None)
    pte = program.save(d / "cnn.pte")
    etdp, dbin = d / "cnn.etdp", d / "cnn.debug.bin"
    y = program.run(x, etdump=etdp, etdump_debug=dbin)
    return {"model": model, "x": x, "y": y, "program": program, "pte": pte, "etdp": etdp,
            "dbin": dbin, "dir": d}  # fmt: skip


def names_of(program: ember.Program) -> list[str]:
    """The operator (or delegate id) of each instruction of `forward`, in order."""
    return [i.kernel.removeprefix("delegate::") for i in program.debug_info("forward")]


def check_table(ins: ei.Inspection, names: list[str], runs: int = 1) -> None:
    """The instructions (events from inside delegates aside) are the program's, once a run."""
    rows = [r for r in ins.rows if not r.inside_delegate]
    assert [r.name for r in rows] == names
    assert [r.instruction for r in rows] == list(range(len(names)))
    assert all(r.calls == runs and r.runs == runs and r.calls_per_run == 1 for r in rows)
    assert sum(r.share for r in rows) == pytest.approx(100.0)
    assert all(r.median_ns >= 0 for r in rows)
    kinds = ins.by_kind()
    assert sum(k.calls for k in kinds) == runs * len(names)
    assert sum(k.share for k in kinds) == pytest.approx(100.0)
    text = ins.table()
    assert all(n in text for n in names)


def check_chrome_trace(path: Path) -> list[dict[str, Any]]:
    """Validates a Chrome trace-event JSON ("JSON Object Format", complete events)."""
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    last: dict[tuple[int, int], float] = {}
    for ev in doc["traceEvents"]:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(ev)
        assert isinstance(ev["name"], str) and ev["name"]
        assert ev["ph"] == "X"
        assert isinstance(ev["ts"], (int, float)) and isinstance(ev["dur"], (int, float))
        assert ev["dur"] >= 0 and ev["ts"] >= 0
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        assert isinstance(ev["args"], dict)
        key = (ev["pid"], ev["tid"])
        assert ev["ts"] >= last.get(key, 0.0), "ts is monotone per thread"
        last[key] = ev["ts"]
    return doc["traceEvents"]


def test_public_and_lazy() -> None:
    assert ember.inspect is ei
    code = (
        "import sys, ember; assert 'ember.inspect' not in sys.modules; "
        "assert ember.inspect.read_etdump; assert 'executorch' not in sys.modules"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr  # loaded on first use, like ember.quantize; no executorch
    with pytest.raises(ei.EtdumpError, match="ED00"):
        ei.read_etdump(b"\0" * 16)


def test_malformed_etdump_raises_etdump_error(cnn: dict[str, Any]) -> None:
    data = cnn["etdp"].read_bytes()
    for n in range(12, len(data), max(1, len(data) // 97)):
        try:
            ei.read_etdump(data[:n])
        except ei.EtdumpError:
            pass
    with pytest.raises(ei.EtdumpError, match="outside the debug buffer"):
        ei.read_etdump(data, cnn["dbin"].read_bytes()[:100])


@needs_cli
def test_cli_runs_median_over_iterations(cnn: dict[str, Any], tmp_path: Path) -> None:
    """`ember run --iters 5 --etdump`: one Execute run per iteration in one file."""
    out = tmp_path / "iters.etdp"
    r = subprocess.run([str(EMBER), "run", str(cnn["pte"]), "--iters", "5", "--etdump", str(out)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    ins = ei.inspect(out, cnn["pte"])
    check_table(ins, names_of(cnn["program"]), runs=5)
    for row in ins.rows:
        assert row.median_ns == sorted(row.samples_ns)[2]


def test_ember_etdump_table_and_trace(cnn: dict[str, Any], tmp_path: Path) -> None:
    program = cnn["program"]
    dump = ei.read_etdump(cnn["etdp"])
    assert dump.version == 0 and [r.name for r in dump.runs] == ["Default", "Execute"]
    ins = ei.inspect(dump, program)
    check_table(ins, names_of(program))
    assert not any(r.delegated for r in ins.rows)
    assert all(r.source and "conftest.py" in r.source for r in ins.rows)  # export-time program
    assert {"Method::init", "Method::execute"} <= set(ins.method_events)
    by_kind = {k.kind: k for k in ins.by_kind()}
    assert by_kind["convolution"].calls == 2 and by_kind["addmm"].calls == 1
    log.info("ember.inspect on Ember's ETDump:\n%s", ins.table())
    events = check_chrome_trace(ins.to_chrome_trace(tmp_path / "trace.json"))
    ops = [e for e in events if e["args"]["instruction"] >= 0 and e["args"]["chain"] == 0]
    assert [e["args"]["op"] for e in ops] == names_of(program)
    whole = next(e for e in events if e["name"] == "Method::execute")
    assert all(whole["ts"] <= e["ts"] and e["ts"] + e["dur"] <= whole["ts"] + whole["dur"] + 1e-3
               for e in ops)  # fmt: skip
    png = ins.plot(tmp_path / "kinds.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a loaded .pte names the instructions but carries no source lines
    loaded = ei.inspect(cnn["etdp"], cnn["pte"])
    assert [r.name for r in loaded.rows] == names_of(program)
    assert all(r.source is None for r in loaded.rows)
    assert "source lines: none" in loaded.table()


def test_delegated_and_several_runs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 16)
    program = ember.export(MLP().eval(), (x,))  # EmberCpuBackend
    program.run(x)  # prepared: the ETDumps hold Execute runs only
    dumps = []
    for i in range(3):
        program.run(x, etdump=tmp_path / f"{i}.etdp")
        dumps.append(ei.read_etdump(tmp_path / f"{i}.etdp"))
    merged = ei.ETDump(0, [r for d in dumps for r in d.runs])
    ins = ei.inspect(merged, program)
    check_table(ins, names_of(program), runs=3)
    assert ins.rows[0].delegated and ins.rows[0].name == "EmberCpuBackend"
    assert len(ins.rows[0].samples_ns) == 3
    assert ins.rows[0].median_ns == sorted(ins.rows[0].samples_ns)[1]


def test_debug_buffer_round_trip(cnn: dict[str, Any]) -> None:
    """The tensors read back from the debug buffer equal the runtime's values of the same
    instructions' outputs (captured by ember.runtime's run_debug)."""
    program = cnn["program"]
    dump = ei.read_etdump(cnn["etdp"], cnn["dbin"])
    debug = {d.instruction_id: d for d in dump.runs[1].debug_events}
    assert sorted(debug) == list(range(len(names_of(program))))
    watch = {d.index: list(d.out_values) for d in program.debug_info()}
    flat = program.flatten_inputs((cnn["x"],))
    _, captured = program.runtime().run_debug("forward", flat, watch)
    for index, values in watch.items():
        got = debug[index].tensors
        assert len(got) >= len(values) and debug[index].value is not None
        for t, vi in zip(got, values, strict=False):
            torch.testing.assert_close(t, captured[(index, vi)], rtol=0, atol=0)
    torch.testing.assert_close(debug[len(debug) - 1].tensors[0], cnn["y"], rtol=0, atol=0)
    pool = debug[names_of(program).index("aten::max_pool2d_with_indices.out")]
    assert pool.value is not None and pool.value.kind == "TensorList"
    assert [t.dtype for t in pool.tensors] == [torch.float32, torch.int64]
    report = ei.inspect(dump, program).compare_with_eager((cnn["x"],))
    assert report.first_drift is None and len(report.rows) == len(debug)


def test_first_drift_names_a_broken_kernel(cnn: dict[str, Any], tmp_path: Path) -> None:
    """The program's first relu is made to run tanh (its operator name patched in the .pte):
    compare_with_eager reports that instruction first."""
    program = cnn["program"]
    buf = program.buffer
    assert buf.count(b"aten::relu") == 1
    broken = ember.load(buf.replace(b"aten::relu", b"aten::tanh"))
    etdp, dbin = tmp_path / "broken.etdp", tmp_path / "broken.bin"
    broken.run(cnn["x"], etdump=etdp, etdump_debug=dbin)
    ins = ei.inspect(etdp, program, debug_buffer=dbin)
    report = ins.compare_with_eager((cnn["x"],))
    first = report.first_drift
    assert first is not None, str(report)
    assert first.instruction == names_of(program).index("aten::relu.out")
    assert first.name == "aten::relu.out" and first.node == "relu"
    assert first.source and "conftest.py" in first.source
    assert all(r.ok for r in report.rows if r.instruction < first.instruction)
    log.info("%s", report)


def stock_etdump(pte: Path, inputs: list[torch.Tensor], out: Path, debug_size: int = 0) -> Path:
    """Runs ``pte`` once on **stock** ExecuTorch with its ETDump enabled (as
    tests/fixtures/make_executorch_fixtures.py's ``make_etdump`` does) and writes ``out`` and,
    with ``debug_size``, ``out``.debug.bin."""
    rt = pytest.importorskip("executorch.runtime")
    prog = rt.Runtime.get().load_program(
        str(pte), verification=rt.Verification.Minimal, enable_etdump=True,
        debug_buffer_size=debug_size,
    )  # fmt: skip
    prog.load_method("forward").execute(inputs)
    prog.write_etdump_result_to_file(str(out), f"{out}.debug.bin")
    return out


def test_stock_executorch_fixture() -> None:
    """The add.pte fixture's ETDump, written by stock ExecuTorch's runtime."""
    from et_fixtures import et_fixture

    pytest.importorskip("executorch.runtime")
    ins = ei.inspect(et_fixture("etdump.etdp"), et_fixture("add.pte"))
    check_table(ins, ["aten::add.out"])
    assert {"Method::init", "Method::execute"} <= set(ins.method_events)
    assert ins.rows[0].kind == "add"


def test_stock_executorch_delegate_events(tmp_path: Path) -> None:
    """Stock ExecuTorch's XNNPACK delegate writes events of its own (a delegate debug id): a row
    inside the delegate call, out of the shares, on its own trace thread."""
    from et_fixtures import et_fixture

    pytest.importorskip("executorch.runtime")
    pte = et_fixture("xnnpack_linear.pte")
    etdp = stock_etdump(pte, [torch.randn(2, 4)], tmp_path / "xnn.etdp", debug_size=1 << 16)
    ins = ei.inspect(etdp, pte)
    check_table(ins, ["XnnpackBackend"])
    call, *inside = ins.rows
    assert call.delegated and not call.inside_delegate and call.kind == "XnnpackBackend"
    assert inside and all(r.inside_delegate and r.delegated and r.share == 0 for r in inside)
    assert any("GEMM" in r.name for r in inside)
    events = check_chrome_trace(ins.to_chrome_trace(tmp_path / "xnn.json"))
    assert {e["tid"] for e in events} == {0, 1}


def test_stock_executorch_cnn_with_debug_buffer(cnn: dict[str, Any], tmp_path: Path) -> None:
    """Stock ExecuTorch runs Ember's portable CNN: its ETDump (native_call_* inside
    OPERATOR_CALL per instruction) gives the same table, and its debug tensors equal Ember's."""
    program, x = cnn["program"], cnn["x"]
    etdp = stock_etdump(cnn["pte"], [x], tmp_path / "stock.etdp", debug_size=1 << 20)
    dump = ei.read_etdump(etdp, Path(f"{etdp}.debug.bin"))
    names = [e.name for r in dump.runs for e in r.profile_events]
    assert "OPERATOR_CALL" in names and "native_call_convolution.out" in names
    ins = ei.inspect(dump, program)
    check_table(ins, names_of(program))
    log.info("ember.inspect on stock ExecuTorch's ETDump:\n%s", ins.table())
    check_chrome_trace(ins.to_chrome_trace(tmp_path / "stock.json"))
    ours = ei.inspect(cnn["etdp"], program, debug_buffer=cnn["dbin"]).debug_tensors()
    theirs = ins.debug_tensors()  # one DebugEvent per output tensor in stock ExecuTorch
    assert sorted(theirs) == sorted(ours) == list(range(len(names_of(program))))
    for index, tensors in theirs.items():
        assert len(tensors) == len(ours[index])
        for a, b in zip(tensors, ours[index], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert ins.compare_with_eager((x,)).first_drift is None


def test_cli(cnn: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "cli.json"
    argv = [str(cnn["etdp"]), "--program", str(cnn["pte"]), "--debug-buffer", str(cnn["dbin"]),
            "--chrome", str(trace)]  # fmt: skip
    assert ei.main(argv) == 0
    out = capsys.readouterr().out
    assert "aten::convolution.out" in out and "share" in out and "convolution" in out
    check_chrome_trace(trace)
    assert ei.main([str(tmp_path / "missing.etdp")]) == 1


# -- ETRecord -------------------------------------------------------------------------------------
class Tiny(torch.nn.Module):
    """The rows' source lines must be the marked lines of this file."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))  # line: conv
        y = torch.nn.functional.max_pool2d(y, 2)  # line: pool
        return torch.relu(self.fc(y.flatten(1)))  # line: fc


_TEXT = Path(__file__).read_text().splitlines()
LINES = {m: next(i + 1 for i, t in enumerate(_TEXT) if t.endswith(f"# line: {m}"))
         for m in ("conv", "pool", "fc")}  # fmt: skip
# the marked line of each operator type of Tiny's graph (relu is on two lines)
LINE_OF = {"convolution": "conv", "max_pool2d_with_indices": "pool", "view": "fc",
           "permute": "fc", "addmm": "fc"}  # fmt: skip


@pytest.fixture(scope="module", params=["portable", "delegated"])
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Tiny exported with an ETRecord (portable kernels, or EmberCpuBackend), run once with an
    ETDump and a debug buffer."""
    d = tmp_path_factory.mktemp(f"etrecord-{request.param}")
    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    rec = d / "tiny.etrecord"
    backend = None if request.param == "portable" else "cpu"
    program = ember.export(Tiny().eval(), (x,), backend=backend, etrecord=rec)
    pte = program.save(d / "tiny.pte")
    etdp, dbin = d / "tiny.etdp", d / "tiny.debug.bin"
    program.run(x, etdump=etdp, etdump_debug=dbin)
    return SimpleNamespace(kind=request.param, program=program, pte=pte, rec=rec, etdp=etdp,
                           dbin=dbin)  # fmt: skip


def check_etrecord_rows(ins: ei.Inspection, program: ember.Program, delegated: bool) -> None:
    """Each row names the program's nodes, their operator types and this file's lines."""
    debug = {d.index: d for d in program.debug_info("forward")}
    report = getattr(program._irs["forward"], "partition_report", None) or []
    lowered = [r.node for r in report if r.delegated]
    assert ins.rows and [r.instruction for r in ins.rows if not r.inside_delegate] == list(debug)
    assert any(r.inside_delegate for r in ins.rows) == delegated
    for r in ins.rows:
        assert r.nodes and len(r.op_types) == len(r.nodes), r
        for node, op in zip(r.nodes, r.op_types, strict=True):
            mark = LINE_OF.get(op.split(".")[0])
            if mark is not None and len(r.nodes) == 1:
                assert r.source is not None and f"test_inspect.py:{LINES[mark]} in forward" in (
                    r.source
                ), (node, r.source)
        assert r.sources and all(
            any(f"test_inspect.py:{n} in forward" in s for n in LINES.values()) for s in r.sources
        ), r.sources
        assert r.source == r.sources[0]
        d = debug[r.instruction]
        if d.kernel.startswith("delegate::"):
            assert r.delegated and r.backend == "EmberCpuBackend"
            assert len(lowered) > 1
            if not r.inside_delegate:
                assert r.nodes == lowered and r.delegate_id is None
        else:
            assert not r.delegated and r.backend is None and r.nodes == [d.node]
            assert r.op_types[0].split(".")[0] in r.name.replace("_copy", "")
    if delegated:  # the events inside each call: together, the call's nodes
        for call in (r for r in ins.rows if r.backend and not r.inside_delegate):
            inner = [r for r in ins.rows if r.inside_delegate and r.instruction == call.instruction]
            assert inner and all(r.delegate_id and " #" in r.delegate_id for r in inner)
            assert {n for r in inner for n in r.nodes} == set(call.nodes)
    covered = {s for r in ins.rows for s in r.sources}
    assert all(any(f".py:{n} in" in s for s in covered) for n in LINES.values())


def test_etrecord_names_rows(tiny: Any) -> None:
    program = tiny.program
    ins = ei.inspect(tiny.etdp, program, etrecord=tiny.rec)
    check_etrecord_rows(ins, program, tiny.kind == "delegated")
    log.info("ember.inspect with the ETRecord (%s):\n%s", tiny.kind, ins.table())
    assert "nodes" in ins.table().splitlines()[1]
    # from files alone: the .pte carries no source lines, the ETRecord does
    files = ei.inspect(tiny.etdp, tiny.pte, etrecord=tiny.rec)
    check_etrecord_rows(files, program, tiny.kind == "delegated")
    assert [(r.nodes, r.op_types, r.sources) for r in files.rows] == [
        (r.nodes, r.op_types, r.sources) for r in ins.rows
    ]
    plain = ei.inspect(tiny.etdp, tiny.pte)  # no ETRecord: as before
    assert all(not r.nodes and r.source is None and r.backend is None for r in plain.rows)
    assert "nodes" not in plain.table()
    trace = ins.chrome_trace()["traceEvents"]
    ops = [e for e in trace if e["args"]["instruction"] >= 0 and e["args"]["chain"] == 0]
    by_key = {(r.instruction, r.delegate_id): r for r in ins.rows}
    for e in ops:
        row = by_key[(e["args"]["instruction"], e["args"].get("delegate_debug_id"))]
        assert e["args"]["nodes"] == row.nodes and e["args"]["op_types"] == row.op_types


def test_etrecord_agrees_with_stock_inspector(tiny: Any) -> None:
    """ExecuTorch's Inspector on the same ETDump and ETRecord: each event's operator types, node
    names and source lines are the same as ember.inspect's row's."""
    ins = ei.inspect(tiny.etdp, tiny.pte, etrecord=tiny.rec)
    rows = {(r.instruction, r.delegate_id): r for r in ins.rows}
    stock = Inspector(etdump_path=str(tiny.etdp), etrecord=str(tiny.rec),
                      debug_buffer_path=str(tiny.dbin))  # fmt: skip
    block = next(b for b in stock.event_blocks if b.name == "Execute")
    events = [e for e in block.events if e.name != "Method::execute"]
    assert len(events) == len(ins.rows)
    for e in events:
        ident = e.delegate_debug_identifier
        row = rows[(e._instruction_id, None if ident is None else str(ident))]
        assert e.op_types == row.op_types, (e.name, e.op_types, row.op_types)
        assert [n.removesuffix("_") for n in e.stack_traces] == row.nodes  # Inspector adds "_"
        assert all(e.stack_traces.values())
        assert {ei._source_line(t) for t in e.stack_traces.values()} == set(row.sources)
        if row.backend is not None:
            assert e.delegate_backend_name == row.backend


def test_cli_etrecord(tiny: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m ember.inspect out.etdp --program m.pte --etrecord m.etrecord` (files only)."""
    assert ei.main([str(tiny.etdp), "--program", str(tiny.pte), "--etrecord", str(tiny.rec)]) == 0
    out = capsys.readouterr().out
    assert "nodes" in out.splitlines()[1]
    for n in LINES.values():
        assert f"test_inspect.py:{n} in forward" in out
    assert "convolution" in out and "addmm" in out
    if tiny.kind == "delegated":
        assert "EmberCpuBackend" in out and " #" in out
    assert ei.main([str(tiny.etdp), "--etrecord", str(tiny.etdp)]) == 1  # not an ETRecord


def test_read_etrecord_errors(tiny: Any, tmp_path: Path) -> None:
    with pytest.raises(ei.EtrecordError, match="not a readable ETRecord"):
        ei.read_etrecord(tiny.etdp)
    with pytest.raises(ei.EtrecordError, match="no graph of method 'other'"):
        ei.read_etrecord(tiny.rec, "other")
    rec = ei.read_etrecord(tiny.rec)
    assert rec.method == "forward" and len(rec.instructions) == len(tiny.program.debug_info())


def test_plot_png(cnn: dict[str, Any], tmp_path: Path) -> None:
    """Inspection.plot writes a PNG that matplotlib decodes to a non-empty image."""
    import matplotlib.image

    ins = ei.inspect(cnn["etdp"], cnn["program"])
    png = ins.plot(tmp_path / "kinds.png")
    assert png == tmp_path / "kinds.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(png)
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50 and img.shape[2] in (3, 4)
    assert float(img[..., :3].min()) < float(img[..., :3].max())  # not a blank canvas
