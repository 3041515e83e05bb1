"""The delegate instruction of the method IR.

:class:`DelegateInstr` subclasses :class:`~ember.passes.ir.KernelInstr` so every pass that walks
instruction arguments (lifetimes, memory planning) sees its inputs and outputs unchanged; the
emitter writes it as a DelegateCall (docs/pte-format.md section 6) with ``args`` = the delegate's
inputs then its outputs, and a ``BackendDelegate{id, processed, compile_specs}`` entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ember.passes.ir import KernelInstr


@dataclass
class DelegateInstr(KernelInstr):
    """A call into backend ``backend_id`` with the opaque ``processed`` blob."""

    backend_id: str = ""
    processed: bytes = b""
    compile_specs: list[tuple[str, bytes]] = field(default_factory=list)
    n_inputs: int = 0
    summary: str = ""
    # Delegate debug id -> the FX nodes it stands for (the runtime's profile events inside the
    # delegate carry these ids; the ETRecord's delegate map resolves them).
    debug_ids: dict[str, list[str]] = field(default_factory=dict)
