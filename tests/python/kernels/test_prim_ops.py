"""Prim ops (kernels/prim/ops.def) against Python semantics and eager PyTorch.

Prim ops are functional on EValues: the last argument is the result value, which the op
overwrites with an Int, Double or Bool (aten::sym_size.int, executorch_prim::add.Scalar, ...).
``call_prim`` runs a registered op through the same ctypes path as ``call_kernel`` and reads
the result value back. One table (CASES) of (op, args, expected) drives one parametrized test;
``expected`` is computed with Python's own operators (floor division floors, % takes the
divisor's sign, / gives a float). Integer division by zero and malformed arguments must raise.

The tensor prim ops (et_copy_index, et_view) have their own tests below.

Run: PYTHONPATH=python .venv/bin/python -m pytest tests/python/kernels/test_prim_ops.py
"""

from __future__ import annotations

import ctypes
import math
import operator
from typing import Any

import pytest
import torch

from ember._lib import (
    KERNEL_FN,
    TAG_BOOL,
    TAG_DOUBLE,
    TAG_INT,
    EmAllocator,
    EmEValue,
    EmKernelCtx,
    Out,
    ValueBuilder,
    call_kernel,
    lib,
    status_message,
)

RESULT = object()  # placeholder for the result value (an Int 0 is passed)


def call_prim(name: str, args: list[Any]) -> Any:
    """Runs prim op ``name`` on ``args`` (RESULT marks the result slot) and returns the
    Python value the op wrote there."""
    L = lib()
    entry = L.em_find_kernel(name.encode())
    if not entry:
        raise RuntimeError(f"kernel {name} is not registered")
    e = entry.contents
    if e.n_args >= 0 and e.n_args != len(args):
        raise RuntimeError(f"kernel {name} takes {e.n_args} args, got {len(args)}")
    vb = ValueBuilder()
    evs = [vb.value(0 if a is RESULT else a) for a in args]
    argv = (ctypes.POINTER(EmEValue) * len(evs))(*[ctypes.pointer(v) for v in evs])
    buf = ctypes.create_string_buffer(1 << 16)
    temp = EmAllocator()
    L.em_allocator_init(ctypes.byref(temp), buf, 1 << 16)
    ctx = EmKernelCtx()
    ctx.temp = ctypes.pointer(temp)
    ctx.op_name = name.encode()
    L.em_clear_last_error()
    st = KERNEL_FN(e.fn)(ctypes.byref(ctx), argv)
    if st != 0:
        raise RuntimeError(f"{name} failed: {status_message(st)}")
    r = evs[-1]
    if r.tag == TAG_INT:
        return int(r.u.i)
    if r.tag == TAG_DOUBLE:
        return float(r.u.d)
    if r.tag == TAG_BOOL:
        return bool(r.u.b)
    raise AssertionError(f"unexpected result tag {r.tag}")


def _promote(r: Any, a: Any, b: Any) -> Any:
    """SymInt/SymFloat mixing gives a float, as torch.sym_max/sym_min on mixed operands."""
    return float(r) if isinstance(a, float) or isinstance(b, float) else r


def py_round(x: Any) -> int:
    return round(x)


BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "eq": operator.eq,
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
    "sym_max": lambda a, b: _promote(max(a, b), a, b),
    "sym_min": lambda a, b: _promote(min(a, b), a, b),
}
UNARY = {
    "neg": operator.neg,
    "ceil": math.ceil,
    "round": py_round,
    "trunc": math.trunc,
    "sym_float": float,
    "sym_int": int,
}

OPERANDS = [
    (7, 3),
    (-7, 3),
    (7, -3),
    (-7, -3),
    (0, 5),
    (3, 4),
    (7.5, 2),
    (-7.5, 2),
    (7, 2.5),
    (-3.25, -0.5),
    (2.0, 2),
    (5, 5),
    (1 << 40, 3),
]

CASES: list[tuple[str, str, list[Any], Any]] = []
for _op, _fn in BINARY.items():
    for _a, _b in OPERANDS:
        CASES.append(
            (f"{_op}-{_a}-{_b}", f"executorch_prim::{_op}.Scalar", [_a, _b, RESULT], _fn(_a, _b))
        )
for _op, _fn in UNARY.items():
    for _a in (7, -7, 0, 2.5, -2.5, 3.5, -0.4, 1e10, 1.7):
        CASES.append((f"{_op}-{_a}", f"executorch_prim::{_op}.Scalar", [_a, RESULT], _fn(_a)))
for _a, _b in [(7, 3), (-7, 3), (7, -3), (-7, -3), (0, 5), (-(1 << 62), 7)]:
    CASES.append(
        (f"floordiv.int-{_a}-{_b}", "executorch_prim::floordiv.int", [_a, _b, RESULT], _a // _b)
    )
    CASES.append((f"mod.int-{_a}-{_b}", "executorch_prim::mod.int", [_a, _b, RESULT], _a % _b))
for _c in (True, False):
    CASES.append((f"sym_not-{_c}", "executorch_prim::sym_not.Scalar", [_c, RESULT], not _c))
    for _t, _e in ((3, 4), (1.5, -2.5), (True, False)):
        CASES.append(
            (
                f"sym_ite-{_c}-{_t}",
                "executorch_prim::sym_ite.Scalar",
                [_c, _t, _e, RESULT],
                _t if _c else _e,
            )
        )
CASES += [
    ("add-overflow-wraps", "executorch_prim::add.Scalar", [(1 << 63) - 1, 1, RESULT], -(1 << 63)),
    ("truediv-int-by-zero", "executorch_prim::truediv.Scalar", [1, 0, RESULT], math.inf),
    ("eq-int-double", "executorch_prim::eq.Scalar", [2, 2.0, RESULT], True),
    ("lt-nan", "executorch_prim::lt.Scalar", [math.nan, 1.0, RESULT], False),
]

_t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
TENSOR_CASES: list[tuple[str, str, list[Any], Any]] = [
    ("sym_size-0", "aten::sym_size.int", [_t, 0, RESULT], 2),
    ("sym_size-neg", "aten::sym_size.int", [_t, -1, RESULT], 4),
    (
        "sym_size-cl",
        "aten::sym_size.int",
        [torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last), 1, RESULT],
        3,
    ),
    ("sym_numel", "aten::sym_numel", [_t, RESULT], 24),
    ("sym_numel-empty", "aten::sym_numel", [torch.zeros(0, 3), RESULT], 0),
    ("sym_numel-0dim", "aten::sym_numel", [torch.tensor(1.0), RESULT], 1),
]
for _dt, _v in [
    (torch.float32, 2.5),
    (torch.float16, -1.5),
    (torch.bfloat16, 3.0),
    (torch.float64, 0.1),
    (torch.int64, -(1 << 40)),
    (torch.int32, 7),
    (torch.uint8, 200),
    (torch.int8, -5),
    (torch.int16, 300),
    (torch.bool, True),
]:
    TENSOR_CASES.append(
        (
            f"local_scalar_dense-{_dt}",
            "aten::_local_scalar_dense",
            [torch.tensor([_v], dtype=_dt).reshape(1, 1), RESULT],
            torch.tensor(_v, dtype=_dt).item(),
        )
    )

ERRORS: list[tuple[str, str, list[Any]]] = [
    ("floordiv-zero", "executorch_prim::floordiv.Scalar", [1, 0, RESULT]),
    ("mod-zero", "executorch_prim::mod.Scalar", [-4, 0, RESULT]),
    ("floordiv.int-zero", "executorch_prim::floordiv.int", [1, 0, RESULT]),
    ("mod.int-double", "executorch_prim::mod.int", [1.5, 2, RESULT]),
    ("add-tensor", "executorch_prim::add.Scalar", [torch.ones(1), 2, RESULT]),
    ("ceil-nan", "executorch_prim::ceil.Scalar", [math.nan, RESULT]),
    ("sym_int-inf", "executorch_prim::sym_int.Scalar", [math.inf, RESULT]),
    ("sym_size-bad-dim", "aten::sym_size.int", [_t, 3, RESULT]),
    ("sym_size-0dim", "aten::sym_size.int", [torch.tensor(1.0), 0, RESULT]),
    ("local_scalar_dense-many", "aten::_local_scalar_dense", [_t, RESULT]),
    ("sym_numel-not-tensor", "aten::sym_numel", [3, RESULT]),
]


def _same(got: Any, want: Any) -> bool:
    if type(got) is not type(want):
        return False
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    return got == want


@pytest.mark.parametrize(
    "name,op,args,want", CASES + TENSOR_CASES, ids=[c[0] for c in CASES + TENSOR_CASES]
)
def test_prim(name: str, op: str, args: list[Any], want: Any) -> None:
    got = call_prim(op, args)
    assert _same(got, want), f"{op}{args[:-1]}: got {got!r}, want {want!r}"


@pytest.mark.parametrize("name,op,args", ERRORS, ids=[e[0] for e in ERRORS])
def test_prim_error(name: str, op: str, args: list[Any]) -> None:
    with pytest.raises(RuntimeError):
        call_prim(op, args)


def _raw_call(name: str, evs: list[EmEValue]) -> int:
    """Calls kernel ``name`` on already-built EValues (so a tensor persists across calls)."""
    L = lib()
    argv = (ctypes.POINTER(EmEValue) * len(evs))(*[ctypes.pointer(v) for v in evs])
    buf = ctypes.create_string_buffer(1 << 12)
    temp = EmAllocator()
    L.em_allocator_init(ctypes.byref(temp), buf, 1 << 12)
    ctx = EmKernelCtx()
    ctx.temp = ctypes.pointer(temp)
    ctx.op_name = name.encode()
    L.em_clear_last_error()
    return int(KERNEL_FN(L.em_find_kernel(name.encode()).contents.fn)(ctypes.byref(ctx), argv))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16, torch.bool])
def test_et_copy_index_stacks_rows(dtype: torch.dtype) -> None:
    """Lowered map/scan: copy_to starts with 0 rows and grows along dim 0 as rows arrive."""
    g = torch.Generator().manual_seed(1)
    rows = [torch.randn(3, 4, generator=g).to(dtype) for _ in range(5)]
    storage = torch.zeros(5, 3, 4, dtype=dtype)
    vb = ValueBuilder()
    acc = vb.value(0)
    acc.tag = 1  # Tensor
    et = vb.tensor(storage[:0], dynamic=True, capacity=60)
    et.data = storage.data_ptr()  # torch reports 0 for an empty view
    acc.u.tensor = ctypes.pointer(et)
    for i, r in enumerate(rows):
        st = _raw_call("executorch_prim::et_copy_index.tensor", [acc, vb.value(r), vb.value(i)])
        assert st == 0, status_message(st)
        t = acc.u.tensor.contents
        assert [t.sizes[k] for k in range(3)] == [i + 1, 3, 4]
    assert torch.equal(storage, torch.stack(rows))


def test_et_copy_index_strided_source_keeps_larger_size() -> None:
    acc = Out(torch.zeros(4, 2, 3))
    src = torch.arange(6.0).reshape(3, 2).t()  # non-contiguous source
    call_kernel("executorch_prim::et_copy_index.tensor", [acc, src, 2], temp_bytes=1 << 16)
    assert acc.sizes == [4, 2, 3]  # copy_to only grows
    assert torch.equal(acc.view()[2], src)
    assert not acc.view()[3].any()


@pytest.mark.parametrize(
    "args",
    [
        [Out(torch.zeros(2, 3)), torch.ones(4), 1],  # shape mismatch
        [Out(torch.zeros(2, 3)), torch.ones(3), 5],  # past the capacity
        [Out(torch.zeros(2, 3)), torch.ones(3, dtype=torch.int32), 0],  # dtype mismatch
        [Out(torch.zeros(2, 3)), torch.ones(3), -1],  # negative index
        [Out(torch.zeros(2, 3)), torch.ones(1, 3), 0],  # rank mismatch
    ],
)
def test_et_copy_index_errors(args: list[Any]) -> None:
    with pytest.raises(RuntimeError):
        call_kernel("executorch_prim::et_copy_index.tensor", args, temp_bytes=1 << 16)


def test_et_view_aliases_and_infers() -> None:
    x = torch.arange(24, dtype=torch.float32)
    vb = ValueBuilder()
    res = vb.value(0)
    res.tag = 1  # Tensor: an unplanned result with no data and no capacity yet
    et = vb.tensor(torch.zeros(1, 1, 1), dynamic=True, capacity=1)
    et.dynamism = 2
    et.data = None
    res.u.tensor = ctypes.pointer(et)
    st = _raw_call("executorch_prim::et_view.default", [vb.value(x), vb.value([2, -1, 4]), res])
    assert st == 0, status_message(st)
    t = res.u.tensor.contents
    assert [t.sizes[i] for i in range(3)] == [2, 3, 4]
    assert [t.strides[i] for i in range(3)] == [12, 4, 1]
    assert t.data == x.data_ptr()
    assert t.numel == 24


@pytest.mark.parametrize("size", [[5, -1], [-1, -1, 24], [2, 3, 5], [0, -1, 1]])
def test_et_view_errors(size: list[int]) -> None:
    x = torch.arange(24, dtype=torch.float32)
    n = len(size)
    res = Out(torch.zeros([1] * n))
    with pytest.raises(RuntimeError):
        call_kernel("executorch_prim::et_view.default", [x, size, res], temp_bytes=1 << 12)


def test_et_view_dtype_mismatch() -> None:
    with pytest.raises(RuntimeError):
        call_kernel(
            "executorch_prim::et_view.default",
            [torch.zeros(4), [4], Out(torch.zeros(4, dtype=torch.int32))],
        )


def test_every_prim_op_is_covered() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "kernels/prim/ops.def").read_text()
    names = set(re.findall(r'^EM_OP\("([^"]+)"', text, re.M))
    covered = {c[1] for c in CASES + TENSOR_CASES}
    covered |= {"executorch_prim::et_copy_index.tensor", "executorch_prim::et_view.default"}
    assert names - covered == set()
