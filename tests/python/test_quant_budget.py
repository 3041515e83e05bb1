"""Budget report at export (ember.export(..., target="cortex-m33"), ember.quant.budget): exact
planned arena and constant bytes, the kernel list, allocator use measured on the host runtime,
and the CLI."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from torch import nn

import ember
import ember.quant as Q
import ember.quant.budget as B
import ember.quant.fused as QF


def _fused_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 10)).eval()
    calib = [torch.randn(32, 24)]
    return QF.lower_to_integer(Q.quantize(model, calib, progress=False), calib), calib[0][:1]


def test_export_with_target_reports_budget(caplog) -> None:
    im, x = _fused_model()
    with caplog.at_level(logging.INFO, logger="ember.export"):
        prog = ember.export(im, (x,), oplist=QF.oplist_with_fused(), target="cortex-m33")
    b = prog.budget["forward"]
    assert isinstance(b, B.Budget) and b.target == "cortex-m33"
    assert b.arena_bytes == [prog.arena_bytes["forward"]] and b.arena_total > 0
    # int8 weights + int32 bias, multiplier and shift per output channel, nothing else
    assert b.constant_bytes == (24 * 16 + 16 * 10) + 4 * 3 * (16 + 10)
    assert b.program_bytes == len(prog.buffer) > b.constant_bytes
    assert [k.name for k in b.kernels] == [
        "ember::quantized_linear.out",
        "quantized_decomposed::dequantize_per_tensor.out",
        "quantized_decomposed::quantize_per_tensor.out",
    ]
    assert b.kernels[0].function == "em_quantized_linear_out"
    assert b.kernels[0].dtypes == ["i32", "i8"] and not b.missing_kernels
    if b.method_allocator_bytes is None:
        pytest.skip("host runtime not built: allocator use not measured")
    assert 0 < b.program_allocator_bytes < b.method_allocator_bytes < 16384
    assert b.host_temp_peak_bytes == 0  # the integer linear kernel needs no scratch
    d = b.as_dict()
    assert d["arena_total"] == b.arena_total and json.dumps(d)
    assert "budget for cortex-m33" in caplog.text and "em_quantized_linear_out" in caplog.text


def test_budget_cli_and_errors(tmp_path, capsys) -> None:
    im, x = _fused_model()
    path = tmp_path / "m.pte"
    ember.export(im, (x,), oplist=QF.oplist_with_fused()).save(path)
    assert B.main([str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["target"] == "cortex-m33" and d["constant_bytes"] > 0 and len(d["kernels"]) == 3
    with pytest.raises(ValueError, match="unknown target"):
        B.budget_of(path.read_bytes(), "z80")
    with pytest.raises(ValueError, match="no method"):
        B.budget_of(path.read_bytes(), method="nope")
    assert B.main([str(tmp_path / "missing.pte")]) == 1


def test_budget_firmware_figures_are_the_targets(tmp_path) -> None:
    """firmware=True builds the image and runs it in QEMU: the exact Cortex-M33 RAM, with the
    same planned arena as the file and less method memory than the 64-bit host needs."""
    import shutil

    if not (shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")):
        pytest.skip("arm-none-eabi-gcc / qemu-system-arm not installed (make mcu-deps)")
    im, x = _fused_model()
    prog = ember.export(im, (x,), oplist=QF.oplist_with_fused())
    try:
        b = B.budget_of(prog.buffer, "cortex-m33", firmware=True)
    except RuntimeError as e:
        pytest.skip(f"firmware build unavailable: {e}")
    f = b.firmware
    assert f is not None and f["arenas"] == b.arena_total
    assert f["ram"] == f["program"] + f["method"] + f["arenas"] + f["temp"]
    assert 0 < f["method"] < b.method_allocator_bytes  # 32-bit structures are smaller
    assert f["temp"] == 0 and f["text"] > f["runtime_text"] > 0 and f["bss"] >= f["ram"]
    assert "QEMU, exact" in b.summary()
