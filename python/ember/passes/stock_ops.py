"""Keeping ``backend=None`` programs runnable on stock ExecuTorch.

``backend=None`` promises a file that stock ExecuTorch runs too. Ember's portable library has
kernels that ExecuTorch 1.5's does not (``aten::linalg_vector_norm.out`` from a weight norm,
``aten::logsumexp.out``, Ember's own ``ember::`` operators, ...). After lowering, every ATen and
``ember::`` kernel of such a method is checked against ExecuTorch's operator list, kept as data in
``ember/data/executorch_ops.txt`` (written by ``tools/executorch_ops.py`` from the executorch
wheel). An ATen operator outside it is decomposed with PyTorch's own decomposition table into
operators inside it where one exists; what is left is reported, naming the operator and the
user's source line, as a warning or (``stock_ops="error"``) an error.
"""

from __future__ import annotations

import logging
from functools import cache
from importlib import resources

import torch
from torch._decomp import get_decompositions

from ember.errors import UnsupportedOperatorError, user_source_line
from ember.passes.ir import KernelInstr, MethodIR

log = logging.getLogger(__name__)

MODES = ("warn", "error", "off")


@cache
def stock_executorch_ops() -> frozenset[str]:
    """The kernel names stock ExecuTorch 1.5's runtime registers (portable + prim)."""
    text = resources.files("ember").joinpath("data/executorch_ops.txt").read_text()
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def _is_kernel_call(ins: object) -> bool:
    from ember.backends.delegate import DelegateInstr

    return isinstance(ins, KernelInstr) and not isinstance(ins, DelegateInstr)


# Namespaces checked: ATen (ExecuTorch's portable library) and Ember's own operators. Others
# (``quantized_decomposed::``, ``llama::``) are ExecuTorch's too, in its optional quantized and
# custom-op libraries, which a stock build links when it runs such programs.
CHECKED = ("aten::", "ember::")


def non_stock(ir: MethodIR) -> list[KernelInstr]:
    """The kernel calls of ``ir`` whose kernel stock ExecuTorch's portable library lacks."""
    stock = stock_executorch_ops()
    return [
        i
        for i in ir.instrs
        if _is_kernel_call(i) and i.kernel.startswith(CHECKED) and i.kernel not in stock  # type: ignore[union-attr]
    ]


def decompositions_for(instrs: list[KernelInstr]) -> dict[torch._ops.OpOverload, object]:
    """PyTorch's decompositions of the ATen operators behind ``instrs`` (those it has)."""
    ops = {
        i.node.target
        for i in instrs
        if i.node is not None
        and isinstance(i.node.target, torch._ops.OpOverload)
        and i.kernel.startswith("aten::")
    }
    return get_decompositions(sorted(ops, key=str)) if ops else {}


def check_stock(ir: MethodIR, mode: str) -> None:
    """Warn (``"warn"``) or raise :class:`UnsupportedOperatorError` (``"error"``) when ``ir``
    still calls kernels that stock ExecuTorch lacks; ``"off"``: say nothing."""
    if mode not in MODES:
        raise ValueError(f"stock_ops={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "off":
        return
    bad = non_stock(ir)
    if not bad:
        return
    first = bad[0]
    names = sorted({i.kernel for i in bad})
    msg = (
        f"method {ir.name!r} calls {', '.join(names)}, which stock ExecuTorch 1.5 does not "
        "register: the file runs on Ember's runtime but not on stock ExecuTorch"
    )
    if mode == "error":
        raise UnsupportedOperatorError(msg, node=first.node)
    where = user_source_line(first.node)
    log.warning("%s%s", msg, f" (first at {where})" if where else "")
