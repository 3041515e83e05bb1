"""Shared models and helpers for the exporter tests (tests/python/test_export*.py).

Two runtimes execute exported programs: stock ExecuTorch (``executorch.runtime``, a test-only
peer) and Ember's C runtime (``ember.runtime``). Tests that need one skip with a reason when it is
unavailable.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from typing import Any

import pytest
import torch

# ExecuTorch (a test-only peer) defines quantized_decomposed::embedding_byte/_4bit when its exir
# passes are imported, and PyTorch refuses a second definition. Ember defines them only where no
# one has (ember.quant.llm.register_ops), so the peer's module is imported first in the test
# process: tests then mix Ember's LLM quantization and ExecuTorch's exporter in any order.
try:
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401
except Exception:  # pragma: no cover - executorch absent: its tests skip
    pass

import ember  # noqa: E402
from ember.oplist import load_oplist, stock_executorch_oplist  # noqa: E402

RTOL = 1e-5


# -- runtimes -----------------------------------------------------------------------------------
def executorch_runtime() -> Any:
    """The stock ExecuTorch Python runtime, or skip."""
    try:
        from executorch.runtime import Runtime
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"executorch is not installed: {e}")
    return Runtime.get()


def ember_runtime_module() -> Any:
    """``ember.runtime`` or skip (the bindings are built by the runtime engineer)."""
    try:
        mod = importlib.import_module("ember.runtime")
        assert hasattr(mod, "RuntimeProgram")
    except Exception as e:
        pytest.skip(f"ember.runtime cannot be imported yet: {e}")
    return mod


def require_ember_kernels(program: ember.Program) -> None:
    """Skip if the program uses operators the Ember kernel library does not register yet."""
    ol = load_oplist()
    if ol.is_fallback:
        return
    from executorch.exir._serialize._program import deserialize_pte_binary

    p = deserialize_pte_binary(program.buffer)
    p = getattr(p, "program", p)
    names = set()
    arity_gaps = set()
    for plan in p.execution_plan:
        ops = [op.name + (f".{op.overload}" if op.overload else "") for op in plan.operators]
        names.update(ops)
        for ins in plan.chains[0].instructions:
            a = ins.instr_args
            if hasattr(a, "op_index"):
                info = ol.get(ops[a.op_index])
                if info is not None and info.n_args >= 0 and info.n_args != len(a.args):
                    arity_gaps.add(
                        f"{info.name}: ops.def says {info.n_args}, calls pass {len(a.args)}"
                    )
    missing = sorted(n for n in names if n not in ol)
    if missing:
        pytest.skip(f"Ember kernels not registered yet: {missing}")
    if arity_gaps:
        # The ExecuTorch convention (schema args + return) is what stock ExecuTorch emits too.
        pytest.xfail(
            f"Ember kernel arg counts disagree with the ExecuTorch convention: {sorted(arity_gaps)}"
        )


class StockMethod:
    """A loaded stock-ExecuTorch method (keeps state between calls)."""

    def __init__(self, program: ember.Program, method: str = "forward") -> None:
        rt = executorch_runtime()
        if program.ptd_buffer is not None:
            self._dir = tempfile.TemporaryDirectory()
            pte = program.save(os.path.join(self._dir.name, "model.pte"))
            self.prog = rt.load_program(str(pte), data_path=str(pte.with_suffix(".ptd")))
        else:
            self.prog = rt.load_program(program.buffer)
        self.method = self.prog.load_method(method)

    def __call__(self, *inputs: Any) -> list[Any]:
        return list(self.method.execute(list(inputs)))


_LIB_PROBLEMS = (
    "undefined symbol",
    "cannot open shared object",
    "No such file",
    "not built",
    "invalid ELF header",
)


def load_runtime(program: ember.Program) -> object:
    """``program.runtime()``, skipping (not failing) when libember itself cannot be loaded
    (a build in progress); program errors such as InvalidProgram still fail."""
    try:
        return program.runtime()
    except ember.EmberRuntimeError as e:
        if any(p in str(e) for p in _LIB_PROBLEMS):
            pytest.skip(f"libember unavailable: {e}")
        raise


class EmberMethod:
    """Runs a method through ``ember.Program.run`` (Ember's C runtime)."""

    def __init__(self, program: ember.Program, method: str = "forward") -> None:
        ember_runtime_module()
        require_ember_kernels(program)
        self.program = program
        self.name = method
        load_runtime(program)

    def __call__(self, *inputs: Any) -> list[Any]:
        out = self.program.run(*inputs, method=self.name)
        return list(out) if isinstance(out, (list, tuple)) else [out]


RUNTIMES = ["executorch", "ember"]


def make_runner(kind: str, program: ember.Program, method: str = "forward") -> Any:
    return StockMethod(program, method) if kind == "executorch" else EmberMethod(program, method)


def export_for_tests(model: Any, inputs: Any = None, **kw: Any) -> ember.Program:
    """Export verifying against stock ExecuTorch's operator inventory (the bytes do not depend
    on the list; Ember-runtime tests check Ember's own list with ``require_ember_kernels``), on
    the portable kernels (``backend=None``): these programs also run on stock ExecuTorch, which
    has no EmberCpuBackend."""
    kw.setdefault("oplist", stock_executorch_oplist())
    kw.setdefault("backend", None)
    return ember.export(model, inputs, **kw)


def assert_close(got: Any, want: Any, rtol: float = RTOL) -> None:
    """Relative error (max abs diff / max abs reference) <= rtol, shapes and dtypes equal."""
    assert isinstance(got, torch.Tensor), type(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.numel() == 0:
        return
    diff = (got.double() - want.double()).abs().max().item()
    scale = max(want.double().abs().max().item(), 1e-30)
    assert diff / scale <= rtol or diff <= 1e-7, f"max abs {diff}, rel {diff / scale}"


# -- models -------------------------------------------------------------------------------------
class MLP(torch.nn.Module):
    def __init__(self, d_in: int = 16, hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.fc3 = torch.nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class SmallCNN(torch.nn.Module):
    """Conv + batchnorm + pooling + residual adds."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = y + torch.relu(self.bn2(self.conv2(y)))  # residual
        y = self.pool(y)
        y = torch.nn.functional.avg_pool2d(y, 2, stride=1, padding=1)[:, :, :4, :4] + y
        return self.fc(y.flatten(1))


def xnnpack_static(model: torch.nn.Module, x: torch.Tensor, calib: int) -> torch.nn.Module:
    """``model`` quantized by ExecuTorch's XNNPACKQuantizer through PyTorch's PT2E flow as a user
    would (static, per-channel symmetric): exported, prepared, run on ``calib`` random batches
    shaped like ``x``, converted. Skips the test without torchao or executorch."""
    pytest.importorskip("torchao")
    xq = pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = xq.XNNPACKQuantizer().set_global(
        xq.get_symmetric_quantization_config(is_per_channel=True)
    )
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    for _ in range(calib):
        prepared(torch.randn(x.shape))
    return convert_pt2e(prepared)


def randomize_bn(m: torch.nn.Module) -> torch.nn.Module:
    """Give batchnorm layers non-trivial statistics; eval mode."""
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.5, 0.5)
    return m.eval()


class CondModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def true_fn(x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).sin()

        def false_fn(x: torch.Tensor) -> torch.Tensor:
            return x.cos() * 2

        y = torch.cond(x.sum() > 0, true_fn, false_fn, (x,))
        return y + 1


class Accumulator(torch.nn.Module):
    """Updates a registered buffer in forward: state must persist across calls."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.full((4,), 5.0))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.total.add_(x)
        self.calls.add_(1)
        return self.total * 2, self.calls.clone()


class DynMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))).reshape(-1) * 2


class Block(torch.nn.Module):
    """A transformer-ish block: reshapes (elided views), matmuls, softmax, layernorm."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.h = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln = torch.nn.LayerNorm(d)
        self.ff = torch.nn.Sequential(
            torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q = q.reshape(b, t, self.h, d // self.h).transpose(1, 2)
        k = k.reshape(b, t, self.h, d // self.h).transpose(1, 2)
        v = v.reshape(b, t, self.h, d // self.h).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.h) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.ff(self.ln(x))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
