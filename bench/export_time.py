"""Export-time benchmark: ember.export vs torch.export.export alone on a ~100M-parameter model.

    .venv/bin/python bench/export_time.py [--layers 24] [--dim 2048] [--repeat 2]

The model is a stack of transformer-style MLP blocks (Linear -> GELU -> Linear + residual,
LayerNorm). Prints the times (best of ``--repeat``) of torch.export alone, torch.export plus
``run_decompositions`` (the Core-ATen floor every exporter built on torch pays) and ember.export
(in memory; the file is written by ``Program.save``, timed separately), and their ratios
(target <= 1.5x).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

import torch

import ember
from ember.oplist import stock_executorch_oplist


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln(x))))


def make_model(layers: int, dim: int) -> torch.nn.Module:
    return torch.nn.Sequential(*[Block(dim) for _ in range(layers)]).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.manual_seed(0)
    model = make_model(args.layers, args.dim)
    n_params = sum(p.numel() for p in model.parameters())
    x = torch.randn(1, 8, args.dim)
    print(f"model: {args.layers} blocks, dim {args.dim}, {n_params / 1e6:.1f}M parameters")

    t_torch, t_decomp, t_ember, t_save = [], [], [], []
    size = 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ep = torch.export.export(model, (x,))
        t_torch.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ep.run_decompositions()
        t_decomp.append(time.perf_counter() - t0 + t_torch[-1])
        t0 = time.perf_counter()
        prog = ember.export(
            model, (x,), oplist=stock_executorch_oplist(), progress=False, backend=None
        )
        t_ember.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            prog.save(os.path.join(d, "model.pte"))
            t_save.append(time.perf_counter() - t0)
        size = prog.nbytes
        del prog
    tt, td, te, ts = min(t_torch), min(t_decomp), min(t_ember), min(t_save)
    print(f"torch.export.export                 : {tt:7.2f} s")
    print(f"torch.export + run_decompositions   : {td:7.2f} s")
    print(f"ember.export (in memory)            : {te:7.2f} s  ({size / 1e6:.0f} MB .pte)")
    print(f"Program.save (write to disk)        : {ts:7.2f} s")
    print(f"ratio ember / torch.export          : {te / tt:7.2f}x  (target <= 1.5x)")
    print(f"ratio ember / (export + decompose)  : {te / td:7.2f}x")


if __name__ == "__main__":
    main()
