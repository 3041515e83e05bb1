"""Checking a delegate blob with the runtime's own validation before it leaves the exporter.

A backend's ``init`` (its C half, in libember) is what refuses a bad blob at load time. The
exporter calls that same ``init`` through the bindings on every blob it writes
(:func:`runtime_check`), so that a blob the runtime would refuse is caught at export and the
subgraph falls back to the portable kernels instead of producing a file that cannot load.

When libember cannot be loaded (an exporter installed without the runtime), the check is skipped
and that is logged once.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
from functools import cache

log = logging.getLogger(__name__)

# Extra method memory a backend's init may take beyond the blob's own arena (handles, tensor and
# operator tables, the AMX workspace). The mapping is anonymous and untouched pages cost nothing.
_SLACK = 256 << 20


class _InitCtx(ctypes.Structure):
    """``em_backend_init_ctx`` (include/ember/backend.h)."""

    _fields_ = [
        ("method_alloc", ctypes.c_void_p),
        ("method_name", ctypes.c_char_p),
        ("named_data", ctypes.c_void_p),
        ("external", ctypes.c_void_p),
        ("pool", ctypes.c_void_p),
    ]


_INIT = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.POINTER(_InitCtx),
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_void_p),
)
_DESTROY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Backend(ctypes.Structure):
    """``em_backend`` (include/ember/backend.h)."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("is_available", ctypes.c_void_p),
        ("init", _INIT),
        ("execute", ctypes.c_void_p),
        ("destroy", ctypes.c_void_p),
    ]


@cache
def _runtime() -> ctypes.CDLL | None:
    try:
        from ember._lib import lib

        L = lib()
    except Exception as e:  # no runtime library beside this exporter
        log.info("delegate blobs are not checked against the runtime (%s)", e)
        return None
    L.em_find_backend.restype = ctypes.POINTER(_Backend)
    L.em_find_backend.argtypes = [ctypes.c_char_p]
    L.em_clear_last_error.restype = None
    return L


def runtime_check(backend_id: str, blob: bytes, arena_nbytes: int = 0) -> str | None:
    """Runs backend ``backend_id``'s own ``init`` on ``blob`` (then releases what it took).

    Returns ``None`` when the runtime accepts the blob (or cannot be asked: no libember, or the
    backend is not in that build), else the runtime's message saying why it refused it.
    ``arena_nbytes`` is the blob's own arena, which init reserves from the method memory.
    """
    from ember._lib import EmAllocator

    L = _runtime()
    if L is None:
        return None
    b = L.em_find_backend(backend_id.encode())
    if not b:
        log.info("delegate blobs for %s are not checked: not in this runtime build", backend_id)
        return None
    size = max(arena_nbytes, 0) + 8 * len(blob) + _SLACK
    mem = mmap.mmap(-1, size)
    try:
        base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
        al = EmAllocator()
        L.em_allocator_init(ctypes.byref(al), ctypes.c_void_p(base), size)
        ctx = _InitCtx(ctypes.addressof(al), b"export_check", None, None, None)
        data = ctypes.create_string_buffer(bytes(blob), len(blob))
        handle = ctypes.c_void_p()
        L.em_clear_last_error()
        st = b.contents.init(
            ctypes.byref(ctx), ctypes.addressof(data), len(blob), None, 0, ctypes.byref(handle)
        )
        if st != 0:
            why = L.em_last_error().decode(errors="replace")
            return f"{L.em_status_str(st).decode()}: {why or 'refused, no message'}"
        if b.contents.destroy and handle.value:
            _DESTROY(b.contents.destroy)(handle)
        return None
    finally:
        mem.close()
