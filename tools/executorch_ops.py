"""Writes python/ember/data/executorch_ops.txt: the operators stock ExecuTorch's runtime registers.

Run with the executorch wheel the project pins installed (``requirements-dev.txt``):

    .venv/bin/python tools/executorch_ops.py

``tests/python/test_stock_ops.py`` fails when the kept list and the installed wheel differ.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("executorch_ops")

OUT = Path(__file__).resolve().parents[1] / "python" / "ember" / "data" / "executorch_ops.txt"
HEADER = """\
# Operators stock ExecuTorch 1.5.1's Python runtime registers (portable + prim
# libraries of the executorch wheel): the set a backend=None file may use to run there.
# Regenerate with tools/executorch_ops.py; tests/python/test_stock_ops.py checks it.
"""


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from executorch.extension.pybindings import portable_lib

    names = sorted(set(portable_lib._get_operator_names()))
    OUT.write_text(HEADER + "".join(n + "\n" for n in names))
    log.info("wrote %d operators to %s", len(names), OUT)


if __name__ == "__main__":
    main()
