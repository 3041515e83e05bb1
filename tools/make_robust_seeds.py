"""Writes the seed files of the robustness work (issue 30) into a directory: every kind of file
the project makes (ember.export with EmberCpuBackend and with the portable kernels, cond,
dynamic shapes, multi-method, a mutable buffer, int8, external constants with their .ptd, a tiny
Llama with a KV cache in f32 and 4-bit) and, when ``executorch`` is installed, files made by
stock ExecuTorch's ``to_edge_transform_and_lower(...).to_executorch()`` (views, in-place buffer
updates, ``index_put_`` KV caches, XNNPACK delegation) to check that the verifier's aliasing rule
refuses no valid file. Used by tools/mutation_sweep.py and the fuzz corpus.

    .venv/bin/python tools/make_robust_seeds.py OUT_DIR [--no-executorch]
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

import ember

log = logging.getLogger("make_robust_seeds")


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


class Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.c1(x))
        y = torch.nn.functional.max_pool2d(self.c2(y) + y, 2)
        return self.fc(y.flatten(1))


class Shapes(torch.nn.Module):
    """Views, cat/split, transpose, index_put, a scatter and reductions: the shape/copy kernels."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = torch.split(x, 2, dim=1)
        c = torch.cat([b, a, a], dim=1).transpose(0, 1).contiguous()
        d = c.reshape(-1)
        e = torch.zeros(6, 4).index_put((idx,), x[:2])
        f = torch.zeros(4, 4).scatter(0, idx.view(2, 1).expand(2, 4), x[:2])
        return d.sum(0, keepdim=True), e + 1.0, f.amax(1), torch.cumsum(x, 1)


class Cond(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t * 2.0, lambda t: t - 1.0, (x,))


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1.0)
        return x + self.count


class KvCache(torch.nn.Module):
    """A KV-cache update in place (``index_put_`` on a buffer), as LLM exports do."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 8, 4))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.k.index_put_((torch.tensor([0]), pos), x)
        return self.k.sum(1) * 2.0


class Inplace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.mul_(2.0).add_(1.0)
        z = y.view(2, -1).t()
        return torch.relu(z) + z.mean()


class Cat80(torch.nn.Module):
    """A cat of 80 planned tensors: an instruction with more operands than the verifier's
    aliasing check keeps on its stack (32)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x * float(i) for i in range(80)], 0)


def tiny_llama(quant: str | None) -> Any:
    from ember.llm import llama

    torch.manual_seed(0)
    c = llama.LlamaConfig(
        dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=64, vocab_size=64, max_seq_len=32
    )
    model = llama.Llama(c, last_logits_only=True).eval()
    return ember.llm.export(model, max_prefill=8, quant=quant)


def int8_mlp() -> Any:
    torch.manual_seed(0)
    m = Mlp().eval()
    q = ember.quantize(m, [torch.randn(2, 8) for _ in range(4)], progress=False)
    return ember.export(q, (torch.randn(2, 8),), backend=None)


def ember_seeds(out: Path) -> list[Path]:
    torch.manual_seed(0)
    x4 = torch.randn(4, 4)
    idx = torch.tensor([1, 3])
    dyn = {"x": {0: torch.export.Dim("batch", max=8)}}
    cases: dict[str, Callable[[], Any]] = {
        "e_mlp_cpu.pte": lambda: ember.export(Mlp().eval(), (torch.randn(2, 8),), backend="cpu"),
        "e_conv_cpu.pte": lambda: ember.export(
            Conv().eval(), (torch.randn(1, 3, 8, 8),), backend="cpu"
        ),
        "e_conv_portable.pte": lambda: ember.export(
            Conv().eval(), (torch.randn(1, 3, 8, 8),), backend=None
        ),
        "e_shapes.pte": lambda: ember.export(Shapes(), (x4, idx), backend=None),
        "e_cond.pte": lambda: ember.export(Cond(), (torch.randn(4),), backend=None),
        "e_cat80.pte": lambda: ember.export(Cat80(), (torch.randn(2, 3),), backend=None),
        "e_dynamic.pte": lambda: ember.export(
            Mlp().eval(), (torch.randn(3, 8),), dynamic_shapes=dyn, backend=None
        ),
        "e_multi.pte": lambda: ember.export(
            {
                "forward": (Mlp().eval(), (torch.randn(2, 8),)),
                "other": (Counter(), (torch.randn(3),)),
            },
            backend=None,
        ),
        "e_counter.pte": lambda: ember.export(Counter(), (torch.randn(3),), backend=None),
        "e_kvcache.pte": lambda: ember.export(
            KvCache(), (torch.randn(1, 4), torch.tensor([2])), backend=None
        ),
        "e_inplace.pte": lambda: ember.export(Inplace(), (torch.randn(4, 4),), backend=None),
        "e_int8.pte": int8_mlp,
        "e_llm_f32.pte": lambda: tiny_llama(None),
        "e_llm_q4.pte": lambda: tiny_llama("4w32"),
        "e_external.pte": lambda: ember.export(
            Mlp().eval(), (torch.randn(2, 8),), external_constants=True, backend=None
        ),
    }
    written = []
    for name, make in tqdm(cases.items(), desc="ember seeds"):
        try:
            prog = make()
        except Exception as e:  # noqa: BLE001 - a seed that cannot be made is reported, not fatal
            log.warning("%s: not made (%s: %s)", name, type(e).__name__, e)
            continue
        prog.save(out / name)
        written.append(out / name)
        ptd = getattr(prog, "ptd_buffer", None)
        if ptd:
            (out / name.replace(".pte", ".ptd")).write_bytes(ptd)
    return written


def executorch_seeds(out: Path) -> list[Path]:
    try:
        from executorch.exir import to_edge_transform_and_lower
    except ImportError:
        log.warning("executorch is not installed: no stock ExecuTorch seeds")
        return []
    torch.manual_seed(0)
    x4 = torch.randn(4, 4)
    cases: dict[str, tuple[torch.nn.Module, tuple[Any, ...], bool]] = {
        "x_mlp.pte": (Mlp().eval(), (torch.randn(2, 8),), False),
        "x_conv.pte": (Conv().eval(), (torch.randn(1, 3, 8, 8),), False),
        "x_shapes.pte": (Shapes(), (x4, torch.tensor([1, 3])), False),
        "x_counter.pte": (Counter(), (torch.randn(3),), False),
        "x_kvcache.pte": (KvCache(), (torch.randn(1, 4), torch.tensor([2])), False),
        "x_inplace.pte": (Inplace(), (torch.randn(4, 4),), False),
        "x_conv_xnnpack.pte": (Conv().eval(), (torch.randn(1, 3, 8, 8),), True),
    }
    written = []
    for name, (model, args, xnn) in tqdm(cases.items(), desc="executorch seeds"):
        try:
            ep = torch.export.export(model, args)
            part = []
            if xnn:
                from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
                    XnnpackPartitioner,
                )

                part = [XnnpackPartitioner()]
            prog = to_edge_transform_and_lower(ep, partitioner=part).to_executorch()
        except Exception as e:  # noqa: BLE001
            log.warning("%s: not made (%s: %s)", name, type(e).__name__, e)
            continue
        (out / name).write_bytes(prog.buffer)
        written.append(out / name)
    return written


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--no-executorch", action="store_true")
    ap.add_argument("--executorch-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.executorch_only:
        files = executorch_seeds(a.out)
    else:
        files = ember_seeds(a.out)
        if not a.no_executorch:
            # Its own process: executorch and ember.quant.llm both register quantized_decomposed::*.
            subprocess.run([sys.executable, __file__, str(a.out), "--executorch-only"], check=False)
    for f in files:
        log.info("%s: %d bytes", f.name, f.stat().st_size)


if __name__ == "__main__":
    main()
