"""Stage 2: decompose to the Core ATen operator set.

Guarantees: every ``call_function`` node targets a Core ATen op (or a higher-order op such as
``cond``, ``operator.getitem``, a symbolic-int operation or a runtime assertion), using PyTorch's
own decomposition table (``torch._decomp.core_aten_decompositions``). Then
:func:`decompose_unsupported`: an operator the runtime has no kernel for (``adaptive_max_pool2d``
before its kernel existed, ``nn.Bilinear``'s ``_trilinear``, ``nn.RReLU`` in eval mode) is
decomposed further where PyTorch's full table or Ember's own has a decomposition.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._decomp import core_aten_decompositions, decomposition_table


def decompose(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Return ``ep.run_decompositions(core_aten_decompositions())``."""
    return ep.run_decompositions(core_aten_decompositions())


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


EMBER_DECOMPOSITIONS: dict[torch._ops.OpOverload, object] = {
    aten._trilinear.default: _trilinear,
    aten.rrelu_with_noise_functional.default: _rrelu_eval,
}


def decompose_unsupported(
    ep: torch.export.ExportedProgram, unsupported: Callable[[torch.fx.Node], bool]
) -> torch.export.ExportedProgram:
    """Operators the runtime has no kernel for (``unsupported(node)``: the verifier's verdict)
    decomposed with PyTorch's full decomposition table, or Ember's own
    (:data:`EMBER_DECOMPOSITIONS`), until none is left that either table has (a few rounds: a
    decomposition may call another such operator). What neither has stays for the verifier to
    report."""
    for _ in range(4):
        ops = {
            n.target
            for n in ep.graph.nodes
            if n.op == "call_function"
            and isinstance(n.target, torch._ops.OpOverload)
            and unsupported(n)
        }
        table = {op: decomposition_table.get(op, EMBER_DECOMPOSITIONS.get(op)) for op in ops}
        table = {op: fn for op, fn in table.items() if fn is not None}
        if not table:
            break
        # with the Core ATen table: what a decomposition calls is decomposed to Core ATen too
        ep = ep.run_decompositions({**core_aten_decompositions(), **table})  # type: ignore[arg-type]
    return ep
