"""The zoo on EmberVulkanBackend (issue 34): each model exported with ``backend="vulkan"`` and
each tensor storage (``vulkan_storage``: f32, f16), the share of its instructions on the Vulkan
device, its error against eager PyTorch (max |got - eager| / max |eager| over the first output)
and the latency of one run (on lavapipe, Mesa's CPU Vulkan device, a functional check only: it
says nothing of a GPU's speed).

    .venv/bin/python bench/vulkan_zoo.py [--models mobilenet_v2,resnet18] [--storage f32,f16]
        [--iters 3]

Prints a Markdown table headed by the Vulkan device (and whether it has 16-bit storage) and the
host CPU (bench/report.py).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import sys
import time
from pathlib import Path

import torch

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
    portable = sorted({d.kernel for d in report if not d.delegated})
    return (
        f"| {name} | {storage} | {100 * share:.1f} % | {err:.1e} | {1e3 * min(t):.1f} | "
        f"{', '.join(portable) or '-'} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--storage", default="f32,f16", help="vulkan_storage values, comma-separated")
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from report import cpu_name

    out = [
        f"Vulkan device: {device_name()} (16-bit storage: {'yes' if has_f16_storage() else 'no'})"
        f"; host CPU: {cpu_name()}",
        "",
        "| model | storage | instructions on Vulkan | max abs error / max abs eager | ms (min) "
        "| portable |",
        "|---|---|---|---|---|---|",
    ]
    for name in a.models.split(","):
        for storage in a.storage.split(","):
            try:
                out.append(row(name, storage, a.iters))
            except Exception as e:  # one model's failure is a row, not the end of the table
                out.append(
                    f"| {name} | {storage} | failed: {type(e).__name__}: {str(e)[:120]} | | | |"
                )
            print(out[-1], file=sys.stderr, flush=True)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
