"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch:
pooling, padding, upsampling, grid sampling and pixel shuffle.

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_nn_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn_pool.py
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
    FLOATS,
    INTS,
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
# pooling
# ---------------------------------------------------------------------------------------------

POOL_DT = (F32, F64, F16, BF16, torch.int32, torch.int64, torch.uint8)


def maxpool_case(name, xs, k, s, p, d, ceil, dts=POOL_DT, layouts=("c",), nan=False):
    for dt in dts:
        for lay in layouts:

            @case(f"maxpool-{name}-{dt}-{lay}")
            def _(g, dt=dt, lay=lay):
                x = rnd(xs, dt, g, lay, -50, 50)
                if nan and dt.is_floating_point:
                    x = x.clone()
                    x.view(-1)[3] = float("nan")
                    x.view(-1)[1] = float("nan")
                ev, ei = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, ceil)
                o, oi = out_like(ev, lay), out_like(ei, lay)
                return Call(
                    "aten::max_pool2d_with_indices.out",
                    [x, k, s, p, d, ceil, o, oi, [o, oi]],
                    [(o, ev), (oi, ei)],
                )


maxpool_case("basic", (2, 3, 8, 9), [2, 2], [2, 2], [0, 0], [1, 1], False, layouts=("c", "cl"))
maxpool_case(
    "resnet", (1, 4, 16, 16), [3, 3], [2, 2], [1, 1], [1, 1], False, dts=(F32,), layouts=("c", "cl")
)
maxpool_case("ceil", (1, 2, 7, 8), [3, 2], [2, 3], [1, 1], [1, 1], True, dts=(F32, torch.int64))
maxpool_case("dilated", (1, 2, 9, 10), [2, 3], [1, 2], [1, 1], [2, 2], False, dts=(F32,))
maxpool_case("3d-input", (3, 7, 6), [2, 2], [], [0, 0], [1, 1], False, dts=(F32, torch.int8))
maxpool_case("nan", (1, 1, 4, 4), [2, 2], [2, 2], [0, 0], [1, 1], False, dts=(F32,), nan=True)
maxpool_case("empty-batch", (0, 2, 4, 4), [2, 2], [2, 2], [0, 0], [1, 1], False, dts=(F32,))
CASES.append(
    (
        "maxpool-err-pad",
        err(
            "aten::max_pool2d_with_indices.out",
            [
                torch.ones(1, 1, 4, 4),
                [2, 2],
                [2, 2],
                [2, 2],
                [1, 1],
                False,
                torch.ones(1, 1, 2, 2),
                torch.ones(1, 1, 2, 2, dtype=torch.long),
                [torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2, dtype=torch.long)],
            ],
        ),
    )
)
CASES.append(
    (
        "maxpool-err-idx-dtype",
        err(
            "aten::max_pool2d_with_indices.out",
            [
                torch.ones(1, 1, 4, 4),
                [2, 2],
                [2, 2],
                [0, 0],
                [1, 1],
                False,
                torch.ones(1, 1, 2, 2),
                torch.ones(1, 1, 2, 2),
                [torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2)],
            ],
        ),
    )
)
CASES.append(
    (
        "maxpool-err-too-small",
        err(
            "aten::max_pool2d_with_indices.out",
            [
                torch.ones(1, 1, 1, 1),
                [3, 3],
                [1, 1],
                [0, 0],
                [1, 1],
                False,
                torch.ones(1, 1, 1, 1),
                torch.ones(1, 1, 1, 1, dtype=torch.long),
                [torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1, dtype=torch.long)],
            ],
        ),
    )
)


@case("maxpool-backward")
def _(g):
    x = rnd((2, 3, 7, 7), F32, g)
    k, s, p, d = [3, 3], [2, 2], [1, 1], [1, 1]
    _, idx = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, False)
    go = rnd(idx.shape, F32, g)
    exp = torch.ops.aten.max_pool2d_with_indices_backward(go, x, k, s, p, d, False, idx)
    return simple(
        "aten::max_pool2d_with_indices_backward.grad_input", [go, x, k, s, p, d, False, idx], exp
    )


def avgpool_case(
    name, xs, k, s, p, ceil, incl, div, dts=(F32, F64, F16, BF16, torch.int64), layouts=("c",)
):
    for dt in dts:
        for lay in layouts:

            @case(f"avgpool-{name}-{dt}-{lay}")
            def _(g, dt=dt, lay=lay):
                x = rnd(xs, dt, g, lay, -50, 50)
                rd = F64 if dt.is_floating_point else dt
                exp = torch.ops.aten.avg_pool2d(x.to(rd), k, s, p, ceil, incl, div).to(dt)
                return simple("aten::avg_pool2d.out", [x, k, s, p, ceil, incl, div], exp, lay)


avgpool_case("basic", (2, 3, 8, 9), [2, 2], [2, 2], [0, 0], False, True, None, layouts=("c", "cl"))
avgpool_case("pad-include", (1, 2, 7, 7), [3, 3], [2, 2], [1, 1], False, True, None)
avgpool_case("pad-exclude", (1, 2, 7, 7), [3, 3], [2, 2], [1, 1], False, False, None)
avgpool_case("ceil", (1, 2, 8, 7), [3, 2], [2, 2], [1, 1], True, False, None)
avgpool_case("ceil-include", (1, 2, 8, 7), [3, 3], [2, 2], [1, 0], True, True, None)
avgpool_case("divisor", (1, 2, 6, 6), [2, 3], [1, 2], [1, 1], False, True, 5)
avgpool_case("3d-input", (3, 6, 5), [2, 2], [], [0, 0], False, True, None, dts=(F32,))
CASES.append(
    (
        "avgpool-err-div0",
        err(
            "aten::avg_pool2d.out",
            [
                torch.ones(1, 1, 4, 4),
                [2, 2],
                [2, 2],
                [0, 0],
                False,
                True,
                0,
                torch.ones(1, 1, 2, 2),
                torch.ones(1, 1, 2, 2),
            ],
        ),
    )
)
CASES.append(
    (
        "avgpool-err-rank",
        err(
            "aten::avg_pool2d.out",
            [
                torch.ones(4, 4),
                [2, 2],
                [2, 2],
                [0, 0],
                False,
                True,
                None,
                torch.ones(2, 2),
                torch.ones(2, 2),
            ],
        ),
    )
)

for dt in FLOATS:
    for xs, os_ in [
        ((2, 3, 7, 9), [3, 4]),
        ((1, 4, 8, 8), [1, 1]),
        ((3, 5, 5), [5, 5]),
        ((1, 2, 4, 4), [7, 6]),
    ]:
        for lay in ("c", "cl"):

            @case(f"adaptive-avg-{dt}-{xs}-{os_}-{lay}")
            def _(g, dt=dt, xs=xs, os_=os_, lay=lay):
                x = rnd(xs, dt, g, lay)
                exp = torch.ops.aten._adaptive_avg_pool2d(x.double(), os_).to(dt)
                return simple(
                    "aten::_adaptive_avg_pool2d.out", [x, os_], exp, lay if len(xs) == 4 else "c"
                )


CASES.append(
    (
        "adaptive-avg-err-int",
        err(
            "aten::_adaptive_avg_pool2d.out",
            [
                torch.ones(1, 1, 4, 4, dtype=torch.int32),
                [2, 2],
                torch.ones(1, 1, 2, 2, dtype=torch.int32),
                torch.ones(1, 1, 2, 2, dtype=torch.int32),
            ],
        ),
    )
)


# ---------------------------------------------------------------------------------------------
# padding
# ---------------------------------------------------------------------------------------------

ALL_DT = [F32, F64, F16, BF16, torch.bool] + INTS

for dt in ALL_DT:
    for xs, pad, lay in [
        ((2, 3, 4), [1, 2], "c"),
        ((2, 3, 4, 5), [1, 0, 2, 3], "cl"),
        ((3, 4), [1, 1, 0, 2], "t"),
        ((2, 5, 6), [-1, 2, 1, -2], "c"),
        ((4,), [], "c"),
        ((0, 3), [1, 1], "c"),
    ]:

        @case(f"constant-pad-{dt}-{xs}-{pad}-{lay}")
        def _(g, dt=dt, xs=xs, pad=pad, lay=lay):
            x = rnd(xs, dt, g, lay)
            value = True if dt == torch.bool else (3 if not dt.is_floating_point else -1.5)
            exp = torch.ops.aten.constant_pad_nd(x, pad, value)
            return simple("aten::constant_pad_nd.out", [x, pad, value], exp)


@case("constant-pad-i64-exact")
def _(g):
    x = torch.tensor([[1, 2]], dtype=torch.int64)
    v = 2**62 + 1
    return simple(
        "aten::constant_pad_nd.out", [x, [1, 1], v], torch.ops.aten.constant_pad_nd(x, [1, 1], v)
    )


CASES.append(
    (
        "constant-pad-err-too-many",
        err(
            "aten::constant_pad_nd.out",
            [torch.ones(3), [1, 1, 1, 1], 0.0, torch.ones(5), torch.ones(5)],
        ),
    )
)
CASES.append(
    (
        "constant-pad-err-negative",
        err(
            "aten::constant_pad_nd.out",
            [torch.ones(3), [-2, -2], 0.0, torch.ones(1), torch.ones(1)],
        ),
    )
)

for kind in ["reflection", "replication"]:
    for nd, xs, pad in [
        (1, (2, 3, 6), [2, 3]),
        (1, (3, 5), [4, 0]),
        (2, (2, 3, 5, 6), [1, 2, 3, 0]),
        (2, (3, 4, 4), [3, 3, 1, 1]),
        (3, (1, 2, 3, 4, 5), [1, 2, 0, 2, 1, 1]),
        (3, (2, 3, 3, 3), [2, 1, 1, 2, 0, 1]),
    ]:
        for dt in [F32, torch.int64, BF16, torch.uint8]:

            @case(f"{kind}-pad{nd}d-{dt}-{xs}-{pad}")
            def _(g, kind=kind, nd=nd, xs=xs, pad=pad, dt=dt):
                x = rnd(xs, dt, g, "cl" if len(xs) in (4, 5) else "c")
                fn = getattr(torch.ops.aten, f"{kind}_pad{nd}d")
                try:
                    exp = fn(x, pad)
                except RuntimeError:
                    exp = fn(x.double(), pad).to(dt)  # some dtypes lack an eager kernel
                return simple(f"aten::{kind}_pad{nd}d.out", [x, pad], exp)


CASES.append(
    (
        "reflection-pad-err-size",
        err(
            "aten::reflection_pad1d.out",
            [torch.ones(2, 3), [3, 0], torch.ones(2, 6), torch.ones(2, 6)],
        ),
    )
)
CASES.append(
    (
        "reflection-pad-err-rank",
        err(
            "aten::reflection_pad2d.out",
            [torch.ones(3), [1, 1, 1, 1], torch.ones(5), torch.ones(5)],
        ),
    )
)

# ---------------------------------------------------------------------------------------------
# upsample / grid sample / pixel shuffle
# ---------------------------------------------------------------------------------------------

for dt in [F32, F64, F16, BF16, torch.uint8]:
    for xs, osz, sc, lay in [
        ((2, 3, 4, 5), [8, 10], None, "c"),
        ((1, 2, 5, 3), [7, 4], None, "cl"),
        ((1, 2, 6, 6), [4, 3], None, "c"),
        ((1, 2, 3, 4), None, [2.5, 1.7], "c"),
        ((1, 1, 4, 4), None, [0.5, 0.75], "c"),
    ]:

        @case(f"upsample-nearest-{dt}-{xs}-{osz}-{sc}-{lay}")
        def _(g, dt=dt, xs=xs, osz=osz, sc=sc, lay=lay):
            x = rnd(xs, dt, g, lay)
            exp = torch.ops.aten.upsample_nearest2d.vec(x, osz, sc)
            return simple("aten::upsample_nearest2d.vec_out", [x, osz, sc], exp, lay)


for dt in FLOATS:
    for xs, osz, sc, lay in [
        ((2, 3, 4, 5), [8, 10], None, "c"),
        ((1, 2, 5, 3), [7, 4], None, "cl"),
        ((1, 2, 6, 6), [4, 3], None, "c"),
        ((1, 2, 3, 4), None, [2.5, 1.7], "c"),
        ((1, 1, 4, 4), [1, 1], None, "c"),
    ]:
        for align in [False, True]:

            @case(f"upsample-bilinear-{dt}-{xs}-{osz}-{sc}-{align}-{lay}")
            def _(g, dt=dt, xs=xs, osz=osz, sc=sc, lay=lay, align=align):
                x = rnd(xs, dt, g, lay)
                exp = torch.ops.aten.upsample_bilinear2d.vec(x, osz, align, sc)
                tol = (1e-5, 1e-5) if dt == F32 else None
                return simple(
                    "aten::upsample_bilinear2d.vec_out", [x, osz, align, sc], exp, lay, tol=tol
                )


CASES.append(
    (
        "upsample-err-both",
        err(
            "aten::upsample_nearest2d.vec_out",
            [
                torch.ones(1, 1, 2, 2),
                [4, 4],
                [2.0, 2.0],
                torch.ones(1, 1, 4, 4),
                torch.ones(1, 1, 4, 4),
            ],
        ),
    )
)
CASES.append(
    (
        "upsample-err-rank",
        err(
            "aten::upsample_bilinear2d.vec_out",
            [torch.ones(1, 2, 2), [4, 4], False, None, torch.ones(1, 4, 4), torch.ones(1, 4, 4)],
        ),
    )
)

for dt in [F32, F64]:
    for mode in [0, 1, 2]:
        for pad in [0, 1, 2]:
            for align in [False, True]:

                @case(f"grid-sampler-{dt}-{mode}-{pad}-{align}")
                def _(g, dt=dt, mode=mode, pad=pad, align=align):
                    x = rnd((2, 3, 5, 6), dt, g)
                    grid = rnd((2, 4, 7, 2), dt, g, lo=-1.3, hi=1.3)
                    exp = torch.ops.aten.grid_sampler_2d(x, grid, mode, pad, align)
                    return simple(
                        "aten::grid_sampler_2d.out",
                        [x, grid, mode, pad, align],
                        exp,
                        tol=(1e-5, 1e-5),
                    )


@case("grid-sampler-bf16-cl")
def _(g):
    x = rnd((1, 3, 5, 6), BF16, g, "cl")
    grid = rnd((1, 4, 7, 2), BF16, g, lo=-1.1, hi=1.1)
    exp = torch.ops.aten.grid_sampler_2d(x.float(), grid.float(), 0, 0, False).bfloat16()
    return simple("aten::grid_sampler_2d.out", [x, grid, 0, 0, False], exp)


CASES.append(
    (
        "grid-sampler-err-mode",
        err(
            "aten::grid_sampler_2d.out",
            [
                torch.ones(1, 1, 2, 2),
                torch.zeros(1, 2, 2, 2),
                3,
                0,
                False,
                torch.ones(1, 1, 2, 2),
                torch.ones(1, 1, 2, 2),
            ],
        ),
    )
)

for dt in [F32, torch.int64, torch.bool, BF16]:
    for xs, r in [((2, 8, 3, 4), 2), ((9, 2, 2), 3), ((2, 2, 4, 2, 3), 2)]:
        for lay in ["c", "cl"]:

            @case(f"pixel-shuffle-{dt}-{xs}-{r}-{lay}")
            def _(g, dt=dt, xs=xs, r=r, lay=lay):
                x = rnd(xs, dt, g, lay)
                exp = torch.pixel_shuffle(x.contiguous(), r)
                return simple("aten::pixel_shuffle.out", [x, r], exp, lay)

            @case(f"pixel-unshuffle-{dt}-{xs}-{r}-{lay}")
            def _(g, dt=dt, xs=xs, r=r, lay=lay):
                x = torch.pixel_shuffle(rnd(xs, dt, g), r)
                if lay == "cl" and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
                return simple("aten::pixel_unshuffle.out", [x, r], torch.pixel_unshuffle(x, r), lay)


CASES.append(
    (
        "pixel-shuffle-err-channels",
        err(
            "aten::pixel_shuffle.out",
            [torch.ones(1, 3, 2, 2), 2, torch.ones(1, 1, 4, 4), torch.ones(1, 1, 4, 4)],
        ),
    )
)


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)
