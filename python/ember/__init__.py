"""Ember: export PyTorch models to ExecuTorch-compatible ``.pte`` files and run them on Ember's
C11 runtime.

Public surface: :func:`export`, :func:`load`, :class:`Program`, :func:`compare`,
:mod:`ember.inspect` (reads an ETDump, loaded on first use), the errors in
:mod:`ember.errors` and the ``ember-py`` command line (:mod:`ember.cli`).

Example::

    import torch, ember

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()).eval()
    x = torch.randn(1, 16)
    prog = ember.export(model, (x,))                # or external_constants=True for a .ptd
    prog.save("model.pte")                          # ExecuTorch 1.x compatible
    y = prog.run(x)                                 # on Ember's C runtime
    print(ember.compare(model, prog, (x,)))         # eager vs runtime, op by op on mismatch
    prog2 = ember.load("model.pte")

On a desktop / host the default ``backend="auto"`` hands the subgraphs it supports to the fast
CPU delegate (``EmberCpuBackend``); ``backend=None`` keeps the portable kernels (a file stock
ExecuTorch runs too), and a microcontroller ``target`` (``"cortex-m33"``) keeps them as well.

Multi-method programs: ``ember.export({"prefill": (m1, args1), "decode": (m2, args2)})``.
Dynamic shapes: ``dynamic_shapes=({0: torch.export.Dim("n", max=64)},)`` (a max is required).
"""

from ember import errors
from ember.compare import CompareReport, compare
from ember.errors import (
    DataDependentShapeError,
    EmberError,
    EmberRuntimeError,
    MemoryPlanError,
    SerializationError,
    UnsupportedDtypeError,
    UnsupportedOperatorError,
)
from ember.export import export
from ember.program import Program, load

__all__ = [
    "export",
    "load",
    "compare",
    "CompareReport",
    "Program",
    "errors",
    "EmberError",
    "UnsupportedOperatorError",
    "UnsupportedDtypeError",
    "DataDependentShapeError",
    "MemoryPlanError",
    "SerializationError",
    "EmberRuntimeError",
]


def __getattr__(name: str) -> object:
    """``ember.quantize`` (static int8 post-training quantization) and ``ember.inspect`` (an
    ETDump reader, :mod:`ember.inspect`) load on first use."""
    if name == "quantize":
        from ember.quant import quantize

        return quantize
    if name == "inspect":
        import importlib

        return importlib.import_module("ember.inspect")
    raise AttributeError(f"module 'ember' has no attribute {name!r}")
