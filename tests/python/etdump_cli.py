"""The `ember` CLI the ETDump tests run (tests/python/test_etdump.py, test_inspect.py), and the
mark that skips them when this build's CLI has no ``--etdump``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cli() -> Path:
    """$EMBER_CLI, else the `ember` next to $EMBER_LIB, else build/ember."""
    if "EMBER_CLI" in os.environ:
        return Path(os.environ["EMBER_CLI"])
    if "EMBER_LIB" in os.environ and (Path(os.environ["EMBER_LIB"]).parent / "ember").exists():
        return Path(os.environ["EMBER_LIB"]).parent / "ember"
    return ROOT / "build" / "ember"


EMBER = _cli()


def _cli_has_etdump() -> bool:
    if not EMBER.exists():
        return False
    r = subprocess.run([str(EMBER), "run", "--help"], capture_output=True, text=True, timeout=30)
    return "--etdump" in r.stdout


needs_cli = pytest.mark.skipif(not _cli_has_etdump(), reason=f"{EMBER} has no --etdump")
