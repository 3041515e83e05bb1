"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch:
convolution (1-D, 2-D, 3-D, transposed, grouped, depthwise, layouts).

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_nn_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn_conv.py
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import CaseList
from kernels_nn_common import (
    BF16,
    F16,
    F32,
    F64,
    Builder,
    conv_ref,
    err,
    rnd,
    run_case,
    simple,
)

CASES = CaseList()
case = CASES.case


# ---------------------------------------------------------------------------------------------
# convolution
# ---------------------------------------------------------------------------------------------


def conv_case(
    name,
    xs,
    ws,
    stride,
    pad,
    dil,
    transposed=False,
    opad=None,
    groups=1,
    bias=True,
    dts=(F32,),
    layouts=("c",),
    tol=None,
):
    S = len(xs) - 2
    opad = opad if opad is not None else [0] * S
    for dt in dts:
        for lay in layouts:

            @case(f"conv-{name}-{dt}-{lay}")
            def _(g, dt=dt, lay=lay):
                xl = lay if lay in ("cl", "s") else "c"
                wl = "cl" if lay in ("cl", "wcl") else "c"
                x, w = rnd(xs, dt, g, xl), rnd(ws, dt, g, wl)
                cout = ws[1] * groups if transposed else ws[0]
                b = rnd((cout,), dt, g) if bias else None
                exp = conv_ref(x, w, b, stride, pad, dil, transposed, opad, groups)
                t = tol
                if t is None and dt in (F16, BF16):
                    t = (3e-2, 5e-2)
                if t is None and dt == F32:
                    t = (1e-4, 1e-4)
                return simple(
                    "aten::convolution.out",
                    [x, w, b, stride, pad, dil, transposed, opad, groups],
                    exp,
                    layout="cl" if lay == "cl" else "c",
                    tol=t,
                )


ALLDT = (F32, F64, F16, BF16, torch.int32, torch.int64)
conv_case(
    "2d-basic",
    (2, 4, 9, 8),
    (6, 4, 3, 3),
    [1, 1],
    [1, 1],
    [1, 1],
    dts=ALLDT,
    layouts=("c", "cl", "wcl", "s"),
)
conv_case(
    "2d-strided-dilated",
    (2, 4, 11, 10),
    (6, 2, 3, 2),
    [2, 1],
    [1, 0],
    [1, 2],
    groups=2,
    layouts=("c", "cl"),
    dts=(F32, F64),
)
conv_case("2d-nobias", (1, 3, 7, 7), (5, 3, 3, 3), [2, 2], [0, 0], [1, 1], bias=False)
conv_case(
    "2d-depthwise",
    (2, 6, 10, 9),
    (6, 1, 3, 3),
    [1, 1],
    [1, 1],
    [1, 1],
    groups=6,
    layouts=("c", "cl"),
    dts=(F32, F64),
)
conv_case("2d-depthwise-mult", (1, 4, 8, 8), (8, 1, 5, 5), [2, 2], [2, 2], [1, 1], groups=4)
conv_case(
    "2d-1x1",
    (2, 16, 7, 6),
    (8, 16, 1, 1),
    [1, 1],
    [0, 0],
    [1, 1],
    layouts=("c", "cl"),
    dts=(F32, F64, BF16),
)
conv_case("2d-1x1-strided", (2, 16, 7, 6), (8, 16, 1, 1), [2, 2], [0, 0], [1, 1])
conv_case("2d-pad-big", (1, 2, 3, 3), (3, 2, 3, 3), [1, 1], [3, 2], [1, 1])
conv_case(
    "2d-resnet-stem", (1, 3, 64, 64), (16, 3, 7, 7), [2, 2], [3, 3], [1, 1], layouts=("c", "cl")
)
conv_case(
    "2d-big-chunked", (1, 64, 56, 56), (64, 64, 3, 3), [1, 1], [1, 1], [1, 1], tol=(1e-4, 2e-4)
)
conv_case("1d", (2, 4, 13), (6, 4, 3), [1], [1], [1], dts=(F32, F64, torch.int32))
conv_case("1d-strided-grouped", (2, 4, 20), (8, 2, 4), [3], [2], [2], groups=2)
conv_case(
    "3d",
    (1, 2, 5, 6, 7),
    (3, 2, 2, 3, 2),
    [1, 2, 1],
    [1, 1, 0],
    [1, 1, 2],
    layouts=("c", "cl"),
    dts=(F32, F64),
)
conv_case(
    "2d-transposed",
    (2, 4, 5, 6),
    (4, 3, 3, 3),
    [2, 2],
    [1, 1],
    [1, 1],
    transposed=True,
    opad=[1, 0],
    dts=ALLDT,
    layouts=("c", "cl"),
)
conv_case(
    "2d-transposed-grouped-dilated",
    (1, 4, 5, 5),
    (4, 2, 3, 2),
    [2, 3],
    [0, 1],
    [2, 1],
    transposed=True,
    opad=[1, 2],
    groups=2,
    dts=(F32, F64),
    layouts=("c", "cl", "wcl"),
)
conv_case("2d-transposed-1x1", (1, 8, 4, 4), (8, 4, 1, 1), [1, 1], [0, 0], [1, 1], transposed=True)
conv_case(
    "1d-transposed", (2, 3, 7), (3, 5, 4), [2], [1], [1], transposed=True, opad=[1], dts=(F32, F64)
)
conv_case(
    "3d-transposed",
    (1, 2, 3, 4, 3),
    (2, 3, 2, 2, 3),
    [2, 1, 2],
    [0, 1, 1],
    [1, 1, 1],
    transposed=True,
    opad=[1, 0, 1],
    dts=(F32, F64),
)
conv_case("2d-empty-batch", (0, 3, 5, 5), (4, 3, 3, 3), [1, 1], [0, 0], [1, 1])


def conv_err(name, xs, ws, bs, stride, pad, dil, transposed, opad, groups, outs):
    CASES.append(
        (
            f"conv-err-{name}",
            err(
                "aten::convolution.out",
                [
                    torch.ones(xs),
                    torch.ones(ws),
                    None if bs is None else torch.ones(bs),
                    stride,
                    pad,
                    dil,
                    transposed,
                    opad,
                    groups,
                    torch.ones(outs),
                    torch.ones(outs),
                ],
            ),
        )
    )


conv_err(
    "cin", (1, 3, 5, 5), (2, 4, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, (1, 2, 3, 3)
)
conv_err(
    "groups",
    (1, 4, 5, 5),
    (3, 2, 3, 3),
    None,
    [1, 1],
    [0, 0],
    [1, 1],
    False,
    [0, 0],
    2,
    (1, 3, 3, 3),
)
conv_err(
    "bias", (1, 4, 5, 5), (2, 4, 3, 3), (3,), [1, 1], [0, 0], [1, 1], False, [0, 0], 1, (1, 2, 3, 3)
)
conv_err(
    "kernel-too-big",
    (1, 4, 2, 2),
    (2, 4, 3, 3),
    None,
    [1, 1],
    [0, 0],
    [1, 1],
    False,
    [0, 0],
    1,
    (1, 2, 1, 1),
)
conv_err(
    "opad", (1, 4, 5, 5), (4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], True, [1, 1], 1, (1, 2, 8, 8)
)
conv_err(
    "stride0",
    (1, 4, 5, 5),
    (2, 4, 3, 3),
    None,
    [0, 1],
    [0, 0],
    [1, 1],
    False,
    [0, 0],
    1,
    (1, 2, 3, 3),
)
conv_err("rank", (4, 5, 5), (2, 4, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, (2, 3, 3))
conv_err(
    "outshape",
    (1, 4, 5, 5),
    (2, 4, 3, 3),
    None,
    [1, 1],
    [0, 0],
    [1, 1],
    False,
    [0, 0],
    1,
    (1, 2, 4, 4),
)


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)
