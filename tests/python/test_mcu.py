"""Bare-metal Cortex-M33 build (mcu/) and selective build (tools/selective_build.py).

The firmware tests build the add.pte fixture for the Cortex-M33 with and without FPU, run it in
QEMU (mps2-an505) and require that its outputs equal the host build's for the same inputs (the
firmware exits 0 only then). They skip, saying why, when arm-none-eabi-gcc, newlib, QEMU or the
host build (build/ember, `make build`) is missing; `make mcu-deps` installs the toolchain.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mcu_common import need_toolchain

REPO = Path(__file__).resolve().parents[2]
HOST_EMBER = REPO / "build" / "ember"
sys.path.insert(0, str(REPO / "tools"))

import pte_summary  # noqa: E402
import selective_build  # noqa: E402
from et_fixtures import et_fixture  # noqa: E402

ADD_PTE = et_fixture("add.pte")  # ExecuTorch's add.pte, made by the installed executorch


def _need_fixture() -> None:
    if not ADD_PTE.exists():
        pytest.skip(f"fixture {ADD_PTE} is not available")


def _need_toolchain() -> None:
    need_toolchain()


# -- selective build ----------------------------------------------------------------------------
def test_pte_summary_reads_add_fixture() -> None:
    _need_fixture()
    (plan,) = pte_summary.read_file(str(ADD_PTE))
    assert plan.name == "forward"
    assert plan.operators == ["aten::add.out"]
    assert plan.arena_sizes == [48]
    assert plan.op_dtypes() == {"aten::add.out": {6}}
    assert [plan.values[i].tensor.sizes for i in plan.inputs] == [[1], [1]]


def test_pte_summary_rejects_garbage() -> None:
    with pytest.raises(pte_summary.PteError):
        pte_summary.read_program(b"\x00" * 64)
    data = bytearray(ADD_PTE.read_bytes()) if ADD_PTE.exists() else None
    if data is not None:
        data[0:4] = (len(data) + 100).to_bytes(4, "little")  # root offset out of the file
        with pytest.raises(pte_summary.PteError):
            pte_summary.read_program(bytes(data))


def test_selective_build_writes_only_used_kernels(tmp_path: Path) -> None:
    _need_fixture()
    table = selective_build.kernel_table(REPO / "kernels")
    if "aten::add.out" not in table:
        pytest.skip("aten::add.out is not in kernels/portable/*.def yet")
    rc = selective_build.main([str(ADD_PTE), "-o", str(tmp_path)])
    assert rc == 0
    c = (tmp_path / "selected_kernels.c").read_text()
    assert c.count('{"aten::') == 1 and '"aten::add.out"' in c
    assert "em_register_portable_kernels" in c
    assert (tmp_path / "selected_ops.txt").read_text().startswith("aten::add.out  # dtypes: f32")
    assert "0x00000040u" in (tmp_path / "selected_dtypes.h").read_text()  # bit 6 = f32


def test_selective_build_names_missing_kernels(tmp_path: Path, capsys) -> None:
    kdir = tmp_path / "kernels"
    (kdir / "portable").mkdir(parents=True)
    (kdir / "prim").mkdir()
    (kdir / "portable" / "ops.def").write_text('#include "portable/ops_x.def"\n')
    (kdir / "portable" / "ops_x.def").write_text(
        'EM_OP("aten::mm.out", em_mm_out, 4, EM_DT_REALS)\n'
    )
    (kdir / "prim" / "ops.def").write_text("")
    out = tmp_path / "out"
    rc = selective_build.main(
        ["--ops", "aten::mm.out,aten::nonexistent.out", "--kernels-dir", str(kdir), "-o", str(out)]
    )
    assert rc == 1
    assert "missing kernel(s): aten::nonexistent.out" in capsys.readouterr().err
    assert '{"aten::mm.out", em_mm_out, 4, EM_DT_REALS}' in (out / "selected_kernels.c").read_text()
    rc = selective_build.main(
        [
            "--ops",
            "aten::nonexistent.out",
            "--kernels-dir",
            str(kdir),
            "-o",
            str(out),
            "--allow-missing",
        ]  # fmt: skip
    )
    assert rc == 0


# -- firmware in QEMU ---------------------------------------------------------------------------
@pytest.mark.parametrize("float_abi", ["hard", "soft"])
def test_mcu_firmware_runs_in_qemu(float_abi: str) -> None:
    _need_fixture()
    _need_toolchain()
    jobs = str(os.cpu_count() or 2)
    cmd = ["make", "-s", "--no-print-directory", "-C", str(REPO / "mcu"), f"-j{jobs}",
           f"MODEL={ADD_PTE}", f"FLOAT={float_abi}", f"HOST_EMBER={HOST_EMBER}",
           f"PY={sys.executable}", "QEMU_TIMEOUT=30", "run"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "RESULT: OK" in out, out
    ram = re.search(r"ram: .* = (\d+) B", out)
    assert ram and int(ram.group(1)) < 4096, out  # add.pte: ~1 KiB of runtime RAM
    elf = REPO / "build-mcu" / f"add-{float_abi}" / "app.elf"
    sizes = subprocess.run(["arm-none-eabi-size", str(elf)], capture_output=True, text=True)
    text = int(sizes.stdout.splitlines()[1].split()[0])
    assert text < 128 * 1024, sizes.stdout


def test_mcu_integer_only_model_matches_python_reference(tmp_path: Path) -> None:
    """A small int8 MLP lowered to ember::quantized_linear runs in QEMU (hard float), with every
    output equal to the bit-exact Python reference and no kernel scratch memory."""
    _need_toolchain()
    import numpy as np
    import torch

    import ember
    import ember.quant as Q
    import ember.quant.fused as F

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(24, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10)
    ).eval()
    calib = [torch.randn(32, 24)]
    im = F.lower_to_integer(Q.quantize(model, calib, progress=False), calib)
    pte = tmp_path / "tiny_fused.pte"
    ember.export(im, (calib[0][:1],), oplist=F.oplist_with_fused()).save(pte)
    xs = torch.randn(4, 1, 24)
    np.save(tmp_path / "x.npy", xs.numpy())
    with torch.no_grad():
        np.save(tmp_path / "y.npy", torch.stack([im(x) for x in xs]).numpy())
    gen = f"--input {tmp_path / 'x.npy'} --expected {tmp_path / 'y.npy'} --cases 4"
    cmd = ["make", "-s", "--no-print-directory", "-C", str(REPO / "mcu"),
           f"-j{os.cpu_count() or 2}", f"MODEL={pte}", "FLOAT=hard", f"HOST_EMBER={HOST_EMBER}",
           f"PY={sys.executable}", f"OUT={REPO / 'build-mcu' / 'test-fused-hard'}",
           f"GEN_ARGS={gen}", "QEMU_TIMEOUT=30", "run"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "RESULT: OK" in out and "ember::quantized_linear.out" in out, out
    assert "temp peak 0 B" in out, out


def test_mcu_residual_graph_with_free_relu_matches_python_reference(tmp_path: Path) -> None:
    """A graph with a plain `+` residual and ReLUs no layer absorbs, lowered to
    ember::quantized_conv2d / _add / _clamp / _max_pool2d / _linear, runs in QEMU (soft float:
    the integer kernels need no FPU) with every output equal to the Python reference."""
    _need_toolchain()
    import numpy as np
    import torch
    from torch import nn

    import ember
    import ember.quant as Q
    import ember.quant.fused as F

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv0, self.conv1 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
            self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(4 * 4 * 4, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            c = self.conv0(x)
            h = torch.relu(c) + self.conv1(c)  # c has two users: the ReLU is a clamp step
            h = torch.relu(self.pool(h))
            return self.fc(h.view(h.size(0), -1))

    torch.manual_seed(0)
    model = Net().eval()
    calib = [torch.rand(32, 1, 8, 8)]
    im = F.lower_graph_to_integer(Q.quantize(model, calib, progress=False), calib)
    kinds = {type(m).__name__ for m in im.layers.values()}
    assert {"FusedQuantizedAdd", "QuantizedClamp"} <= kinds, kinds
    pte = tmp_path / "residual_fused.pte"
    ember.export(im, (calib[0][:1],), oplist=F.oplist_with_fused()).save(pte)
    xs = torch.rand(4, 1, 1, 8, 8)
    np.save(tmp_path / "x.npy", xs.numpy())
    with torch.no_grad():
        np.save(tmp_path / "y.npy", torch.stack([im(x) for x in xs]).numpy())
    gen = f"--input {tmp_path / 'x.npy'} --expected {tmp_path / 'y.npy'} --cases 4"
    cmd = ["make", "-s", "--no-print-directory", "-C", str(REPO / "mcu"),
           f"-j{os.cpu_count() or 2}", f"MODEL={pte}", "FLOAT=soft", f"HOST_EMBER={HOST_EMBER}",
           f"PY={sys.executable}", f"OUT={REPO / 'build-mcu' / 'test-residual-soft'}",
           f"GEN_ARGS={gen}", "QEMU_TIMEOUT=30", "run"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "RESULT: OK" in out, out
    for op in ("quantized_add", "quantized_clamp", "quantized_conv2d"):
        assert f"ember::{op}.out" in out, out
