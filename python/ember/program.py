"""``ember.Program``: an exported (or loaded) program, its bytes and how to run it."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch.utils._pytree as pytree

from ember import pytree_str
from ember.emit import InstrDebug
from ember.errors import EmberRuntimeError
from ember.reader import read_plans

log = logging.getLogger(__name__)


class Program:
    """A serialized ExecuTorch-format program (``.pte`` bytes, optional ``.ptd`` bytes).

    Programs made by :func:`ember.export` also keep the exporter's view of each method (memory
    plan, per-instruction debug info, the decomposed ExportedProgram) for :func:`ember.compare`.
    """

    def __init__(
        self,
        buffer: bytes,
        ptd_buffer: bytes | None = None,
        *,
        debug: dict[str, list[InstrDebug]] | None = None,
        exported: dict[str, Any] | None = None,
        irs: dict[str, Any] | None = None,
    ) -> None:
        # ``buffer`` may be a list of pieces (serialize_pte_pieces): joined on first use.
        if isinstance(buffer, list):
            self._pieces: list | None = buffer
            self._buffer: bytes | None = None
            head = b"".join(bytes(p) for p in buffer[:4])
        else:
            self._pieces = None
            self._buffer = buffer if isinstance(buffer, bytes) else bytes(buffer)
            head = self._buffer
        self._ptd = (
            ptd_buffer if isinstance(ptd_buffer, bytes) or ptd_buffer is None else bytes(ptd_buffer)
        )
        self._plans = {p.name: p for p in read_plans(head)}
        self._debug = debug or {}
        self._exported = exported or {}
        self._irs = irs or {}
        self._rt: Any = None
        # Test cases from ember.export(..., bundle=...), {method: [(inputs, expected)]}.
        self.bundle: dict[str, list[tuple[Any, Any]]] | None = None

    # -- bytes --------------------------------------------------------------------------------
    @property
    def buffer(self) -> bytes:
        """The ``.pte`` file contents."""
        if self._buffer is None:
            self._buffer = b"".join(self._pieces or [])
            self._pieces = None
        return self._buffer

    @property
    def ptd_buffer(self) -> bytes | None:
        """The ``.ptd`` file contents (external constants), or None."""
        return self._ptd

    def save(self, path: str | os.PathLike, ptd_path: str | os.PathLike | None = None) -> Path:
        """Write the ``.pte`` to ``path``; with external data also the ``.ptd`` (default:
        ``path`` with suffix ``.ptd``). Returns the ``.pte`` path."""
        path = Path(path)
        with open(path, "wb") as f:
            for piece in self._pieces if self._pieces is not None else [self.buffer]:
                f.write(piece)
        if self._ptd is not None:
            ptd = Path(ptd_path) if ptd_path is not None else path.with_suffix(".ptd")
            ptd.write_bytes(self._ptd)
            log.info(
                "wrote %s (%d bytes) and %s (%d bytes)",
                path,
                path.stat().st_size,
                ptd,
                len(self._ptd),
            )
        else:
            log.info("wrote %s (%d bytes)", path, path.stat().st_size)
        return path

    @property
    def nbytes(self) -> int:
        """Size of the ``.pte`` file."""
        if self._buffer is not None:
            return len(self._buffer)
        return sum(memoryview(p).nbytes for p in self._pieces or [])

    # -- metadata -----------------------------------------------------------------------------
    @property
    def methods(self) -> list[str]:
        """Method names, in file order."""
        return list(self._plans)

    @property
    def arena_bytes(self) -> dict[str, int]:
        """Planned memory per method (sum of ``non_const_buffer_sizes[1:]``)."""
        return {n: sum(p.non_const_buffer_sizes[1:]) for n, p in self._plans.items()}

    def input_spec(self, method: str = "forward") -> pytree.TreeSpec | None:
        s = self._plans[method].encoded_inp_str
        return pytree_str.decode(s) if s else None

    def output_spec(self, method: str = "forward") -> pytree.TreeSpec | None:
        s = self._plans[method].encoded_out_str
        return pytree_str.decode(s) if s else None

    def explain(self, method: str | None = None) -> str:
        """Which instructions went to a backend and why each other one stayed on the portable
        kernels, per method (export-time programs only; ``ember.export(..., explain=True)``
        writes this to stderr)."""
        lines: list[str] = []
        for name in [method] if method else self.methods:
            ir = self._irs.get(name)
            report = getattr(ir, "partition_report", None) if ir is not None else None
            if not report:
                lines.append(f"{name}: no backend pass ran (portable kernels only)")
                continue
            n = sum(d.delegated for d in report)
            lines.append(f"{name}: {n} of {len(report)} instructions delegated")
            for d in report:
                where = f" [{d.node}]" if d.node else ""
                state = "delegated to" if d.delegated else "portable:"
                src = f"  at {d.source}" if d.source and not d.delegated else ""
                lines.append(f"  {d.index:4d} {d.kernel}{where} {state} {d.why}{src}")
        return "\n".join(lines)

    def debug_info(self, method: str = "forward") -> list[InstrDebug]:
        """Per-instruction debug records (export-time programs only)."""
        return self._debug.get(method, [])

    def memory_plan(self, method: str = "forward") -> list[dict[str, Any]]:
        """Planned tensors of ``method``: name, offset, nbytes, lifetime (export-time only)."""
        from ember.passes.memory_plan import planned_roots

        ir = self._irs.get(method)
        if ir is None:
            return []
        return [
            {
                "name": s.name,
                "offset": s.mem_offset,
                "nbytes": s.nbytes,
                "lifetime": tuple(s.lifetime),
                "kind": s.kind,
            }
            for s in planned_roots(ir)
        ]

    # -- running ------------------------------------------------------------------------------
    def runtime(self) -> Any:
        """The Ember C runtime's program object (created once; keeps mutable state)."""
        if self._rt is None:
            try:
                from ember import runtime as _runtime
            except ImportError as e:  # the bindings are built separately
                raise EmberRuntimeError(f"the Ember runtime bindings are unavailable: {e}") from e
            try:
                self._rt = _runtime.RuntimeProgram(self.buffer, self._ptd)
            except Exception as e:
                raise EmberRuntimeError(f"runtime failed to load the program: {e}") from e
        return self._rt

    def flatten_inputs(self, inputs: Sequence[Any], method: str = "forward") -> list[Any]:
        leaves, _ = pytree.tree_flatten((tuple(inputs), {}))
        return leaves

    def unflatten_outputs(self, outs: list[Any], method: str = "forward") -> Any:
        spec = self.output_spec(method)
        if spec is None or spec.num_leaves != len(outs):
            return outs
        return pytree.tree_unflatten(outs, spec)

    def run(
        self,
        *inputs: Any,
        method: str = "forward",
        etdump: str | os.PathLike | None = None,
        etdump_debug: str | os.PathLike | None = None,
    ) -> Any:
        """Execute ``method`` on the Ember C runtime; outputs have the model's structure.

        ``etdump``: a path where this run's ExecuTorch ETDump (profile events per instruction)
        is written; ``executorch.devtools.Inspector(etdump_path=...)`` opens it.
        ``etdump_debug``: with ``etdump``, also record every kernel's output tensors and write
        their bytes there (the Inspector's ``debug_buffer_path``). See docs/devtools.md."""
        rt = self.runtime()
        flat = self.flatten_inputs(inputs, method)
        try:
            outs = rt.run(method, flat, etdump=etdump, etdump_debug=etdump_debug)
        except Exception as e:
            raise EmberRuntimeError(f"running '{method}' failed: {e}") from e
        return self.unflatten_outputs(list(outs), method)

    # -- bundled programs -----------------------------------------------------------------------
    def bundled_buffer(
        self,
        cases: Sequence[tuple[Any, Any]] | dict[str, Sequence[tuple[Any, Any]]],
        method: str = "forward",
    ) -> bytes:
        """The bytes of an ExecuTorch BundledProgram (``.bpte``, ``BP08``) holding this
        program and test cases for ``method`` (or a dict ``{method: cases}`` for several);
        see :meth:`save_bundled`."""
        from ember.serialize import serialize_bundled

        if self._ptd is not None:
            raise ValueError("a bundled program holds only the .pte: export without external data")
        by_method = cases if isinstance(cases, dict) else {method: cases}
        return serialize_bundled(
            self.buffer, [(name, self._bundled_cases(c, name)) for name, c in by_method.items()]
        )

    def _bundled_cases(self, cases: Sequence[tuple[Any, Any]], method: str) -> list[Any]:
        if method not in self._plans:
            raise ValueError(f"no method '{method}' in this program (methods: {self.methods})")
        out = []
        for k, case in enumerate(cases):
            if not isinstance(case, (tuple, list)) or len(case) != 2:
                raise TypeError(f"test case {k}: expected an (inputs, expected_or_None) pair")
            inputs, expected = case
            flat_in = self.flatten_inputs(_as_tuple(inputs), method)
            if expected is None:
                expected = self._eager(method, flat_in, k)
            flat_out, _ = pytree.tree_flatten(expected)
            out.append(([_bundled(v) for v in flat_in], [_bundled(v) for v in flat_out]))
        return out

    def save_bundled(
        self,
        path: str | os.PathLike,
        cases: Sequence[tuple[Any, Any]] | dict[str, Sequence[tuple[Any, Any]]] | None = None,
        method: str = "forward",
    ) -> Path:
        """Write an ExecuTorch BundledProgram (``.bpte``) with test cases for ``method``.

        ``cases`` is a list of ``(inputs, expected)`` pairs: ``inputs`` a tuple of positional
        arguments (or one tensor), ``expected`` the outputs in any pytree structure, or None to
        compute them by running the exported model in eager PyTorch (programs made by
        :func:`ember.export` only); a dict ``{method: cases}`` bundles several methods. Without
        ``cases``, the ones given to ``ember.export(..., bundle=...)``. ``ember run --bundled`` and
        stock ExecuTorch's ``BundledModule`` run every case; see docs/devtools.md."""
        if cases is None:
            if self.bundle is None:
                raise ValueError("no test cases: pass cases, or export(..., bundle=...)")
            cases = self.bundle
        data = self.bundled_buffer(cases, method)
        path = Path(path)
        path.write_bytes(data)
        log.info("wrote %s (%d bytes)", path, len(data))
        return path

    # -- ETRecord -----------------------------------------------------------------------------
    def save_etrecord(self, path: str | os.PathLike, inputs: Any = None) -> Path:
        """Write an ETRecord (ExecuTorch 1.5's zip: each method's graph with debug handles, the
        map from instruction index to handles, the delegate calls) that ExecuTorch's
        ``Inspector(etdump_path=..., etrecord=...)`` joins with an ETDump of this program, so its
        events are named by graph node and source line. ``inputs``: representative inputs of
        ``forward`` (a tuple of positional arguments, or one tensor) for the Inspector's
        ``calculate_numeric_gap``. Export-time programs only. See docs/devtools.md (ETRecord)."""
        from ember.etrecord import write_etrecord

        if not self._exported:
            raise ValueError("save_etrecord: only programs made by ember.export keep their graphs")
        rep = None
        if inputs is not None and "forward" in self._plans:
            rep = self.flatten_inputs(_as_tuple(inputs), "forward")
        out = write_etrecord(path, self._exported, self._debug, self._irs, rep)
        log.info("wrote %s (%d bytes)", out, out.stat().st_size)
        return out

    def _eager(self, method: str, flat_in: list[Any], k: int) -> Any:
        ep = self._exported.get(method)
        if ep is None:
            raise ValueError(
                f"test case {k} has no expected outputs and this program has no exported model "
                "to compute them (give (inputs, expected) pairs)"
            )
        import torch

        with torch.no_grad():
            return ep.module()(*flat_in)

    def __repr__(self) -> str:
        ext = f", ptd={len(self._ptd)} B" if self._ptd is not None else ""
        return f"ember.Program(methods={self.methods}, pte={self.nbytes} B{ext})"


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _bundled(v: Any) -> Any:
    """A flattened input or output as a bundled value (tensor bytes contiguous)."""
    import torch

    from ember.dtypes import code_of
    from ember.serialize import BundledTensor

    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return BundledTensor(code_of(t.dtype), list(t.shape), data)
    if isinstance(v, (bool, int, float)):
        return v
    raise TypeError(f"a bundled value must be a tensor, int, bool or float, not {type(v).__name__}")


def load(path: str | os.PathLike | bytes, ptd: str | os.PathLike | bytes | None = None) -> Program:
    """Load a ``.pte`` (path or bytes) and optional ``.ptd``. With a path and no ``ptd``, a
    ``.ptd`` with the same stem beside it is used if present."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        pte = bytes(path)
    else:
        p = Path(path)
        pte = p.read_bytes()
        if ptd is None and p.with_suffix(".ptd").is_file():
            ptd = p.with_suffix(".ptd")
    ptd_bytes = None
    if ptd is not None:
        ptd_bytes = bytes(ptd) if isinstance(ptd, (bytes, bytearray)) else Path(ptd).read_bytes()
    return Program(pte, ptd_bytes)
