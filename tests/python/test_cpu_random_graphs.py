"""Random-graph property test of EmberCpuBackend (issue 27, item 5).

2,000 random graphs of the operators the CPU partitioner lowers (tests/python/random_graphs.py:
convs of every flavour, folded batch norms, every fused activation and recognised
decomposition, GEMMs, broadcasting binary ops, pools, means, masked / scaled softmax, layer
norm, copies, residual adds...), 40 side by side per export, each checked on the default path
(``ember.export(m, inputs)`` -> EmberCpuBackend, at 1 and 2 threads) and the portable path
(``backend=None``) against eager, within 1e-4 of each output's largest magnitude. The graphs
must also really run inside the backend (most instructions delegated, and every fusion the
partitioner makes seen at least once), or the test would pass by not testing it.

A failing seed is printed with its graph; add it to ``REGRESSION_SEEDS`` (checked alone, every
run). Longer runs: ``tools/random_graphs.py --graphs 50000 --seed-start N``. Cost: ~205 s of
CPU time (the two torch traces per batch are ~90 % of it) split over 2 forked processes: ~1.8 min
on 2 idle cores (measured 2026-12-02: 225 s user+sys for this file, 9 min wall at load 10).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from random_graph_check import _Fallbacks, _run, check_cases, delegation, run_batches
from random_graphs import make_case
from torch import nn

import ember

SEEDS = range(0, 2000)
BATCH = 40
JOBS = 2
THREADS = (1, 2)

# Seeds that failed once (kept forever, each checked alone):
# 86: layer norm of a log_softmax (nearly constant rows): eager float32 is itself 4e-4 off;
#     the checker allows 4x eager's own float32 error (its distance to float64) on top.
# 719, 738: an activation after a reshape of a conv / binary output was fused into it (the
#     conv's output became 2-d, the binary's did not broadcast): IndexError / the runtime
#     refused the blob, the run was split (test_reshaped_outputs_are_not_fused_through).
# 106619, 107824: layer norm of a row of equal values; the backend's mean was sum / n, an ulp
#     off, which 1 / sqrt(eps) made 2e-4 of the output (a corrected mean now).
REGRESSION_SEEDS: list[int] = [86, 719, 738, 1273, 106619, 107824]

# Every fusion / variant the generator must reach inside the delegates (blob_features names).
REQUIRED = {
    "conv2d:depthwise", "conv2d:grouped", "conv2d:strided", "conv2d:dilated",
    "conv2d:residual", "conv2d:in_scale", "conv2d:plane_means", "conv2d:winograd2",
    "conv2d+clamp", "conv2d+hardswish", "conv2d+hardsigmoid", "conv2d+sigmoid", "conv2d+silu",
    "conv2d+gelu", "conv2d+tanh", "gemm:batched", "gemm:packed_b", "gemm:bias", "gemm:residual",
    "gemm+clamp", "gemm+gelu", "gemm+gelu_tanh", "gemm+silu", "binary:add", "binary:mul",
    "binary:div", "binary:sub", "binary:add:scalar", "binary:mul:scalar", "binary:rsub:scalar",
    "binary+clamp", "unary+hardswish", "unary+hardsigmoid", "unary+silu", "unary+exp",
    "unary+sqrt", "binary+rsqrt", "unary+neg", "unary+abs", "maxpool2d", "avgpool2d", "mean",
    "softmax:scale", "softmax:mask", "softmax:log", "layernorm", "permute", "cat", "slice",
    "channel_affine",
}  # fmt: skip


def _report(failures: list) -> str:
    return "\n".join(f"seed {f.seed}: {f.kind}: {f.detail}" for f in failures)


def test_random_graphs() -> None:
    st = run_batches(SEEDS, BATCH, JOBS, THREADS)
    assert st.graphs == len(SEEDS)
    assert not st.failures, f"{len(st.failures)} failing graphs:\n{_report(st.failures)}"
    outside = sum(st.outside.values())
    assert st.inside >= 0.9 * (st.inside + outside), (st.inside, st.outside)
    missing = REQUIRED - set(st.features)
    assert not missing, f"never delegated: {sorted(missing)}"


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_regression_seed(seed: int) -> None:
    st = check_cases([make_case(seed)], THREADS)
    assert not st.failures, _report(st.failures)


class Clamps(nn.Module):
    """Clamps in a row whose ranges are disjoint, and a clamp with min > max."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = F.relu(F.hardtanh(x, -2.0, -1.5))  # [-2, -1.5] then [0, inf): 0
        b = torch.clamp(F.relu6(x * 2), -3.0, -2.0)  # [0, 6] then [-3, -2]: -2
        c = torch.clamp(x, 2.0, 1.0)  # min > max: every element max
        return a, b, c


def test_disjoint_clamps_merge() -> None:
    """Merged clamps had unordered bounds ([0, -1.5]): the runtime refused the blob and the run
    was split (before the exporter's fallback: the file did not load)."""
    x = torch.randn(3, 17)
    with _Fallbacks() as fell:
        prog = ember.export(Clamps(), (x,))
    assert not fell.messages, fell.messages
    inside, outside, n, _ = delegation(prog)
    assert (n, sum(outside.values())) == (1, 0), (n, outside)
    for got, want in zip(_run(prog, (x,), 1), Clamps()(x), strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("kind", "kw", "shape"),
    [
        ("avg", {"kernel_size": 2, "stride": 2, "ceil_mode": True}, (1, 3, 1, 5)),
        ("max", {"kernel_size": 3, "stride": 2, "ceil_mode": True}, (1, 3, 2, 5)),
    ],
)
def test_ceil_pool_window_past_the_input(kind: str, kw: dict, shape: tuple) -> None:
    """Ceil-mode pools whose window is larger than the padded input (torch allows them): the
    blob was refused by the runtime and its run split; now the pool is declined up front."""
    pool = F.avg_pool2d if kind == "avg" else F.max_pool2d

    class Pool(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return pool(x * 1.5, **kw)

    x = torch.randn(*shape)
    with _Fallbacks() as fell:
        prog = ember.export(Pool(), (x,))
    assert not fell.messages, fell.messages
    torch.testing.assert_close(_run(prog, (x,), 1)[0], Pool()(x), rtol=1e-5, atol=1e-6)


class Reshaped(nn.Module):
    """Activations, a residual add and a batch norm after a reshape of a conv, binary, channel
    affine or GEMM output."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2, self.c3 = (nn.Conv2d(3, 4, 3) for _ in range(3))
        self.fc = nn.Linear(8, 6)
        self.bn2 = nn.BatchNorm2d(3).eval()
        self.bn1 = nn.BatchNorm1d(4).eval()
        with torch.no_grad():
            self.bn1.running_mean.uniform_(-1, 1)
            self.bn1.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, r: torch.Tensor) -> Any:
        return (
            F.relu(self.c1(x).flatten(1)),  # conv -> flatten -> relu
            F.gelu(self.fc(y).reshape(3, 3, 2)),  # GEMM -> reshape -> gelu (still fused)
            F.relu6(self.bn2(x * 2).flatten(2)),  # channel affine -> flatten -> relu6
            torch.sigmoid((z * 3.0).unsqueeze(1)),  # binary -> unsqueeze -> sigmoid
            self.c2(x).flatten(1) + r,  # conv -> flatten -> residual add
            self.bn1(self.c3(x).flatten(2)),  # conv -> flatten -> batch norm 1-d
        )


def test_reshaped_outputs_are_not_fused_through() -> None:
    m = Reshaped().eval()
    ins = (torch.randn(1, 3, 6, 6), torch.randn(3, 8), torch.randn(5, 7), torch.randn(1, 64))
    with _Fallbacks() as fell:
        prog = ember.export(m, ins)
    assert not fell.messages, fell.messages
    assert delegation(prog)[2] == 1
    with torch.no_grad():
        want = m(*ins)
    for got, w in zip(_run(prog, ins, 1), want, strict=True):
        torch.testing.assert_close(got, w, rtol=1e-5, atol=1e-6)
