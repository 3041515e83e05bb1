"""What the corpus checks for one case, shared by ``test_corpus.py`` and ``bench/corpus.py``:
the four export / runtime paths against eager, and how much of the default path's program runs
inside EmberCpuBackend (``bench/coverage.py``'s measures: ATen operators left outside the
delegates, per ``ember info``, and their share of ``ember run --profile``'s time).

The paths:

- ``default``: ``ember.export(model, inputs)`` (backend "auto" -> EmberCpuBackend) on Ember;
- ``portable``: ``ember.export(model, inputs, backend=None)`` on Ember;
- ``stock_rt``: that portable file on stock ExecuTorch (``executorch.runtime``);
- ``stock_export``: ExecuTorch's own portable export (``to_edge_transform_and_lower``) on Ember.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import ember

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from bench.coverage import (  # noqa: E402
    DELEGATE,
    EMBER,
    count_aten_ops,
    outside_ops,
    profile_arrays,
)

PATHS = ("default", "portable", "stock_rt", "stock_export")
REL_TOL = 1e-4  # max |y - eager| / max |eager|

# case -> column -> cell, filled by the tests and printed as a table at the end of the run.
RESULTS: dict[str, dict[str, str]] = {}
COLUMNS = ("family", *PATHS, "ops in", "time in", "s", "outside")


def table() -> list[str]:
    """RESULTS as markdown rows."""
    rows = ["| model | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for name, cells in RESULTS.items():
        rows.append(f"| {name} | " + " | ".join(cells.get(c, "") for c in COLUMNS) + " |")
    return rows


def rel_err(got: Any, want: torch.Tensor) -> float:
    """max |got - want| / max |want|; raises on a shape or dtype mismatch."""
    if isinstance(got, (list, tuple)):
        assert len(got) == 1, f"{len(got)} outputs, want 1"
        got = got[0]
    assert isinstance(got, torch.Tensor), type(got)
    assert got.shape == want.shape, (tuple(got.shape), tuple(want.shape))
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    diff = (got.double() - want.double()).abs().max().item()
    return diff / max(want.double().abs().max().item(), 1e-30)


@dataclass
class Share:
    """How much of a default-path program runs in EmberCpuBackend."""

    aten_ops: int
    outside: dict[str, int]
    time_outside_pct: float | None  # None when build/ember is not there

    @property
    def ops_inside_pct(self) -> float:
        return 100.0 * (1 - sum(self.outside.values()) / max(self.aten_ops, 1))

    def outside_names(self) -> str:
        return ", ".join(
            f"{op.split('::')[1].split('.')[0]} x{c}" for op, c in self.outside.items()
        )


@dataclass
class Subject:
    """A built case: module, inputs, eager output, and the programs made so far."""

    name: str
    model: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    ref: torch.Tensor
    programs: dict[str, ember.Program] = field(default_factory=dict)
    _ep: Any = None
    _aten_ops: int | None = None

    @classmethod
    def build(cls, name: str) -> Subject:
        from . import CASES

        m, inputs = CASES[name].build()
        with torch.no_grad():
            ref = m(*inputs)
        return cls(name, m, inputs, ref)

    def exported(self) -> Any:
        """``torch.export.export`` of the model (once)."""
        if self._ep is None:
            self._ep = torch.export.export(self.model, self.inputs)
        return self._ep

    def program(self, kind: str) -> ember.Program:
        """The ``default`` or ``portable`` Ember export (once each)."""
        if kind not in self.programs:
            kw: dict[str, Any] = {} if kind == "default" else {"backend": None}
            self.programs[kind] = ember.export(self.model, self.inputs, **kw)
        return self.programs[kind]

    # -- the four paths: each returns the relative error against eager --------------------------
    def run_default(self) -> float:
        return rel_err(self.program("default").run(*self.inputs), self.ref)

    def run_portable(self) -> float:
        return rel_err(self.program("portable").run(*self.inputs), self.ref)

    def run_stock_rt(self) -> float:
        from executorch.runtime import Runtime

        method = Runtime.get().load_program(self.program("portable").buffer).load_method("forward")
        return rel_err(list(method.execute(list(self.inputs))), self.ref)

    def aten_ops(self) -> int:
        """Call nodes after the Core ATen decomposition (``bench/coverage.py``'s count), once."""
        if self._aten_ops is None:
            self._aten_ops = count_aten_ops(self.exported())
        return self._aten_ops

    def stock_export_buffer(self) -> bytes:
        from executorch.exir import to_edge_transform_and_lower

        self.aten_ops()  # counted first: the lowering below may rewrite the program it is given
        return to_edge_transform_and_lower(self.exported()).to_executorch().buffer

    def run_stock_export(self) -> float:
        from ember.runtime import RuntimeProgram

        out = RuntimeProgram(self.stock_export_buffer()).run("forward", list(self.inputs))
        return rel_err(out, self.ref)

    def share(self, iters: int = 5, ember_cli: Path = EMBER) -> Share:
        """The default program's share inside EmberCpuBackend (operators, and time when the
        ``ember`` CLI is built)."""
        total = self.aten_ops()
        with tempfile.TemporaryDirectory() as tmp:
            pte = self.program("default").save(Path(tmp) / "model.pte")
            if not ember_cli.exists():
                return Share(total, {}, None)
            out = outside_ops(pte, ember_cli)
            _, shares = profile_arrays(pte, [x.numpy() for x in self.inputs], iters, ember_cli)
        t_out = sum(s for op, s in shares.items() if op != DELEGATE)
        return Share(total, out, t_out)
