"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch:
normalization, embedding and distances.

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_nn_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn_norm.py
"""

from __future__ import annotations

import math

import pytest
import torch
from kernel_cases import CaseList
from kernels_nn_common import (
    BF16,
    F16,
    F32,
    F64,
    FLOATS,
    Builder,
    Call,
    err,
    out_like,
    rnd,
    run_case,
    simple,
)

CASES = CaseList()
case = CASES.case


# ---------------------------------------------------------------------------------------------
# normalization
# ---------------------------------------------------------------------------------------------

NORM_TOL = {F32: (1e-5, 1e-5), F64: (1e-10, 1e-10), F16: (1e-2, 2e-2), BF16: (2e-2, 5e-2)}


def opt(t, dt):
    return None if t is None else t.to(dt)


for dt in FLOATS:
    for xs, lay in [
        ((2, 3, 5, 4), "c"),
        ((2, 3, 5, 4), "cl"),
        ((4, 3), "c"),
        ((2, 3, 7), "c"),
        ((0, 3, 2, 2), "c"),
        ((2, 3, 4, 3), "s"),
    ]:
        for affine in [True, False]:

            @case(f"bn-infer-{dt}-{xs}-{lay}-{affine}")
            def _(g, dt=dt, xs=xs, lay=lay, affine=affine):
                C = xs[1]
                x = rnd(xs, dt, g, lay)
                w = rnd((C,), dt, g) if affine else None
                b = rnd((C,), dt, g) if affine else None
                rm, rv = rnd((C,), dt, g), rnd((C,), dt, g, lo=0.5, hi=2.0)
                exp = torch.ops.aten._native_batch_norm_legit_no_training(
                    x.double(), opt(w, F64), opt(b, F64), rm.double(), rv.double(), 0.1, 1e-5
                )[0]
                o = out_like(exp.to(dt), lay if lay == "cl" else "c")
                m1o, m2o = torch.ones(0, dtype=dt), torch.ones(0, dtype=dt)
                return Call(
                    "aten::_native_batch_norm_legit_no_training.out",
                    [x, w, b, rm, rv, 0.1, 1e-5, o, m1o, m2o, [o, m1o, m2o]],
                    [(o, exp.to(dt)), (m1o, torch.empty(0, dtype=dt))],
                    NORM_TOL[dt],
                )


for dt in [F32, F64, BF16]:
    for training in [True, False]:
        for xs in [(4, 3, 5, 2), (6, 2)]:

            @case(f"bn-legit-{dt}-{training}-{xs}")
            def _(g, dt=dt, training=training, xs=xs):
                C = xs[1]
                x, w, b = rnd(xs, dt, g), rnd((C,), dt, g), rnd((C,), dt, g)
                rm, rv = rnd((C,), F32, g), rnd((C,), F32, g, lo=0.5, hi=2.0)
                rm2, rv2 = rm.double().clone(), rv.double().clone()
                y, sm, si = torch.ops.aten._native_batch_norm_legit(
                    x.double(), w.double(), b.double(), rm2, rv2, training, 0.1, 1e-5
                )
                n = 0 if not training else C
                o = out_like(y.to(dt))
                smo, sio = torch.zeros(n, dtype=F32), torch.zeros(n, dtype=F32)
                return Call(
                    "aten::_native_batch_norm_legit.out",
                    [x, w, b, rm, rv, training, 0.1, 1e-5, o, smo, sio, [o, smo, sio]],
                    [
                        (o, y.to(dt)),
                        (smo, sm.float()[:n]),
                        (sio, si.float()[:n]),
                        (rm, rm2.float()),
                        (rv, rv2.float()),
                    ],
                    NORM_TOL[dt],
                )


@case("bn-no-stats")
def _(g):
    x, w, b = rnd((3, 4, 6), F32, g), rnd((4,), F32, g), rnd((4,), F32, g)
    y, sm, si = torch.ops.aten._native_batch_norm_legit.no_stats(
        x.double(), w.double(), b.double(), True, 0.1, 1e-5
    )
    o, smo, sio = torch.zeros(3, 4, 6), torch.zeros(4), torch.zeros(4)
    return Call(
        "aten::_native_batch_norm_legit.no_stats_out",
        [x, w, b, True, 0.1, 1e-5, o, smo, sio, [o, smo, sio]],
        [(o, y.float()), (smo, sm.float()), (sio, si.float())],
    )


CASES.append(
    (
        "bn-no-stats-err-eval",
        err(
            "aten::_native_batch_norm_legit.no_stats_out",
            [
                torch.ones(2, 3),
                None,
                None,
                False,
                0.1,
                1e-5,
                torch.ones(2, 3),
                torch.ones(3),
                torch.ones(3),
                [torch.ones(2, 3), torch.ones(3), torch.ones(3)],
            ],
        ),
    )
)
CASES.append(
    (
        "bn-err-weight",
        err(
            "aten::_native_batch_norm_legit_no_training.out",
            [
                torch.ones(2, 3),
                torch.ones(4),
                None,
                torch.ones(3),
                torch.ones(3),
                0.1,
                1e-5,
                torch.ones(2, 3),
                torch.ones(0),
                torch.ones(0),
                [torch.ones(2, 3), torch.ones(0), torch.ones(0)],
            ],
        ),
    )
)
CASES.append(
    (
        "bn-err-int",
        err(
            "aten::_native_batch_norm_legit_no_training.out",
            [
                torch.ones(2, 3, dtype=torch.int32),
                None,
                None,
                torch.ones(3),
                torch.ones(3),
                0.1,
                1e-5,
                torch.ones(2, 3, dtype=torch.int32),
                torch.ones(0),
                torch.ones(0),
                [torch.ones(2, 3, dtype=torch.int32), torch.ones(0), torch.ones(0)],
            ],
        ),
    )
)

for dt in FLOATS:
    for xs, ns in [
        ((2, 3, 8), [8]),
        ((4, 6, 5), [6, 5]),
        ((7,), [7]),
        ((2, 0, 4), [4]),
        ((3, 4, 5), [3, 4, 5]),
    ]:
        for affine in [True, False]:
            for lay in ["c", "t"]:

                @case(f"layernorm-{dt}-{xs}-{ns}-{affine}-{lay}")
                def _(g, dt=dt, xs=xs, ns=ns, affine=affine, lay=lay):
                    x = rnd(xs, dt, g, lay)
                    n = math.prod(ns)
                    w = rnd(ns, dt, g) if affine else None
                    b = rnd(ns, dt, g) if affine else None
                    y, mean, rstd = torch.ops.aten.native_layer_norm(
                        x.double(), ns, opt(w, F64), opt(b, F64), 1e-5
                    )
                    o, mo, ro = (out_like(y.to(dt)), out_like(mean.to(dt)), out_like(rstd.to(dt)))
                    del n
                    return Call(
                        "aten::native_layer_norm.out",
                        [x, ns, w, b, 1e-5, o, mo, ro, [o, mo, ro]],
                        [(o, y.to(dt)), (mo, mean.to(dt)), (ro, rstd.to(dt))],
                        NORM_TOL[dt],
                    )


CASES.append(
    (
        "layernorm-err-shape",
        err(
            "aten::native_layer_norm.out",
            [
                torch.ones(2, 3),
                [4],
                None,
                None,
                1e-5,
                torch.ones(2, 3),
                torch.ones(2, 1),
                torch.ones(2, 1),
                [torch.ones(2, 3), torch.ones(2, 1), torch.ones(2, 1)],
            ],
        ),
    )
)

for dt in FLOATS:
    for xs, G in [((2, 6, 4, 3), 3), ((3, 4, 5), 2), ((2, 4), 4), ((1, 8, 2, 2, 2), 1)]:
        for lay in ["c", "cl"]:

            @case(f"groupnorm-{dt}-{xs}-{G}-{lay}")
            def _(g, dt=dt, xs=xs, G=G, lay=lay):
                x = rnd(xs, dt, g, lay)
                N, C = xs[0], xs[1]
                hw = math.prod(xs[2:])
                w, b = rnd((C,), dt, g), rnd((C,), dt, g)
                y, mean, rstd = torch.ops.aten.native_group_norm(
                    x.double(), w.double(), b.double(), N, C, hw, G, 1e-5
                )
                o, mo, ro = out_like(y.to(dt)), out_like(mean.to(dt)), out_like(rstd.to(dt))
                return Call(
                    "aten::native_group_norm.out",
                    [x, w, b, N, C, hw, G, 1e-5, o, mo, ro, [o, mo, ro]],
                    [(o, y.to(dt)), (mo, mean.to(dt)), (ro, rstd.to(dt))],
                    NORM_TOL[dt],
                )


CASES.append(
    (
        "groupnorm-err-groups",
        err(
            "aten::native_group_norm.out",
            [
                torch.ones(2, 6, 4),
                None,
                None,
                2,
                6,
                4,
                4,
                1e-5,
                torch.ones(2, 6, 4),
                torch.ones(2, 4),
                torch.ones(2, 4),
                [torch.ones(2, 6, 4), torch.ones(2, 4), torch.ones(2, 4)],
            ],
        ),
    )
)


# ---------------------------------------------------------------------------------------------
# embedding / distances
# ---------------------------------------------------------------------------------------------

for dt in [F32, F16, BF16, torch.int64, torch.uint8]:
    for ishape in [(5,), (2, 3), (), (0,)]:
        for idt in [torch.int64, torch.int32]:
            for lay in ["c", "t"]:

                @case(f"embedding-{dt}-{ishape}-{idt}-{lay}")
                def _(g, dt=dt, ishape=ishape, idt=idt, lay=lay):
                    w = rnd((10, 6), dt, g, lay)
                    idx = torch.randint(0, 10, ishape, generator=g).to(idt)
                    return simple(
                        "aten::embedding.out",
                        [w, idx, -1, False, False],
                        torch.ops.aten.embedding(w, idx.long()),
                    )


for ishape in [(4,), (2, 3)]:

    @case(f"embedding-empty-rows-{ishape}")
    def _(g, ishape=ishape):
        # [V, 0] weights hold no data: the rows gathered are empty (a fuzzed file found the
        # kernel offsetting the weight's null data pointer)
        w = torch.empty(10, 0)
        idx = torch.randint(0, 10, ishape, generator=g)
        return simple(
            "aten::embedding.out",
            [w, idx, -1, False, False],
            torch.ops.aten.embedding(w, idx),
        )


CASES.append(
    (
        "embedding-err-range",
        err(
            "aten::embedding.out",
            [
                torch.ones(4, 2),
                torch.tensor([1, 4]),
                -1,
                False,
                False,
                torch.ones(2, 2),
                torch.ones(2, 2),
            ],
        ),
    )
)
CASES.append(
    (
        "embedding-err-negative",
        err(
            "aten::embedding.out",
            [
                torch.ones(4, 2),
                torch.tensor([-1]),
                -1,
                False,
                False,
                torch.ones(1, 2),
                torch.ones(1, 2),
            ],
        ),
    )
)
CASES.append(
    (
        "embedding-err-float-idx",
        err(
            "aten::embedding.out",
            [
                torch.ones(4, 2),
                torch.tensor([1.0]),
                -1,
                False,
                False,
                torch.ones(1, 2),
                torch.ones(1, 2),
            ],
        ),
    )
)

for dt in [F32, F64]:
    for p in [0.0, 1.0, 2.0, 3.0, 0.5, float("inf")]:
        for s1, s2 in [
            ((5, 4), (6, 4)),
            ((2, 3, 4), (1, 5, 4)),
            ((3, 0), (2, 0)),
            ((30, 3), (28, 3)),
        ]:

            @case(f"cdist-{dt}-{p}-{s1}-{s2}")
            def _(g, dt=dt, p=p, s1=s1, s2=s2):
                a, b = rnd(s1, dt, g), rnd(s2, dt, g)
                if s1[-1] and p == 0.0 and s1[:-2] == s2[:-2]:
                    b = b.clone()
                    b[..., 0, :] = a[..., 0, :] if a.dim() == b.dim() else b[..., 0, :]
                exp = torch.ops.aten._cdist_forward(a.double(), b.double(), p, None).to(dt)
                return simple("aten::_cdist_forward.out", [a, b, p, None], exp, tol=(1e-5, 1e-5))

        @case(f"pdist-{dt}-{p}")
        def _(g, dt=dt, p=p):
            a = rnd((6, 5), dt, g, "t")
            exp = torch.ops.aten._pdist_forward(a.contiguous().double(), p).to(dt)
            return simple("aten::_pdist_forward.out", [a, p], exp, tol=(1e-5, 1e-5))


CASES.append(
    (
        "cdist-err-cols",
        err(
            "aten::_cdist_forward.out",
            [torch.ones(2, 3), torch.ones(2, 4), 2.0, None, torch.ones(2, 2), torch.ones(2, 2)],
        ),
    )
)
CASES.append(
    (
        "pdist-err-int",
        err(
            "aten::_pdist_forward.out",
            [
                torch.ones(3, 2, dtype=torch.int32),
                2.0,
                torch.ones(3, dtype=torch.int32),
                torch.ones(3, dtype=torch.int32),
            ],
        ),
    )
)


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)
