"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch:
mm, bmm, addmm and linear (GEMM tile edges, the matrix-vector path).

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_nn_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn_gemm.py
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_cases import CaseList
from kernels_nn_common import (
    BF16,
    F16,
    F32,
    F64,
    Builder,
    Call,
    err,
    mm_ref,
    ref_in,
    rnd,
    run_case,
    simple,
)

CASES = CaseList()
case = CASES.case


# ---------------------------------------------------------------------------------------------
# mm / bmm / addmm / linear
# ---------------------------------------------------------------------------------------------

MM_DTYPES = [F32, F64, F16, BF16, torch.int32, torch.int64, torch.int8, torch.uint8, torch.int16]


for dt in MM_DTYPES:
    for m, k, n in [(3, 5, 4), (7, 33, 19), (0, 3, 4), (3, 0, 4), (1, 1, 1)]:

        @case(f"mm-{dt}-{m}x{k}x{n}")
        def _(g, dt=dt, m=m, k=k, n=n):
            a, b = rnd((m, k), dt, g), rnd((k, n), dt, g)
            return simple("aten::mm.out", [a, b], mm_ref(a, b))


for lay_a, lay_b in [("t", "c"), ("c", "t"), ("s", "s"), ("t", "t")]:

    @case(f"mm-f32-layout-{lay_a}{lay_b}")
    def _(g, lay_a=lay_a, lay_b=lay_b):
        a, b = rnd((37, 70), F32, g, lay_a), rnd((70, 29), F32, g, lay_b)
        return simple("aten::mm.out", [a, b], mm_ref(a, b))


# GEMM tile edges: micro-tile 6x16, KC 256, MC 144 (below, at, above and multiples), and the
# matrix-vector path (m <= 4 with a contiguous B column).
for m, k, n in [
    (5, 255, 15),
    (6, 256, 16),
    (7, 257, 17),
    (12, 512, 32),
    (145, 20, 33),
    (1, 300, 70),
    (4, 9, 5),
    (2, 1, 40),
]:
    for lay_b in ["c", "t"]:

        @case(f"mm-f32-tiles-{m}x{k}x{n}-{lay_b}")
        def _(g, m=m, k=k, n=n, lay_b=lay_b):
            a, b = rnd((m, k), F32, g), rnd((k, n), F32, g, lay_b)
            return simple("aten::mm.out", [a, b], mm_ref(a, b), tol=(1e-5, 1e-4))


@case("mm-f32-small-scratch")
def _(g):
    # 96 KiB of scratch: the GEMM must shrink its blocks (NC/KC/MC) rather than fail.
    a, b = rnd((200, 700), F32, g, "t"), rnd((700, 900), F32, g)
    c = simple("aten::mm.out", [a, b], mm_ref(a, b), tol=(1e-4, 1e-4))
    c.temp_bytes = 96 << 10
    return c


@case("mm-f32-big")
def _(g):
    a, b = rnd((150, 300), F32, g), rnd((300, 3100), F32, g)
    return simple("aten::mm.out", [a, b], mm_ref(a, b), tol=(1e-4, 1e-4))


@case("mm-f32-dynamic-out")
def _(g):
    a, b = rnd((5, 6), F32, g), rnd((6, 7), F32, g)
    return simple("aten::mm.out", [a, b], mm_ref(a, b), dynamic=True)


@case("mm-f32-out-transposed")
def _(g):
    a, b = rnd((5, 6), F32, g), rnd((6, 7), F32, g)
    o = torch.zeros(7, 5).t()
    return Call("aten::mm.out", [a, b, o, o], [(o, mm_ref(a, b))])


CASES.append(
    (
        "mm-err-shape",
        err(
            "aten::mm.out", [torch.ones(2, 3), torch.ones(4, 2), torch.ones(2, 2), torch.ones(2, 2)]
        ),
    )
)
CASES.append(
    (
        "mm-err-dtype",
        err(
            "aten::mm.out",
            [torch.ones(2, 3), torch.ones(3, 2).double(), torch.ones(2, 2), torch.ones(2, 2)],
        ),
    )
)
CASES.append(
    (
        "mm-err-rank",
        err(
            "aten::mm.out",
            [torch.ones(2, 3, 1), torch.ones(3, 2), torch.ones(2, 2), torch.ones(2, 2)],
        ),
    )
)
CASES.append(
    (
        "mm-err-outshape",
        err(
            "aten::mm.out", [torch.ones(2, 3), torch.ones(3, 2), torch.ones(3, 3), torch.ones(3, 3)]
        ),
    )
)
CASES.append(
    (
        "mm-err-bool",
        err(
            "aten::mm.out",
            [
                torch.ones(2, 3, dtype=torch.bool),
                torch.ones(3, 2, dtype=torch.bool),
                torch.ones(2, 2, dtype=torch.bool),
                torch.ones(2, 2, dtype=torch.bool),
            ],
        ),
    )
)

for dt in [F32, F64, BF16, torch.int32]:
    for lay in ["c", "t"]:

        @case(f"bmm-{dt}-{lay}")
        def _(g, dt=dt, lay=lay):
            a, b = rnd((3, 9, 17), dt, g, lay), rnd((3, 17, 5), dt, g)
            exp = torch.stack([mm_ref(a[i], b[i]) for i in range(3)])
            return simple("aten::bmm.out", [a, b], exp)


for dt in [F32, F16]:

    @case(f"bmm-many-batches-small-scratch-{dt}")
    def _(g, dt=dt):
        # Per-batch GEMM scratch must be released: 300 batches x ~40 KiB > the 1 MiB given.
        a, b = rnd((300, 40, 48), dt, g), rnd((300, 48, 40), dt, g)
        exp = torch.stack([mm_ref(a[i], b[i]) for i in range(300)])
        c = simple("aten::bmm.out", [a, b], exp, tol=(1e-5, 1e-5) if dt == F32 else None)
        c.temp_bytes = 1 << 20
        return c


@case("bmm-empty-batch")
def _(g):
    a, b = rnd((0, 2, 3), F32, g), rnd((0, 3, 4), F32, g)
    return simple("aten::bmm.out", [a, b], torch.zeros(0, 2, 4))


CASES.append(
    (
        "bmm-err-batch",
        err(
            "aten::bmm.out",
            [torch.ones(2, 2, 3), torch.ones(3, 3, 2), torch.ones(2, 2, 2), torch.ones(2, 2, 2)],
        ),
    )
)

for dt in [F32, F64, F16, torch.int64, torch.int32]:
    for self_shape in [(4, 6), (6,), (1, 6), (4, 1), ()]:
        for beta, alpha in [(1, 1), (0, 2), (2, -1)]:

            @case(f"addmm-{dt}-{self_shape}-{beta}-{alpha}")
            def _(g, dt=dt, self_shape=self_shape, beta=beta, alpha=alpha):
                s, a, b = rnd(self_shape, dt, g), rnd((4, 5), dt, g), rnd((5, 6), dt, g)
                if beta == 0 and dt.is_floating_point:
                    s = s.clone()
                    s.view(-1)[0] = float("nan")  # beta 0 ignores self, NaNs included
                rd = ref_in(dt) if dt.is_floating_point else torch.int64
                exp = alpha * (a.to(rd) @ b.to(rd))
                if beta != 0:
                    exp = exp + beta * s.to(rd)
                exp = exp.to(dt)
                bb = float(beta) if dt.is_floating_point else beta
                aa = float(alpha) if dt.is_floating_point else alpha
                return simple("aten::addmm.out", [s, a, b, bb, aa], exp)


CASES.append(
    (
        "addmm-err-float-alpha-int",
        err(
            "aten::addmm.out",
            [
                torch.ones(2, 2, dtype=torch.int32),
                torch.ones(2, 3, dtype=torch.int32),
                torch.ones(3, 2, dtype=torch.int32),
                1,
                0.5,
                torch.ones(2, 2, dtype=torch.int32),
                torch.ones(2, 2, dtype=torch.int32),
            ],
        ),
    )
)
CASES.append(
    (
        "addmm-err-self-bcast",
        err(
            "aten::addmm.out",
            [
                torch.ones(3),
                torch.ones(2, 3),
                torch.ones(3, 2),
                1,
                1,
                torch.ones(2, 2),
                torch.ones(2, 2),
            ],
        ),
    )
)

for dt in [F32, F64, F16, BF16, torch.int32]:
    for xshape in [(5, 8), (2, 3, 8), (8,), (0, 8), (2, 0, 8)]:
        for has_bias in [True, False]:

            @case(f"linear-{dt}-{xshape}-{has_bias}")
            def _(g, dt=dt, xshape=xshape, has_bias=has_bias):
                x, w = rnd(xshape, dt, g), rnd((6, 8), dt, g)
                b = rnd((6,), dt, g) if has_bias else None
                rd = ref_in(dt) if dt.is_floating_point else torch.int64
                exp = x.to(rd) @ w.to(rd).t()
                if b is not None:
                    exp = exp + b.to(rd)
                tol = (3e-2, 3e-2) if dt in (F16, BF16) else None
                return simple("aten::linear.out", [x, w, b], exp.to(dt), tol=tol)


for lay in ["t", "s"]:

    @case(f"linear-f32-layout-{lay}")
    def _(g, lay=lay):
        x = (
            rnd((4, 3, 10), F32, g, lay).transpose(0, 2)
            if lay == "t"
            else rnd((10, 3, 4), F32, g, "s")
        )
        w, b = rnd((7, 4), F32, g, "t" if lay == "t" else "c"), rnd((7,), F32, g)
        return simple(
            "aten::linear.out", [x, w, b], F.linear(x.double(), w.double(), b.double()).float()
        )


CASES.append(
    (
        "linear-err-features",
        err(
            "aten::linear.out",
            [torch.ones(2, 3), torch.ones(4, 5), None, torch.ones(2, 4), torch.ones(2, 4)],
        ),
    )
)
CASES.append(
    (
        "linear-err-bias",
        err(
            "aten::linear.out",
            [torch.ones(2, 5), torch.ones(4, 5), torch.ones(3), torch.ones(2, 4), torch.ones(2, 4)],
        ),
    )
)


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)
