"""A Hugging Face BERT (MiniLM-L6's shape: 6 layers, hidden 384, 12 heads, sequence 128, random
seeded weights) exported by ``ember.export`` with its default attention (SDPA), without and with
the export-time constant folding (ember/passes/fold_graph.py) and the CPU backend's safe-softmax
fusion (ember/backends/cpu/safe_softmax.py), and with eager attention: medians of 10 runs in 5
interleaved rounds at 1 and 2 threads. A report (bench/results/generality_2026-12-07.md).

    .venv/bin/python bench/hf_default_attention.py
"""

from __future__ import annotations

import importlib
import logging
import statistics
import time
from typing import Any

import torch

import ember
import ember.backends.cpu.safe_softmax as ss
from ember.runtime import RuntimeProgram

log = logging.getLogger("hf_default_attention")


class _Wrap(torch.nn.Module):
    def __init__(self, m: torch.nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


def _model(attn: str) -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        attn_implementation=attn,
    )
    return _Wrap(BertModel(cfg).eval()).eval()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ex = importlib.import_module("ember.export")
    ids = torch.randint(0, 30000, (1, 128), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(1, 128, dtype=torch.long)
    real_fold, real_find = ex.fold_constant_subgraphs, ss.find
    runtimes: dict[tuple[str, int], Any] = {}
    for name, attn, new in (
        ("sdpa, without", "sdpa", False),
        ("sdpa, with", "sdpa", True),
        ("eager attention, with", "eager", True),
    ):
        ex.fold_constant_subgraphs = real_fold if new else (lambda ep, external=False: ep)
        ss.find = real_find if new else (lambda ir: {})
        w = _model(attn)
        ref = w(ids, mask)
        p = ember.export(w, (ids, mask))
        outside = sum(1 for d in p._irs["forward"].partition_report if not d.delegated)
        for t in (1, 2):
            rt = RuntimeProgram(p.buffer, threads=t)
            err = (rt.run("forward", [ids, mask])[0] - ref).abs().max().item()
            runtimes[(name, t)] = rt
        log.info("%s: %d instructions outside, max |err| %.1e", name, outside, err)
    ex.fold_constant_subgraphs, ss.find = real_fold, real_find
    res: dict[tuple[str, int], list[float]] = {k: [] for k in runtimes}
    for _ in range(5):
        for k, rt in runtimes.items():
            ts = []
            for _ in range(10):
                t0 = time.perf_counter()
                rt.run("forward", [ids, mask])
                ts.append(time.perf_counter() - t0)
            res[k].append(statistics.median(ts) * 1e3)
    for (name, t), v in res.items():
        rounds = " / ".join(f"{x:.1f}" for x in v)
        log.info("| %s | %d | %.2f | %s |", name, t, statistics.median(v), rounds)


if __name__ == "__main__":
    main()
