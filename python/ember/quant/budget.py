"""Memory and kernel budget of a program for a microcontroller target (``ember.export(...,
target="cortex-m33")``, ``python -m ember.quant.budget model.pte``).

What the file itself fixes, exactly:

* ``arena_bytes``      — the planned arenas (activations), as the memory plan recorded them;
* ``constant_bytes``   — the constant tensors (weights, requantization tables) inside the `.pte`,
  which stay in flash on the MCU (used in place);
* ``program_bytes``    — the whole `.pte` (flash);
* ``kernels``          — the operators the method calls, the dtypes they see and the C function
  and ``.def`` file providing each (what ``tools/selective_build.py`` links), plus any operator
  no kernel provides.

And, measured by loading the program and preparing the method on the host build of Ember's
runtime (``libember.so``) with counting allocators: ``program_allocator_bytes`` and
``method_allocator_bytes`` (values, tensors, kernel table: the pool a firmware must give). Those
are exact for the host's data model (``pointer_bytes``, 8 on x86-64); on a 32-bit Cortex-M the
same structures are smaller, and the firmware prints its own exact figures (``make -C mcu
MODEL=... exact``: program + method + planned arenas + kernel scratch peak, and ``size``:
.text/.data/.bss). ``host_temp_peak_bytes`` is the kernel scratch one inference took on the host.

With ``firmware=True`` (CLI ``--firmware``) the budget also builds the Cortex-M33 firmware for the
file (``mcu/Makefile``: selective build, ``-mcpu=cortex-m33``, hard float for ``cortex-m33``,
soft for ``cortex-m33-nofpu``), runs one inference in QEMU and records the target's exact
figures in ``firmware``: program and method allocator bytes, planned arenas, kernel scratch peak,
their total, and the image's .text/.rodata/.data/.bss and runtime + kernel code (needs
arm-none-eabi-gcc, newlib and qemu-system-arm; ~20 s).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ember.dtypes import NAMES as DTYPE_NAMES

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
TARGETS = ("cortex-m33", "cortex-m33-nofpu")


@dataclass
class KernelUse:
    """One operator a method calls and the kernel that provides it."""

    name: str
    dtypes: list[str]
    function: str | None  # None: no kernel provides it
    source: str | None


@dataclass
class Budget:
    """Memory and kernels one method of a program needs on `target` (see the module doc)."""

    target: str
    method: str
    program_bytes: int
    constant_bytes: int
    arena_bytes: list[int]
    kernels: list[KernelUse]
    program_allocator_bytes: int | None = None
    method_allocator_bytes: int | None = None
    host_temp_peak_bytes: int | None = None
    pointer_bytes: int = ctypes.sizeof(ctypes.c_void_p)
    missing_kernels: list[str] = field(default_factory=list)
    firmware: dict[str, int] | None = None  # exact figures on the target (firmware=True)

    @property
    def arena_total(self) -> int:
        """Sum of the planned arenas."""
        return sum(self.arena_bytes)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON-serializable)."""
        d = asdict(self)
        d["arena_total"] = self.arena_total
        return d

    def summary(self) -> str:
        """A human-readable report."""
        alloc = (
            f"program allocator {self.program_allocator_bytes} B + method allocator "
            f"{self.method_allocator_bytes} B (host, {8 * self.pointer_bytes}-bit pointers)"
            if self.method_allocator_bytes is not None
            else "allocators: not measured (host runtime unavailable)"
        )
        lines = [
            f"budget for {self.target}, method {self.method!r}:",
            f"  planned arenas {self.arena_bytes} = {self.arena_total} B (RAM)",
            f"  constants {self.constant_bytes} B of a {self.program_bytes} B program (flash)",
            f"  {alloc}",
            f"  kernel scratch peak {self.host_temp_peak_bytes} B (host run)",
            f"  {len(self.kernels)} kernel(s):",
        ]
        for k in self.kernels:
            where = f"{k.function} ({k.source})" if k.function else "MISSING"
            lines.append(f"    {k.name} [{','.join(k.dtypes)}] -> {where}")
        if self.firmware:
            f = self.firmware
            lines.append(
                f"  on the {self.target} (QEMU, exact): program {f['program']} B + method "
                f"{f['method']} B + arenas {f['arenas']} B + temp peak {f['temp']} B = "
                f"{f['ram']} B of runtime RAM; image .text {f['text']} B, .rodata {f['rodata']} B,"
                f" .data {f['data']} B, .bss {f['bss']} B; runtime + kernels code "
                f"{f['runtime_text']} B"
            )
        return "\n".join(lines)


def _tools():
    tools = str(REPO / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import pte_summary
    import selective_build

    return pte_summary, selective_build


def budget_of(pte: bytes, target: str = "cortex-m33", method: str = "forward",
              measure: bool = True, firmware: bool = False) -> Budget:  # fmt: skip
    """The :class:`Budget` of `method` of the program `pte` (bytes) on `target` (`firmware`:
    also build and run the firmware in QEMU for the target's exact figures)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (known: {', '.join(TARGETS)})")
    pte_summary, selective_build = _tools()
    plans = [p for p in pte_summary.read_program(pte) if p.name == method]
    if not plans:
        raise ValueError(f"the program has no method {method!r}")
    plan = plans[0]
    constant = sum(v.tensor.nbytes for v in plan.values if v.tensor and v.tensor.constant)
    table = selective_build.kernel_table(REPO / "kernels")
    kernels, missing = [], []
    for op, dts in sorted(plan.op_dtypes().items()):
        e = table.get(op)
        if e is None:
            missing.append(op)
        src = str(Path(e.source).relative_to(REPO)) if e else None
        names = sorted(DTYPE_NAMES.get(d, str(d)) for d in dts)
        kernels.append(KernelUse(op, names, e.c_function if e else None, src))
    b = Budget(target, method, len(pte), constant, list(plan.arena_sizes), kernels,
               missing_kernels=missing)  # fmt: skip
    if measure:
        try:
            b.program_allocator_bytes, b.method_allocator_bytes, b.host_temp_peak_bytes = (
                _measure_host(pte, method, plan.arena_sizes)
            )
        except (OSError, AttributeError, RuntimeError) as e:
            log.warning("budget: could not measure allocator use on the host runtime: %s", e)
    if firmware:
        b.firmware = _measure_firmware(pte, target, method, plan)
    return b


def _measure_firmware(pte: bytes, target: str, method: str, plan: Any) -> dict[str, int]:
    """Builds the firmware for `pte`, runs one inference (zero inputs) in QEMU, parses what the
    firmware and the size report print."""
    import re
    import shutil
    import subprocess
    import tempfile

    import numpy as np
    import torch

    from ember.runtime import RuntimeProgram

    missing = [t for t in ("arm-none-eabi-gcc", "qemu-system-arm") if not shutil.which(t)]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not installed (make mcu-deps)")
    pte_summary, _ = _tools()
    dt = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
          6: torch.float32, 7: torch.float64, 11: torch.bool}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "model.pte").write_bytes(pte)
        inputs = []
        for vi in plan.inputs:
            ti = plan.values[vi].tensor
            if ti is None or ti.dtype not in dt:
                raise RuntimeError("firmware budget: only tensor inputs are supported")
            inputs.append(torch.zeros(ti.sizes, dtype=dt[ti.dtype]))
        outs = RuntimeProgram(t / "model.pte").run(method, inputs)
        gen = ["--method", method, "--cases", "1"]
        for i, x in enumerate(inputs):
            np.save(t / f"in{i}.npy", x[None].numpy())
            gen += ["--input", str(t / f"in{i}.npy")]
        for i, y in enumerate(outs):
            if isinstance(y, torch.Tensor):
                np.save(t / f"out{i}.npy", y[None].numpy())
                gen += ["--expected", str(t / f"out{i}.npy")]
        abi = "soft" if target.endswith("nofpu") else "hard"
        cmd = ["make", "-s", "--no-print-directory", "-C", str(REPO / "mcu"),
               f"MODEL={t / 'model.pte'}", f"FLOAT={abi}", f"OUT={t / 'fw'}",
               f"PY={sys.executable}", f"GEN_ARGS={' '.join(gen)}", "exact"]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    m = re.search(r"ram: program (\d+) B \+ method (\d+) B \+ planned arenas (\d+) B \+ "
                  r"temp peak (\d+) B = (\d+) B", out)  # fmt: skip
    if r.returncode != 0 or not m:
        raise RuntimeError(f"firmware build/run failed:\n{out[-2000:]}")
    res = dict(zip(("program", "method", "arenas", "temp", "ram"), map(int, m.groups()),
                   strict=True))  # fmt: skip
    for sec in ("text", "rodata", "data", "bss"):
        ms = re.search(rf"^\.{sec}\s+(\d+)", out, re.M)
        res[sec] = int(ms.group(1)) if ms else -1
    ms = re.search(r"runtime \+ kernels \(core, platform, kernels\): text (\d+) B", out)
    res["runtime_text"] = int(ms.group(1)) if ms else -1
    return res


def _measure_host(pte: bytes, method: str, arena_sizes: list[int]) -> tuple[int, int, int]:
    """(program, method allocator bytes, kernel scratch peak of one run) on the host build."""
    from ember import _lib

    L = _lib.lib()

    class _Cfg(ctypes.Structure):
        _fields_ = [
            ("method_alloc", ctypes.POINTER(_lib.EmAllocator)),
            ("temp_alloc", ctypes.POINTER(_lib.EmAllocator)),
            ("arenas", ctypes.POINTER(ctypes.c_void_p)),
            ("arena_sizes", ctypes.POINTER(ctypes.c_uint64)),
            ("n_arenas", ctypes.c_size_t),
            ("external", ctypes.c_void_p),
            ("pool", ctypes.c_void_p),
            ("profiler", ctypes.c_void_p),
            ("max_instructions", ctypes.c_uint64),
        ]

    L.em_buffer_loader_init.restype = ctypes.c_void_p
    L.em_buffer_loader_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    L.em_program_load.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                  ctypes.POINTER(_lib.EmAllocator),
                                  ctypes.POINTER(ctypes.c_void_p)]  # fmt: skip
    L.em_method_prepare.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Cfg),
                                    ctypes.POINTER(ctypes.c_void_p)]  # fmt: skip
    L.em_method_execute.argtypes = [ctypes.c_void_p]
    L.em_method_destroy.argtypes = [ctypes.c_void_p]
    # The loader wants 16-byte aligned data.
    raw = ctypes.create_string_buffer(len(pte) + 16)
    base = (ctypes.addressof(raw) + 15) & ~15
    ctypes.memmove(base, pte, len(pte))
    loader_buf = ctypes.create_string_buffer(256)
    loader = L.em_buffer_loader_init(loader_buf, base, len(pte))
    pool_bytes = 1 << 24
    pool = ctypes.create_string_buffer(pool_bytes)
    alloc, temp = _lib.EmAllocator(), _lib.EmAllocator()
    L.em_allocator_init(ctypes.byref(alloc), pool, pool_bytes)
    temp_pool = ctypes.create_string_buffer(pool_bytes)
    L.em_allocator_init(ctypes.byref(temp), temp_pool, pool_bytes)
    prog = ctypes.c_void_p()
    st = L.em_program_load(loader, 0, ctypes.byref(alloc), ctypes.byref(prog))
    if st != 0:
        raise RuntimeError(f"em_program_load: {L.em_last_error().decode()}")
    program_bytes = alloc.used
    arenas = [ctypes.create_string_buffer(max(s, 1) + 16) for s in arena_sizes]
    ptrs = (ctypes.c_void_p * max(len(arenas), 1))(
        *[(ctypes.addressof(a) + 15) & ~15 for a in arenas]
    )
    sizes = (ctypes.c_uint64 * max(len(arenas), 1))(*arena_sizes)
    cfg = _Cfg(ctypes.pointer(alloc), ctypes.pointer(temp), ptrs, sizes, len(arenas))
    m = ctypes.c_void_p()
    st = L.em_method_prepare(prog, method.encode(), ctypes.byref(cfg), ctypes.byref(m))
    if st != 0:
        raise RuntimeError(f"em_method_prepare: {L.em_last_error().decode()}")
    method_bytes = alloc.used - program_bytes
    # One run with the inputs as prepared (zeros) gives the kernel scratch peak.
    st = L.em_method_execute(m)
    peak = temp.peak if st == 0 else -1
    L.em_method_destroy(m)
    return program_bytes, method_bytes, peak


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m ember.quant.budget model.pte [--target cortex-m33] [--json]``."""
    ap = argparse.ArgumentParser(description="Memory and kernel budget of a .pte for an MCU")
    ap.add_argument("pte")
    ap.add_argument("--target", default="cortex-m33", choices=TARGETS)
    ap.add_argument("--method", default="forward")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--firmware",
        action="store_true",
        help="also build the firmware and run it in QEMU for the exact target figures",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        b = budget_of(Path(args.pte).read_bytes(), args.target, args.method,
                      firmware=args.firmware)  # fmt: skip
    except (OSError, ValueError, RuntimeError) as e:
        log.error("budget: %s", e)
        return 1
    sys.stdout.write((json.dumps(b.as_dict(), indent=1) if args.json else b.summary()) + "\n")
    return 0 if not b.missing_kernels else 2


if __name__ == "__main__":
    raise SystemExit(main())
