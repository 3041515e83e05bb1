"""kernels_ew.py — micro benchmark of the portable elementwise, reduction and copy kernels.

Times single kernels through ctypes (``ember._lib.call_kernel``, no thread pool) on the shapes
of a SmolLM2-135M prefill of 256 tokens (hidden 576, MLP 1536). Each case reports the median
of ``--reps`` timed calls, minus the median of the same number of calls of a 1-element kernel
(the ctypes cost), in microseconds.

A before/after comparison under the same machine load runs the cases against two libraries,
alternated case by case::

    PYTHONPATH=python .venv/bin/python bench/kernels_ew.py --lib /tmp/base/libember.so \
        --lib build/libember.so --reps 30

``EMBER_LIB`` selects the library in-process, so each library is timed in its own subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

S, H, F = 256, 576, 1536


def cases() -> dict[str, Callable[[], tuple[str, list[Any]]]]:
    """Name -> builder of (kernel name, args). Built lazily so tensors are fresh per process."""
    from ember._lib import Out

    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    def oo(*shape: int) -> list[Out]:
        """An out tensor as the kernels take it: the `out` argument and the returned value."""
        t = Out(torch.empty(*shape))
        return [t, t]

    x, y, w = r(1, S, H), r(1, S, H), r(H)
    col, m = r(1, S, 1).abs() + 0.1, r(1, S, F)
    return {
        "mul [S,H]*[S,H]": lambda: ("aten::mul.out", [x, y, *oo(1, S, H)]),
        "mul [S,H]*[H] (x*weight)": lambda: ("aten::mul.out", [x, w, *oo(1, S, H)]),
        "mul [S,H]*[S,1] (x*rsqrt)": lambda: ("aten::mul.out", [x, col, *oo(1, S, H)]),
        "mul.Scalar [S,F]": lambda: ("aten::mul.Scalar_out", [m, 0.5, *oo(1, S, F)]),
        "add [S,H]+[S,H]": lambda: ("aten::add.out", [x, y, 1, *oo(1, S, H)]),
        "add.Scalar [S,1]+eps": lambda: ("aten::add.Scalar_out", [col, 1e-5, 1, *oo(1, S, 1)]),
        "sub alpha=2 [S,H]": lambda: ("aten::sub.out", [x, y, 2, *oo(1, S, H)]),
        "div [S,H]/[S,1]": lambda: ("aten::div.out", [x, col, *oo(1, S, H)]),
        "pow [S,H] ** 2 (RMSNorm)": lambda: (
            "aten::pow.Tensor_Scalar_out",
            [x, 2.0, *oo(1, S, H)],
        ),
        "neg [S,F]": lambda: ("aten::neg.out", [m, *oo(1, S, F)]),
        "rsqrt [S,F]": lambda: ("aten::rsqrt.out", [m.abs(), *oo(1, S, F)]),
        "exp [S,F]": lambda: ("aten::exp.out", [m, *oo(1, S, F)]),
        "sigmoid [S,F]": lambda: ("aten::sigmoid.out", [m, *oo(1, S, F)]),
        "silu [S,F]": lambda: ("aten::silu.out", [m, *oo(1, S, F)]),
        "relu [S,F]": lambda: ("aten::relu.out", [m, *oo(1, S, F)]),
        "mean [S,H] dim -1 keepdim": lambda: (
            "aten::mean.out",
            [x, [-1], True, None, *oo(1, S, 1)],
        ),
        "sum [S,F] dim -1": lambda: ("aten::sum.IntList_out", [m, [-1], False, None, *oo(1, S)]),
        "cat [S,H]+[S,H] dim -1": lambda: ("aten::cat.out", [[x, y], -1, *oo(1, S, 2 * H)]),
        "slice_copy [S,F] dim -1 [0:H]": lambda: (
            "aten::slice_copy.Tensor_out",
            [m, -1, 0, H, 1, *oo(1, S, H)],
        ),
        "permute_copy [1,S,9,64]->[1,9,S,64]": lambda: (
            "aten::permute_copy.out",
            [x.view(1, S, 9, 64), [0, 2, 1, 3], *oo(1, 9, S, 64)],
        ),
        "view_copy [S,H]->[S,9,64]": lambda: (
            "aten::view_copy.out",
            [x, [1, S, 9, 64], *oo(1, S, 9, 64)],
        ),
        "clone of a transposed [H,S] (dim order change)": lambda: (
            "aten::clone.out",
            [x.view(S, H).t(), None, *oo(H, S)],
        ),
        "copy.out [S,H] <- [H] (broadcast)": lambda: (
            "aten::copy.out",
            [x, w, False, *oo(1, S, H)],
        ),
        "expand_copy [S,1]->[S,H]": lambda: (
            "aten::expand_copy.out",
            [col, [1, S, H], False, *oo(1, S, H)],
        ),
    }


def run_here(reps: int, only: list[str] | None) -> dict[str, float]:
    """Times every case with the library EMBER_LIB names; returns name -> microseconds."""
    from ember._lib import call_kernel

    def med(kname: str, args: list[Any]) -> float:
        call_kernel(kname, args)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            call_kernel(kname, args)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e6

    from ember._lib import Out

    one = torch.ones(1)
    o1 = Out(torch.empty(1))
    base = med("aten::neg.out", [one, o1, o1])
    res = {}
    for name, build in cases().items():
        if only and not any(s in name for s in only):
            continue
        kname, args = build()
        try:
            res[name] = max(med(kname, args) - base, 0.0)
        except RuntimeError as e:  # a kernel this library lacks
            print(f"{name}: {e}", file=sys.stderr)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lib", action="append", default=[], help="libember.so (repeatable)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the libraries")
    ap.add_argument("--only", nargs="*", help="substrings of case names to run")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run_here(a.reps, a.only)))
        return
    libs = a.lib or ["build/libember.so"]
    best: dict[str, dict[str, float]] = {lib: {} for lib in libs}
    for _ in range(a.rounds):
        for lib in libs:
            env = dict(os.environ, EMBER_LIB=os.path.abspath(lib))
            cmd = [sys.executable, __file__, "--child", "--reps", str(a.reps)]
            if a.only:
                cmd += ["--only", *a.only]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            for k, v in json.loads(out).items():
                best[lib][k] = min(best[lib].get(k, v), v)
    names = list(best[libs[0]])
    head = "| case | " + " | ".join(libs) + (" | speed-up |" if len(libs) == 2 else "")
    print(head)
    print("|---" * (len(libs) + 1 + (len(libs) == 2)) + "|")
    for n in names:
        vals = [best[lib].get(n, float("nan")) for lib in libs]
        row = f"| {n} | " + " | ".join(f"{v:.0f} us" for v in vals)
        if len(libs) == 2:
            row += f" | {vals[0] / max(vals[1], 1e-3):.1f}x |"
        print(row)


if __name__ == "__main__":
    main()
