"""Stage 1: capture a model with ``torch.export``.

Guarantees: the result is an ATen-dialect ExportedProgram (functional, parameters and buffers
lifted to placeholders) for ``model`` called with ``example_inputs``. Plain callables are wrapped
in an ``nn.Module`` first. Data-dependent control flow and unbounded guards surface as
torch.export's own errors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

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
    return torch.export.export(
        model, example_inputs, kwargs=example_kwargs, dynamic_shapes=dynamic_shapes, strict=strict
    )
