"""The zoo on EmberVulkanBackend (issue 34): each model exported with ``backend="vulkan"`` and
each tensor storage (``vulkan_storage``: f32, f16), the share of its instructions on the Vulkan
device, its error against eager PyTorch over the first output (max |got - eager| / max |eager|,
the measure the tests bound, and ||got - eager||_2 / ||eager||_2 beside it) and the latency of
one run (on lavapipe, Mesa's CPU Vulkan device, a functional check only: it says nothing of a
GPU's speed).

    .venv/bin/python bench/vulkan_zoo.py [--models mobilenet_v2,resnet18] [--storage f32,f16]
        [--iters 3]

Prints a Markdown table headed by the Vulkan device (and whether it has 16-bit storage) and the
host CPU (bench/report.py). ``--emulate`` adds a table of what f16 rounding alone costs each
model, in eager PyTorch (no Vulkan): the exported program (the ATen operators Ember runs, attention
decomposed) run with its weights rounded to f16, with every operator's f32 output rounded to f16
(what f16 storage does to activations), and both, each error measured as above.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import logging
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "bench"))

log = logging.getLogger("vulkan_zoo")
DEFAULT = "mlp,lenet,mobilenet_v2,mobilenet_v3_small,resnet18,vit_tiny,minilm"


def device_name() -> str:
    from ember._lib import lib

    L = lib()
    if not hasattr(L, "em_vulkan_device_name"):
        return "none (libember built without Vulkan)"
    L.em_vulkan_device_name.restype = ctypes.c_char_p
    name = L.em_vulkan_device_name()
    return name.decode() if name else "none"


def has_f16_storage() -> bool:
    from ember._lib import lib

    L = lib()
    if not hasattr(L, "em_vulkan_has_f16_storage"):
        return False
    L.em_vulkan_has_f16_storage.restype = ctypes.c_bool
    return bool(L.em_vulkan_has_f16_storage())


def row(name: str, storage: str, iters: int) -> str:
    from zoo.models import build

    import ember
    from ember.runtime import RuntimeProgram

    m, inputs = build(name)
    with torch.inference_mode():
        want = m(*inputs)
    want = want[0] if isinstance(want, (tuple, list)) else want
    prog = ember.export(m, inputs, backend="vulkan", vulkan_storage=storage)
    report = prog._irs["forward"].partition_report
    share = sum(d.delegated for d in report) / max(len(report), 1)
    rt = RuntimeProgram(prog.buffer)
    got = rt.run("forward", list(inputs))[0]
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        rt.run("forward", list(inputs))
        t.append(time.perf_counter() - t0)
    err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))
    l2 = float((got - want).norm() / want.norm().clamp_min(1e-12))
    portable = sorted({d.kernel for d in report if not d.delegated})
    return (
        f"| {name} | {storage} | {100 * share:.1f} % | {err:.1e} | {l2:.1e} | {1e3 * min(t):.1f} | "
        f"{', '.join(portable) or '-'} |"
    )


class _RoundOutputs(TorchDispatchMode):
    """Rounds every f32 activation an operator returns (views excepted) to f16 and back; what
    operators compute from constants alone (weight transposes...) stays exact: with
    ``consts`` (the module's parameters and buffers) as the constants."""

    def __init__(self, consts: list[torch.Tensor]) -> None:
        super().__init__()
        self.keep = list(consts)  # alive, so that their ids stay theirs
        self.const = {id(t) for t in consts}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if ins and all(id(t) in self.const for t in ins):
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.keep.append(t)
                    self.const.add(id(t))
            return out
        if isinstance(out, torch.Tensor) and not func.is_view and out.dtype == torch.float32:
            out = out.half().float()
        return out


def emulation_row(name: str) -> str:
    from zoo.models import build

    import ember

    m, inputs = build(name)
    with torch.inference_mode():
        want = m(*inputs)
    want = want[0] if isinstance(want, (tuple, list)) else want
    ep = ember.export(m, inputs, backend=None)._exported["forward"]
    errs = []
    for weights, acts in ((True, False), (False, True), (True, True)):
        mod = copy.deepcopy(ep.module())  # module() shares the program's parameters
        if weights:
            for t in [*mod.parameters(), *mod.buffers()]:
                if t.dtype == torch.float32:
                    t.data = t.data.half().float()
        consts = [*mod.parameters(), *mod.buffers()]
        with torch.no_grad(), _RoundOutputs(consts) if acts else contextlib.nullcontext():
            got = mod(*inputs)
        got = got[0] if isinstance(got, (tuple, list)) else got
        errs.append(float((got - want).abs().max() / want.abs().max().clamp_min(1e-12)))
    return f"| {name} | " + " | ".join(f"{e:.1e}" for e in errs) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument(
        "--storage", default="f32,f16", help='vulkan_storage values, comma-separated ("": none)'
    )
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--emulate", action="store_true", help="also the eager f16-rounding table")
    ap.add_argument(
        "--f32-arena",
        action="store_true",
        help="f16 files run with f32 storage (em_vulkan_allow_f16_storage(false): f16 weights)",
    )
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if a.f32_arena:
        from ember._lib import lib

        L = lib()
        L.em_vulkan_allow_f16_storage.argtypes = [ctypes.c_bool]
        L.em_vulkan_allow_f16_storage(False)
    from report import cpu_name

    out = [
        f"Vulkan device: {device_name()} (16-bit storage: {'yes' if has_f16_storage() else 'no'})"
        f"; host CPU: {cpu_name()}",
        "",
        "| model | storage | instructions on Vulkan | max abs error / max abs eager "
        "| L2 error / L2 eager | ms (min) | portable |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in a.models.split(","):
        for storage in filter(None, a.storage.split(",")):
            try:
                out.append(row(name, storage, a.iters))
                if a.f32_arena and storage == "f16":
                    out[-1] = out[-1].replace("| f16 |", "| f16 weights, f32 arena |", 1)
            except Exception as e:  # one model's failure is a row, not the end of the table
                out.append(
                    f"| {name} | {storage} | failed: {type(e).__name__}: {str(e)[:120]} | | | | |"
                )
            print(out[-1], file=sys.stderr, flush=True)
    if a.emulate:
        out += [
            "",
            "f16 rounding in eager PyTorch (max abs error / max abs eager):",
            "",
            "| model | f16 weights | f16 activations | both |",
            "|---|---|---|---|",
        ]
        for name in a.models.split(","):
            try:
                out.append(emulation_row(name))
            except Exception as e:
                out.append(f"| {name} | failed: {type(e).__name__}: {str(e)[:120]} | | |")
            print(out[-1], file=sys.stderr, flush=True)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
