"""Console scripts ``ember`` and ``ember-llm``: run the C programs packaged with the wheel.

An installed wheel carries them in ``ember/bin/`` (setup.py builds them); in a source checkout
they are ``build/ember`` and ``build/ember-llm`` (``make build``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ember._lib import repo_root


def _exec(name: str) -> None:
    for cand in (Path(__file__).parent / "bin" / name, repo_root() / "build" / name):
        if cand.is_file() and os.access(cand, os.X_OK):
            os.execv(cand, [name, *sys.argv[1:]])
    sys.exit(f"{name}: the C program is not built (run `make build`, or install the wheel)")


def ember() -> None:
    """``ember info | run | ops ...`` (tools/ember)."""
    _exec("ember")


def ember_llm() -> None:
    """``ember-llm ...`` (tools/ember-llm)."""
    _exec("ember-llm")
