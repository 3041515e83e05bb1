"""``backend=None`` files run on stock ExecuTorch: the operator list kept as data, decomposition of
what stock ExecuTorch lacks, and the warning / error for what cannot be decomposed (issue 27)."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import executorch_runtime

import ember
from ember.errors import UnsupportedOperatorError
from ember.passes.stock_ops import stock_executorch_ops


def test_the_kept_list_is_the_installed_executorchs() -> None:
    pl = pytest.importorskip("executorch.extension.pybindings.portable_lib")
    assert stock_executorch_ops() == frozenset(pl._get_operator_names()), (
        "regenerate python/ember/data/executorch_ops.txt with tools/executorch_ops.py"
    )


class _WeightNormConv(torch.nn.Module):
    """The positional convolution of wav2vec2-style audio encoders: a weight norm over dim 2,
    computed in the graph from its parametrization (``aten::linalg_vector_norm``)."""

    def __init__(self) -> None:
        super().__init__()
        conv = torch.nn.Conv1d(8, 8, 5, padding=2, groups=2)
        self.conv = torch.nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.conv(x)) + x


@pytest.mark.parametrize("backend", [None, "auto"])
def test_weight_norm_runs_on_stock_executorch(backend: str | None) -> None:
    torch.manual_seed(0)
    m = _WeightNormConv().eval()
    x = torch.randn(1, 8, 16)
    with torch.no_grad():
        want = m(x)
    prog = ember.export(m, (x,), backend=backend, stock_ops="error")
    got = prog.run(x)
    assert float((got - want).abs().max()) <= 1e-4 * float(want.abs().max())
    if backend is None:
        kernels = {i.kernel for i in prog._irs["forward"].instrs if hasattr(i, "kernel")}
        assert kernels <= stock_executorch_ops()
        rt = executorch_runtime()
        method = rt.load_program(prog.buffer).load_method("forward")
        (et,) = method.execute([x])
        assert float((et - want).abs().max()) <= 1e-4 * float(want.abs().max())


class _Sorts(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=-1).values * 2


def test_an_operator_with_no_stock_form_is_named(caplog: pytest.LogCaptureFixture) -> None:
    x = torch.randn(3, 7)
    with caplog.at_level(logging.WARNING, logger="ember.passes.stock_ops"):
        prog = ember.export(_Sorts(), (x,), backend=None)
    assert any("aten::sort" in r.getMessage() for r in caplog.records)
    assert torch.equal(prog.run(x), _Sorts()(x))  # Ember runs it all the same
    with pytest.raises(UnsupportedOperatorError, match="aten::sort"):
        ember.export(_Sorts(), (x,), backend=None, stock_ops="error")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ember.passes.stock_ops"):
        ember.export(_Sorts(), (x,), backend=None, stock_ops="off")
    assert not caplog.records
    with pytest.raises(ValueError, match="stock_ops"):
        ember.export(_Sorts(), (x,), stock_ops="maybe")


class _ChannelsLast(torch.nn.Module):
    """A channels-last copy (YOLOS's position-embedding interpolation makes one): stock
    ExecuTorch's clone refuses a channels_last memory format."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) * 2 + 1


def test_a_channels_last_copy_runs_on_stock_executorch() -> None:
    x = torch.randn(1, 3, 4, 5)
    want = _ChannelsLast()(x)
    prog = ember.export(_ChannelsLast(), (x,), backend=None)
    assert torch.equal(prog.run(x), want)
    rt = executorch_runtime()
    (et,) = rt.load_program(prog.buffer).load_method("forward").execute([x])
    assert torch.equal(et.contiguous(), want.contiguous())
