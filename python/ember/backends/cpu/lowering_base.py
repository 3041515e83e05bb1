"""EmberCpuBackend lowering's records and argument helpers: :class:`Op` (the backend operator
record the fusion passes edit and the packer writes into the blob), :class:`Const`,
:class:`Unsupported` (why an instruction stays on the portable kernels), and the readers of an
instruction's arguments shared by :mod:`.lowering`, :mod:`.lowering_data` and the Vulkan
backend's lowering.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ember.passes.ir import CONSTANT, Arg, KernelInstr, TensorSpec
from ember.passes.out_variants import SCALAR_TYPE

INF = float("inf")
F32_CODE = SCALAR_TYPE[torch.float32]  # a dtype argument's value (the ScalarType code)


@dataclass(eq=False)
class Const:
    """A constant produced at export time (packed or folded weights)."""

    arr: np.ndarray
    key: Any = None


@dataclass(eq=False)
class Op:
    """One backend operator. Compared by identity: the fusion passes find and remove ops in
    lists (``in``, ``remove``), and two equal-looking ops are still two ops (their attrs hold
    numpy arrays, which have no truth value)."""

    kind: str
    ins: list[Any]  # TensorSpec | Const | None
    outs: list[TensorSpec]
    # ip / fp: the kind's parameter slots, in the order of backends/cpu/emc_format.h's
    # EMC_<KIND>_* enums (the C side reads them through that kind's typed view,
    # emc_<kind>_params_of); the layout is the blob format, unchanged by the C refactors.
    ip: list[int] = field(default_factory=list)
    fp: list[float] = field(default_factory=list)
    act: str = "none"
    attrs: dict[str, Any] = field(default_factory=dict)
    # The FX nodes this op computes (its instruction's, then those of the ops fused into it):
    # the ETRecord maps the op's profile events to them.
    nodes: list[str] = field(default_factory=list)


class Unsupported(Exception):
    pass


# ---- helpers ----------------------------------------------------------------------------------
def _f32(s: Any) -> bool:
    return isinstance(s, TensorSpec) and s.dtype == torch.float32 and not s.dynamic


def _const_arr(s: TensorSpec) -> np.ndarray | None:
    if s.kind == CONSTANT and s.data is not None:
        return s.data.detach().to(torch.float32).contiguous().numpy().reshape(s.shape)
    return None


def _t(a: Arg) -> TensorSpec:
    if a.kind != "tensor":
        raise Unsupported(f"argument is {a.kind}, not a tensor")
    return a.value


def _num(a: Arg) -> float | None:
    if a.kind in ("int", "double"):
        return float(a.value)
    if a.kind == "null":
        return None
    raise Unsupported(f"argument is {a.kind}, not a number")


def _ints(a: Arg) -> list[int]:
    if a.kind != "intlist" or not all(isinstance(x, int) for x in a.value):
        raise Unsupported("needs a static int list")
    return [int(x) for x in a.value]


def _pair(a: Arg, name: str, empty_ok: bool = False) -> list[int]:
    """A 2-d window parameter as two ints: ATen repeats a one-element list (``padding="valid"``
    decomposes to ``[0]``); an empty list is kept where ATen gives it a meaning (a pool's
    stride: the kernel)."""
    v = _ints(a)
    if len(v) == 1:
        v = v * 2
    if len(v) != 2 and not (empty_ok and not v):
        raise Unsupported(f"{name} has {len(v)} values, not 2")
    return v


def _out(ins: KernelInstr, i: int = 0) -> TensorSpec:
    return ins.outputs[i].value


def _operand(s: TensorSpec) -> Any:
    """A tensor operand: constants become Const (so they are packed into the blob)."""
    arr = _const_arr(s)
    return Const(arr, ("spec", id(s))) if arr is not None else s


def _f32x(a: Arg) -> TensorSpec:
    t = _t(a)
    if not _f32(t) or _const_arr(t) is not None:
        raise Unsupported("operand is not an f32 activation")
    return t
