"""Shape, copy and indexing kernels (kernels/portable/ops_shape.def) against eager PyTorch:
index_select, gather, scatter and advanced indexing (index, index_put).

One table (CASES) drives one parametrized test; the case convention, layouts and the runner are
in kernels_shape_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_shape_index.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from kernels_shape_common import (
    BF16,
    BOOL,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    LAYOUTS,
    U8,
    A,
    Builder,
    Call,
    ShapeCases,
    err_call,
    out_call,
    pick,
    rint,
    rnd,
    run_case,
)

CASES = ShapeCases()
case = CASES.add
each_dtype_shape = CASES.each_dtype_shape


# -- index_select, gather, scatter ----------------------------------------------------------------
def rand_index(
    shape: Any, n: int, g: torch.Generator, dt: torch.dtype = I64, unique_dim: int | None = None
) -> torch.Tensor:
    """Index values in [0, n); with unique_dim, distinct along that dim (needs size <= n)."""
    if unique_dim is None or not shape or n == 0 or 0 in list(shape):
        return torch.randint(0, max(n, 1), list(shape), generator=g).to(dt)
    shape = list(shape)
    k = shape[unique_dim]
    moved = shape[:unique_dim] + shape[unique_dim + 1 :] + [k]
    rows = [
        torch.randperm(n, generator=g)[:k]
        for _ in range(max(1, int(torch.tensor(moved[:-1]).prod())))
    ]
    t = torch.stack(rows).reshape(moved) if rows else torch.empty(moved, dtype=I64)
    return t.movedim(-1, unique_dim).to(dt)


def mk_index_select(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = max(len(shp), 1)
    d = rint(g, -r, r - 1)
    n = shp[d] if shp else 1
    ishape = pick(g, [(), (1,)]) if not shp else pick(g, [(), (0,), (rint(g, 1, 6),)])
    idx = rand_index(ishape, n, g, pick(g, [I32, I64])) if n or 0 in ishape else None
    if idx is None:
        idx = torch.empty(0, dtype=I64)
    if pick(g, [0, 1]) and idx.dim() == 1 and idx.numel() > 1:
        idx = torch.stack([idx, idx], 1)[:, 0]  # non-contiguous index
    return out_call("aten::index_select.out", [x, d, idx], A.index_select.default(x, d, idx), g)


for rep in range(2):
    each_dtype_shape(f"index_select{rep}", mk_index_select)
case(
    "index_select-err-oob",
    lambda g: err_call(
        "aten::index_select.out", [rnd((3, 4), F32, g), 1, torch.tensor([4])], torch.empty(3, 1)
    ),
)
case(
    "index_select-err-neg",
    lambda g: err_call(
        "aten::index_select.out", [rnd((3, 4), F32, g), 1, torch.tensor([-1])], torch.empty(3, 1)
    ),
)
case(
    "index_select-err-2d",
    lambda g: err_call(
        "aten::index_select.out", [rnd((3, 4), F32, g), 1, torch.tensor([[1]])], torch.empty(3, 1)
    ),
)
case(
    "index_select-err-dtype",
    lambda g: err_call(
        "aten::index_select.out",
        [rnd((3, 4), F32, g), 1, torch.tensor([1], dtype=I16)],
        torch.empty(3, 1),
    ),
)


def gather_shape(shp: tuple, d: int, g: torch.Generator) -> list[int]:
    """An index shape valid for gather/scatter along d (<= self elsewhere)."""
    return (
        [
            rint(g, 0 if pick(g, [0, 0, 1]) else 1, 4)
            if i == d % len(shp)
            else rint(g, 1 if s else 0, s)
            for i, s in enumerate(shp)
        ]
        if shp
        else []
    )


def mk_gather(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = max(len(shp), 1)
    d = rint(g, -r, r - 1)
    n = shp[d] if shp else 1
    ishape = gather_shape(shp, d, g) if n else [0] * len(shp)
    idx = rand_index(ishape, n, g, pick(g, [I32, I64]))
    want = A.gather.default(x, d, idx)
    return out_call("aten::gather.out", [x, d, idx, False], want, g, pos=4)


for rep in range(2):
    each_dtype_shape(f"gather{rep}", mk_gather)
case(
    "gather-err-oob",
    lambda g: err_call(
        "aten::gather.out", [rnd((3, 4), F32, g), 0, torch.tensor([[3]]), False], torch.empty(1, 1)
    ),
)
case(
    "gather-err-neg",
    lambda g: err_call(
        "aten::gather.out", [rnd((3, 4), F32, g), 0, torch.tensor([[-1]]), False], torch.empty(1, 1)
    ),
)
case(
    "gather-err-rank",
    lambda g: err_call(
        "aten::gather.out", [rnd((3, 4), F32, g), 0, torch.tensor([1]), False], torch.empty(1)
    ),
)
case(
    "gather-err-size",
    lambda g: err_call(
        "aten::gather.out",
        [rnd((3, 4), F32, g), 0, torch.zeros(2, 5, dtype=I64), False],
        torch.empty(2, 5),
    ),
)


def mk_scatter(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    r = max(len(shp), 1)
    d = rint(g, -r, r - 1)
    n = shp[d] if shp else 1
    kind = pick(g, ["src", "value", "add", "reduce", "value_reduce", "two"])
    ishape = gather_shape(shp, d, g) if n else [0] * len(shp)
    if kind in ("src", "value") and ishape:
        ishape[d] = min(ishape[d], n)
    idx = rand_index(
        ishape,
        n,
        g,
        pick(g, [I32, I64]),
        unique_dim=d % r if kind in ("src", "value") and shp else None,
    )
    src_shape = [s + rint(g, 0, 1) for s in ishape]
    src = rnd(src_shape, dt, g, pick(g, LAYOUTS))
    if kind == "src":
        return out_call("aten::scatter.src_out", [x, d, idx, src], A.scatter.src(x, d, idx, src), g)
    value = pick(g, [True, 3, -2.5]) if dt != BOOL else pick(g, [True, False])
    if kind == "value":
        if not dt.is_floating_point and isinstance(value, float):
            value = 7
        return out_call(
            "aten::scatter.value_out", [x, d, idx, value], A.scatter.value(x, d, idx, value), g
        )
    tol = dt.is_floating_point
    if kind == "add":
        return out_call(
            "aten::scatter_add.out",
            [x, d, idx, src],
            A.scatter_add.default(x, d, idx, src),
            g,
            tol=tol,
        )
    if dt == BOOL:
        return out_call("aten::scatter.src_out", [x, d, idx, src], A.scatter.src(x, d, idx, src), g)
    red = pick(g, ["add", "multiply"])
    if kind == "reduce":
        return out_call(
            "aten::scatter.reduce_out",
            [x, d, idx, src, red],
            A.scatter.reduce(x, d, idx, src, reduce=red),
            g,
            tol=tol,
        )
    if kind == "value_reduce":
        v = 2 if not dt.is_floating_point else -1.5
        return out_call(
            "aten::scatter.value_reduce_out",
            [x, d, idx, v, red],
            A.scatter.value_reduce(x, d, idx, v, reduce=red),
            g,
            tol=tol,
        )
    red = pick(g, ["sum", "prod", "mean", "amax", "amin"])
    inc = bool(pick(g, [0, 1]))
    want = A.scatter_reduce.two(x, d, idx, src, red, include_self=inc)
    return out_call(
        "aten::scatter_reduce.two_out", [x, d, idx, src, red, inc], want, g, pos=6, tol=tol
    )


for rep in range(6):
    each_dtype_shape(f"scatter{rep}", mk_scatter)
case(
    "scatter-err-oob",
    lambda g: err_call(
        "aten::scatter.src_out",
        [rnd((3, 4), F32, g), 0, torch.tensor([[3]]), rnd((1, 1), F32, g)],
        torch.empty(3, 4),
    ),
)
case(
    "scatter-err-dtype",
    lambda g: err_call(
        "aten::scatter.src_out",
        [rnd((3, 4), F32, g), 0, torch.tensor([[1]]), rnd((1, 1), F64, g)],
        torch.empty(3, 4),
    ),
)
case(
    "scatter-err-src-size",
    lambda g: err_call(
        "aten::scatter_add.out",
        [rnd((3, 4), F32, g), 0, torch.tensor([[1, 1]]), rnd((1, 1), F32, g)],
        torch.empty(3, 4),
    ),
)
case(
    "scatter-err-reduce",
    lambda g: Call(
        "aten::scatter.reduce_out",
        [
            rnd((3, 4), F32, g),
            0,
            torch.tensor([[1]]),
            rnd((1, 1), F32, g),
            "mean",
            torch.empty(3, 4),
            torch.empty(3, 4),
        ],
        error=True,
    ),
)
case(
    "scatter_reduce-err-reduce",
    lambda g: Call(
        "aten::scatter_reduce.two_out",
        [
            rnd((3, 4), F32, g),
            0,
            torch.tensor([[1]]),
            rnd((1, 1), F32, g),
            "add",
            True,
            torch.empty(3, 4),
            torch.empty(3, 4),
        ],
        error=True,
    ),
)


# -- advanced indexing ----------------------------------------------------------------------------
def mk_indices(x: torch.Tensor, g: torch.Generator, unique: bool = False) -> list[Any]:
    """A random Tensor?[] for x: Nones, int32/int64 tensors (broadcasting, negative values),
    bool masks spanning one or more dims. With `unique`, the indexed positions are distinct."""
    shp = list(x.shape)
    r = len(shp)
    out: list[Any] = []
    d = 0
    bshape = pick(g, [[2], [3], [2, 1], [1, 2], [], [0]])
    used = False
    while d < r and len(out) < rint(g, 1, r):
        kind = pick(g, ["none", "int", "int", "mask"])
        if kind == "mask" and not used and not unique:
            k = rint(g, 1, min(2, r - d))
            out.append(torch.rand(shp[d : d + k], generator=g) > 0.4)
            d += k
            used = True
            continue
        if kind == "int" and shp[d] > 0 and not (unique and used):
            n = shp[d]
            s = [b for b in bshape] if pick(g, [0, 1, 1]) else bshape[-1:]
            if unique:
                k = min(n, 3)
                t = torch.randperm(n, generator=g)[:k]
                t = t.to(pick(g, [I32, I64]))
            else:
                t = torch.randint(-n, n, s, generator=g).to(pick(g, [I32, I64]))
            out.append(t)
            d += 1
            used = True
            continue
        out.append(None)
        d += 1
    if all(i is None for i in out):
        n = shp[0]
        out = [torch.randperm(n, generator=g)[: min(n, 2)] if n else torch.empty(0, dtype=I64)]
    return out


INDEX_SHAPES = [(5,), (3, 4), (2, 3, 4), (2, 0, 3), (2, 3, 4, 5), (3, 1, 2)]


def mk_index(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    for _ in range(20):
        idx = mk_indices(x, g)
        try:
            want = A.index.Tensor(x, idx)
            break
        except (IndexError, RuntimeError):
            continue
    return out_call("aten::index.Tensor_out", [x, idx], want, g)


def mk_index_put(dt: torch.dtype, shp: tuple, g: torch.Generator) -> Call:
    x = rnd(shp, dt, g, pick(g, LAYOUTS + ["cl"]))
    acc = bool(pick(g, [0, 1]))
    for _ in range(20):
        idx = mk_indices(x, g, unique=not acc)
        try:
            rshape = A.index.Tensor(x, idx).shape
            break
        except (IndexError, RuntimeError):
            continue
    vshape = list(rshape)[rint(g, 0, len(rshape)) :]
    if vshape and pick(g, [0, 1]):
        vshape[0] = 1
    v = rnd(vshape, dt, g, pick(g, LAYOUTS))
    want = A.index_put.default(x, idx, v, acc)
    tol = acc and dt.is_floating_point
    if pick(g, [0, 1]):
        return out_call("aten::index_put.out", [x, idx, v, acc], want, g, tol=tol)
    self = x.clone()  # in place; keep x's strides when they are dense
    return Call("aten::index_put_", [self, idx, v, acc, self], [(self, want)], tol=tol)


for rep in range(4):
    each_dtype_shape(f"index{rep}", mk_index, INDEX_SHAPES)
    each_dtype_shape(f"index_put{rep}", mk_index_put, INDEX_SHAPES)
case(
    "index-adjacent-split",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], A.index.Tensor(x, i), g))(
        rnd((2, 3, 4, 5), F32, g, "cl"),
        [None, torch.tensor([[0], [2]]), None, torch.tensor([1, -1, 3])],
    ),
)
case(
    "index-mask-2d",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], A.index.Tensor(x, i), g))(
        rnd((2, 3, 4), I64, g, "t"), [None, torch.rand(3, 4, generator=g) > 0.5]
    ),
)
case(
    "index-mask-u8",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], x[i[0].bool()], g))(
        rnd((4, 3), F16, g), [torch.tensor([1, 0, 1, 1], dtype=U8)]
    ),
)
case(
    "index-mask-and-int",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], A.index.Tensor(x, i), g))(
        rnd((4, 3, 5), BF16, g),
        [torch.tensor([True, False, True, True]), None, torch.tensor([0, 4, -1])],
    ),
)
case(
    "index-0d-int",
    lambda g: (lambda x, i: out_call("aten::index.Tensor_out", [x, i], A.index.Tensor(x, i), g))(
        rnd((4, 3), I8, g), [None, torch.tensor(-1)]
    ),
)
case(
    "index-err-oob",
    lambda g: err_call(
        "aten::index.Tensor_out", [rnd((3, 4), F32, g), [torch.tensor([3])]], torch.empty(1, 4)
    ),
)
case(
    "index-err-oob-neg",
    lambda g: err_call(
        "aten::index.Tensor_out",
        [rnd((3, 4), F32, g), [None, torch.tensor([-5])]],
        torch.empty(3, 1),
    ),
)
case(
    "index-err-too-many",
    lambda g: err_call(
        "aten::index.Tensor_out",
        [rnd((3,), F32, g), [torch.tensor([0]), torch.tensor([0])]],
        torch.empty(1),
    ),
)
case(
    "index-err-dtype",
    lambda g: err_call(
        "aten::index.Tensor_out", [rnd((3,), F32, g), [torch.tensor([0.0])]], torch.empty(1)
    ),
)
case(
    "index-err-broadcast",
    lambda g: err_call(
        "aten::index.Tensor_out",
        [rnd((3, 4), F32, g), [torch.tensor([0, 1]), torch.tensor([0, 1, 2])]],
        torch.empty(2),
    ),
)
case(
    "index-err-mask-shape",
    lambda g: err_call(
        "aten::index.Tensor_out",
        [rnd((3, 4), F32, g), [torch.ones(4, dtype=BOOL)]],
        torch.empty(3, 4),
    ),
)
case(
    "index-err-empty",
    lambda g: err_call("aten::index.Tensor_out", [rnd((3,), F32, g), []], torch.empty(3)),
)
case(
    "index_put-err-dtype",
    lambda g: err_call(
        "aten::index_put.out",
        [rnd((3, 4), F32, g), [torch.tensor([0])], rnd((4,), F64, g), False],
        torch.empty(3, 4),
    ),
)
case(
    "index_put-err-values",
    lambda g: err_call(
        "aten::index_put.out",
        [rnd((3, 4), F32, g), [torch.tensor([0])], rnd((3,), F32, g), False],
        torch.empty(3, 4),
    ),
)
case(
    "index_put-err-oob",
    lambda g: Call(
        "aten::index_put_",
        [rnd((3, 4), F32, g), [torch.tensor([0, 3])], rnd((4,), F32, g), True, None],
        error=True,
    ),
)
case(
    "index_put-acc-dups",
    lambda g: (
        lambda x, i, v: Call(
            "aten::index_put_",
            [x, i, v, True, x],
            [(x, A.index_put.default(x.clone(), i, v, True))],
            tol=True,
        )
    )(rnd((3, 4), F32, g), [torch.tensor([0, 0, 2, 0])], rnd((4, 4), F32, g)),
)


@pytest.mark.parametrize("name,build", CASES, ids=CASES.ids())
def test_kernel(name: str, build: Builder) -> None:
    run_case(name, build)
