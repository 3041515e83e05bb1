"""Bad inputs give Ember errors that name the operator overload and the user's source line."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import ember
from ember.oplist import DTYPE_BITS, OpList, stock_executorch_oplist


def _line_of(marker: str) -> str:
    """``this_file:line`` of the line carrying ``# marker``."""
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# {marker}"):
                return f"{__file__}:{i}"
    raise AssertionError(marker)


class Bessel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        return torch.special.bessel_j0(y)  # BESSEL


class ToComplex(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.complex64)  # COMPLEX


class Relu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)  # RELU


class NonZero(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x)  # NONZERO


class MaskedSelect(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        return torch.masked_select(y, y > 1)  # MASKED


def test_unsupported_operator_names_op_and_line() -> None:
    with pytest.raises(ember.UnsupportedOperatorError) as ei:
        ember.export(Bessel(), (torch.randn(4),), oplist=stock_executorch_oplist())
    msg = str(ei.value)
    assert "aten.special_bessel_j0.default" in msg
    assert "float32" in msg
    assert _line_of("BESSEL") in msg
    assert isinstance(ei.value, ember.EmberError)


def test_unsupported_operator_against_runtime_list() -> None:
    # An op list lacking relu: the error names the kernel the exporter would call.
    ol = OpList.from_names(["aten::mul.out"])
    with pytest.raises(ember.UnsupportedOperatorError) as ei:
        ember.export(Relu(), (torch.randn(4),), oplist=ol)
    msg = str(ei.value)
    assert "aten.relu.default" in msg and "aten::relu.out" in msg
    assert _line_of("RELU") in msg


def test_unsupported_dtype_for_kernel_mask() -> None:
    ol = OpList.from_names(["aten::relu.out"], mask=DTYPE_BITS["F64"])
    with pytest.raises(ember.UnsupportedDtypeError) as ei:
        ember.export(Relu(), (torch.randn(4),), oplist=ol)
    msg = str(ei.value)
    assert "aten.relu.default" in msg and "float32" in msg
    assert _line_of("RELU") in msg
    # The same list accepts float64.
    ember.export(Relu(), (torch.randn(4, dtype=torch.float64),), oplist=ol)


def test_unrepresentable_dtype() -> None:
    with pytest.raises(ember.UnsupportedDtypeError) as ei:
        ember.export(ToComplex(), (torch.randn(4),), oplist=stock_executorch_oplist())
    msg = str(ei.value)
    assert "complex64" in msg and "_to_copy" in msg
    assert _line_of("COMPLEX") in msg


@pytest.mark.parametrize(
    ("model", "op", "marker"),
    [(NonZero(), "aten.nonzero.default", "NONZERO"), (MaskedSelect(), "masked_select", "MASKED")],
)
def test_data_dependent_shape(model: torch.nn.Module, op: str, marker: str) -> None:
    with pytest.raises(ember.DataDependentShapeError) as ei:
        ember.export(model, (torch.randn(6),), oplist=stock_executorch_oplist())
    msg = str(ei.value)
    assert op in msg
    assert _line_of(marker) in msg


def test_unbounded_dynamic_dim() -> None:
    n = torch.export.Dim("n")  # no max
    with pytest.raises(ember.MemoryPlanError) as ei:
        ember.export(
            Relu(), (torch.randn(4),), dynamic_shapes=({0: n},), oplist=stock_executorch_oplist()
        )
    assert "max" in str(ei.value)


def test_errors_hierarchy() -> None:
    for cls in (
        ember.UnsupportedOperatorError,
        ember.UnsupportedDtypeError,
        ember.DataDependentShapeError,
        ember.MemoryPlanError,
        ember.SerializationError,
        ember.EmberRuntimeError,
    ):
        assert issubclass(cls, ember.EmberError)


def test_kernel_arity_mismatch_is_reported() -> None:
    from ember.oplist import KernelInfo

    ol = OpList({"aten::relu.out": KernelInfo("aten::relu.out", 2, DTYPE_BITS["F32"])})
    with pytest.raises(ember.UnsupportedOperatorError) as ei:
        ember.export(Relu(), (torch.randn(4),), oplist=ol)
    msg = str(ei.value)
    assert "aten::relu.out" in msg and "2" in msg and "3" in msg
    assert _line_of("RELU") in msg


class DataBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # BRANCH
            return x * 2
        return x


def test_python_branch_on_data() -> None:
    with pytest.raises(ember.DataDependentShapeError) as ei:
        ember.export(DataBranch(), (torch.randn(3),), oplist=stock_executorch_oplist())
    msg = str(ei.value)
    assert "torch.cond" in msg
    assert _line_of("BRANCH") in msg


def test_training_mode_warns(caplog: pytest.LogCaptureFixture) -> None:
    """A model left in training mode is exported as it is, with a warning naming the modules
    that compute differently then; in eval mode, no warning."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.drop = nn.Dropout(0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.drop(self.bn(self.c(x)))

    x = torch.randn(2, 3, 8, 8)
    m = M()
    with caplog.at_level(logging.WARNING, logger="ember.passes.capture"):
        ember.export(m, (x,))
    msg = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "training mode" in msg and "bn" in msg and "drop" in msg and "model.eval()" in msg
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ember.passes.capture"):
        prog = ember.export(m.eval(), (x,))
    assert not [r for r in caplog.records if "training mode" in r.getMessage()]
    torch.testing.assert_close(prog.run(x), m(x), rtol=1e-4, atol=1e-5)
