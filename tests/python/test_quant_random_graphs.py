"""Random-graph property test of int8 quantization (issue 31: a quantizer that works on any
exported graph, int8 in EmberCpuBackend).

Seeded random graphs of tests/python/random_graphs.py (CNNs with every conv flavour, batch norms,
pools, residual adds and activations; sequence models with linears, attention, layer norms and
softmax; elementwise graphs) quantized with no model rewrite by
``ember.quant.pt2e.quantize_exported`` (static and dynamic) and by ExecuTorch's XNNPACKQuantizer
through PyTorch's PT2E flow as a user's code would (the stock quantizer's graph, which Ember
takes as it is), then checked by tests/python/random_q8_check.py: the default path
(EmberCpuBackend, 1 and 2 threads) and the portable path against the quantized graph run by
PyTorch, every lowering without a fallback. The quantizer must change most graphs, and the
delegates must hold int8 operators (integer convs, their fused fake-quants, dynamic int8
linears), or the test would pass by not testing them.

Longer runs: ``tools/random_graphs.py --int8 MODE --graphs 5000`` (MODE: static, dynamic,
xnnpack, xnnpack-dynamic). Cost: ~150 s of CPU time in all, over 2 forked processes.
"""

from __future__ import annotations

import pytest
from random_q8_check import Q8Stats, run_q8

STATIC_SEEDS = range(0, 48)
DYNAMIC_SEEDS = range(0, 96)  # about one in five has a linear or matmul to quantize
XNNPACK_SEEDS = range(0, 16)  # ~4 s each (PT2E's prepare / convert)
JOBS = 2
THREADS = (1, 2)


def _report(st: Q8Stats) -> str:
    return "\n".join(f"seed {f.seed}: {f.kind}: {f.detail}" for f in st.failures)


def test_random_graphs_static_int8() -> None:
    st = run_q8(STATIC_SEEDS, "static", JOBS, THREADS)
    assert st.graphs == len(STATIC_SEEDS)
    assert not st.failures, f"{len(st.failures)} failing graphs:\n{_report(st)}"
    assert st.quantized >= 0.7 * st.graphs, (st.quantized, st.graphs)
    for need in ("conv2d:q8", "conv2d+fakequant"):
        assert st.features[need] > 0, f"never delegated: {need} ({dict(st.features)})"
    assert st.int8_records() >= st.quantized, (st.int8_records(), st.quantized)


def test_random_graphs_dynamic_int8() -> None:
    st = run_q8(DYNAMIC_SEEDS, "dynamic", JOBS, THREADS)
    assert st.graphs == len(DYNAMIC_SEEDS)
    assert not st.failures, f"{len(st.failures)} failing graphs:\n{_report(st)}"
    assert st.quantized >= 12, st.quantized
    assert st.features["dq_linear"] >= st.quantized, (st.features["dq_linear"], st.quantized)


def test_random_graphs_xnnpack_quantizer() -> None:
    pytest.importorskip("torchao")
    pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")
    st = run_q8(XNNPACK_SEEDS, "xnnpack", JOBS, THREADS, chunk=4)
    assert st.graphs == len(XNNPACK_SEEDS)
    assert not st.failures, f"{len(st.failures)} failing graphs:\n{_report(st)}"
    assert st.quantized >= 0.6 * st.graphs, (st.quantized, st.graphs)
    assert st.int8_records() >= st.quantized, (st.int8_records(), st.quantized)
