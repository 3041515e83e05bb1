"""Prints the corpus table (``harness.RESULTS``) after the run, and writes it to
``$EMBER_CORPUS_TABLE`` when that is set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .harness import RESULTS, table


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    rows = table()
    terminalreporter.write_sep(
        "-", "corpus: error vs eager (max |diff| / max |eager|), share in EmberCpuBackend"
    )
    for r in rows:
        terminalreporter.write_line(r)
    out = os.environ.get("EMBER_CORPUS_TABLE")
    if out:
        Path(out).write_text("\n".join(rows) + "\n")
