"""Python bindings to Ember's C runtime: load a `.pte` (+ `.ptd`), run methods on torch tensors.

All execution happens in ``libember`` (the same C code as the ``ember`` CLI); this module only
moves tensors across the ctypes boundary. Used by ``ember.Program.run``, ``ember.load`` and
``ember.compare``, and by tests that run stock ExecuTorch files on Ember.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ember import _lib
from ember._lib import EM_TO_TORCH, EmEValue, EmTensor, ValueBuilder

_log = logging.getLogger(__name__)

Scalar = int | float | bool | None
RuntimeValue = torch.Tensor | Scalar | str


class EmberRuntimeError(RuntimeError):
    """A runtime call failed; the message carries the runtime's own explanation."""


class _ModuleOptions(ctypes.Structure):
    _fields_ = [
        ("verification", ctypes.c_int),
        ("use_mmap", ctypes.c_int),
        ("pool", ctypes.c_void_p),
        ("profiler", ctypes.c_void_p),
        ("temp_bytes", ctypes.c_size_t),
        ("max_memory_bytes", ctypes.c_uint64),  # 0: no budget (extension/ember_ext/module.h)
    ]


_PROF_BEGIN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_char_p)
_PROF_END = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint64
)


class _Profiler(ctypes.Structure):
    _fields_ = [
        ("begin", _PROF_BEGIN),
        ("end", _PROF_END),
        ("ctx", ctypes.c_void_p),
        ("record", ctypes.c_void_p),  # em_etdump_record while an ETDump is attached
        ("record_ctx", ctypes.c_void_p),
    ]


# Bytes of the ETDump writer's buffer for one run: about 50,000 instruction events.
ETDUMP_BUFFER_BYTES = 2 << 20
# Bytes of the debug buffer (intermediate outputs) when ``etdump_debug`` is given: an anonymous
# mapping, so only the pages the run writes take memory (a ViT's ~100 MB, an LLM's more).
ETDUMP_DEBUG_BYTES = 1 << 31


def _setup(L: ctypes.CDLL) -> None:
    if getattr(L, "_ember_runtime_ready", False):
        return
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    L.em_module_open_buffer.argtypes = [
        vp,
        sz,
        vp,
        sz,
        ctypes.POINTER(_ModuleOptions),
        ctypes.POINTER(vp),
    ]
    L.em_module_method.argtypes = [vp, ctypes.c_char_p, ctypes.POINTER(vp)]
    L.em_module_program.argtypes = [vp]
    L.em_module_program.restype = vp
    L.em_module_destroy.argtypes = [vp]
    L.em_program_method_count.argtypes = [vp]
    L.em_program_method_count.restype = sz
    L.em_program_method_name.argtypes = [vp, sz]
    L.em_program_method_name.restype = ctypes.c_char_p
    L.em_method_input_count.argtypes = [vp]
    L.em_method_input_count.restype = sz
    L.em_method_output_count.argtypes = [vp]
    L.em_method_output_count.restype = sz
    L.em_method_input.argtypes = [vp, sz]
    L.em_method_input.restype = ctypes.POINTER(EmEValue)
    L.em_method_output.argtypes = [vp, sz]
    L.em_method_output.restype = ctypes.POINTER(EmEValue)
    L.em_method_value.argtypes = [vp, sz]
    L.em_method_value.restype = ctypes.POINTER(EmEValue)
    L.em_method_value_count.argtypes = [vp]
    L.em_method_value_count.restype = sz
    L.em_method_set_input_tensor.argtypes = [vp, sz, ctypes.POINTER(EmTensor)]
    L.em_method_bind_input_tensor.argtypes = [vp, sz, ctypes.POINTER(EmTensor)]
    L.em_method_set_input.argtypes = [vp, sz, ctypes.POINTER(EmEValue)]
    L.em_method_execute.argtypes = [vp]
    L.em_threadpool_create.argtypes = [ctypes.c_int]
    L.em_threadpool_create.restype = vp
    L.em_threadpool_destroy.argtypes = [vp]
    L.em_etdump_init.argtypes = [vp, sz, ctypes.POINTER(vp)]
    L.em_etdump_finish.argtypes = [vp, vp, sz, ctypes.POINTER(sz)]
    L.em_etdump_event_count.argtypes = [vp]
    L.em_etdump_event_count.restype = sz
    L.em_etdump_dropped.argtypes = [vp]
    L.em_etdump_dropped.restype = ctypes.c_uint64
    L.em_etdump_set_debug_buffer.argtypes = [vp, vp, sz]
    L.em_etdump_debug_size.argtypes = [vp]
    L.em_etdump_debug_size.restype = sz
    L._ember_runtime_ready = True


def _check(status: int, what: str) -> None:
    if status != 0:
        raise EmberRuntimeError(f"{what}: {_lib.status_message(status)}")


def tensor_from_em(t: EmTensor) -> torch.Tensor:
    """Copies an em_tensor into a new torch tensor with the same shape and dim order."""
    dtype = EM_TO_TORCH.get(t.dtype)
    if dtype is None:
        raise EmberRuntimeError(f"runtime tensor has dtype {t.dtype} with no torch equivalent")
    sizes = t.sizes[: t.dim]
    strides = t.strides[: t.dim]
    numel = 1
    for s in sizes:
        numel *= s
    if numel == 0:
        return torch.empty(sizes, dtype=dtype)
    if not t.data:
        raise EmberRuntimeError("runtime tensor has no data")
    # the runtime's tensors are dense in their dim order: one copy of numel elements into a
    # tensor with the same strides
    out = torch.empty_strided(sizes, strides, dtype=dtype)
    ctypes.memmove(out.data_ptr(), t.data, numel * out.element_size())
    return out


def value_from_em(v: EmEValue) -> RuntimeValue:
    tag = v.tag
    if tag == _lib.TAG_TENSOR:
        return tensor_from_em(v.u.tensor.contents)
    if tag == _lib.TAG_INT:
        return int(v.u.i)
    if tag == _lib.TAG_DOUBLE:
        return float(v.u.d)
    if tag == _lib.TAG_BOOL:
        return bool(v.u.b)
    if tag == _lib.TAG_NONE:
        return None
    if tag == _lib.TAG_STRING:
        return ctypes.string_at(v.u.str.ptr, v.u.str.len).decode()
    raise EmberRuntimeError(f"cannot convert a runtime value with tag {tag}")


def _read_bytes(src: bytes | bytearray | memoryview | str | os.PathLike[str]) -> bytes:
    if isinstance(src, bytes | bytearray | memoryview):
        return bytes(src)
    return Path(src).read_bytes()


# A call's plan (RuntimeProgram._plan): the method; per input (dtype, shape, strides, runtime
# tensor).
_Plan = tuple[ctypes.c_void_p, tuple[Any, ...]]


class RuntimeProgram:
    """A program loaded on the C runtime. Methods are prepared on first use and then reused."""

    def __init__(
        self,
        pte: bytes | bytearray | memoryview | str | os.PathLike[str],
        ptd: bytes | bytearray | memoryview | str | os.PathLike[str] | None = None,
        threads: int = 1,
    ) -> None:
        self._L = _lib.lib()
        _setup(self._L)
        self._pte = _read_bytes(pte)
        self._ptd = _read_bytes(ptd) if ptd is not None else None
        self._pool = self._L.em_threadpool_create(threads) if threads > 1 else None
        self._watch: dict[int, list[int]] = {}
        self._captured: dict[tuple[int, int], torch.Tensor] = {}
        self._in_meta: dict[int, list[tuple[int, Any, int, list[int]]]] = {}
        # per (method, input): the last call's shape, strides and runtime tensor (re-pointed
        # when the next call's tensor has that layout); per static output tensor: its layout
        self._in_tensors: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...], Any]] = {}
        self._out_layout: dict[int, tuple[torch.dtype, list[int], list[int], int]] = {}
        self._method_for_watch: ctypes.c_void_p | None = None
        self._end_cb = _PROF_END(self._on_instruction_end)
        # The profiler struct is retained by every method; its `end` hook is set only while
        # run_debug runs, so plain runs pay no Python callback per instruction.
        self._profiler = _Profiler(_PROF_BEGIN(), _PROF_END(), None)
        opts = _ModuleOptions(
            0, 0, self._pool, ctypes.cast(ctypes.pointer(self._profiler), ctypes.c_void_p), 0
        )
        mod = ctypes.c_void_p()
        ptd_buf = self._ptd or b""
        _check(
            self._L.em_module_open_buffer(
                self._pte,
                len(self._pte),
                ptd_buf if self._ptd is not None else None,
                len(ptd_buf),
                ctypes.byref(opts),
                ctypes.byref(mod),
            ),
            "loading program",
        )
        self._mod = mod
        self._methods: dict[str, ctypes.c_void_p] = {}
        self._fast: dict[str, _Plan | None] = {}  # per method: the last call's plan (_plan)
        # A method is one set of buffers: calls from several Python threads take turns (ctypes
        # releases the GIL while the C runtime runs).
        self._lock = threading.RLock()

    def close(self) -> None:
        """Releases the program, its methods and its thread pool. Later calls raise
        :class:`EmberRuntimeError`; closing twice is harmless."""
        lock = getattr(self, "_lock", None)
        with lock if lock is not None else contextlib.nullcontext():
            L = getattr(self, "_L", None)
            if L is None:
                return
            self._methods = {}
            self._fast = {}
            if getattr(self, "_mod", None):
                L.em_module_destroy(self._mod)
                self._mod = None
            if getattr(self, "_pool", None):
                L.em_threadpool_destroy(self._pool)
                self._pool = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> RuntimeProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> None:
        if not getattr(self, "_mod", None):
            raise EmberRuntimeError("the program is closed")

    def method_names(self) -> list[str]:
        self._live()
        prog = self._L.em_module_program(self._mod)
        n = self._L.em_program_method_count(prog)
        return [self._L.em_program_method_name(prog, i).decode() for i in range(n)]

    def _method(self, name: str) -> ctypes.c_void_p:
        self._live()
        if not isinstance(name, str):
            raise TypeError(f"a method name is a str, not {type(name).__name__}")
        if name not in self._methods:
            m = ctypes.c_void_p()
            _check(
                self._L.em_module_method(self._mod, name.encode(), ctypes.byref(m)),
                f"preparing method '{name}'",
            )
            self._methods[name] = m
        return self._methods[name]

    def _input_meta(self, m: ctypes.c_void_p) -> list[tuple[int, Any, int, list[int]]]:
        """Per input of method m, what a call checks and lays out against, read once: (tag,
        torch dtype or None, dims, dim order); the method's inputs keep these."""
        key = int(m.value or 0)
        meta = self._in_meta.get(key)
        if meta is None:
            meta = []
            for i in range(self._L.em_method_input_count(m)):
                want = self._L.em_method_input(m, i).contents
                if want.tag != _lib.TAG_TENSOR:
                    meta.append((int(want.tag), None, -1, []))
                    continue
                t = want.u.tensor.contents
                order = [int(t.dim_order[d]) for d in range(t.dim)]
                meta.append((int(want.tag), EM_TO_TORCH.get(int(t.dtype)), int(t.dim), order))
            self._in_meta[key] = meta
        return meta

    def _set_inputs(self, m: ctypes.c_void_p, inputs: Sequence[Any], vb: ValueBuilder) -> None:
        meta = self._input_meta(m)
        if len(inputs) != len(meta):
            raise EmberRuntimeError(f"method takes {len(meta)} inputs, got {len(inputs)}")
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                tag, dtype, dim, order_ = meta[i]
                if (
                    tag != _lib.TAG_TENSOR
                    or x.device.type != "cpu"
                    or (dtype is not None and x.dtype != dtype)
                    or x.dim() != dim
                ):  # names what is wrong
                    self._check_tensor_input(i, x, self._L.em_method_input(m, i).contents)
                x = x.detach()
                if order_ == list(range(dim)):
                    x = x.contiguous()
                else:
                    x = self._match_dim_order(x, self._L.em_method_input(m, i).contents)
                et = self._input_tensor(m, i, x, order_)
                vb.keep.append(x)  # alive through the execute
                # read in place where the method only reads it (no copy into planned memory)
                _check(self._L.em_method_bind_input_tensor(m, i, ctypes.byref(et)), f"input {i}")
            else:
                ev = vb.value(x)
                _check(self._L.em_method_set_input(m, i, ctypes.byref(ev)), f"input {i}")

    def _input_tensor(self, m: ctypes.c_void_p, i: int, x: torch.Tensor, order: list[int]) -> Any:
        """The runtime tensor for input ``i`` of ``m`` holding ``x``: the last call's, pointed at
        ``x``, when ``x`` has its shape and strides."""
        key = (int(m.value or 0), i)
        shape, strides = tuple(x.shape), x.stride()
        got = self._in_tensors.get(key)
        if got is None or got[0] != shape or got[1] != strides:
            vb = ValueBuilder()
            et = vb.tensor(x, dim_order=order)
            vb.keep.remove(x)  # the arrays stay with the cache, the tensor does not
            got = self._in_tensors[key] = (shape, strides, (et, vb))
        et = got[2][0]
        et.data = x.data_ptr() if x.numel() or x.data_ptr() else None
        return et

    def _outputs(self, m: ctypes.c_void_p) -> list[RuntimeValue]:
        """Copies of ``m``'s outputs; a static tensor's layout read once."""
        res: list[RuntimeValue] = []
        for i in range(self._L.em_method_output_count(m)):
            v = self._L.em_method_output(m, i).contents
            if v.tag != _lib.TAG_TENSOR:
                res.append(value_from_em(v))
                continue
            t = v.u.tensor.contents
            lay = self._out_layout.get(ctypes.addressof(t))
            if lay is None or t.dynamism != 0 or not t.data:
                y = tensor_from_em(t)
                if t.dynamism == 0 and y.numel():
                    self._out_layout[ctypes.addressof(t)] = (
                        y.dtype,
                        list(y.shape),
                        list(y.stride()),
                        y.numel() * y.element_size(),
                    )
                res.append(y)
                continue
            y = torch.empty_strided(lay[1], lay[2], dtype=lay[0])
            ctypes.memmove(y.data_ptr(), t.data, lay[3])
            res.append(y)
        return res

    @staticmethod
    def _check_tensor_input(i: int, x: torch.Tensor, want: EmEValue) -> None:
        """Names what is wrong with tensor input ``i`` before the runtime sees it."""
        if x.device.type != "cpu":
            raise EmberRuntimeError(
                f"input {i} is a tensor on {x.device}; the runtime takes CPU tensors (.cpu())"
            )
        if want.tag != _lib.TAG_TENSOR:
            raise EmberRuntimeError(f"input {i} takes a value of tag {want.tag}, not a tensor")
        t = want.u.tensor.contents
        dtype = _lib.EM_TO_TORCH.get(int(t.dtype))
        if dtype is not None and x.dtype != dtype:
            raise EmberRuntimeError(f"input {i} is {x.dtype}; the method takes {dtype}")
        shape = [int(t.sizes[d]) for d in range(t.dim)]
        if x.dim() != t.dim:
            raise EmberRuntimeError(
                f"input {i} has shape {list(x.shape)}; the method takes {t.dim} dims ({shape})"
            )

    @staticmethod
    def _match_dim_order(x: torch.Tensor, want: EmEValue) -> torch.Tensor:
        """Lays ``x`` out densely in the dim order the program expects for this input."""
        if want.tag != _lib.TAG_TENSOR:
            return x.contiguous()
        t = want.u.tensor.contents
        order = [t.dim_order[d] for d in range(t.dim)]
        if x.dim() != len(order) or order == list(range(len(order))):
            return x.contiguous()
        perm = x.permute(order).contiguous()
        inverse = [order.index(d) for d in range(len(order))]
        return perm.permute(inverse)

    def run(
        self,
        method: str,
        inputs: Sequence[Any],
        etdump: str | os.PathLike[str] | None = None,
        etdump_debug: str | os.PathLike[str] | None = None,
    ) -> list[RuntimeValue]:
        """Executes ``method`` on flattened ``inputs``; returns the flattened outputs (copies).
        Safe to call from several threads (they take turns).

        With ``etdump``, the run is recorded by the runtime's ETDump writer and written to that
        path: ExecuTorch's ETDump format (one "Execute" RunData with a profile event per
        instruction and "Method::execute"; "Method::init" too when this call prepares the
        method), which ``executorch.devtools.Inspector(etdump_path=...)`` opens. With
        ``etdump_debug`` too, every kernel's output tensors are recorded (DebugEvents) and their
        bytes written to that path: the Inspector's ``debug_buffer_path``. See
        docs/devtools.md."""
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"inputs is a list or tuple, not {type(inputs).__name__}")
        if etdump_debug is not None and etdump is None:
            raise ValueError("etdump_debug needs etdump (the ETDump that describes its tensors)")
        if etdump is not None:
            debug = Path(etdump_debug) if etdump_debug is not None else None
            with self._lock:
                return self._run_with_etdump(method, inputs, Path(etdump), debug)
        with self._lock:
            plan = self._fast.get(method)
            if plan is not None:
                outs = self._run_planned(method, plan, inputs)
                if outs is not None:
                    return outs
            m = self._method(method)
            vb = ValueBuilder()
            self._set_inputs(m, inputs, vb)
            _check(self._L.em_method_execute(m), f"executing '{method}'")
            res = self._outputs(m)
            self._fast[method] = self._plan(m, inputs)
            return res

    def _plan(self, m: ctypes.c_void_p, inputs: Sequence[Any]) -> _Plan | None:
        """After a call of ``m`` with ``inputs``: what the next call with inputs of the same
        layouts needs (per input its dtype, shape, strides and runtime tensor), or None where a
        call must take the checks (an input not a plain CPU tensor in the default dim order).
        Outputs are not planned: a method with control flow returns other tensors on another
        branch."""
        key = int(m.value or 0)
        meta = self._input_meta(m)
        ins = []
        for i, x in enumerate(inputs):
            got = self._in_tensors.get((key, i))
            if type(x) is not torch.Tensor or x.requires_grad or got is None:
                return None
            if meta[i][3] != list(range(meta[i][2])) or (tuple(x.shape), x.stride()) != got[:2]:
                return None
            ins.append((x.dtype, got[0], got[1], got[2][0]))
        return m, tuple(ins)

    def _run_planned(self, method: str, plan: _Plan, inputs: Sequence[Any]) -> list[Any] | None:
        """A call whose inputs have the layouts of the call that made ``plan``: bound and
        executed without the per-call checks (the same runtime calls), outputs copied as by any
        call; None, with nothing done, when an input differs. Python's steps around a large
        model's execute run with cold caches: all-MiniLM-L6-v2 int8 at 1 thread, 9.65-9.75 ->
        9.58-9.65 ms a call (Zen 4, one process alternating the two)."""
        m, ins = plan
        if len(inputs) != len(ins) or not self._mod:
            return None
        for x, (dtype, shape, strides, _) in zip(inputs, ins, strict=True):
            if type(x) is not torch.Tensor or x.dtype != dtype or x.requires_grad or not x.is_cpu:
                return None
            if x.shape != shape or x.stride() != strides:
                return None
        L = self._L
        for i, (x, (_, _, _, et)) in enumerate(zip(inputs, ins, strict=True)):
            et.data = x.data_ptr() if x.numel() or x.data_ptr() else None
            _check(L.em_method_bind_input_tensor(m, i, ctypes.byref(et)), f"input {i}")
        _check(L.em_method_execute(m), f"executing '{method}'")
        return self._outputs(m)

    def _run_with_etdump(
        self, method: str, inputs: Sequence[Any], path: Path, debug: Path | None
    ) -> list[RuntimeValue]:
        self._live()
        mem = ctypes.create_string_buffer(ETDUMP_BUFFER_BYTES)
        d = ctypes.c_void_p()
        _check(self._L.em_etdump_init(mem, len(mem), ctypes.byref(d)), "starting the ETDump")
        dbg = mmap.mmap(-1, ETDUMP_DEBUG_BYTES) if debug is not None else None
        dbg_at = ctypes.addressof(ctypes.c_char.from_buffer(dbg)) if dbg is not None else None
        if dbg is not None:
            self._L.em_etdump_set_debug_buffer(d, dbg_at, len(dbg))
        self._profiler.record = ctypes.cast(self._L.em_etdump_record, ctypes.c_void_p).value
        self._profiler.record_ctx = d.value
        try:
            outs = self.run(method, inputs)
        finally:
            self._profiler.record = None
            self._profiler.record_ctx = None
        need = ctypes.c_size_t()
        self._L.em_etdump_finish(d, None, 0, ctypes.byref(need))
        out = ctypes.create_string_buffer(max(need.value, 1))
        _check(self._L.em_etdump_finish(d, out, len(out), ctypes.byref(need)), "writing the ETDump")
        path.write_bytes(out.raw[: need.value])
        if debug is not None and dbg is not None:
            debug.write_bytes(dbg[: self._L.em_etdump_debug_size(d)])
        if dropped := int(self._L.em_etdump_dropped(d)):
            _log.warning("ETDump buffer full: %d events dropped from %s", dropped, path)
        return outs

    def values(self, method: str) -> list[RuntimeValue | None]:
        """Every value of a prepared method as it is now (tensors copied; lists as None)."""
        with self._lock:
            return self._values(method)

    def _values(self, method: str) -> list[RuntimeValue | None]:
        m = self._method(method)
        out: list[RuntimeValue | None] = []
        for i in range(self._L.em_method_value_count(m)):
            v = self._L.em_method_value(m, i).contents
            has_data = v.tag != _lib.TAG_TENSOR or bool(v.u.tensor.contents.data)
            simple = v.tag in (
                _lib.TAG_NONE,
                _lib.TAG_TENSOR,
                _lib.TAG_INT,
                _lib.TAG_DOUBLE,
                _lib.TAG_BOOL,
                _lib.TAG_STRING,
            )
            out.append(value_from_em(v) if simple and has_data else None)
        return out

    def _on_instruction_end(self, ctx: int, idx: int, name: bytes, ns: int) -> None:
        del ctx, name, ns
        if self._method_for_watch is None or idx not in self._watch:
            return
        for vi in self._watch[idx]:
            v = self._L.em_method_value(self._method_for_watch, vi)
            if v and v.contents.tag == _lib.TAG_TENSOR:
                self._captured[(idx, vi)] = tensor_from_em(v.contents.u.tensor.contents)

    def run_debug(
        self, method: str, inputs: Sequence[Any], watch: dict[int, list[int]]
    ) -> tuple[list[RuntimeValue], dict[tuple[int, int], torch.Tensor]]:
        """Runs ``method`` and copies out, right after instruction ``i`` runs, each value in
        ``watch[i]``. Returns (outputs, {(instruction, value_index): tensor})."""
        with self._lock:
            m = self._method(method)
            self._watch = dict(watch)
            self._captured = {}
            self._method_for_watch = m
            self._profiler.end = self._end_cb
            try:
                outs = self.run(method, inputs)
            finally:
                self._profiler.end = _PROF_END()
                self._method_for_watch = None
            return outs, dict(self._captured)
