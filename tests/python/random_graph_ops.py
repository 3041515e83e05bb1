"""The network side of the random-graph test (tests/python/random_graphs.py): a graph is a
list of :class:`Step` replayed by :func:`apply`, in a :class:`Sub` module; :class:`Batch` runs
many side by side (one export for all of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


# ---- the network ------------------------------------------------------------------------------
@dataclass
class Step:
    """One step: ``op`` on the values ``ins`` (indices into the values so far) with parameters
    ``kw`` and submodules ``mods`` (indices into :attr:`Sub.mods`)."""

    op: str
    ins: tuple[int, ...] = ()
    kw: dict[str, Any] = field(default_factory=dict)
    mods: tuple[int, ...] = ()

    def __str__(self) -> str:
        kw = ", ".join(f"{k}={v}" for k, v in self.kw.items())
        return f"{self.op}{list(self.ins)}({kw})"


class Const(nn.Module):
    """A constant tensor operand (a frozen parameter: an export-time constant)."""

    def __init__(self, t: torch.Tensor) -> None:
        super().__init__()
        self.t = nn.Parameter(t, requires_grad=False)


class Sub(nn.Module):
    """One random graph: its steps replayed on its inputs; returns the values ``outs``."""

    def __init__(self) -> None:
        super().__init__()
        self.mods = nn.ModuleList()
        self.steps: list[Step] = []
        self.outs: list[int] = []
        # > 0: every step's float output times (1 + noise * a seeded normal): f32-sized rounding
        # noise on each intermediate, for the checker's conditioning (random_graph_check.py)
        self.noise = 0.0

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        vals: list[torch.Tensor] = []
        gen = torch.Generator().manual_seed(0) if self.noise else None
        for st in self.steps:
            v = apply(st, vals, self.mods, xs)
            if gen is not None and isinstance(v, torch.Tensor) and v.is_floating_point():
                v = v * (1 + self.noise * torch.randn(v.shape, generator=gen, dtype=v.dtype))
            vals.append(v)
        return tuple(vals[i] for i in self.outs)

    def describe(self) -> str:
        return "; ".join(f"v{i}={s}" for i, s in enumerate(self.steps)) + f" -> {self.outs}"


class Batch(nn.Module):
    """Many cases side by side: each reads its own inputs; the outputs are all of theirs."""

    def __init__(self, subs: Sequence[Sub], n_inputs: Sequence[int]) -> None:
        super().__init__()
        self.subs = nn.ModuleList(subs)
        self.n_inputs = list(n_inputs)

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        k = 0
        for s, n in zip(self.subs, self.n_inputs, strict=True):
            outs.extend(s(*xs[k : k + n]))
            k += n
        return tuple(outs)


def _act(name: str, x: torch.Tensor, kw: dict[str, Any]) -> torch.Tensor:
    if name == "relu":
        return F.relu(x)
    if name == "relu6":
        return F.relu6(x)
    if name == "hardtanh":
        return F.hardtanh(x, kw["lo"], kw["hi"])
    if name == "clamp":
        return torch.clamp(x, kw["lo"], kw["hi"])
    if name == "hardswish":
        return F.hardswish(x)
    if name == "hardsigmoid":
        return F.hardsigmoid(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "silu":
        return F.silu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "tanh":
        return torch.tanh(x)
    if name in ("hsig_dec", "hswish_dec"):  # the decompositions the partitioner recognises
        v = kw.get("v", 0)
        t = (
            F.relu6(x + 3)
            if v == 0
            else torch.clamp(x + 3, 0, 6)
            if v == 1
            else torch.clamp(F.relu(x + 3), max=6.0)
        )
        if name == "hswish_dec":
            t = x * t if kw.get("left", True) else t * x
        return t / 6 if kw.get("div", True) else t * (1 / 6)
    if name == "silu_dec":
        return x * torch.sigmoid(x) if kw.get("left", True) else torch.sigmoid(x) * x
    if name == "leaky":  # lowered since blob version 17 (before: a portable op in the run)
        return F.leaky_relu(x, 0.1)
    if name == "elu":
        return F.elu(x)
    raise ValueError(name)


def _bin(fn: str, x: Any, y: Any) -> torch.Tensor:
    if fn == "add":
        return x + y
    if fn == "sub":
        return x - y
    if fn == "mul":
        return x * y
    if fn == "div":
        return x / y
    raise ValueError(fn)


def _unary(fn: str, x: torch.Tensor) -> torch.Tensor:
    if fn == "exp":
        return torch.exp(x)
    if fn == "sqrt":
        return torch.sqrt(x.abs())
    if fn == "rsqrt":
        return torch.rsqrt(x.abs() + 0.25)
    if fn == "neg":
        return -x
    if fn == "abs":
        return x.abs()
    raise ValueError(fn)


def apply(st: Step, v: list[torch.Tensor], mods: nn.ModuleList, xs: Sequence[torch.Tensor]) -> Any:
    """Step ``st`` on the values ``v`` (``xs``: the graph's inputs)."""
    op, kw = st.op, st.kw
    a = [v[i] for i in st.ins]
    m = [mods[i] for i in st.mods]
    if op == "input":
        return xs[kw["k"]]
    if op in ("module", "conv", "convT", "bn", "linear", "ln"):
        return m[0](a[0])
    if op == "act":
        return _act(kw["name"], a[0], kw)
    if op == "unary":
        return _unary(kw["fn"], a[0])
    if op == "bin":
        x = a[0]
        other = kw["other"]
        y: Any = a[1] if other == "val" else m[0].t if other == "const" else kw["s"]
        if kw.get("safe"):  # a tensor denominator away from zero
            y = y.abs() + 0.5
        if kw.get("swap"):
            x, y = y, x
        return _bin(kw["fn"], x, y)
    if op == "maxpool":
        return F.max_pool2d(a[0], kw["k"], kw["s"], kw["p"], kw["d"], ceil_mode=kw["ceil"])
    if op == "avgpool":
        return F.avg_pool2d(a[0], kw["k"], kw["s"], kw["p"], kw["ceil"], kw["cip"], kw["div"])
    if op == "adapool":
        return F.adaptive_avg_pool2d(a[0], kw["o"])
    if op == "mean":
        return a[0].mean(kw["dims"], keepdim=kw["keep"])
    if op == "softmax":
        x = a[0]
        if "scale" in kw:
            x = x * kw["scale"]
        if "mask" in kw:
            mk = a[1] if kw["mask"] == "val" else m[0].t
            x = x + mk if kw["mask_right"] else mk + x
        f = F.log_softmax if kw.get("log") else F.softmax
        return f(x, dim=kw["dim"])
    if op == "permute":
        y = a[0].permute(*kw["dims"])
        return y.contiguous() if kw.get("contig") else y
    if op == "transpose":
        return a[0].transpose(kw["a"], kw["b"])
    if op == "reshape":
        return a[0].reshape(kw["shape"])
    if op == "flatten":
        return a[0].flatten(kw["s"], kw["e"])
    if op == "unsqueeze":
        return a[0].unsqueeze(kw["d"])
    if op == "squeeze":
        return a[0].squeeze(kw["d"])
    if op == "expand":
        return a[0].expand(*kw["shape"])
    if op == "clone":
        return a[0].clone()
    if op == "cat":
        return torch.cat(a + [c.t for c in m], dim=kw["dim"])
    if op == "slice":
        idx = (slice(None),) * kw["dim"] + (slice(kw["start"], kw["end"], kw["step"]),)
        return a[0][idx]
    if op == "pieces":  # one piece of a split / chunk / unbind, a select or a flip
        x, d, kind = a[0], kw["dim"], kw["kind"]
        if kind == "flip":
            return x.flip(kw["dims"])
        if kind == "select":
            return x.select(d, kw["i"])
        parts = (
            torch.split(x, kw["sizes"], dim=d)
            if kind == "split"
            else x.chunk(kw["n"], dim=d)
            if kind == "chunk"
            else x.unbind(d)
        )
        return parts[kw["i"] % len(parts)]
    if op == "reduce":  # a sum or a 1- / 2-norm
        if kw["fn"] == "sum":
            return a[0].sum(kw["dims"], keepdim=kw["keep"])
        return torch.linalg.vector_norm(a[0], kw["ord"], dim=kw["dims"], keepdim=kw["keep"])
    if op == "matmul":
        if kw.get("const") == "right":
            return torch.matmul(a[0], m[0].t)
        if kw.get("const") == "left":
            return torch.matmul(m[0].t, a[0])
        return torch.matmul(a[0], a[1])
    if op == "se":  # squeeze-excitation gate, then a 1x1 conv of the gated map
        x = a[0]
        s = m[1](F.relu(m[0](x.mean((2, 3), keepdim=True))))
        s = F.hardsigmoid(s) if kw["gate"] == "hardsigmoid" else torch.sigmoid(s)
        return m[2](x * s if kw["left"] else s * x)
    if op == "mb":  # inverted residual: expand, depthwise, project (+ the input)
        x = a[0]
        t = _act(kw["act"], m[1](m[0](x)), kw)
        t = _act(kw["act"], m[3](m[2](t)), kw)
        y = m[5](m[4](t))
        return y + x if kw["res"] else y
    if op == "res":  # ResNet basic block
        x = a[0]
        y = F.relu(m[1](m[0](x)))
        y = m[3](m[2](y))
        sc = m[4](x) if len(m) > 4 else x
        return F.relu(y + sc)
    if op == "attn":  # multi-head self-attention, scaled and optionally masked
        x = a[0]
        b, s, d = x.shape
        h = kw["heads"]
        q, k, vv = (m[i](x).view(b, s, h, d // h).transpose(1, 2) for i in range(3))
        sc = torch.matmul(q, k.transpose(-1, -2)) * kw["scale"]
        if kw.get("mask"):
            sc = sc + m[4].t
        p = F.softmax(sc, dim=-1)
        o = torch.matmul(p, vv).transpose(1, 2).reshape(b, s, d)
        y = m[3](o)
        return y + x if kw["res"] else y
    raise ValueError(op)
