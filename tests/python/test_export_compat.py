"""Compat (a): programs exported by stock ExecuTorch (no delegate) run on Ember's runtime and
agree with eager PyTorch."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    MLP,
    Block,
    SmallCNN,
    assert_close,
    ember_runtime_module,
    load_runtime,
    randomize_bn,
    require_ember_kernels,
)

import ember


def _stock_pte(m: torch.nn.Module, inputs: tuple) -> bytes:
    exir = pytest.importorskip("executorch.exir")
    ep = torch.export.export(m, inputs)
    return exir.to_edge(ep).to_executorch().buffer


class AddMul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a + b) * a


MODELS = {
    "add_mul": (AddMul, lambda: (torch.randn(4, 4), torch.randn(4, 4))),
    "mlp": (lambda: MLP().eval(), lambda: (torch.randn(3, 16),)),
    "cnn": (lambda: randomize_bn(SmallCNN()), lambda: (torch.randn(2, 3, 8, 8),)),
    "block": (lambda: Block().eval(), lambda: (torch.randn(2, 8, 32),)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_stock_program_runs_on_ember(name: str) -> None:
    ember_runtime_module()
    make, make_inputs = MODELS[name]
    m = make()
    inputs = make_inputs()
    prog = ember.load(_stock_pte(m, inputs))
    require_ember_kernels(prog)
    load_runtime(prog)
    out = prog.run(*inputs)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert_close(out, m(*inputs).detach())


def test_stock_fixture_add_pte_on_ember() -> None:
    """ExecuTorch's add.pte (made by the installed executorch: tests/python/et_fixtures.py)."""
    from et_fixtures import et_fixture

    ember_runtime_module()
    prog = ember.load(et_fixture("add.pte"))
    require_ember_kernels(prog)
    load_runtime(prog)
    de = pytest.importorskip("executorch.exir._serialize._program")
    plan = de.deserialize_pte_binary(prog.buffer).program.execution_plan[0]
    a, b = (torch.randn(*plan.values[i].val.sizes) for i in plan.inputs)
    out = prog.run(a, b)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert_close(out, a + b)
