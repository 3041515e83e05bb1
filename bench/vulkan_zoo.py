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
(what f16 storage does to activations), and both, each error measured as above. ``--rules``
adds the table of mixed-storage rules (:data:`RULES`), emulated the same way: each rule says
which activations stay f32 and which constants are rounded (the conv / matmul weight matrices
always; the other constants, biases and norm parameters, or not), the embedding tables never
(they run portable, in f32); ``prop`` is the rule ``vulkan_storage="f16"`` implements
(python/ember/backends/vulkan/partition.py f32_activations).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import logging
import sys
import time
from collections.abc import Callable
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
    arena = arena_summary(prog)
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
        f"{arena} | {', '.join(portable) or '-'} |"
    )


def arena_summary(prog: object) -> str:
    """The delegates' device arenas: total MB, and the share of its bytes stored as f32 among
    the weights and among the activations (each activation block counted once, by offset)."""
    from ember.backends.delegate import DelegateInstr
    from ember.backends.vulkan.blob import arena_bytes, tensor_table

    total = wf32 = wall = af32 = aall = 0
    for d in prog._irs["forward"].instrs:  # type: ignore[attr-defined]
        if not isinstance(d, DelegateInstr) or d.backend_id != "EmberVulkanBackend":
            continue
        total += arena_bytes(d.processed)
        blocks: dict[int, tuple[int, int]] = {}
        for off, w, n, st in tensor_table(d.processed)[0]:
            nb = n * (2 if st else 4)
            if w != 0xFFFFFFFF:
                wall += nb
                wf32 += nb if st == 0 else 0
            elif nb > blocks.get(off, (0, 0))[0]:
                blocks[off] = (nb, st)
        aall += sum(nb for nb, _ in blocks.values())
        af32 += sum(nb for nb, st in blocks.values() if st == 0)
    return (
        f"{total / 1e6:.2f} MB (f32: weights {100 * wf32 / max(wall, 1):.1f} %, "
        f"activations {100 * af32 / max(aall, 1):.0f} %)"
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


MATMUL = {"aten.addmm.default", "aten.mm.default", "aten.bmm.default", "aten.convolution.default"}
COPY = {"aten.clone.default", "aten._to_copy.default"}
LN, SM = "aten.native_layer_norm.default", "aten._softmax.default"
SKIP = {"aten._assert_tensor_metadata.default"}
# name -> (rounds the non-matrix constants, which activations stay f32)
RULES: dict[str, tuple[bool, str]] = {
    "all f16": (True, "none"),
    "weights only (every activation f32)": (False, "all"),
    "layer norm in/out": (True, "ln"),
    "layer norm in/out, vectors f32": (False, "ln"),
    "layer norm + softmax in/out, vectors f32": (False, "ln_sm"),
    "+ linear outputs, vectors f32": (False, "ln_sm_lin"),
    "all but attention internals, vectors f32": (False, "notattn"),
    "prop (implemented), vectors f16": (True, "prop"),
    "prop (implemented)": (False, "prop"),
}


class _Mixed(TorchDispatchMode):
    """Records the exported program's operator calls (``plan`` None: producer / consumer
    edges between non-view calls, copies transparent), or replays them rounding to f16 the
    outputs of the calls ``plan`` marks and the constants a rule rounds."""

    def __init__(self, consts: list[torch.Tensor], vectors: bool, plan: list[bool] | None) -> None:
        super().__init__()
        self.keep = list(consts)
        self.const = {id(t) for t in consts}
        self.vectors, self.plan, self.k = vectors, plan, 0
        self.prod: dict[int, int] = {}
        self.funcs: list[str] = []
        self.consumers: list[set[str]] = []
        self.ins: list[set[int]] = []

    def _const(self, name: str, t: object) -> object:
        if not isinstance(t, torch.Tensor) or id(t) not in self.const or t.dtype != torch.float32:
            return t
        if name == "aten.embedding.default" or not (
            (name in MATMUL and t.dim() >= 2) or self.vectors
        ):
            return t
        return t.half().float()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs, name = kwargs or {}, str(func)
        flat = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if flat and all(id(t) in self.const for t in flat):
            out = func(*args, **kwargs)
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.keep.append(t)
                    self.const.add(id(t))
            return out
        if self.plan is not None:
            args = tuple(self._const(name, a) for a in args)
        out = func(*args, **kwargs)
        if func.is_view or name in SKIP:
            return out
        k = self.k
        self.k += 1
        if self.plan is None:
            self.funcs.append(name)
            self.consumers.append(set())
            self.ins.append(set())
            for t in flat:
                p = self.prod.get(t.untyped_storage().data_ptr())
                if p is not None:
                    self.consumers[p].add(name)
                    self.ins[k].add(p)
            o = tree_flatten(out)[0]
            if o and isinstance(o[0], torch.Tensor):
                self.keep.append(o[0])
                src = self.prod.get(flat[0].untyped_storage().data_ptr()) if flat else None
                self.prod[o[0].untyped_storage().data_ptr()] = (
                    src if name in COPY and src is not None else k
                )
            return out
        if not self.plan[k]:
            return out
        if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
            return out.half().float()
        if isinstance(out, tuple) and name == LN:
            return (out[0].half().float(), *out[1:])
        return out


def _kept_f32(rec: _Mixed, acts: str) -> set[int]:
    """The calls whose outputs a rule keeps f32."""
    f, c = rec.funcs, rec.consumers
    n = range(len(f))
    ln = {k for k in n if f[k] == LN or LN in c[k]}
    sm = {k for k in n if f[k] == SM or SM in c[k]}
    lin = {k for k in n if f[k] in ("aten.addmm.default", "aten.mm.default")}
    attn = {"aten.bmm.default", SM, "aten.where.self", "aten.mul.Scalar", "aten.div.Tensor"}
    if acts == "prop":
        keep = {p for k in n if f[k] == LN for p in rec.ins[k]}
        for k in n:
            if f[k] in (LN, SM) or rec.ins[k] & keep:
                keep.add(k)
        return keep
    return {
        "none": set(),
        "all": set(n),
        "ln": ln,
        "ln_sm": ln | sm,
        "ln_sm_lin": ln | sm | lin,
        "notattn": {k for k in n if f[k] not in attn},
    }[acts]


def rules_row(name: str) -> str:
    from zoo.models import build

    import ember

    m, inputs = build(name)
    with torch.inference_mode():
        want = m(*inputs)
    want = want[0] if isinstance(want, (tuple, list)) else want
    base = ember.export(m, inputs, backend=None)._exported["forward"].module()
    rec = _Mixed([*base.parameters(), *base.buffers()], False, None)
    with torch.no_grad(), rec:
        base(*inputs)
    cells = []
    for vectors, acts in RULES.values():
        keep = _kept_f32(rec, acts)
        mod = copy.deepcopy(base)
        plan = [k not in keep for k in range(len(rec.funcs))]
        with torch.no_grad(), _Mixed([*mod.parameters(), *mod.buffers()], vectors, plan):
            got = mod(*inputs)
        got = got[0] if isinstance(got, (tuple, list)) else got
        err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))
        cells.append(f"{err:.1e} ({100 * len(keep) / max(len(plan), 1):.0f} %)")
    return f"| {name} | " + " | ".join(cells) + " |"


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
    ap.add_argument("--rules", action="store_true", help="also the mixed-storage rules table")
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
        "| L2 error / L2 eager | ms (min) | arena | portable |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in a.models.split(","):
        for storage in filter(None, a.storage.split(",")):
            try:
                out.append(row(name, storage, a.iters))
                if a.f32_arena and storage == "f16":
                    out[-1] = out[-1].replace("| f16 |", "| f16 weights, f32 arena |", 1)
            except Exception as e:  # one model's failure is a row, not the end of the table
                out.append(
                    f"| {name} | {storage} | failed: {type(e).__name__}: {str(e)[:120]} | | | | | |"
                )
            print(out[-1], file=sys.stderr, flush=True)

    def model_rows(make: Callable[[str], str], blanks: str) -> None:
        """One row per model from ``make`` (a failure is a row, not the end of the table)."""
        for name in a.models.split(","):
            try:
                out.append(make(name))
            except Exception as e:
                out.append(f"| {name} | failed: {type(e).__name__}: {str(e)[:120]} |{blanks}")
            print(out[-1], file=sys.stderr, flush=True)

    if a.emulate:
        out += [
            "",
            "f16 rounding in eager PyTorch (max abs error / max abs eager):",
            "",
            "| model | f16 weights | f16 activations | both |",
            "|---|---|---|---|",
        ]
        model_rows(emulation_row, " | |")
    if a.rules:
        out += [
            "",
            "Mixed-storage rules in eager PyTorch (max abs error / max abs eager; in brackets the "
            "share of operator outputs kept f32):",
            "",
            "| model | " + " | ".join(RULES) + " |",
            "|---" * (len(RULES) + 1) + "|",
        ]
        model_rows(rules_row, "")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
