"""Memory planning: place every planned tensor in one arena (memory_id 1).

Guarantees afterwards: every root spec of kind activation / input / mutable that the method
references has ``mem_id = 1`` and a ``mem_offset`` that is a multiple of ``alignment`` (16); two
specs whose lifetimes overlap occupy disjoint byte ranges (sizes rounded up to ``alignment``);
``ir.arena_bytes`` is the arena size the runtime must provide (``non_const_buffer_sizes[1]``).
Mutable buffers are live for the whole method, so nothing else ever reuses their bytes and their
state persists between calls. Elided views resolve to their root's placement at emission.

Algorithm: greedy by size. Specs are taken largest first; each goes into the *smallest* gap
(best fit) between the already-placed specs whose lifetimes overlap its own, or at the end.
"""

from __future__ import annotations

import logging

from ember.errors import MemoryPlanError
from ember.passes.ir import ACTIVATION, INPUT, MUTABLE, MethodIR, TensorSpec

log = logging.getLogger(__name__)

_PLANNED = (ACTIVATION, INPUT, MUTABLE)


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def planned_roots(ir: MethodIR) -> list[TensorSpec]:
    """Distinct root specs that need arena memory, in creation order."""
    seen: dict[int, TensorSpec] = {}
    for s in ir.specs:
        r = s.root()
        if r.kind in _PLANNED and r.lifetime[0] >= 0 and id(r) not in seen:
            seen[id(r)] = r
    return list(seen.values())


def _overlap(a: list[int], b: list[int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def plan_memory(ir: MethodIR, alignment: int = 16) -> MethodIR:
    """Assign arena offsets (see the module docstring)."""
    roots = planned_roots(ir)
    order = sorted(roots, key=lambda s: (-align_up(s.nbytes, alignment), s.lifetime[0]))
    placed: list[tuple[TensorSpec, int, int]] = []  # (spec, offset, size)
    arena = 0
    for s in order:
        size = align_up(s.nbytes, alignment)
        busy = sorted(
            (off, off + sz) for p, off, sz in placed if sz and _overlap(p.lifetime, s.lifetime)
        )
        best_off, best_gap = None, None
        cursor = 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best_off, best_gap = cursor, gap
            cursor = max(cursor, hi)
        off = best_off if best_off is not None else cursor
        s.mem_id, s.mem_offset = 1, off
        placed.append((s, off, size))
        arena = max(arena, off + size)
    if arena >= 1 << 63:
        raise MemoryPlanError(f"method '{ir.name}' needs {arena} bytes of planned memory")
    ir.arena_bytes = arena
    log.debug("method %s: %d planned tensors in %d bytes", ir.name, len(roots), arena)
    return ir


def check_plan(ir: MethodIR, alignment: int = 16) -> None:
    """Raise MemoryPlanError if two simultaneously live tensors overlap or a range is out of
    the arena or misaligned."""
    roots = planned_roots(ir)
    for s in roots:
        if s.mem_offset is None or s.mem_offset % alignment:
            raise MemoryPlanError(f"{s.name}: bad offset {s.mem_offset}")
        if s.mem_offset + s.nbytes > ir.arena_bytes:
            raise MemoryPlanError(f"{s.name}: outside the arena")
    for i, a in enumerate(roots):
        for b in roots[i + 1 :]:
            if a.nbytes and b.nbytes and _overlap(a.lifetime, b.lifetime):
                if (
                    a.mem_offset < b.mem_offset + b.nbytes
                    and b.mem_offset < a.mem_offset + a.nbytes
                ):
                    raise MemoryPlanError(f"{a.name} and {b.name} overlap while both live")
