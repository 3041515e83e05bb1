"""The case tables behind the table-driven kernel tests (tests/python/kernels/test_kernels_*.py).

Each test file holds one table: ``CASES``, a list of (name, builder) pairs that drives its
parametrized ``test_kernel``. A builder takes a generator seeded from the case name (``seeded``),
so a case's inputs do not depend on the file or the position it is registered at. A kernel
group split over several files (``test_kernels_nn_*``, ...) checks its coverage over the tables
of all of them (``gather``).
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from typing import Any, TypeVar

import torch

AnyBuilder = Callable[[torch.Generator], Any]
B = TypeVar("B", bound=AnyBuilder)


class CaseList(list[tuple[str, AnyBuilder]]):
    """One test file's table of (name, builder) pairs."""

    def add(self, name: str, fn: AnyBuilder) -> None:
        """Registers builder ``fn`` as case ``name``."""
        self.append((name, fn))

    def case(self, name: str) -> Callable[[B], B]:
        """A decorator registering the decorated builder as case ``name``."""

        def deco(fn: B) -> B:
            self.append((name, fn))
            return fn

        return deco

    def ids(self) -> list[str]:
        """The case names, in registration order (the pytest ids)."""
        return [name for name, _ in self]


def seeded(name: str) -> torch.Generator:
    """The generator case ``name`` is built with (seeded from the CRC-32 of the name)."""
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def gather(modules: list[str]) -> list[tuple[str, AnyBuilder]]:
    """The tables (``CASES``) of the named test modules, concatenated. The modules sit next to
    this one and are imported by their file names, as pytest's default import mode does."""
    out: list[tuple[str, AnyBuilder]] = []
    for m in modules:
        out.extend(importlib.import_module(m).CASES)
    return out
