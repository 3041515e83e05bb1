"""Shared helpers of the shape, copy and indexing kernel tests (test_kernels_shape_*.py:
kernels/portable/ops_shape.def against eager PyTorch).

Each test file holds one table (CASES, a ShapeCases) that drives one parametrized test. A case
is a name plus a builder that, given a seeded generator, returns a ``Call``: the kernel name,
its boxed arguments in the runtime's convention (schema args, out= args, then the return value
again for ops that return one), the expected contents of every out tensor, and optionally a
tolerance. These ops move bytes, so results must be bit-exact (NaN-aware) unless the op
accumulates (index_put accumulate, scatter_add, scatter_reduce), which gets a per-dtype
tolerance. Error cases must raise RuntimeError, never crash.

Inputs cover every dtype (u8, i8, i16, i32, i64, f16, bf16, f32, f64, bool), empty and 0-dim
tensors, negative dims, and non-contiguous layouts (permuted, sliced, channels-last, expanded
stride-0) for inputs and outs; data-dependent ops write DYNAMIC outs. ``run_case`` runs one
case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from kernel_cases import CaseList, seeded

from ember._lib import Out, call_kernel

A = torch.ops.aten
U8, I8, I16, I32, I64 = torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64
F16, BF16, F32, F64, BOOL = torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool
ALL = [U8, I8, I16, I32, I64, F16, BF16, F32, F64, BOOL]
REALS = [U8, I8, I16, I32, I64, F16, BF16, F32, F64]
LAYOUTS = ["c", "t", "s", "x"]

# (rtol, atol) for accumulating ops, per result dtype.
TOL = {F32: (1e-5, 1e-6), F64: (1e-12, 1e-12), F16: (1e-2, 1e-2), BF16: (2e-2, 2e-2)}


@dataclass
class Call:
    op: str
    args: list[Any]
    expect: list[tuple[Any, Any]] = field(default_factory=list)  # (out object, expected)
    tol: bool = False  # compare floats with TOL instead of exactly
    error: bool = False


Builder = Callable[[torch.Generator], Call]


# -- tensors ------------------------------------------------------------------------------------
def rnd(shape: Any, dtype: torch.dtype, g: torch.Generator, layout: str = "c") -> torch.Tensor:
    """Random tensor of `shape`; layout 'c' contiguous, 't' permuted (dims reversed), 's' sliced
    (every other element of a wider last dim), 'cl' channels-last (4-D), 'x' expanded (stride 0
    on the first dim when its size is > 1)."""
    shape = list(shape)
    if layout == "s" and shape:
        return rnd(shape[:-1] + [shape[-1] * 2], dtype, g)[..., ::2]
    if layout == "t" and len(shape) > 1:
        return rnd(shape[::-1], dtype, g).permute(*reversed(range(len(shape))))
    if layout == "x" and shape and shape[0] > 1:
        return rnd([1] + shape[1:], dtype, g).expand(shape)
    if dtype.is_floating_point:
        t = (torch.randn(shape, generator=g, dtype=F64) * 3).to(dtype)
    elif dtype == BOOL:
        t = torch.rand(shape, generator=g) > 0.5
    elif dtype == U8:
        t = torch.randint(0, 200, shape, generator=g).to(dtype)
    else:
        t = torch.randint(-100, 100, shape, generator=g).to(dtype)
    if layout == "cl" and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def out_like(want: torch.Tensor, kind: str = "c") -> Any:
    """An out tensor for `want`: 'c' contiguous, 't' permuted strides, 'd' DYNAMIC with spare
    capacity (an Out wrapper)."""
    if kind == "t" and want.dim() > 1:
        return torch.empty(list(want.shape)[::-1], dtype=want.dtype).permute(
            *reversed(range(want.dim()))
        )
    if kind == "d" and want.dim() > 0:
        return Out(torch.empty([s + 1 for s in want.shape], dtype=want.dtype))
    return torch.empty(want.shape, dtype=want.dtype)


def ret_of(o: Any) -> Any:
    """The return-value argument for out `o`. Kernels never read it; call_kernel builds a separate
    tensor for each occurrence of an Out, so a DYNAMIC out is not repeated (its resized sizes
    would be overwritten by the untouched copy)."""
    return None if isinstance(o, Out) else o


def pick(g: torch.Generator, xs: list[Any]) -> Any:
    return xs[int(torch.randint(0, len(xs), (1,), generator=g))]


def rint(g: torch.Generator, lo: int, hi: int) -> int:
    """Random int in [lo, hi]."""
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


def out_call(
    op: str,
    args: list[Any],
    want: torch.Tensor,
    g: torch.Generator | None = None,
    pos: int | None = None,
    tol: bool = False,
    kind: str | None = None,
) -> Call:
    """A Call for an out variant: inserts the out at `pos` (default: end) and as the return."""
    kind = kind or (pick(g, ["c", "c", "t", "d"]) if g is not None else "c")
    o = out_like(want, kind)
    args = list(args)
    args.insert(len(args) if pos is None else pos, o)
    return Call(op, args + [ret_of(o)], [(o, want)], tol=tol)


def err_call(op: str, args: list[Any], out: torch.Tensor | None = None) -> Call:
    """A call that must fail; `out` is appended as out and return when given."""
    args = list(args) + ([out, ret_of(out)] if out is not None else [])
    return Call(op, args, error=True)


def dims_of(shape: Any) -> int:
    return len(shape)


# Shapes every view-copy op is checked on (each_dtype_shape's default).
SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4), (2, 0, 3), (2, 3, 4, 5), (1, 3, 1, 2)]


# Non-empty shapes (the ops that index a dim), as_strided geometries (input shape, size, stride,
# storage offset) and slice arguments: the view copies and the *_scatter ops use them.
NONEMPTY = [(5,), (3, 4), (2, 3, 4), (2, 0, 3), (2, 3, 4, 5)]
AS_STRIDED = [
    ((12,), [3, 2], [1, 3], 0),
    ((3, 4), [2, 2], [4, 1], 5),
    ((3, 4), [4, 3], [1, 4], None),
    ((2, 3), [0, 2], [1, 1], 1),
    ((5,), [], [], 4),
    ((2, 3, 2), [3, 2], [0, 1], 2),
]


def slice_args(g: torch.Generator, n: int) -> tuple[Any, Any, int]:
    start = pick(g, [None, 0, 1, -1, -n - 3, n + 2, rint(g, -n, n)])
    end = pick(g, [None, n, -1, n + 5, -n - 5, rint(g, -n, n)])
    return start, end, rint(g, 1, 3)


class ShapeCases(CaseList):
    """A test file's table, with a registration per (dtype, shape)."""

    def each_dtype_shape(
        self,
        name: str,
        make: Callable[[torch.dtype, tuple, torch.Generator], Call],
        shapes: list[tuple] = SHAPES,
        dtypes: list[torch.dtype] = ALL,
    ) -> None:
        """Registers one case per (dtype, shape)."""
        for dt in dtypes:
            for shp in shapes:
                self.add(
                    f"{name}-{str(dt)[6:]}-{'x'.join(map(str, shp)) or 'scalar'}",
                    lambda g, dt=dt, shp=shp: make(dt, shp, g),
                )


# -- checks -------------------------------------------------------------------------------------
def value_of(o: Any) -> torch.Tensor:
    return o.view() if isinstance(o, Out) else o


def check(got: torch.Tensor, want: torch.Tensor, tol: bool) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if tol and want.dtype in TOL:
        rtol, atol = TOL[want.dtype]
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    elif want.is_complex() or want.dtype.is_floating_point:
        # bit-exact, NaN-aware
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        assert torch.equal(got, want), (got, want)


def run_case(name: str, build: Builder) -> None:
    """Builds case ``name`` with its seeded generator, runs it and checks the outs."""
    call = build(seeded(name))
    if call.error:
        with pytest.raises(RuntimeError, match=" failed: "):  # the kernel's own error
            call_kernel(call.op, call.args, temp_bytes=1 << 16)
        return
    call_kernel(call.op, call.args, temp_bytes=1 << 16)
    for o, want in call.expect:
        check(value_of(o), want, call.tol)
