"""ETDump from Ember's C runtime (issue 32 item 1): `ember run --etdump` and
``Program.run(..., etdump=...)`` write ExecuTorch's ETDump flatbuffer, read here with
**ExecuTorch's own** deserializer and Inspector. Checked for a portable CNN and a delegated
(EmberCpuBackend) MLP: one RunData per execute (plus "Default" holding Method::init), the
profile events' names are the program's instructions in order, then "Method::execute";
chain 0 and instruction ids 0..n-1 (the instruction id is the debug handle), start <= end, all
inside the Method::execute span. Intermediate outputs: with a debug buffer, a DebugEvent before
each kernel's ProfileEvent holds its output (a Tensor, or a TensorList for several outputs), and
the Inspector's debug data equals eager PyTorch. About 10 s (two exports, the Inspector import)."""

from __future__ import annotations

import io
import logging
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import MLP, SmallCNN
from etdump_cli import EMBER, needs_cli

import ember

pytest.importorskip("executorch.devtools.etdump.serialize")
from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc  # noqa: E402

log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[ember.Program, Path]]:
    d = tmp_path_factory.mktemp("etdump")
    torch.manual_seed(0)
    cnn = ember.export(SmallCNN().eval(), (torch.randn(1, 3, 8, 8),), backend=None)
    mlp = ember.export(MLP().eval(), (torch.randn(2, 16),))  # default path: EmberCpuBackend
    return {"cnn": (cnn, cnn.save(d / "cnn.pte")), "mlp": (mlp, mlp.save(d / "mlp.pte"))}


def _inputs(kind: str) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, 8, 8),) if kind == "cnn" else (torch.randn(2, 16),)


def instruction_names(program: ember.Program) -> list[str]:
    """The event name of each instruction of `forward`, in order: the operator, or
    "DELEGATE_CALL" (as ExecuTorch's runtime names a delegate call)."""
    return [
        "DELEGATE_CALL" if i.kernel.startswith("delegate::") else i.kernel
        for i in program.debug_info("forward")
    ]


_INNER_ID = re.compile(r"^([a-z_0-9]+(?:\+[a-z_0-9]+)*) #(\d+)(?:-(\d+))?$")


def check_inner(inner: list[Any], calls: dict[int, Any], program: ember.Program) -> None:
    """The events inside delegate calls: each names its operators ("conv2d #3", a chain
    "conv2d+conv2d #3-4"), lies inside its call's span, and together they cover every operator
    of each call's subgraph once, in order; every id is one the ETRecord maps."""
    ids = {i.index: i.delegate_ids for i in program.debug_info("forward")}
    covered: dict[int, list[int]] = {}
    for e in inner:
        assert e.delegate_debug_id_int == -1 and e.name in ("", None)
        call = calls[e.instruction_id]
        assert call.start_time <= e.start_time <= e.end_time <= call.end_time
        m = _INNER_ID.match(e.delegate_debug_id_str)
        assert m, e.delegate_debug_id_str
        first = int(m.group(2))
        last = int(m.group(3)) if m.group(3) else first
        assert len(m.group(1).split("+")) == last - first + 1
        assert e.delegate_debug_id_str in ids[e.instruction_id]
        covered.setdefault(e.instruction_id, []).extend(range(first, last + 1))
    assert set(covered) == set(calls)
    for ops in covered.values():
        assert ops == list(range(len(ops))), ops


def _events(run: Any) -> list[Any]:
    """The run's profile events (debug events, when recorded, are left out)."""
    return [e.profile_event for e in run.events or [] if e.debug_event is None]


def check_etdump(path: Path, program: ember.Program, executes: int, init: bool) -> Any:
    """Deserializes `path` with ExecuTorch and checks it against the program; returns it."""
    et = deserialize_from_etdump_flatcc(path.read_bytes())
    names = instruction_names(program)
    runs = list(et.run_data)
    if init:
        assert runs[0].name == "Default", [r.name for r in runs]
        (pe,) = _events(runs.pop(0))
        assert pe.name == "Method::init" and pe.chain_index == -1
        assert pe.end_time > pe.start_time
    assert [r.name for r in runs] == ["Execute"] * executes
    for run in runs:
        assert run.bundled_input_index == -1
        evs = _events(run)
        assert all(e is not None for e in evs)  # an Event holds one kind
        inner = [e for e in evs if e.delegate_debug_id_str]
        evs = [e for e in evs if not e.delegate_debug_id_str]
        assert [e.name for e in evs] == [*names, "Method::execute"]
        body, whole = evs[:-1], evs[-1]
        assert [e.chain_index for e in body] == [0] * len(names)
        assert [e.instruction_id for e in body] == list(range(len(names)))
        assert all(e.delegate_debug_id_int == -1 for e in evs)
        check_inner(
            inner, {e.instruction_id: e for e in body if e.name == "DELEGATE_CALL"}, program
        )
        assert all(e.chain_index == 0 for e in inner)
        assert all(e.end_time >= e.start_time for e in evs)
        assert whole.chain_index == -1 and whole.end_time > whole.start_time
        assert all(whole.start_time <= e.start_time and e.end_time <= whole.end_time for e in body)
        starts = [e.start_time for e in body]
        assert starts == sorted(starts)
    return et


@needs_cli
@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_cli_writes_etdump(programs: dict[str, Any], kind: str, tmp_path: Path) -> None:
    program, pte = programs[kind]
    out = tmp_path / f"{kind}.etdp"
    r = subprocess.run(
        [str(EMBER), "run", str(pte), "--iters", "3", "--etdump", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert f"-> {out}" in r.stdout and "DROPPED" not in r.stdout
    check_etdump(out, program, executes=3, init=True)


@needs_cli
def test_cli_etdump_help_and_unwritable(programs: dict[str, Any], tmp_path: Path) -> None:
    r = subprocess.run([str(EMBER), "run", "--help"], capture_output=True, text=True, timeout=30)
    assert "--etdump OUT.etdp" in r.stdout
    _, pte = programs["mlp"]
    bad = tmp_path / "no" / "such" / "dir" / "x.etdp"
    r = subprocess.run(
        [str(EMBER), "run", str(pte), "--etdump", str(bad)], capture_output=True, text=True
    )
    assert r.returncode == 1 and f"cannot write {bad}" in r.stderr


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_python_run_writes_etdump(programs: dict[str, Any], kind: str, tmp_path: Path) -> None:
    program, pte = programs[kind]
    fresh = ember.load(pte)  # its methods are prepared by the first run: Method::init is there
    x = _inputs(kind)
    want = fresh.run(*x)
    got = fresh.run(*x, etdump=tmp_path / "first.etdp")  # prepared already: no Default run
    torch.testing.assert_close(got, want)
    check_etdump(tmp_path / "first.etdp", program, executes=1, init=False)
    again = ember.load(pte)
    again.run(*x, etdump=tmp_path / "init.etdp")
    check_etdump(tmp_path / "init.etdp", program, executes=1, init=True)
    plain = again.run(*x)  # detached again: nothing recorded, same result
    torch.testing.assert_close(plain, want)


def test_stock_inspector_opens_it(programs: dict[str, Any], tmp_path: Path) -> None:
    inspector_mod = pytest.importorskip("executorch.devtools")
    program, pte = programs["cnn"]
    path = tmp_path / "cnn.etdp"
    ember.load(pte).run(*_inputs("cnn"), etdump=path)
    with pytest.warns(UserWarning):  # no debug buffer: "Tensor Debug Data will not be available"
        inspector = inspector_mod.Inspector(etdump_path=str(path))
    blocks = {b.name: b for b in inspector.event_blocks}
    assert set(blocks) == {"Default", "Execute"}
    names = [e.name for e in blocks["Execute"].events]
    assert names == [*instruction_names(program), "Method::execute"]
    assert all(
        e.perf_data is not None and e.perf_data.raw[0] >= 0 for e in blocks["Execute"].events
    )
    table = io.StringIO()
    inspector.print_data_tabular(file=table)
    log.info("stock Inspector on Ember's ETDump:\n%s", table.getvalue())
    assert "aten::convolution.out" in table.getvalue()


def test_intermediate_outputs(tmp_path: Path) -> None:
    """--debug-buffer / etdump_debug: every kernel's output, read back by the Inspector."""
    inspector_mod = pytest.importorskip("executorch.devtools")
    torch.manual_seed(1)
    model = SmallCNN().eval()
    x = torch.randn(1, 3, 8, 8)
    program = ember.export(model, (x,), backend=None)
    etdp, dbin = tmp_path / "cnn.etdp", tmp_path / "cnn.debug.bin"
    y = program.run(x, etdump=etdp, etdump_debug=dbin)
    names = instruction_names(program)
    et = check_etdump(etdp, program, executes=1, init=True)
    events = et.run_data[1].events
    debug = [e.debug_event for e in events if e.debug_event is not None]
    assert [d.instruction_id for d in debug] == list(range(len(names)))  # every kernel's output
    for k, d in enumerate(debug):
        assert d.chain_index == 0 and d.delegate_debug_id_int == -1
        kinds = {"Tensor", "TensorList"}
        assert d.debug_entry.val in kinds
        # ExecuTorch's order: the DebugEvent right before the instruction's ProfileEvent
        at = next(i for i, e in enumerate(events) if e.debug_event is d)
        assert events[at + 1].profile_event.instruction_id == k
    lists = [names[d.instruction_id] for d in debug if d.debug_entry.val == "TensorList"]
    assert "aten::max_pool2d_with_indices.out" in lists  # (out, indices): one TensorList
    with pytest.warns(Warning):
        inspector = inspector_mod.Inspector(etdump_path=str(etdp), debug_buffer_path=str(dbin))
    block = next(b for b in inspector.event_blocks if b.name == "Execute")
    data = {e._instruction_id: e.debug_data for e in block.events if e.debug_data}
    torch.testing.assert_close(data[len(names) - 1][0], y)  # the last kernel's output
    with torch.no_grad():
        torch.testing.assert_close(data[0][0], model.conv1(x), rtol=1e-4, atol=1e-5)
    pool_out, pool_idx = data[names.index("aten::max_pool2d_with_indices.out")][0]
    assert pool_out.dtype == torch.float32 and pool_idx.dtype == torch.int64


@needs_cli
def test_cli_debug_buffer(programs: dict[str, Any], tmp_path: Path) -> None:
    program, pte = programs["cnn"]
    out = tmp_path / "cnn.etdp"
    r = subprocess.run(
        [str(EMBER), "run", str(pte), "--etdump", str(out), "--debug-buffer", "1M"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    dbin = Path(f"{out}.debug.bin")
    assert f"-> {dbin}" in r.stdout and dbin.stat().st_size > 0
    et = check_etdump(out, program, executes=1, init=True)
    n_debug = sum(e.debug_event is not None for e in et.run_data[1].events)
    assert n_debug == len(instruction_names(program))
    # too small a debug buffer: tensors dropped and said so, the profile stays whole
    r = subprocess.run(
        [str(EMBER), "run", str(pte), "--etdump", str(out), "--debug-buffer", "4K"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "dropped" in r.stderr
    check_etdump(out, program, executes=1, init=True)
    r = subprocess.run([str(EMBER), "run", str(pte), "--debug-buffer", "1M"], capture_output=True)
    assert r.returncode == 2 and b"--debug-buffer needs --etdump" in r.stderr
