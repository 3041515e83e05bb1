"""The ember-py CLI and the operator-list parser."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from conftest import StockMethod, assert_close

import ember
from ember import cli
from ember.oplist import DTYPE_BITS, DTYPE_GROUPS, parse_dtype_mask, parse_ops_def, read_ops_def


def test_cli_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "clifactory.py").write_text(
        textwrap.dedent(
            """
            import torch

            def make():
                torch.manual_seed(0)
                layers = [torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)]
                m = torch.nn.Sequential(*layers)
                return m.eval(), (torch.randn(1, 4),)
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EMBER_KERNELS_DIR", str(tmp_path / "none"))  # stock inventory fallback
    from ember import oplist

    oplist.load_oplist.cache_clear()
    try:
        out_pte = str(tmp_path / "out.pte")
        assert cli.main(["export", "clifactory:make", out_pte, "--backend", "portable"]) == 0
        assert cli.main(["export", "clifactory:make", str(tmp_path / "cpu.pte")]) == 0
    finally:
        oplist.load_oplist.cache_clear()
    import clifactory

    m, (x,) = clifactory.make()
    prog = ember.load(tmp_path / "out.pte")
    assert b"EmberCpuBackend" not in prog.buffer
    (out,) = StockMethod(prog)(x)  # portable: stock ExecuTorch runs it
    assert_close(out, m(x).detach())
    fast = ember.load(tmp_path / "cpu.pte")  # the default on a host: EmberCpuBackend
    assert b"EmberCpuBackend" in fast.buffer
    assert_close(fast.run(x), m(x).detach(), rtol=1e-4)


def test_cli_reports_ember_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "badfactory.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.nonzero(x)\n"
        "def make():\n"
        "    return M(), (torch.randn(3),)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["export", "badfactory:make", str(tmp_path / "bad.pte")]) == 1


def test_parse_ops_def_masks() -> None:
    text = textwrap.dedent(
        """
        /* comment */
        EM_OP("aten::add.out", em_add_out, 5, EM_DT_REALS)
        EM_OP("aten::relu.out", em_relu_out, 3, EM_DT_F32 | EM_DT_F64)
        EM_OP("aten::copy_", em_copy_, 4, EM_DT_ALL)
        EM_OP("executorch_prim::add.Scalar", em_prim_add, -1, 0)
        """
    )
    ops = parse_ops_def(text)
    assert set(ops) == {
        "aten::add.out",
        "aten::relu.out",
        "aten::copy_",
        "executorch_prim::add.Scalar",
    }
    assert ops["aten::add.out"].n_args == 5 and ops["aten::add.out"].c_function == "em_add_out"
    assert ops["aten::relu.out"].dtype_mask == DTYPE_BITS["F32"] | DTYPE_BITS["F64"]
    assert ops["aten::copy_"].dtype_mask == DTYPE_GROUPS["ALL"]
    assert ops["executorch_prim::add.Scalar"].n_args == -1
    assert parse_dtype_mask("EM_DT_FLOATS") == (
        DTYPE_BITS["F16"] | DTYPE_BITS["BF16"] | DTYPE_BITS["F32"] | DTYPE_BITS["F64"]
    )
    assert parse_dtype_mask("EM_DT_INTS|EM_DT_BOOL") & DTYPE_BITS["BOOL"]


def test_read_ops_def_includes(tmp_path: Path) -> None:
    (tmp_path / "portable").mkdir()
    (tmp_path / "portable/ops.def").write_text(
        '#include "portable/ops_a.def"\n#include "ops_b.def"\n'
    )
    (tmp_path / "portable/ops_a.def").write_text('EM_OP("aten::mm.out", em_mm, 4, EM_DT_REALS)\n')
    (tmp_path / "portable/ops_b.def").write_text('EM_OP("aten::bmm.out", em_bmm, 4, EM_DT_F32)\n')
    ops = read_ops_def(tmp_path / "portable/ops.def", tmp_path)
    assert set(ops) == {"aten::mm.out", "aten::bmm.out"}


def test_oplist_dtype_support() -> None:
    ol = ember.oplist.OpList(parse_ops_def('EM_OP("aten::relu.out", f, 3, EM_DT_F32)'))
    assert ol.supports_dtype("aten::relu.out", torch.float32)
    assert not ol.supports_dtype("aten::relu.out", torch.int32)
    assert not ol.supports_dtype("aten::add.out", torch.float32)
