"""The small int8 CNN on the Cortex-M33 (mcu/models/cnn.py) and the Q/DQ file on stock ExecuTorch.

* The integer-only CNN (ember::quantized_conv2d / quantized_max_pool2d / quantized_linear,
  committed weights, Fashion-MNIST test images) runs in QEMU with the DSP path (SXTB16/SMLAD)
  and must print exactly the outputs of the host's portable C path, which in turn must equal the
  Python reference: same predictions everywhere.
* The Q/DQ `.pte` (before Ember's fusion) of the CNN and of the MLP runs on stock
  ``executorch.runtime`` (portable + quantized kernels) with the same predictions as Ember.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mcu_common import need_toolchain

import ember
import ember.quant as Q
import ember.quant.fused as QF

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "mcu" / "models"
HOST_EMBER = REPO / "build" / "ember"
DATA = Path("/usr/share/datasets/fashion-mnist")
sys.path.insert(0, str(MODELS))

import cnn as cnn_mod  # noqa: E402
import mlp as mlp_mod  # noqa: E402


def _data(n_calib: int = 300, n_test: int = 16):
    """Calibration images (train split) and a spread-out sample of test images, or random data
    when the data set is not installed."""
    try:
        xtr, _ = mlp_mod.load(DATA, "train")
        xte, yte = mlp_mod.load(DATA, "test")
    except FileNotFoundError:
        g = torch.Generator().manual_seed(0)
        return torch.rand(n_calib, 784, generator=g), torch.rand(n_test, 784, generator=g), None
    g = torch.Generator().manual_seed(1)
    calib = xtr[torch.randperm(len(xtr), generator=g)[:n_calib]]
    idx = torch.linspace(0, len(xte) - 1, n_test).long()
    return calib, xte[idx], yte[idx]


def _cnn() -> torch.nn.Sequential:
    model = cnn_mod.cnn()
    model.load_state_dict(torch.load(MODELS / "cnn_state.pt"))
    return model.eval()


def _runtime():
    try:
        from ember import _lib
        from ember.runtime import RuntimeProgram

        _lib.lib().em_register_quantized_kernels()
    except (ImportError, OSError, AttributeError) as e:
        pytest.skip(f"C runtime with kernels/quantized not built: {e}")
    return RuntimeProgram


def _need_toolchain() -> None:
    need_toolchain()


def test_cnn_int8_in_qemu_matches_host_portable_path(tmp_path: Path) -> None:
    _need_toolchain()
    rt_cls = _runtime()
    calib, xte, _ = _data(n_test=6)
    calib, xte = calib.reshape(-1, 1, 28, 28), xte.reshape(-1, 1, 28, 28)
    qm = Q.quantize(_cnn(), list(calib.split(100)), observer="percentile", progress=False)
    im = QF.lower_to_integer(qm, list(calib.split(100)), int8_input=True)
    x8 = im.quantize_input(xte)
    pte = tmp_path / "cnn_in8.pte"
    ember.export(im, (x8[:1],), oplist=QF.oplist_with_fused()).save(pte)
    # Host: the portable C kernels (no DSP) must equal the Python reference bit for bit.
    rt = rt_cls(pte)
    host = torch.stack([rt.run("forward", [x8[i : i + 1]])[0] for i in range(len(x8))])
    with torch.no_grad():
        ref = torch.stack([im(x8[i : i + 1]) for i in range(len(x8))])
    assert torch.equal(host, ref)
    np.save(tmp_path / "x.npy", x8.numpy())
    np.save(tmp_path / "y.npy", host.numpy())  # the firmware must print exactly these
    out_dir = REPO / "build-mcu" / "test-cnn-in8-hard"
    gen = f"--input {tmp_path / 'x.npy'} --expected {tmp_path / 'y.npy'} --cases {len(x8)}"
    cmd = ["make", "-s", "--no-print-directory", "-C", str(REPO / "mcu"),
           f"-j{os.cpu_count() or 2}", f"MODEL={pte}", "FLOAT=hard", f"HOST_EMBER={HOST_EMBER}",
           f"PY={sys.executable}", f"OUT={out_dir}", f"GEN_ARGS={gen}", "QEMU_TIMEOUT=60",
           "run", "size"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "RESULT: OK" in out, out
    preds = [int(p) for p in re.findall(r"predicted class (\d+)", out)]
    assert preds == host.reshape(len(x8), -1).argmax(1).tolist(), out
    # The export-time budget's planned arena is what the firmware allocates; the size report
    # splits .text/.data/.bss.
    from ember.quant.budget import budget_of

    ram = re.search(r"planned arenas (\d+) B \+ temp peak (\d+) B", out)
    assert ram and int(ram.group(1)) == budget_of(pte.read_bytes()).arena_total, out
    assert re.search(r"^\.text\s+\d+", out, re.M) and re.search(r"^\.bss\s+\d+", out, re.M), out
    assert "runtime + kernels (core, platform, kernels): text" in out, out
    # The Cortex-M33 build took the DSP path: dual 16-bit MACs in the linked kernels.
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(out_dir / "app.elf")],
                         capture_output=True, text=True).stdout  # fmt: skip
    assert "smlad" in dis and "sxtb16" in dis


# Runs in a fresh interpreter: executorch.kernels.quantized defines the quantized_decomposed
# ``.out`` schemas in PyTorch, which ember.quant (imported here) already defined.
_STOCK = """
import sys, numpy as np, torch
import executorch.kernels.quantized  # registers the quantized_decomposed kernels
from executorch.runtime import Runtime
rt = Runtime.get()
if "quantized_decomposed::dequantize_per_channel.out" not in rt.operator_registry.operator_names:
    sys.exit(3)
prog = rt.load_program(open(sys.argv[1], "rb").read())  # must outlive the method
m = prog.load_method("forward")
xs = torch.from_numpy(np.load(sys.argv[2]))
np.save(sys.argv[3], torch.cat([m.execute([x[None].contiguous()])[0] for x in xs]).numpy())
"""


@pytest.mark.parametrize("which", ["cnn", "mlp"])
def test_qdq_pte_runs_on_stock_executorch(tmp_path: Path, which: str) -> None:
    pytest.importorskip("executorch.runtime")
    rt_cls = _runtime()
    calib, xte, _ = _data()
    if which == "cnn":
        model = _cnn()
        calib, xte = calib.reshape(-1, 1, 28, 28), xte.reshape(-1, 1, 28, 28)
    else:
        model = mlp_mod.mlp()
        model.load_state_dict(torch.load(MODELS / "mlp_state.pt"))
        model.eval()
    qm = Q.quantize(model, list(calib.split(100)), observer="percentile", progress=False)
    path = tmp_path / f"{which}_int8.pte"
    ember.export(qm, (xte[:1],), backend=None).save(path)  # portable: stock ExecuTorch runs it
    np.save(tmp_path / "x.npy", xte.numpy())
    args = [str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]
    r = subprocess.run(
        [sys.executable, "-c", _STOCK, *args], capture_output=True, text=True, timeout=300
    )
    if r.returncode == 3:
        pytest.skip("stock ExecuTorch runtime without the quantized kernels")
    assert r.returncode == 0, r.stderr[-3000:]
    y_stock = torch.from_numpy(np.load(tmp_path / "y.npy"))
    ours = rt_cls(path)
    y_ember = torch.cat([ours.run("forward", [xte[i : i + 1]])[0] for i in range(len(xte))])
    assert y_stock.argmax(1).tolist() == y_ember.argmax(1).tolist()
    torch.testing.assert_close(y_ember, y_stock, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(y_ember, qm(xte), rtol=1e-4, atol=1e-4)
