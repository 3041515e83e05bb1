"""The corpus registry and what its builders share: the ``Case`` record, the ``case`` decorator,
seeding, batchnorm statistics, and the one-tensor-in / one-tensor-out wrapper of HF models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Built = tuple[torch.nn.Module, tuple[torch.Tensor, ...]]


@dataclass(frozen=True)
class Case:
    """One architecture: ``build()`` returns a fresh eval-mode module and its inputs."""

    name: str
    family: str
    build: Callable[[], Built]
    fast: bool = False


CASES: dict[str, Case] = {}


def case(family: str, fast: bool = False) -> Callable[[Callable[[], Built]], Callable[[], Built]]:
    """Registers the decorated builder under its function name (seeded with 0 when built)."""

    def deco(fn: Callable[[], Built]) -> Callable[[], Built]:
        def seeded() -> Built:
            torch.manual_seed(0)
            m, inputs = fn()
            return randomize_norm_stats(m).eval(), inputs

        assert fn.__name__ not in CASES, fn.__name__
        CASES[fn.__name__] = Case(fn.__name__, family, seeded, fast)
        return fn

    return deco


def randomize_norm_stats(m: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial batchnorm statistics and affine parameters (HF initializes 0 / 1)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in m.modules():
            if (
                isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)
                and mod.running_var is not None
            ):
                n = mod.running_var.numel()
                mod.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
                mod.running_var.copy_(torch.rand(n, generator=g) * 1.5 + 0.5)
                if mod.weight is not None:
                    mod.weight.copy_(torch.rand(n, generator=g) + 0.5)
                    mod.bias.copy_(torch.rand(n, generator=g) - 0.5)
    return m


class HF(torch.nn.Module):
    """Calls a `transformers` model with its one input under keyword ``arg`` (plus constant
    keyword tensors ``consts``, e.g. one decoder step's ids) and returns output field ``key``
    (default: the first)."""

    def __init__(
        self,
        model: torch.nn.Module,
        arg: str = "pixel_values",
        key: str | int = 0,
        consts: dict[str, torch.Tensor] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__()
        self.model = model
        self.arg = arg
        self.key = key
        self.kw = kw
        self.const_names = list(consts or {})
        for k, v in (consts or {}).items():
            self.register_buffer(k, v, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        consts = {k: getattr(self, k) for k in self.const_names}
        out = self.model(**{self.arg: x}, **consts, **self.kw)
        if isinstance(out, torch.Tensor):
            return out
        return out[self.key]


def image(size: int = 32, channels: int = 3) -> tuple[torch.Tensor]:
    return (torch.randn(1, channels, size, size),)


def tokens(n: int = 12, vocab: int = 99) -> tuple[torch.Tensor]:
    return (torch.randint(3, vocab, (1, n)),)
