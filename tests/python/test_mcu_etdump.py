"""ETDump on bare metal (issue 32): the Cortex-M33 firmware built with ``ETDUMP=1`` records an
ExecuTorch ETDump in static buffers and writes it, with its debug buffer of intermediate outputs,
to host files over semihosting (SYS_OPEN "wb" / SYS_WRITE). One QEMU run of the fp32 MLP
(mcu/models/mlp.py, committed weights), two cases of one input (ExecuTorch's Inspector requires
equal intermediate outputs across the runs it merges); the files are read with **ExecuTorch's
own** deserializer and Inspector and with ``ember.inspect.read_etdump``, and compared with the
host runtime's ETDump of the same ``.pte`` and inputs: a "Default" run holding Method::init, one
"Execute" run per case whose profile events are the program's instructions (same names, ids,
chain) then Method::execute, and intermediate outputs equal to the host's within float
tolerance. Skips, saying why, without arm-none-eabi-gcc / newlib / QEMU or build/ember.
About 15 s (firmware build, the Inspector import)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from mcu_common import need_toolchain

import ember
from ember.inspect import read_etdump

pytest.importorskip("executorch.devtools.etdump.serialize")
from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "mcu" / "models"
HOST_EMBER = REPO / "build" / "ember"
sys.path.insert(0, str(MODELS))

import mlp as mlp_mod  # noqa: E402

log = logging.getLogger(__name__)
CASES = 2


def _need_toolchain() -> None:
    need_toolchain()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Exports the MLP, runs it on the host with an ETDump per case, builds the ETDUMP=1
    firmware and runs it once in QEMU. Returns paths, the program, inputs and QEMU's output."""
    _need_toolchain()
    d = tmp_path_factory.mktemp("mcu_etdump")
    model = mlp_mod.mlp()
    model.load_state_dict(torch.load(MODELS / "mlp_state.pt"))
    deploy = mlp_mod.DeployMLP([model[0], model[2], model[4]]).eval()
    x = torch.rand(1, 1, 784, generator=torch.Generator().manual_seed(3))
    xs = x.expand(CASES, 1, 784).contiguous()
    program = ember.export(deploy, (xs[0],), backend=None)  # portable kernels, as on the MCU
    pte = program.save(d / "mlp.pte")
    np.save(d / "x.npy", xs.numpy())
    host = ember.load(pte)
    for c in range(CASES):
        host.run(xs[c], etdump=d / f"host{c}.etdp", etdump_debug=d / f"host{c}.debug.bin")
    etdp = d / "fw.etdp"
    cmd = ["make", "-s", "--no-print-directory", "-C", str(REPO / "mcu"),
           f"-j{min(os.cpu_count() or 2, 2)}", f"MODEL={pte}", "FLOAT=hard",
           f"HOST_EMBER={HOST_EMBER}", f"PY={sys.executable}", f"OUT={d / 'fw'}",
           f"GEN_ARGS=--input {d / 'x.npy'} --cases {CASES}", "ETDUMP=1",
           "ETDUMP_DEBUG=8192", f"ETDUMP_OUT={etdp}", f"ETDUMP_DEBUG_OUT={d / 'fw.debug.bin'}",
           "QEMU_TIMEOUT=60", "run"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "RESULT: OK" in out, out
    log.info("firmware:\n%s", out)
    return {"dir": d, "program": program, "xs": xs, "out": out, "etdp": etdp,
            "debug": d / "fw.debug.bin", "host": host}  # fmt: skip


def _profile(run: Any) -> list[Any]:
    return [e.profile_event for e in run.events if e.profile_event is not None]


def test_executorch_reads_the_firmware_etdump(run: dict[str, Any]) -> None:
    out, etdp = run["out"], run["etdp"]
    assert f"-> {etdp} ({etdp.stat().st_size} bytes" in out, out
    assert "DROPPED" not in out, out
    et = deserialize_from_etdump_flatcc(etdp.read_bytes())
    runs = list(et.run_data)
    assert [r.name for r in runs] == ["Default"] + ["Execute"] * CASES
    (init,) = _profile(runs[0])
    assert init.name == "Method::init" and init.chain_index == -1
    assert init.end_time > init.start_time > 0  # the SysTick clock, not the noos 0
    # The host's profile of the same program names the same instructions.
    host = deserialize_from_etdump_flatcc((run["dir"] / "host0.etdp").read_bytes())
    host_names = [e.name for e in _profile(host.run_data[-1])]
    names = [i.kernel for i in run["program"].debug_info("forward")]
    assert names == ["aten::addmm.out", "aten::relu.out"] * 2 + ["aten::addmm.out"]
    assert host_names == [*names, "Method::execute"]
    last_end = init.end_time
    for r in runs[1:]:
        evs = _profile(r)
        assert [e.name for e in evs] == host_names
        body, whole = evs[:-1], evs[-1]
        assert [e.instruction_id for e in body] == list(range(len(names)))
        assert [e.chain_index for e in body] == [0] * len(names)
        assert whole.chain_index == -1 and whole.start_time >= last_end
        assert all(whole.start_time <= e.start_time <= e.end_time <= whole.end_time for e in body)
        assert [e.start_time for e in body] == sorted(e.start_time for e in body)
        assert body[0].end_time > body[0].start_time  # the 784x32 addmm spans many ticks
        dbg = [e.debug_event for e in r.events if e.debug_event is not None]
        assert [x.instruction_id for x in dbg] == list(range(len(names)))
        last_end = whole.end_time


def test_intermediate_outputs_equal_the_hosts(run: dict[str, Any]) -> None:
    fw = read_etdump(run["etdp"], run["debug"])
    assert [r.name for r in fw.runs] == ["Default"] + ["Execute"] * CASES
    assert fw.runs[0].profile_events[0].name == "Method::init"
    for c in range(CASES):
        host = read_etdump(run["dir"] / f"host{c}.etdp", run["dir"] / f"host{c}.debug.bin")
        want = host.runs[-1].debug_events
        got = fw.runs[1 + c].debug_events
        assert [g.instruction_id for g in got] == [w.instruction_id for w in want]
        assert len(got) == 5
        for g, w in zip(got, want, strict=True):
            (gt,), (wt,) = g.tensors, w.tensors
            assert gt.shape == wt.shape and gt.dtype == wt.dtype == torch.float32
            torch.testing.assert_close(gt, wt, rtol=1e-4, atol=1e-5)
        # the last kernel's output is the method's output
        torch.testing.assert_close(got[-1].tensors[0], run["host"].run(run["xs"][c]))


def test_stock_inspector_opens_the_firmware_etdump(run: dict[str, Any]) -> None:
    inspector_mod = pytest.importorskip("executorch.devtools")
    with warnings.catch_warnings():  # no ETRecord: the Inspector warns, and reads on
        warnings.simplefilter("ignore")
        inspector = inspector_mod.Inspector(
            etdump_path=str(run["etdp"]), debug_buffer_path=str(run["debug"])
        )
    blocks = [b for b in inspector.event_blocks if b.name == "Execute"]
    assert len(blocks) == 1  # the Inspector merges runs of one name: CASES samples each
    names = [i.kernel for i in run["program"].debug_info("forward")]
    events = blocks[0].events
    assert [e.name for e in events] == [*names, "Method::execute"]
    assert all(len(e.perf_data.raw) == CASES for e in events)
    data = {e._instruction_id: e.debug_data for e in events if e.debug_data}
    assert sorted(data) == list(range(len(names)))
    with torch.no_grad():
        last = run["host"].run(run["xs"][-1])
    torch.testing.assert_close(data[len(names) - 1][-1], last)
