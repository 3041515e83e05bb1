"""ExecuTorch pytree strings (``container_meta_type``), to and from torch TreeSpecs.

Format (ExecuTorch ``extension/pytree/pytree.h``, digest docs/pte-format.md section 6): a leaf is
``$``; a container is ``<kind><n children>`` then ``#<leaves of child i>`` for each child, then
``(`` the children separated by ``,`` ``)``. Kinds: ``T`` tuple, ``L`` list, ``D`` dict (children
written ``'key':child`` or ``int:child``), ``N`` namedtuple. Example: ``forward(x)`` inputs are
``T2#1#0(T1#1($),D0())``. Other pytree node types are written as tuples.
"""

from __future__ import annotations

import json
from typing import Any

import torch.utils._pytree as pytree


def _kind(spec: pytree.TreeSpec) -> str:
    t = spec.type
    if t is list:
        return "L"
    if t is dict:
        return "D"
    if t is tuple:
        return "T"
    if isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields"):
        return "N"
    return "T"


def encode(spec: pytree.TreeSpec) -> str:
    """TreeSpec -> ExecuTorch pytree string."""
    if spec.is_leaf():
        return "$"
    kids = spec.children()
    kind = _kind(spec)
    head = f"{kind}{len(kids)}" + "".join(f"#{c.num_leaves}" for c in kids)
    if kind == "D":
        parts = []
        for key, c in zip(spec.context, kids, strict=True):
            k = str(key) if isinstance(key, int) else "'" + str(key) + "'"
            parts.append(f"{k}:{encode(c)}")
    else:
        parts = [encode(c) for c in kids]
    return head + "(" + ",".join(parts) + ")"


class _Parser:
    def __init__(self, s: str) -> None:
        self.s, self.i = s, 0

    def peek(self) -> str:
        return self.s[self.i]

    def take(self, ch: str) -> None:
        if self.s[self.i] != ch:
            raise ValueError(f"pytree string: expected {ch!r} at {self.i} in {self.s!r}")
        self.i += 1

    def number(self) -> int:
        j = self.i
        while self.i < len(self.s) and self.s[self.i].isdigit():
            self.i += 1
        return int(self.s[j : self.i])

    def node(self) -> Any:
        c = self.peek()
        if c == "$":
            self.i += 1
            return 0
        if c not in "TLDN":
            raise ValueError(f"pytree string: unknown kind {c!r} in {self.s!r}")
        self.i += 1
        n = self.number()
        while self.peek() == "#":
            self.i += 1
            self.number()
        self.take("(")
        items: list[Any] = []
        keys: list[Any] = []
        for k in range(n):
            if k:
                self.take(",")
            if c == "D":
                if self.peek() == "'":
                    j = self.s.index("'", self.i + 1)
                    keys.append(self.s[self.i + 1 : j])
                    self.i = j + 1
                else:
                    keys.append(self.number())
                self.take(":")
            items.append(self.node())
        self.take(")")
        if c == "D":
            return dict(zip(keys, items, strict=True))
        return list(items) if c == "L" else tuple(items)


def decode(s: str) -> pytree.TreeSpec:
    """ExecuTorch pytree string (or torch's JSON pytree encoding) -> TreeSpec."""
    s = s.strip()
    if s.startswith("["):
        return (
            pytree.treespec_loads(s)
            if s.startswith("[1")
            else pytree.treespec_loads(json.dumps(json.loads(s)))
        )
    p = _Parser(s)
    obj = p.node()
    return pytree.tree_structure(obj)
