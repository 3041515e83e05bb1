"""ctypes bindings to the C runtime (libember.so): structs, library loading, kernel calls.

This is the only place Python touches the C ABI. ``ember.runtime`` builds the
program/method API on top of it; kernel tests use :func:`call_kernel` to run a
single registered kernel on torch tensors without exporting anything.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import torch

from ember.dtypes import PLAIN_KINDS, torch_to_code

# ---- dtypes ---------------------------------------------------------------------------------

# ScalarType codes of the torch dtypes a tensor may have across the binding (ember.dtypes).
TORCH_TO_EM: dict[torch.dtype, int] = dict(torch_to_code(PLAIN_KINDS))
EM_TO_TORCH: dict[int, torch.dtype] = {v: k for k, v in TORCH_TO_EM.items()}

TAG_NONE, TAG_TENSOR, TAG_STRING, TAG_DOUBLE, TAG_INT, TAG_BOOL = 0, 1, 2, 3, 4, 5
TAG_LIST_BOOL, TAG_LIST_DOUBLE, TAG_LIST_INT, TAG_LIST_TENSOR = 6, 7, 8, 9
TAG_LIST_OPTIONAL_TENSOR = 11

# ---- structs (mirror include/ember/tensor.h) ---------------------------------------------------


class EmTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("dim_order", ctypes.POINTER(ctypes.c_uint8)),
        ("numel", ctypes.c_int64),
        ("numel_bound", ctypes.c_int64),
        ("dim", ctypes.c_int32),
        ("dtype", ctypes.c_int8),
        ("dynamism", ctypes.c_uint8),
    ]


class EmEValue(ctypes.Structure):
    pass


class _Str(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_char_p), ("len", ctypes.c_size_t)]


class _ListU(ctypes.Union):
    _fields_ = [("ints", ctypes.POINTER(ctypes.c_int64)), ("ptr", ctypes.c_void_p)]


class _List(ctypes.Structure):
    _fields_ = [
        ("items", ctypes.POINTER(ctypes.POINTER(EmEValue))),
        ("u", _ListU),
        ("n", ctypes.c_size_t),
    ]


class _EValueU(ctypes.Union):
    _fields_ = [
        ("i", ctypes.c_int64),
        ("d", ctypes.c_double),
        ("b", ctypes.c_bool),
        ("tensor", ctypes.POINTER(EmTensor)),
        ("str", _Str),
        ("list", _List),
    ]


EmEValue._fields_ = [("u", _EValueU), ("tag", ctypes.c_uint32)]


class EmAllocator(ctypes.Structure):
    _fields_ = [
        ("base", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("used", ctypes.c_size_t),
        ("peak", ctypes.c_size_t),
    ]


class EmKernelCtx(ctypes.Structure):
    _fields_ = [
        ("temp", ctypes.POINTER(EmAllocator)),
        ("pool", ctypes.c_void_p),
        ("op_name", ctypes.c_char_p),
    ]


KERNEL_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(EmKernelCtx), ctypes.POINTER(ctypes.POINTER(EmEValue))
)


class EmKernelEntry(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("fn", ctypes.c_void_p),
        ("n_args", ctypes.c_int32),
        ("dtypes", ctypes.c_uint32),
    ]


# ---- library -------------------------------------------------------------------------------


def repo_root() -> Path:
    """The source checkout this package lives in (python/ember/_lib.py → repo)."""
    return Path(__file__).resolve().parents[2]


def library_path() -> Path:
    """Finds libember.so: $EMBER_LIB, else the one inside an installed package (the wheel puts it
    next to this file), else the source checkout's <repo>/build/libember.so."""
    env = os.environ.get("EMBER_LIB")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).parent / "libember.so", repo_root() / "build" / "libember.so"]
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        "libember.so not found (looked in: "
        + ", ".join(str(c) for c in candidates)
        + "); run `make build` or set EMBER_LIB"
    )


@cache
def lib() -> ctypes.CDLL:
    """Loads libember.so once and registers the prim ops and portable kernels."""
    L = ctypes.CDLL(str(library_path()))
    L.em_status_str.restype = ctypes.c_char_p
    L.em_last_error.restype = ctypes.c_char_p
    L.em_find_kernel.restype = ctypes.POINTER(EmKernelEntry)
    L.em_find_kernel.argtypes = [ctypes.c_char_p]
    L.em_kernel_at.restype = ctypes.POINTER(EmKernelEntry)
    L.em_kernel_at.argtypes = [ctypes.c_size_t]
    L.em_kernel_count.restype = ctypes.c_size_t
    L.em_allocator_init.argtypes = [ctypes.POINTER(EmAllocator), ctypes.c_void_p, ctypes.c_size_t]
    L.em_allocator_reset.argtypes = [ctypes.POINTER(EmAllocator)]
    L.em_log_set_level.argtypes = [ctypes.c_int]
    # Errors are raised as Python exceptions with em_last_error(); keep stderr quiet.
    L.em_log_set_level(ord("F"))
    for reg in (
        "em_register_prim_ops",
        "em_register_portable_kernels",
        "em_register_quantized_kernels",
        "em_register_cpu_backend",
    ):
        st = getattr(L, reg)()
        if st != 0:
            raise RuntimeError(f"{reg} failed: {L.em_status_str(st).decode()}")
    # EmberVulkanBackend: EM_ERR_NOT_SUPPORTED (0x10) in a library built without Vulkan.
    if hasattr(L, "em_register_vulkan_backend"):
        st = L.em_register_vulkan_backend()
        if st not in (0, 0x10):
            raise RuntimeError(f"em_register_vulkan_backend failed: {L.em_status_str(st).decode()}")
    try:
        configure_cpu_backend(
            isa=os.environ.get("EMBER_CPU_ISA"),
            no_fuse="EMBER_CPU_NO_FUSE" in os.environ,
            profile="EMBER_CPU_PROFILE" in os.environ,
            q8_winograd=_q8_winograd_env(),
            q8_pixel_major=-1 if os.environ.get("EMBER_CPU_Q8_PIXEL_MAJOR", "")[:1] == "0" else 0,
            threads_adaptive=-1
            if os.environ.get("EMBER_CPU_THREADS_ADAPTIVE", "")[:1] == "0"
            else 0,
            L=L,
        )
    except ValueError as e:
        logging.getLogger(__name__).warning("EMBER_CPU_ISA ignored: %s", e)
    return L


class EmCpuBackendOptions(ctypes.Structure):
    """``em_cpu_backend_options`` (include/ember/backend_cpu.h)."""

    _fields_ = [
        ("isa", ctypes.c_char_p),
        ("no_fuse", ctypes.c_bool),
        ("profile", ctypes.c_bool),
        ("q8_winograd", ctypes.c_int),
        ("q8_pixel_major", ctypes.c_int),
        ("threads_adaptive", ctypes.c_int),
    ]


def _q8_winograd_env() -> int:
    """``EMBER_CPU_Q8_WINOGRAD``: 1 (always f32 Winograd), 0 (always int8), unset: the CPU's."""
    v = os.environ.get("EMBER_CPU_Q8_WINOGRAD", "")
    return 0 if not v else (-1 if v.startswith("0") else 1)


def configure_cpu_backend(
    isa: str | None = None,
    no_fuse: bool = False,
    profile: bool = False,
    q8_winograd: int = 0,
    q8_pixel_major: int = 0,
    threads_adaptive: int = 0,
    L: Any = None,
) -> None:
    """Sets EmberCpuBackend's options for the methods prepared from now on (the library reads
    no environment variable; :func:`lib` maps ``EMBER_CPU_ISA``, ``EMBER_CPU_NO_FUSE``,
    ``EMBER_CPU_PROFILE``, ``EMBER_CPU_Q8_WINOGRAD``, ``EMBER_CPU_Q8_PIXEL_MAJOR`` and
    ``EMBER_CPU_THREADS_ADAPTIVE`` onto this once). ``q8_winograd``: int8 3x3 convs stored
    with a Winograd alternative run as f32 Winograd (1), in int8 (-1), or as the default (0:
    int8, the faster on every CPU measured).
    ``q8_pixel_major``: ungrouped int8 convs run on the pixel-major tile where the ISA
    has one (0, the default) or always on the panel path (-1). ``threads_adaptive``: with a
    pool, each delegate runs without it while its threads hand work to each other slowly and the
    caller alone was measured faster (0, the default), or always on it (-1). An ISA this CPU
    lacks raises ``ValueError``."""
    L = L or lib()
    if not hasattr(L, "em_cpu_backend_configure"):  # a library built before the options API
        return
    opts = EmCpuBackendOptions(
        isa.encode() if isa else None,
        no_fuse,
        profile,
        q8_winograd,
        q8_pixel_major,
        threads_adaptive,
    )
    st = L.em_cpu_backend_configure(ctypes.byref(opts))
    if st != 0:
        back = EmCpuBackendOptions(
            None, no_fuse, profile, q8_winograd, q8_pixel_major, threads_adaptive
        )
        L.em_cpu_backend_configure(ctypes.byref(back))
        raise ValueError(f"EmberCpuBackend: ISA {isa!r} is unknown or not on this CPU")


def status_message(status: int) -> str:
    L = lib()
    return f"{L.em_status_str(status).decode()}: {L.em_last_error().decode(errors='replace')}"


def registered_kernels() -> dict[str, int]:
    """Name → dtype mask of every kernel registered in the loaded library."""
    L = lib()
    out: dict[str, int] = {}
    for i in range(L.em_kernel_count()):
        e = L.em_kernel_at(i).contents
        out[e.name.decode()] = int(e.dtypes)
    return out


# ---- building values from Python objects ---------------------------------------------------


class Out:
    """A tensor passed as a DYNAMIC_BOUND out argument whose capacity is ``t.numel()``."""

    def __init__(self, t: torch.Tensor, dynamic: bool = True) -> None:
        if not t.is_contiguous():
            raise ValueError("Out() needs a contiguous tensor")
        self.t = t
        self.dynamic = dynamic
        self.sizes: list[int] = list(t.shape)

    def view(self) -> torch.Tensor:
        n = 1
        for s in self.sizes:
            n *= s
        return self.t.reshape(-1)[:n].view(self.sizes)


def dim_order_of(t: torch.Tensor) -> list[int]:
    """Dim order (outermost first) of a strided tensor: dims sorted by decreasing stride."""
    if t.dim() == 0:
        return []
    return sorted(range(t.dim()), key=lambda d: (-t.stride(d), d))


class ValueBuilder:
    """Owns the ctypes memory behind EValues built from Python objects (keep it alive)."""

    def __init__(self) -> None:
        self.keep: list[Any] = []
        self.outs: list[tuple[Out, EmTensor]] = []
        # The same Python tensor passed twice (an out argument and its return slot) must be
        # one runtime tensor, so a resize through one is seen through the other.
        self.shared: dict[int, EmTensor] = {}

    def tensor(
        self,
        t: torch.Tensor,
        dynamic: bool = False,
        capacity: int | None = None,
        dim_order: list[int] | None = None,
    ) -> EmTensor:
        if t.device.type != "cpu":
            raise ValueError("only CPU tensors")
        if t.dtype not in TORCH_TO_EM:
            raise ValueError(f"dtype {t.dtype} has no runtime equivalent")
        dim = t.dim()
        order = dim_order if dim_order is not None else dim_order_of(t)
        sizes = (ctypes.c_int64 * max(dim, 1))(*t.shape)
        strides = (ctypes.c_int64 * max(dim, 1))(*t.stride())
        dorder = (ctypes.c_uint8 * max(dim, 1))(*order)
        et = EmTensor()
        et.data = t.data_ptr() if t.numel() or t.data_ptr() else None
        et.sizes = sizes
        et.strides = strides
        et.dim_order = dorder
        et.numel = t.numel()
        et.numel_bound = capacity if capacity is not None else t.numel()
        et.dim = dim
        et.dtype = TORCH_TO_EM[t.dtype]
        et.dynamism = 1 if dynamic else 0
        self.keep += [t, sizes, strides, dorder, et]
        return et

    def value(self, x: Any) -> EmEValue:
        ev = EmEValue()
        if x is None:
            ev.tag = TAG_NONE
        elif isinstance(x, Out):
            et = self.shared.get(id(x))
            if et is None:
                et = self.tensor(x.t, dynamic=x.dynamic, capacity=x.t.numel())
                self.shared[id(x)] = et
                self.outs.append((x, et))
            ev.tag = TAG_TENSOR
            ev.u.tensor = ctypes.pointer(et)
        elif isinstance(x, torch.Tensor):
            et = self.shared.get(id(x))
            if et is None:
                et = self.shared[id(x)] = self.tensor(x)
            ev.tag = TAG_TENSOR
            ev.u.tensor = ctypes.pointer(et)
        elif isinstance(x, bool):
            ev.tag = TAG_BOOL
            ev.u.b = x
        elif isinstance(x, int):
            ev.tag = TAG_INT
            ev.u.i = x
        elif isinstance(x, float):
            ev.tag = TAG_DOUBLE
            ev.u.d = x
        elif isinstance(x, str):
            raw = x.encode()
            buf = ctypes.create_string_buffer(raw)
            self.keep.append(buf)
            ev.tag = TAG_STRING
            ev.u.str.ptr = ctypes.cast(buf, ctypes.c_char_p)
            ev.u.str.len = len(raw)
        elif isinstance(x, list | tuple):
            self._list(ev, list(x))
        elif isinstance(x, torch.dtype):
            ev.tag = TAG_INT
            ev.u.i = TORCH_TO_EM[x]
        else:
            raise TypeError(f"cannot pass {type(x).__name__} to a kernel")
        self.keep.append(ev)
        return ev

    def _list(self, ev: EmEValue, xs: list[Any]) -> None:
        n = len(xs)
        if n and all(isinstance(v, bool) for v in xs):
            arr = (ctypes.c_uint8 * n)(*[int(v) for v in xs])
            ev.tag = TAG_LIST_BOOL
            ev.u.list.u.ptr = ctypes.cast(arr, ctypes.c_void_p)
            ev.u.list.n = n
            self.keep.append(arr)
        elif n and all(isinstance(v, float) for v in xs):
            arr = (ctypes.c_double * n)(*xs)
            ev.tag = TAG_LIST_DOUBLE
            ev.u.list.u.ptr = ctypes.cast(arr, ctypes.c_void_p)
            ev.u.list.n = n
            self.keep.append(arr)
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in xs):
            items = (ctypes.POINTER(EmEValue) * max(n, 1))()
            for i, v in enumerate(xs):
                items[i] = ctypes.pointer(self.value(v))
            cache_arr = (ctypes.c_int64 * max(n, 1))()
            ev.tag = TAG_LIST_INT
            ev.u.list.items = items
            ev.u.list.u.ints = cache_arr
            ev.u.list.n = n
            self.keep += [items, cache_arr]
        elif all(v is None or isinstance(v, torch.Tensor | Out) for v in xs):
            items = (ctypes.POINTER(EmEValue) * max(n, 1))()
            for i, v in enumerate(xs):
                if v is not None:
                    items[i] = ctypes.pointer(self.value(v))
            ev.tag = TAG_LIST_OPTIONAL_TENSOR if any(v is None for v in xs) else TAG_LIST_TENSOR
            ev.u.list.items = items
            ev.u.list.n = n
            self.keep.append(items)
        else:
            raise TypeError(f"unsupported list for a kernel argument: {xs!r}")


@cache
def _scratch(nbytes: int) -> ctypes.Array:
    """One reusable scratch buffer per size (allocating and zeroing 64 MiB per call is slow)."""
    return ctypes.create_string_buffer(nbytes)


def call_kernel(name: str, args: Sequence[Any], temp_bytes: int = 64 << 20) -> None:
    """Runs registered kernel ``name`` on ``args`` (see ValueBuilder for accepted types).

    Raises RuntimeError with the kernel's message when it fails or is missing.
    Out tensors are written in place; ``Out`` wrappers get their resized ``sizes``.
    """
    L = lib()
    entry = L.em_find_kernel(name.encode())
    if not entry:
        raise RuntimeError(f"kernel {name} is not registered")
    e = entry.contents
    if e.n_args >= 0 and e.n_args != len(args):
        raise RuntimeError(f"kernel {name} takes {e.n_args} args, got {len(args)}")
    vb = ValueBuilder()
    evs = [vb.value(a) for a in args]
    argv = (ctypes.POINTER(EmEValue) * max(len(evs), 1))(*[ctypes.pointer(v) for v in evs])
    temp_buf = _scratch(temp_bytes)
    temp = EmAllocator()
    L.em_allocator_init(ctypes.byref(temp), temp_buf, temp_bytes)
    ctx = EmKernelCtx()
    ctx.temp = ctypes.pointer(temp)
    ctx.pool = None
    ctx.op_name = name.encode()
    L.em_clear_last_error()
    fn = KERNEL_FN(e.fn)
    st = fn(ctypes.byref(ctx), argv)
    for o, et in vb.outs:
        o.sizes = [et.sizes[i] for i in range(et.dim)]
    if st != 0:
        raise RuntimeError(f"{name} failed: {status_message(st)}")
