"""Stage 2: decompose to the Core ATen operator set.

Guarantees: every ``call_function`` node targets a Core ATen op (or a higher-order op such as
``cond``, ``operator.getitem``, a symbolic-int operation or a runtime assertion), using PyTorch's
own decomposition table (``torch._decomp.core_aten_decompositions``). Then
:func:`decompose_unsupported`: an operator the runtime has no kernel for (``adaptive_max_pool2d``
before its kernel existed, ``nn.Bilinear``'s ``_trilinear``, ``nn.RReLU`` in eval mode, 3-d
average pools) is decomposed further where PyTorch's full table or Ember's own has a
decomposition.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._decomp import core_aten_decompositions, decomposition_table

# Core ATen decomposes these into select / log1p / exp chains; the runtime has their kernels
# (the CPU backend runs each as one activation) and the stock-ExecuTorch check decomposes them
# where a portable program must run there.
KEPT = (torch.ops.aten.softplus.default, torch.ops.aten.mish.default)


def decompose(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Return ``ep.run_decompositions(core_aten_decompositions())``, :data:`KEPT` kept whole."""
    table = core_aten_decompositions()
    for op in KEPT:
        table.pop(op, None)
    return ep.run_decompositions(table)


# ---- operators the runtime has no kernel for ----------------------------------------------------
aten = torch.ops.aten
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _trilinear(
    i1: torch.Tensor,
    i2: torch.Tensor,
    i3: torch.Tensor,
    expand1: list[int],
    expand2: list[int],
    expand3: list[int],
    sumdim: list[int],
    unroll_dim: int = 1,
) -> torch.Tensor:
    """``aten::_trilinear`` (``nn.Bilinear``'s): each input unsqueezed at its ``expand`` dims,
    the three multiplied and summed over ``sumdim``, as one einsum (products, not the full
    broadcast of the three)."""
    nd = i1.dim() + len(expand1)

    def sub(expand: list[int]) -> str:
        return "".join(_LETTERS[d] for d in range(nd) if d not in expand)

    out = "".join(_LETTERS[d] for d in range(nd) if d not in sumdim)
    return torch.einsum(f"{sub(expand1)},{sub(expand2)},{sub(expand3)}->{out}", i1, i2, i3)


def _rrelu_eval(
    x: torch.Tensor,
    noise: torch.Tensor,
    lower: float = 0.125,
    upper: float = 1.0 / 3.0,
    training: bool = False,
    generator: object = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``nn.RReLU`` in eval mode: a leaky ReLU of slope (lower + upper) / 2, the noise as it was.
    Training mode draws random slopes: no kernel, the verifier reports it."""
    if training:
        return NotImplemented  # type: ignore[return-value]
    return torch.nn.functional.leaky_relu(x, (lower + upper) / 2), noise


def _three(v: list[int], default: list[int]) -> list[int]:
    v = list(v) or default
    return v * 3 if len(v) == 1 else v


def _avg_pool3d(
    x: torch.Tensor,
    kernel_size: list[int],
    stride: list[int] | None = None,
    padding: list[int] | int = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> torch.Tensor:
    """``avg_pool3d`` as a 2-d average pool along depth over ``[N * C, 1, D, H * W]``, then one
    along H x W: a box average is the product of the axes' averages, the divisor (padded or
    valid count, clipped in ceil mode) the product of theirs. A divisor override is not."""
    if divisor_override is not None or x.dim() not in (4, 5):
        return NotImplemented  # type: ignore[return-value]
    k = _three(kernel_size, [])
    st = _three(stride or [], k)
    pad = _three([padding] if isinstance(padding, int) else padding, [0])
    lead, (d, h, w) = list(x.shape[:-3]), x.shape[-3:]
    y = torch.nn.functional.avg_pool2d(
        x.reshape(-1, 1, d, h * w), (k[0], 1), (st[0], 1), (pad[0], 0), ceil_mode, count_include_pad
    )
    od = y.shape[2]
    y = torch.nn.functional.avg_pool2d(
        y.reshape(-1, 1, h, w), k[1:], st[1:], pad[1:], ceil_mode, count_include_pad
    )
    return y.reshape(*lead, od, y.shape[-2], y.shape[-1])


def _adaptive_avg_pool3d(x: torch.Tensor, output_size: list[int]) -> torch.Tensor:
    """``_adaptive_avg_pool3d`` as adaptive 2-d pools along depth, then along H x W (each
    axis' windows are its own)."""
    if x.dim() not in (4, 5):
        return NotImplemented  # type: ignore[return-value]
    od, oh, ow = _three(output_size, [])
    lead, (d, h, w) = list(x.shape[:-3]), x.shape[-3:]
    y = torch.nn.functional.adaptive_avg_pool2d(x.reshape(-1, 1, d, h * w), (od, h * w))
    y = torch.nn.functional.adaptive_avg_pool2d(y.reshape(-1, 1, h, w), (oh, ow))
    return y.reshape(*lead, od, oh, ow)


EMBER_DECOMPOSITIONS: dict[torch._ops.OpOverload, object] = {
    aten.avg_pool3d.default: _avg_pool3d,
    aten._adaptive_avg_pool3d.default: _adaptive_avg_pool3d,
    aten._trilinear.default: _trilinear,
    aten.rrelu_with_noise_functional.default: _rrelu_eval,
}


def decompose_unsupported(
    ep: torch.export.ExportedProgram, unsupported: Callable[[torch.fx.Node], bool]
) -> torch.export.ExportedProgram:
    """Operators the runtime has no kernel for (``unsupported(node)``: the verifier's verdict)
    decomposed with PyTorch's full decomposition table, or Ember's own
    (:data:`EMBER_DECOMPOSITIONS`), until none is left that either table has (a few rounds: a
    decomposition may call another such operator). If any is left that neither has, the program
    is returned as it was, for the verifier to name the user's operator (not a prim of it)."""

    def lacking(e: torch.export.ExportedProgram) -> set[torch._ops.OpOverload]:
        return {
            n.target
            for n in e.graph.nodes
            if n.op == "call_function"
            and isinstance(n.target, torch._ops.OpOverload)
            and unsupported(n)
        }

    if not lacking(ep):
        return ep
    out = ep
    for _ in range(4):
        ops = lacking(out)
        table = {op: decomposition_table.get(op, EMBER_DECOMPOSITIONS.get(op)) for op in ops}
        table = {op: fn for op, fn in table.items() if fn is not None}
        if not table:
            break
        # with the Core ATen table: what a decomposition calls is decomposed to Core ATen too
        out = out.run_decompositions({**core_aten_decompositions(), **table})  # type: ignore[arg-type]
    # Something still lacking (a decomposition into prims, an operator no table has): the
    # program as it was, so that the verifier names the user's operator, not a prim of it.
    return ep if lacking(out) else out
