"""Stage 1: capture a model with ``torch.export``.

Guarantees: the result is an ATen-dialect ExportedProgram (functional, parameters and buffers
lifted to placeholders) for ``model`` called with ``example_inputs``. Plain callables are wrapped
in an ``nn.Module`` first. Python control flow on tensor data raises DataDependentShapeError
naming the user's line; other tracing failures surface as torch.export's own errors.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from ember.errors import DataDependentShapeError

log = logging.getLogger(__name__)


class _CallableModule(torch.nn.Module):
    """Wraps a plain function so torch.export can trace it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def capture(
    model: torch.nn.Module | Callable[..., Any],
    example_inputs: tuple[Any, ...],
    *,
    example_kwargs: dict[str, Any] | None = None,
    dynamic_shapes: Any = None,
    strict: bool = False,
) -> torch.export.ExportedProgram:
    """Run ``torch.export.export`` (non-strict by default) and return the ExportedProgram."""
    if not isinstance(model, torch.nn.Module):
        model = _CallableModule(model)
    if not isinstance(example_inputs, tuple):
        example_inputs = (
            tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
        )
    log.debug("torch.export.export(strict=%s)", strict)
    try:
        return torch.export.export(
            model,
            example_inputs,
            kwargs=example_kwargs,
            dynamic_shapes=dynamic_shapes,
            strict=strict,
        )
    except GuardOnDataDependentSymNode as e:
        raise DataDependentShapeError(
            "Python control flow or a shape depends on tensor data "
            f"({str(e).splitlines()[0]}); use torch.cond or torch.where instead",
            source=_user_frame(e),
        ) from e


def _user_frame(e: BaseException) -> str | None:
    """``file:line in fn: code`` of the innermost traceback frame outside torch and ember."""
    frames = [
        f
        for f in traceback.extract_tb(e.__traceback__)
        if "/torch/" not in f.filename and "/ember/" not in f.filename and f.filename[0] != "<"
    ]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}"
