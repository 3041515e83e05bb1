"""Ember exporter errors.

Every error the exporter raises on purpose derives from :class:`EmberError`. Errors that concern a
node of the user's graph carry the FX node name, the operator overload and the user's source line
(taken from ``node.meta["stack_trace"]``) so the message points at the model code that caused it.
"""

from __future__ import annotations

import re

import torch.fx

__all__ = [
    "EmberError",
    "UnsupportedOperatorError",
    "UnsupportedDtypeError",
    "DataDependentShapeError",
    "UnsupportedValueError",
    "MemoryPlanError",
    "SerializationError",
    "EmberRuntimeError",
    "user_source_line",
]

_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def user_source_line(node: torch.fx.Node | None) -> str | None:
    """Return ``"file:line in fn: code"`` for the innermost user frame of ``node``, or None.

    torch.export records the Python stack of the op that produced each node. The innermost frame
    outside torch itself is the line the user wrote.
    """
    if node is None:
        return None
    trace = node.meta.get("stack_trace")
    if not trace:
        return None
    frames = _FRAME_RE.findall(trace)
    user = [f for f in frames if "/torch/" not in f[0] and "/ember/" not in f[0]]
    pick = (user or frames or [None])[-1]
    if pick is None:
        return None
    file, line, fn, code = pick
    return f"{file}:{line} in {fn}: {code.strip()}"


class EmberError(Exception):
    """Base class of every error raised by the Ember exporter."""

    def __init__(
        self, message: str, *, node: torch.fx.Node | None = None, source: str | None = None
    ) -> None:
        self.node_name = node.name if node is not None else None
        self.source = source if source is not None else user_source_line(node)
        parts = [message]
        if self.node_name:
            parts.append(f"(FX node '{self.node_name}')")
        if self.source:
            parts.append(f"\n  at {self.source}")
        super().__init__(" ".join(parts[:2]) + "".join(parts[2:]))


class UnsupportedOperatorError(EmberError):
    """An operator (overload) has no kernel in the runtime's operator list."""


class UnsupportedDtypeError(EmberError):
    """An operator exists but not for the dtype(s) used, or a dtype Ember cannot represent."""


class DataDependentShapeError(EmberError):
    """An output shape depends on tensor data (nonzero, masked_select, item, ...)."""


class UnsupportedValueError(EmberError):
    """A model input or output of a type a program cannot carry (e.g. a cache object)."""


class MemoryPlanError(EmberError):
    """Memory planning failed (unbounded dynamic shape, overflow, ...)."""


class SerializationError(EmberError):
    """The program could not be written (or read back) in the .pte / .ptd format."""


class EmberRuntimeError(EmberError):
    """The C runtime reported an error while loading or running a program."""
