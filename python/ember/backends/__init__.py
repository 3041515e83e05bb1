"""Backends (delegates) of the Ember exporter.

A backend pass runs on a :class:`~ember.passes.ir.MethodIR` after view elision and before
lifetimes and memory planning: it replaces runs of supported instructions with
:class:`DelegateInstr` calls whose ``processed`` blob the backend's runtime half executes.
"""

from __future__ import annotations

from ember.backends.delegate import DelegateInstr
from ember.passes.ir import MethodIR

BACKENDS = ("cpu",)


def partition(ir: MethodIR, backend: str | None) -> MethodIR:
    """Hand the subgraphs ``backend`` supports to it (``None`` / ``"portable"``: no change)."""
    if backend in (None, "", "portable", "none"):
        return ir
    if backend == "cpu":
        from ember.backends.cpu.partition import partition_cpu

        return partition_cpu(ir)
    raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)}, portable)")


__all__ = ["BACKENDS", "DelegateInstr", "partition"]
