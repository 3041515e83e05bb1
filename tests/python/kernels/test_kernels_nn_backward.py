"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch:
backward ops.

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_nn_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn_backward.py
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import CaseList
from kernels_nn_common import (
    BF16,
    F32,
    F64,
    Builder,
    Call,
    err,
    rnd,
    run_case,
    simple,
)

CASES = CaseList()
case = CASES.case


# ---------------------------------------------------------------------------------------------
# backward ops
# ---------------------------------------------------------------------------------------------

for dt in [F32, F64]:
    for name, xs, ws, stride, pad, dil, tr, opad, groups in [
        ("2d", (2, 4, 7, 6), (6, 2, 3, 2), [2, 1], [1, 0], [1, 2], False, [0, 0], 2),
        ("1d", (2, 3, 9), (4, 3, 3), [1], [1], [1], False, [0], 1),
        ("2d-transposed", (1, 4, 4, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 0], 1),
        (
            "3d",
            (1, 2, 4, 4, 3),
            (2, 2, 2, 2, 2),
            [1, 1, 1],
            [0, 1, 0],
            [1, 1, 1],
            False,
            [0, 0, 0],
            1,
        ),
    ]:
        for mask in [[True, True, True], [True, False, False], [False, True, True]]:

            @case(f"conv-backward-{name}-{dt}-{mask}")
            def _(
                g,
                dt=dt,
                xs=xs,
                ws=ws,
                stride=stride,
                pad=pad,
                dil=dil,
                tr=tr,
                opad=opad,
                groups=groups,
                mask=mask,
            ):
                x, w = rnd(xs, dt, g, "cl" if len(xs) == 4 else "c"), rnd(ws, dt, g)
                cout = ws[1] * groups if tr else ws[0]
                y = torch.ops.aten.convolution(
                    x.double(), w.double(), None, stride, pad, dil, tr, opad, groups
                )
                go = rnd(y.shape, dt, g)
                gi, gw, gb = torch.ops.aten.convolution_backward(
                    go.double(),
                    x.double(),
                    w.double(),
                    [cout],
                    stride,
                    pad,
                    dil,
                    tr,
                    opad,
                    groups,
                    mask,
                )
                o0, o1, o2 = (
                    torch.zeros(xs, dtype=dt),
                    torch.zeros(ws, dtype=dt),
                    torch.zeros(cout, dtype=dt),
                )
                exp = []
                for o, e, m in [(o0, gi, mask[0]), (o1, gw, mask[1]), (o2, gb, mask[2])]:
                    exp.append((o, e.to(dt) if m else torch.zeros_like(o)))
                return Call(
                    "aten::convolution_backward.out",
                    [
                        go,
                        x,
                        w,
                        [cout],
                        stride,
                        pad,
                        dil,
                        tr,
                        opad,
                        groups,
                        mask,
                        o0,
                        o1,
                        o2,
                        [o0, o1, o2],
                    ],
                    exp,
                    tol=(1e-5, 1e-5) if dt == F32 else None,
                )


CASES.append(
    (
        "conv-backward-err-shape",
        err(
            "aten::convolution_backward.out",
            [
                torch.ones(1, 2, 4, 4),
                torch.ones(1, 3, 5, 5),
                torch.ones(2, 3, 3, 3),
                None,
                [1, 1],
                [0, 0],
                [1, 1],
                False,
                [0, 0],
                1,
                [True, True, True],
                torch.ones(1, 3, 5, 5),
                torch.ones(2, 3, 3, 3),
                torch.ones(2),
                [torch.ones(1, 3, 5, 5), torch.ones(2, 3, 3, 3), torch.ones(2)],
            ],
        ),
    )
)

for dt in [F32, F64, BF16]:
    for xs, osz, sc in [
        ((1, 2, 9, 11), [4, 5], None),
        ((2, 3, 4, 5), [9, 7], None),
        ((1, 1, 8, 8), [3, 3], (2.5, 2.5)),
        ((1, 2, 6, 6), [1, 1], None),
    ]:
        for align in [False, True]:

            @case(f"upsample-bilinear-aa-{dt}-{xs}-{osz}-{sc}-{align}")
            def _(g, dt=dt, xs=xs, osz=osz, sc=sc, align=align):
                x = rnd(xs, dt, g, "cl")
                sh, sw = sc if sc else (None, None)
                exp = torch.ops.aten._upsample_bilinear2d_aa(x.double(), osz, align, sh, sw)
                return simple(
                    "aten::_upsample_bilinear2d_aa.out", [x, osz, align, sh, sw], exp.to(dt)
                )


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)
