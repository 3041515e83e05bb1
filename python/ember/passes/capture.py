"""Stage 1: capture a model with ``torch.export``.

Guarantees: the result is an ATen-dialect ExportedProgram (functional, parameters and buffers
lifted to placeholders) for ``model`` called with ``example_inputs``. Plain callables are wrapped
in an ``nn.Module`` first. Python control flow on tensor data raises DataDependentShapeError
naming the user's line; an input or output of a type torch.export cannot carry (a
``transformers`` cache object, a custom class) raises UnsupportedValueError naming the type and
its path in the input/output tree. A ``transformers`` model whose config asks for a KV cache
(``use_cache=True``, their default) is exported without one (logged at INFO): its outputs then
hold the logits and no cache object. Other tracing failures surface as torch.export's own errors.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from ember.errors import DataDependentShapeError, UnsupportedValueError

log = logging.getLogger(__name__)


class _CallableModule(torch.nn.Module):
    """Wraps a plain function so torch.export can trace it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


# Modules that compute differently in training mode.
_TRAINING_DIFFERS = (
    torch.nn.modules.dropout._DropoutNd,
    torch.nn.modules.batchnorm._BatchNorm,
    torch.nn.modules.instancenorm._InstanceNorm,
    torch.nn.RReLU,
)


def _warn_training(model: object) -> None:
    """Log a warning naming the submodules of ``model`` left in training mode whose results
    then differ from inference (dropout is random, batch norm uses the batch's statistics and
    updates its running ones): the export captures them as they are."""
    if not isinstance(model, torch.nn.Module):
        return
    names = [
        n or type(model).__name__
        for n, m in model.named_modules()
        if m.training and isinstance(m, _TRAINING_DIFFERS)
    ]
    if names:
        log.warning(
            "%s is in training mode (%d module(s) compute differently then: %s%s): exported as "
            "it is, with random dropout and batch statistics; call model.eval() first for "
            "inference",
            type(model).__name__,
            len(names),
            ", ".join(names[:4]),
            ", ..." if len(names) > 4 else "",
        )


def capture(
    model: torch.nn.Module | Callable[..., Any],
    example_inputs: tuple[Any, ...],
    *,
    example_kwargs: dict[str, Any] | None = None,
    dynamic_shapes: Any = None,
    strict: bool = False,
) -> torch.export.ExportedProgram:
    """Run ``torch.export.export`` (non-strict by default) and return the ExportedProgram. An
    ``ExportedProgram`` (e.g. from :func:`ember.quant.quantize_exported` or PyTorch's PT2E
    ``convert_pt2e``) is re-exported from its ``.module()``."""
    if isinstance(model, torch.export.ExportedProgram):
        model = model.module()
    _warn_training(model)
    if not isinstance(model, torch.nn.Module):
        model = _CallableModule(model)
    if not isinstance(example_inputs, tuple):
        example_inputs = (
            tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
        )
    log.debug("torch.export.export(strict=%s)", strict)
    try:
        with _without_hf_cache(model, example_kwargs):
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
    except Exception as e:
        if not _UNKNOWN_TYPE.search(str(e)):
            raise
        raise _explain_unknown_type(model, example_inputs, example_kwargs or {}, e) from e


# torch.export's words for a value of a type it cannot flatten.
_UNKNOWN_TYPE = re.compile(r"Found <class '([^']+)'> in (output|input)|not a known type")


@contextlib.contextmanager
def _without_hf_cache(model: torch.nn.Module, kwargs: dict[str, Any] | None) -> Iterator[None]:
    """While exporting, a ``transformers`` model whose ``config.use_cache`` is on (their default)
    and whose forward takes ``use_cache`` runs with it off, unless the caller passed it: a cache
    object cannot be a program output, and a KV-cache program is ``ember.llm.export``'s job."""
    cfg = getattr(model, "config", None)
    if (
        not getattr(cfg, "use_cache", False)
        or (kwargs and "use_cache" in kwargs)
        or "use_cache" not in inspect.signature(model.forward).parameters
    ):
        yield
        return
    log.info(
        "%s: config.use_cache is on; exporting without the KV cache (use_cache=False): the "
        "outputs hold the logits, no cache object. For a program with a KV cache use "
        "ember.llm.export.",
        type(model).__name__,
    )
    cfg.use_cache = False
    try:
        yield
    finally:
        cfg.use_cache = True


def _leaves_of_unknown_type(tree: Any, path: str) -> Iterator[tuple[str, type]]:
    """``(path, type)`` of every leaf of ``tree`` that torch.export cannot carry."""
    from torch.utils import _pytree as pytree

    if tree is None or isinstance(tree, (torch.Tensor, int, float, bool, str, torch.dtype)):
        return
    if isinstance(tree, dict) or type(tree) in pytree.SUPPORTED_NODES:
        if isinstance(tree, dict):
            items = list(tree.items())
        else:
            children, ctx = pytree.SUPPORTED_NODES[type(tree)].flatten_fn(tree)
            keys = ctx if isinstance(ctx, (list, tuple)) and len(ctx) == len(children) else None
            items = list(zip(keys if keys else range(len(children)), children, strict=True))
        for k, v in items:
            sub = f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{k!r}]"
            yield from _leaves_of_unknown_type(v, sub)
        return
    yield path, type(tree)


def _explain_unknown_type(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], e: Exception
) -> UnsupportedValueError:
    """The error for an input or output torch.export cannot carry, naming its type and path."""
    bad = list(_leaves_of_unknown_type(args, "inputs"))
    bad += list(_leaves_of_unknown_type(kwargs, "kwargs"))
    where = "input"
    if not bad:
        with torch.no_grad(), _without_hf_cache(model, kwargs):
            out = model(*args, **kwargs)
        bad = list(_leaves_of_unknown_type(out, "output"))
        where = "output"
    if not bad:
        m = _UNKNOWN_TYPE.search(str(e))
        return UnsupportedValueError(
            f"torch.export cannot carry a value of type {m.group(1) if m and m.group(1) else '?'}"
            " in the model's inputs or outputs: return and take only tensors, numbers and "
            "lists, tuples or dicts of them"
        )
    path, typ = bad[0]
    hint = (
        "pass use_cache=False (or set model.config.use_cache = False), or use ember.llm.export "
        "for a program with a KV cache"
        if "cache" in typ.__name__.lower()
        else f"make the model {'take' if where == 'input' else 'return'} tensors (or lists, "
        "tuples or dicts of them) instead, or register the type with "
        "torch.utils._pytree.register_pytree_node"
    )
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return UnsupportedValueError(
        f"the model's {where} holds a {typ.__module__}.{typ.__qualname__} at {path}{more}, "
        f"which torch.export cannot carry: {hint}"
    )


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
