"""Ember: export PyTorch models to ExecuTorch-compatible ``.pte`` files and run them on Ember's
C11 runtime.

Public surface: :func:`export`, :func:`load`, :class:`Program`, :func:`compare`, the errors in
:mod:`ember.errors` and the ``ember-py`` command line (:mod:`ember.cli`).
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
