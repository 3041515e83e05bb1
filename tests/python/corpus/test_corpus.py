"""The architecture corpus (issue 27 item 4): every case of ``corpus.CASES`` on four paths, each
within 1e-4 of eager relative to the largest |output| (see ``harness.py``):

- ``default``: ``ember.export(model, inputs)`` (EmberCpuBackend) on Ember's runtime;
- ``portable``: ``backend=None`` on Ember's runtime;
- ``stock_rt``: that portable file on stock ExecuTorch;
- ``stock_export``: ExecuTorch's own portable export on Ember's runtime.

``test_share`` reports how much of the default program runs inside EmberCpuBackend (operators
and time), so that a silent fallback to the portable kernels shows; the table is printed at the
end of the run (``conftest.py``) and written to ``$EMBER_CORPUS_TABLE`` when that is set.

``make test`` runs the cases marked ``fast``; ``EMBER_CORPUS=full`` (``make test-corpus``) runs
them all. A (case, path) that fails for a known reason is in :data:`KNOWN_FAILURES`
(``xfail(strict=True)``: the fix turns it into a failure, and the entry is removed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from . import CASES
from .harness import REL_TOL, RESULTS, Share, Subject

FULL = os.environ.get("EMBER_CORPUS") == "full"
NAMES = [n for n, c in CASES.items() if FULL or c.fast]

# (case, path) -> reason: each becomes xfail(strict=True).
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module", params=NAMES)
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    t = time.perf_counter()
    s = Subject.build(request.param)
    RESULTS.setdefault(s.name, {})["family"] = CASES[s.name].family
    yield s
    RESULTS[s.name]["s"] = f"{time.perf_counter() - t:.1f}"


def _check(subject: Subject, path: str) -> None:
    cell = RESULTS.setdefault(subject.name, {})
    known = "xfail " if (subject.name, path) in KNOWN_FAILURES else ""
    try:
        err = getattr(subject, f"run_{path}")()
    except Exception as e:
        cell[path] = f"{known}{type(e).__name__}"
        raise
    cell[path] = f"{err:.1e}" if err <= REL_TOL else f"{known}**{err:.1e}**"
    assert err <= REL_TOL, f"{subject.name} {path}: max error {err:.3g} of max |eager|"


def test_default(subject: Subject, request: pytest.FixtureRequest) -> None:
    _apply_known(request, subject.name, "default")
    _check(subject, "default")


def test_portable(subject: Subject, request: pytest.FixtureRequest) -> None:
    _apply_known(request, subject.name, "portable")
    _check(subject, "portable")


def test_stock_rt(subject: Subject, request: pytest.FixtureRequest) -> None:
    pytest.importorskip("executorch.runtime")
    _apply_known(request, subject.name, "stock_rt")
    _check(subject, "stock_rt")


def test_stock_export(subject: Subject, request: pytest.FixtureRequest) -> None:
    pytest.importorskip("executorch.exir")
    _apply_known(request, subject.name, "stock_export")
    _check(subject, "stock_export")


def test_share(subject: Subject) -> None:
    """Reports (asserts nothing beyond the default export existing) the share inside
    EmberCpuBackend."""
    cell = RESULTS.setdefault(subject.name, {})
    try:
        sh: Share = subject.share()
    except Exception as e:
        cell["ops in"] = f"n/a ({type(e).__name__})"
        pytest.skip(f"no default program to measure: {type(e).__name__}: {e}")
    cell["ops in"] = f"{sh.ops_inside_pct:.0f} % of {sh.aten_ops}"
    cell["time in"] = "n/a" if sh.time_outside_pct is None else f"{100 - sh.time_outside_pct:.0f} %"
    cell["outside"] = sh.outside_names() or "none"


def _apply_known(request: pytest.FixtureRequest, name: str, path: str) -> None:
    reason = KNOWN_FAILURES.get((name, path))
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
