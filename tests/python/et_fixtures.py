"""Where the tests find the stock-ExecuTorch fixtures (tests/fixtures/make_executorch_fixtures.py).

The files are made by the installed ``executorch`` into ``build/fixtures/executorch`` (the
Makefile's ``fixtures`` step) or, when a test asks for one and they are missing or stale, here, on
first use (about 20 s, then cached). ``EMBER_ET_FIXTURES`` names another directory (the
stand-alone clone test uses its own).
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@cache
def fixtures_dir() -> Path:
    """The fixture directory, generated (or found up to date) once per test session."""
    out = Path(os.environ.get("EMBER_ET_FIXTURES", ROOT / "build" / "fixtures" / "executorch"))
    script = ROOT / "tests" / "fixtures" / "make_executorch_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_executorch_fixtures", script)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.generate(out)
    return out


def et_fixture(name: str) -> Path:
    """The path of one generated fixture (``add.pte``, ``bundled_program.bpte``, ...)."""
    return fixtures_dir() / name
