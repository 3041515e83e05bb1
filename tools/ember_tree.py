"""ember_tree.py — the stdlib-only modules of the ``ember`` package, loaded from this checkout
without importing the package (whose ``__init__`` imports torch).

The build tools (tools/selective_build.py, run by CMake with any Python 3) and mcu/gen_model.py
share the package's single sources of truth: ``ember.dtypes`` (the dtype table),
``ember.opdefs`` (the ``ops.def`` parser) and ``ember.reader`` (the ``.pte`` reader). Each is
loaded by path as module ``_ember_tree_<name>`` (its dependency ``dtypes`` first), so nothing named
``ember`` enters ``sys.modules`` and a later ``import ember`` in the same process is unaffected.

    from ember_tree import load
    opdefs = load("opdefs")
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "ember"
STDLIB_ONLY = ("dtypes", "opdefs", "reader")


def load(name: str) -> ModuleType:
    """Module ``ember.<name>`` (one of ``STDLIB_ONLY``) from this checkout."""
    if name not in STDLIB_ONLY:
        raise ValueError(f"ember.{name} is not a stdlib-only module ({', '.join(STDLIB_ONLY)})")
    if name != "dtypes":
        load("dtypes")
    key = f"_ember_tree_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, PACKAGE / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    spec.loader.exec_module(mod)
    return mod
