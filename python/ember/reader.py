"""A small reader for what :class:`ember.Program` needs back from a ``.pte`` file.

Reads the execution plans' names, pytree strings and arena sizes directly from the flatbuffer
(docs/pte-format.md section 1 rules: vtables may sit before or after their table, absent fields take
their defaults). Not a verifier: the C runtime verifies files it executes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ember.errors import SerializationError


@dataclass
class PlanSummary:
    name: str
    encoded_inp_str: str
    encoded_out_str: str
    non_const_buffer_sizes: list[int]


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.b = buf

    def u32(self, p: int) -> int:
        return struct.unpack_from("<I", self.b, p)[0]

    def field(self, table: int, slot: int) -> int:
        """Absolute address of the field, or 0 if absent."""
        vt = table - struct.unpack_from("<i", self.b, table)[0]
        vt_len = struct.unpack_from("<H", self.b, vt)[0]
        o = 4 + 2 * slot
        if o + 2 > vt_len:
            return 0
        off = struct.unpack_from("<H", self.b, vt + o)[0]
        return table + off if off else 0

    def ref(self, table: int, slot: int) -> int:
        a = self.field(table, slot)
        return a + self.u32(a) if a else 0

    def string(self, table: int, slot: int) -> str:
        p = self.ref(table, slot)
        if not p:
            return ""
        n = self.u32(p)
        return self.b[p + 4 : p + 4 + n].decode("utf-8")

    def vec_tables(self, table: int, slot: int) -> list[int]:
        p = self.ref(table, slot)
        if not p:
            return []
        n = self.u32(p)
        return [p + 4 + 4 * i + self.u32(p + 4 + 4 * i) for i in range(n)]

    def vec_i64(self, table: int, slot: int) -> list[int]:
        p = self.ref(table, slot)
        if not p:
            return []
        n = self.u32(p)
        return list(struct.unpack_from(f"<{n}q", self.b, p + 4))


def read_plans(buf: bytes) -> list[PlanSummary]:
    """Summaries of every execution plan in a ``.pte`` buffer."""
    if len(buf) < 8 or buf[4:8] != b"ET12":
        raise SerializationError("not an ExecuTorch ET12 program (bad identifier)")
    r = _Reader(buf)
    try:
        root = r.u32(0)
        out = []
        for plan in r.vec_tables(root, 1):
            cmt = r.ref(plan, 1)
            inp = r.string(cmt, 0) if cmt else ""
            outs = r.string(cmt, 1) if cmt else ""
            out.append(PlanSummary(r.string(plan, 0), inp, outs, r.vec_i64(plan, 8)))
        return out
    except (struct.error, UnicodeDecodeError, IndexError) as e:
        raise SerializationError(f"malformed program: {e}") from e
