"""Portable neural-network kernels (kernels/portable/ops_nn.def) against eager PyTorch:
small scratch arenas, error cases, garbage arguments and a thread pool.

One table (CASES) drives one parametrized test; the case convention, tolerances and the runner
are in kernels_nn_common.py.

Run: .venv/bin/python -m pytest tests/python/kernels/test_kernels_nn_robust.py
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
    mm_ref,
    rnd,
    run_case,
    sdpa_ref,
    simple,
)

CASES = CaseList()
case = CASES.case


# Small scratch (an MCU-sized temp arena): chunked buffers and GEMM blocks must shrink to fit.
@case("conv-small-scratch")
def _(g):
    x, w = rnd((1, 16, 30, 30), F32, g), rnd((24, 16, 3, 3), F32, g)
    exp = conv_ref(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    c = simple(
        "aten::convolution.out",
        [x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1],
        exp,
        tol=(1e-4, 1e-4),
    )
    c.temp_bytes = 64 << 10
    return c


@case("conv-transposed-small-scratch")
def _(g):
    x, w = rnd((1, 8, 20, 20), F32, g), rnd((8, 12, 3, 3), F32, g)
    exp = conv_ref(x, w, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1)
    c = simple(
        "aten::convolution.out",
        [x, w, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1],
        exp,
        tol=(1e-4, 1e-4),
    )
    c.temp_bytes = 64 << 10
    return c


@case("custom-sdpa-small-scratch")
def _(g):
    q, k, v = (
        rnd((1, 64, 2, 32), F32, g),
        rnd((1, 200, 2, 32), F32, g),
        rnd((1, 200, 2, 32), F32, g),
    )
    c = simple(
        "llama::custom_sdpa.out",
        [q, k, v, 100, None, 0.0, True, None],
        sdpa_ref(q, k, v, 100, None, True, None),
        tol=(1e-4, 1e-5),
    )
    c.temp_bytes = 48 << 10
    return c


@case("mixed-linear-small-scratch")
def _(g):
    x = rnd((8, 256), F32, g)
    w = torch.randint(-128, 128, (300, 256), generator=g).to(torch.int8)
    s = torch.rand(300, generator=g) * 0.05
    exp = (x.double() @ (w.double() * s.double()[:, None]).t()).float()
    c = simple(
        "quantized_decomposed::mixed_linear.out", [x, w, s, None, F32], exp, tol=(1e-4, 1e-4)
    )
    c.temp_bytes = 64 << 10
    return c


# ---------------------------------------------------------------------------------------------
# more error cases (bad shapes, dtypes, arguments must raise, never crash)
# ---------------------------------------------------------------------------------------------

I8, U8, I64 = torch.int8, torch.uint8, torch.int64
MORE_ERRORS = [
    (
        "maxpool-backward-err-index",
        "aten::max_pool2d_with_indices_backward.grad_input",
        [
            torch.ones(1, 1, 2, 2),
            torch.ones(1, 1, 4, 4),
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            False,
            torch.full((1, 1, 2, 2), 16, dtype=I64),
            torch.zeros(1, 1, 4, 4),
            torch.zeros(1, 1, 4, 4),
        ],
    ),
    (
        "maxpool-backward-err-shape",
        "aten::max_pool2d_with_indices_backward.grad_input",
        [
            torch.ones(1, 1, 3, 3),
            torch.ones(1, 1, 4, 4),
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            False,
            torch.zeros(1, 1, 3, 3, dtype=I64),
            torch.zeros(1, 1, 4, 4),
            torch.zeros(1, 1, 4, 4),
        ],
    ),
    (
        "constant-pad-err-dtype",
        "aten::constant_pad_nd.out",
        [torch.ones(3), [1, 1], 0.0, torch.ones(5, dtype=F64), torch.ones(5, dtype=F64)],
    ),
    (
        "upsample-aa-err-size",
        "aten::_upsample_bilinear2d_aa.out",
        [
            torch.ones(1, 1, 4, 4),
            [0, 2],
            False,
            None,
            None,
            torch.ones(1, 1, 1, 2),
            torch.ones(1, 1, 1, 2),
        ],
    ),
    (
        "pixel-unshuffle-err-spatial",
        "aten::pixel_unshuffle.out",
        [torch.ones(1, 1, 3, 4), 2, torch.ones(1, 4, 1, 2), torch.ones(1, 4, 1, 2)],
    ),
    (
        "dq-per-channel-err-axis",
        "quantized_decomposed::dequantize_per_channel.out",
        [
            torch.zeros(2, 3, dtype=I8),
            torch.ones(3),
            None,
            2,
            -128,
            127,
            I8,
            None,
            torch.zeros(2, 3),
            torch.zeros(2, 3),
        ],
    ),
    (
        "q-per-token-err-scales",
        "quantized_decomposed::quantize_per_token.out",
        [
            torch.ones(2, 3),
            torch.ones(3, 1, dtype=F64),
            torch.zeros(3, 1, dtype=I64),
            -128,
            127,
            I8,
            torch.zeros(2, 3, dtype=I8),
            torch.zeros(2, 3, dtype=I8),
        ],
    ),
    (
        "choose-qparams-err-empty",
        "quantized_decomposed::choose_qparams.Tensor_out",
        [
            torch.ones(0),
            -128,
            127,
            1e-7,
            I8,
            torch.zeros(1, dtype=F64),
            torch.zeros(1, dtype=I64),
            [torch.zeros(1, dtype=F64), torch.zeros(1, dtype=I64)],
        ],
    ),
    (
        "mixed-mm-err-shape",
        "quantized_decomposed::mixed_mm.out",
        [
            torch.ones(2, 3),
            torch.zeros(4, 5, dtype=I8),
            torch.ones(4),
            None,
            torch.ones(2, 5),
            torch.ones(2, 5),
        ],
    ),
    (
        "q-add-err-dtype",
        "quantized_decomposed::add.out",
        [
            torch.zeros(3, dtype=U8),
            0.1,
            0,
            0,
            255,
            torch.zeros(3, dtype=I8),
            0.1,
            0,
            0,
            255,
            0.1,
            0,
            0,
            255,
            torch.zeros(3, dtype=U8),
            torch.zeros(3, dtype=U8),
        ],
    ),
    (
        "sdpa-kv-cache-err-seq-len",
        "llama::sdpa_with_kv_cache.out",
        [
            torch.ones(1, 2, 2, 4),
            torch.ones(1, 2, 2, 4),
            torch.ones(1, 2, 2, 4),
            torch.ones(1, 6, 2, 4),
            torch.ones(1, 6, 2, 4),
            0,
            3,
            None,
            0.0,
            True,
            None,
            torch.ones(1, 2, 2, 4),
            torch.ones(1, 2, 2, 4),
        ],
    ),
    (
        "custom-sdpa-err-dtype",
        "llama::custom_sdpa.out",
        [
            torch.ones(1, 1, 2, 4, dtype=I64),
            torch.ones(1, 4, 2, 4, dtype=I64),
            torch.ones(1, 4, 2, 4, dtype=I64),
            0,
            None,
            0.0,
            True,
            None,
            torch.ones(1, 1, 2, 4, dtype=I64),
            torch.ones(1, 1, 2, 4, dtype=I64),
        ],
    ),
    (
        "groupnorm-err-shape",
        "aten::native_group_norm.out",
        [
            torch.ones(2, 6, 4),
            None,
            None,
            2,
            6,
            5,
            3,
            1e-5,
            torch.ones(2, 6, 4),
            torch.ones(2, 3),
            torch.ones(2, 3),
            [torch.ones(2, 6, 4), torch.ones(2, 3), torch.ones(2, 3)],
        ],
    ),
    (
        "cdist-err-batch",
        "aten::_cdist_forward.out",
        [
            torch.ones(2, 3, 4),
            torch.ones(3, 5, 4),
            2.0,
            None,
            torch.ones(2, 3, 5),
            torch.ones(2, 3, 5),
        ],
    ),
    (
        "embedding-err-weight-rank",
        "aten::embedding.out",
        [torch.ones(4), torch.tensor([1]), -1, False, False, torch.ones(1, 1), torch.ones(1, 1)],
    ),
]
for name, op, args in MORE_ERRORS:
    CASES.append((name, err(op, args)))


# Pads near INT64_MAX (a hostile file's values): refused (the padded size was signed overflow).
CASES.append(
    (
        "constant-pad-err-overflow",
        err("aten::constant_pad_nd.out", [torch.ones(2, 3), [1, 2**63 - 1], 0.0, torch.ones(2, 3)]),
    )
)

# Window parameters near INT64_MAX (a fuzzed file's values: dilation * (kernel - 1) was signed
# overflow in the output-size arithmetic): refused with a message.
_BIG = 2**63 - 1
CASES.append(
    (
        "maxpool-err-dilation-overflow",
        err(
            "aten::max_pool2d_with_indices.out",
            [torch.ones(1, 1, 8, 8), [20, 2], [1, 1], [0, 0], [_BIG, 1], False]
            + [torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1, dtype=I64)],
        ),
    )
)
CASES.append(
    (
        "maxpool-err-stride-overflow",
        err(
            "aten::max_pool2d_with_indices.out",
            [torch.ones(1, 1, 8, 8), [2, 2], [_BIG, 1], [0, 0], [1, 1], True]
            + [torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1, dtype=I64)],
        ),
    )
)
CASES.append(
    (
        "avgpool-err-kernel-overflow",
        err(
            "aten::avg_pool2d.out",
            [torch.ones(1, 1, 8, 8), [_BIG, 2], [1, 1], [0, 0], False, True, None]
            + [torch.zeros(1, 1, 1, 1)],
        ),
    )
)


@case("constant-pad-0dim")
def _(g):
    x = torch.tensor(3.5)
    return simple("aten::constant_pad_nd.out", [x, [], 1.0], torch.ops.aten.constant_pad_nd(x, []))


def _nn_ops() -> list[tuple[str, int]]:
    """(name, n_args) of every entry in ops_nn.def."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "kernels/portable/ops_nn.def").read_text()
    return [(m[0], int(m[1])) for m in re.findall(r'EM_OP\("([^"]+)",\s*\w+,\s*(-?\d+)', text)]


# Garbage arguments (all None; all ints; tensors where scalars belong) must raise, not crash.
for _op, _n in _nn_ops():
    CASES.append((f"garbage-none-{_op}", err(_op, [None] * _n)))
    CASES.append((f"garbage-int-{_op}", err(_op, [1] * _n)))
    if _op not in ("aten::mm.out", "ember::rope.out"):  # all-[2, 2]: a valid call of these
        CASES.append((f"garbage-tensor-{_op}", err(_op, [torch.ones(2, 2)] * _n)))


for dt in [BF16, F16]:
    for m in [1, 3, 9]:

        @case(f"linear-half-column-blocks-{dt}-{m}")
        def _(g, dt=dt, m=m):
            # f16/bf16 weights are widened in column blocks sized to the scratch (here ~4).
            x, w, b = rnd((m, 64), dt, g), rnd((300, 64), dt, g), rnd((300,), dt, g)
            exp = (x.double() @ w.double().t() + b.double()).to(dt)
            c = simple("aten::linear.out", [x, w, b], exp, tol=(3e-2, 5e-2))
            c.temp_bytes = 64 << 10
            return c


# The same kernels with a thread pool in the context (GEMM tiles and packing, matrix-vector
# columns, depthwise channels run in parallel).
_THREADED = [
    (
        "mm",
        lambda g: (lambda a, b: simple("aten::mm.out", [a, b], mm_ref(a, b), tol=(1e-4, 1e-4)))(
            rnd((100, 300), F32, g, "t"), rnd((300, 700), F32, g)
        ),
    ),
    (
        "linear-gemv",
        lambda g: (
            lambda x, w: simple(
                "aten::linear.out",
                [x, w, None],
                (x.double() @ w.double().t()).float(),
                tol=(1e-4, 1e-4),
            )
        )(rnd((3, 500), F32, g), rnd((70, 500), F32, g)),
    ),
    (
        "conv",
        lambda g: (
            lambda x, w: simple(
                "aten::convolution.out",
                [x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1],
                conv_ref(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
                tol=(1e-4, 1e-4),
            )
        )(rnd((2, 16, 20, 20), F32, g), rnd((32, 16, 3, 3), F32, g)),
    ),
    (
        "conv-depthwise",
        lambda g: (
            lambda x, w: simple(
                "aten::convolution.out",
                [x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 16],
                conv_ref(x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 16),
                tol=(1e-4, 1e-4),
            )
        )(rnd((2, 16, 21, 20), F32, g, "cl"), rnd((16, 1, 3, 3), F32, g)),
    ),
    (
        "sdpa",
        lambda g: (
            lambda q, k, v: simple(
                "llama::custom_sdpa.out",
                [q, k, v, 30, None, 0.0, True, None],
                sdpa_ref(q, k, v, 30, None, True, None),
                tol=(1e-4, 1e-5),
            )
        )(rnd((1, 50, 4, 32), F32, g), rnd((1, 80, 2, 32), F32, g), rnd((1, 80, 2, 32), F32, g)),
    ),
]
for _name, _build in _THREADED:

    @case(f"threaded-{_name}")
    def _(g, _build=_build):
        c = _build(g)
        c.threads = True
        c.temp_bytes = 32 << 20
        return c


# A scale factor whose output size is past int64 (a fuzzed file's value: the size's integer cast
# was undefined behaviour) or NaN: refused with a message.
for _name, _scale in (("huge", 1e300), ("nan", float("nan"))):
    CASES.append(
        (
            f"upsample-nearest-err-{_name}-scale",
            err(
                "aten::upsample_nearest2d.vec_out",
                [torch.ones(1, 1, 4, 4), None, [_scale, 2.0], torch.ones(1, 1, 8, 8)],
            ),
        )
    )


@pytest.mark.parametrize("name,builder", CASES, ids=CASES.ids())
def test_kernel(name: str, builder: Builder) -> None:
    run_case(name, builder)
