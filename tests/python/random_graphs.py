"""Random graphs of the operators EmberCpuBackend lowers, and their check (issue 27, item 5).

:func:`make_case` turns a seed into one small random network (a :class:`Sub`) and its inputs:
a CNN (NCHW, NHWC-permuted or non-contiguous input), a sequence model ([B, S, D]) or an
elementwise graph with broadcasting, of 1-7 steps drawn from what ``lower()`` and the fusion
helpers in ``ember/backends/cpu/{lowering,fusion}.py`` handle: conv2d (groups, depthwise,
dilation,
stride, padding incl. "same" / "valid", large channel counts for the transposed and Winograd
paths), batch norm (folded or a channel affine), every fused activation and the hardswish /
hardsigmoid / silu decompositions, linear / addmm / mm / bmm / matmul, binary ops with
broadcasting, constants, 1-element constants and Python scalars (both sides), unary ops, max /
avg / adaptive pooling (ceil mode, padding, count_include_pad, divisor_override), means (the
plane means after a depthwise conv too), softmax / log_softmax (scaled and masked), layer norm,
permute / transpose / reshape / squeeze / expand / clone / cat / slice, split / chunk / unbind /
select / flip, sums and vector norms, residual adds,
squeeze-excitation gates (the 1x1 conv's input scale), inverted-residual and ResNet blocks, plus
a few operators it does not lower (some transposed convs) so that runs break and restart;
leaky ReLU and ELU, drawn as such once, are lowered since blob version 17.

The steps themselves (:func:`apply`) are in tests/python/random_graph_ops.py; the check
(many cases side by side per export, default vs portable vs eager, the failing seed named) in
tests/python/random_graph_check.py. Used by tests/python/test_cpu_random_graphs.py and
tools/random_graphs.py.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from random_graph_ops import Const, Step, Sub, apply  # noqa: F401
from torch import nn

log = logging.getLogger(__name__)

RTOL = 1e-4  # of the largest |output| of each output tensor
ATOL = 1e-6
MAX_NUMEL = 1 << 15  # elements per intermediate tensor (large-channel convs: 4x)
MAX_ABS = 1e4  # a step whose result grows past this is redrawn


# ---- generation -------------------------------------------------------------------------------
class Builder:
    """Grows a :class:`Sub` step by step, evaluating each step eagerly on the example inputs
    (a step that fails, overflows or grows too large is undone)."""

    def __init__(self, rng: random.Random, gen: torch.Generator) -> None:
        self.rng, self.gen = rng, gen
        self.sub = Sub()
        self.vals: list[torch.Tensor] = []
        self.inputs: list[torch.Tensor] = []
        self.big = False

    def randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(tuple(shape), generator=self.gen) * scale

    def mod(self, m: nn.Module) -> int:
        self.sub.mods.append(m.eval())
        return len(self.sub.mods) - 1

    def const(self, t: torch.Tensor) -> int:
        return self.mod(Const(t))

    def input(self, t: torch.Tensor) -> int:
        self.inputs.append(t)
        return self.add("input", (), k=len(self.inputs) - 1, _force=True)  # type: ignore[return-value]

    def add(
        self, op: str, ins: tuple[int, ...], mods: tuple[int, ...] = (), **kw: Any
    ) -> int | None:
        force = kw.pop("_force", False)
        st = Step(op, tuple(ins), kw, tuple(mods))
        try:
            with torch.no_grad():
                y = apply(st, self.vals, self.sub.mods, self.inputs)
        except (RuntimeError, ValueError, IndexError, TypeError):
            y = None
        limit = MAX_NUMEL * (4 if self.big else 1)
        ok = (
            isinstance(y, torch.Tensor)
            and y.dtype == torch.float32
            and (force or (0 < y.numel() <= limit and y.dim() <= 6))
            and bool(torch.isfinite(y).all())
            and (y.numel() == 0 or float(y.abs().max()) <= MAX_ABS)
        )
        if not ok:
            for i in sorted(mods, reverse=True):  # drop the step's modules
                if i == len(self.sub.mods) - 1:
                    del self.sub.mods[i]
            return None
        self.sub.steps.append(st)
        self.vals.append(y)  # type: ignore[arg-type]
        return len(self.vals) - 1

    def shape(self, i: int) -> list[int]:
        return list(self.vals[i].shape)


ACTS = [
    "relu", "relu6", "hardtanh", "clamp", "hardswish", "hardsigmoid", "sigmoid", "silu",
    "gelu", "gelu_tanh", "tanh", "hsig_dec", "hswish_dec", "silu_dec",
]  # fmt: skip


def _act_kw(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "hardtanh":
        lo = rng.choice([-1.0, -0.5, 0.0, -2.0])
        return {"lo": lo, "hi": rng.choice([lo + 0.5, 1.0, 2.0, 6.0])}
    if name == "clamp":
        lo: float | None = rng.choice([None, -1.0, 0.0, -0.25])
        hi: float | None = rng.choice([None, 0.5, 1.0, 6.0] if lo is not None else [0.5, 6.0])
        if lo is not None and hi is not None and hi < lo:
            hi = lo + 1.0
        return {"lo": lo, "hi": hi}
    if name in ("hsig_dec", "hswish_dec"):
        return {"v": rng.randrange(3), "left": rng.random() < 0.5, "div": rng.random() < 0.7}
    if name == "silu_dec":
        return {"left": rng.random() < 0.5}
    return {}


def g_act(b: Builder, cur: int) -> int | None:
    r = b.rng
    name = r.choice(ACTS) if r.random() < 0.93 else r.choice(["leaky", "elu"])
    return b.add("act", (cur,), name=name, **_act_kw(r, name))


def g_unary(b: Builder, cur: int) -> int | None:
    fn = b.rng.choice(["exp", "sqrt", "rsqrt", "neg", "abs"])
    if fn == "exp" and float(b.vals[cur].abs().max()) > 6:
        return None
    return b.add("unary", (cur,), fn=fn)


def _bcast_shape(r: random.Random, shape: list[int]) -> list[int]:
    """A shape that broadcasts with ``shape``: some dims 1, some leading dims dropped, and
    sometimes a size-1 dim of ``shape`` widened (the result is then larger)."""
    s = [1 if r.random() < 0.4 else d for d in shape]
    s = [r.randint(2, 4) if d == 1 and r.random() < 0.15 else d for d in s]
    drop = r.randint(0, len(s)) if r.random() < 0.4 else 0
    return s[drop:] or [1]


def g_bin(b: Builder, cur: int) -> int | None:
    r = b.rng
    fn = r.choice(["add", "sub", "mul", "div"])
    shape = b.shape(cur)
    kind = r.choice(["scalar", "scalar", "const", "const", "const1", "val", "val", "input"])
    swap = r.random() < 0.3
    if kind == "scalar":
        s = r.choice([2.0, -1.5, 0.5, 3.0, 1 / 6, 6.0, -0.25, 1.0])
        if swap and fn == "div":
            return None  # s / x: a reciprocal; x may be near 0
        return b.add("bin", (cur,), fn=fn, other="scalar", s=s, swap=swap)
    if kind in ("const", "const1"):
        cs = [1] * r.randint(0, 2) if kind == "const1" else _bcast_shape(r, shape)
        t = b.randn(*cs)
        if fn == "div":  # constants away from zero
            t = torch.sign(t + 1e-3) * (t.abs() + 0.5)
        return b.add("bin", (cur,), (b.const(t),), fn=fn, other="const", swap=swap)
    if kind == "input":
        o = b.input(b.randn(*_bcast_shape(r, shape)))
    else:
        cands = [i for i in range(len(b.vals)) if i != cur]
        if not cands:
            return None
        o = r.choice(cands)
    return b.add("bin", (cur, o), fn=fn, other="val", swap=swap, safe=fn == "div")


def _conv_mod(b: Builder, cin: int, big: bool = False) -> nn.Module | None:
    r = b.rng
    k = (
        r.choice([1, 1, 3, 3, 3, 2, 5, 7])
        if r.random() < 0.85
        else (r.choice([1, 3]), r.choice([3, 5, 1]))
    )
    kk = k if isinstance(k, int) else max(k)
    kind = r.random()
    if kind < 0.25:  # depthwise (channel multiplier 1 or 2)
        groups, cout = cin, cin * r.choice([1, 1, 2])
    elif kind < 0.35 and cin > 1:
        divs = [g for g in range(2, cin + 1) if cin % g == 0]
        groups = r.choice(divs)
        cout = groups * r.randint(1, 3)
    else:
        groups = 1
        cout = r.choice([1, 2, 3, 4, 6, 8, 12, 16, 17, 24, 32])
    if big:
        cout = r.choice([64, 96, 128, 256, 272]) if groups == 1 else cout
    stride = r.choice([1, 1, 1, 2, 3]) if r.random() < 0.9 else (1, 2)
    dil = 1 if r.random() < 0.8 else r.choice([2, 3, (1, 2)])
    pad: Any = r.choice([0, kk // 2, kk // 2, r.randint(0, kk)])
    if r.random() < 0.1:
        pad = "valid"
    elif r.random() < 0.1 and stride == 1:
        pad = "same"
    elif r.random() < 0.1:
        pad = (r.randint(0, kk), r.randint(0, kk))
    return nn.Conv2d(cin, cout, k, stride, pad, dil, groups, bias=r.random() < 0.7)


def _bn(b: Builder, c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c, eps=b.rng.choice([1e-5, 1e-3]), affine=b.rng.random() < 0.9)
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(c, generator=b.gen) * 0.4 - 0.2)
        bn.running_var.copy_(torch.rand(c, generator=b.gen) + 0.5)
        if bn.affine:
            bn.weight.copy_(torch.rand(c, generator=b.gen) + 0.5)
            bn.bias.copy_(torch.rand(c, generator=b.gen) * 0.4 - 0.2)
    return bn


def g_conv(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    if len(s) != 4:
        return None
    m = _conv_mod(b, s[1], big=b.big)
    if m is None:
        return None
    y = b.add("conv", (cur,), (b.mod(m),))
    if y is not None and b.rng.random() < 0.3:  # conv -> bn (folded) -> activation
        y = b.add("bn", (y,), (b.mod(_bn(b, b.shape(y)[1])),)) or y
        if b.rng.random() < 0.6:
            y = g_act(b, y) or y
    return y


def g_bn(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    if len(s) != 4:
        return None
    return b.add("bn", (cur,), (b.mod(_bn(b, s[1])),))  # not after a conv: a channel affine


def g_convT(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if len(s) != 4:
        return None
    k, st = r.choice([2, 3, 4]), r.choice([1, 2, 2])
    pad = r.randint(0, k - 1)
    opad = r.randint(0, st - 1)
    if (s[2] - 1) * st - 2 * pad + k + opad < 1 or (s[3] - 1) * st - 2 * pad + k + opad < 1:
        pad = 0
    g = r.choice([1, 1, 2]) if s[1] % 2 == 0 else 1
    m = nn.ConvTranspose2d(s[1], g * r.choice([1, 2, 4]), k, st, pad, opad, groups=g)
    return b.add("convT", (cur,), (b.mod(m),))


def g_pool(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if len(s) != 4:
        return None
    kind = r.choice(["max", "max", "avg", "avg", "ada"])
    k = (
        r.choice([1, 2, 2, 3, 3, 4, 5])
        if r.random() < 0.85
        else [r.choice([1, 2, 3]), r.choice([2, 3])]
    )
    kmin = k if isinstance(k, int) else min(k)
    st = r.choice([None, 1, 2, 2, 3]) if r.random() < 0.9 else [1, 2]
    p = r.randint(0, kmin // 2)
    ceil = r.random() < 0.35
    if kind == "max":
        d = 1 if r.random() < 0.8 else 2
        return b.add("maxpool", (cur,), k=k, s=st, p=p, d=d, ceil=ceil)
    if kind == "avg":
        div = None if r.random() < 0.8 else r.randint(1, 9)
        return b.add("avgpool", (cur,), k=k, s=st, p=p, ceil=ceil, cip=r.random() < 0.5, div=div)
    h, w = s[2], s[3]
    o = r.choice(
        [(1, 1), (1, 1), (h // max(1, r.choice([1, 2, 3])), w), (max(1, h - 1), max(1, w // 2))]
    )
    return b.add("adapool", (cur,), o=tuple(max(1, x) for x in o))


def g_mean(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    nd = len(s)
    if nd == 0:
        return None
    if nd == 4 and r.random() < 0.5:
        dims: list[int] = [2, 3] if r.random() < 0.7 else [-1, -2]
    else:
        i = r.randrange(nd)
        j = r.randrange(i, nd) if r.random() < 0.8 else r.randrange(nd)
        dims = sorted({i, j})
        if r.random() < 0.2:
            dims = [d - nd for d in dims]
    return b.add("mean", (cur,), dims=dims, keep=r.random() < 0.5)


def g_dw_mean(b: Builder, cur: int) -> int | None:
    """A depthwise conv and the mean of its planes (fused: the conv's second output)."""
    s = b.shape(cur)
    if len(s) != 4:
        return None
    c = s[1]
    m = nn.Conv2d(c, c, b.rng.choice([3, 5]), b.rng.choice([1, 2]), padding=1, groups=c)
    y = b.add("conv", (cur,), (b.mod(m),))
    if y is None:
        return None
    if b.rng.random() < 0.5:
        y = b.add("act", (y,), name=b.rng.choice(["relu", "hardswish", "relu6"])) or y
    mn = b.add("mean", (y,), dims=[2, 3], keep=b.rng.random() < 0.7)
    if mn is not None and b.rng.random() < 0.7:  # both read: the map and its means
        g = b.add("act", (mn,), name="sigmoid")
        if g is not None:
            return b.add("bin", (y, g), fn="mul", other="val")
    return mn


def g_se(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    if len(s) != 4:
        return None
    c, r = s[1], b.rng
    mid = max(1, c // r.choice([2, 4]))
    ms = (
        b.mod(nn.Conv2d(c, mid, 1)),
        b.mod(nn.Conv2d(mid, c, 1)),
        b.mod(nn.Conv2d(c, r.choice([4, 8, 16, c]), 1, bias=r.random() < 0.5)),
    )
    return b.add("se", (cur,), ms, gate=r.choice(["hardsigmoid", "sigmoid"]), left=r.random() < 0.5)


def g_mb(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    if len(s) != 4:
        return None
    c, r = s[1], b.rng
    e = c * r.choice([2, 3, 4, 6])
    k = r.choice([3, 5])
    st = r.choice([1, 1, 2])
    res = st == 1 and r.random() < 0.7
    ms = (
        b.mod(nn.Conv2d(c, e, 1, bias=False)),
        b.mod(_bn(b, e)),
        b.mod(nn.Conv2d(e, e, k, st, k // 2, groups=e, bias=False)),
        b.mod(_bn(b, e)),
        b.mod(nn.Conv2d(e, c if res else r.choice([c, 8, 16]), 1, bias=False)),
        b.mod(_bn(b, c if res else b.sub.mods[-1].out_channels)),  # type: ignore[union-attr]
    )
    return b.add("mb", (cur,), ms, act=r.choice(["relu6", "hardswish", "relu"]), res=res)


def g_res(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    if len(s) != 4:
        return None
    c, r = s[1], b.rng
    co = c if r.random() < 0.6 else r.choice([8, 16, 2 * c])
    st = 1 if co == c and r.random() < 0.7 else r.choice([1, 2])
    ms = [
        b.mod(nn.Conv2d(c, co, 3, st, 1, bias=False)),
        b.mod(_bn(b, co)),
        b.mod(nn.Conv2d(co, co, 3, 1, 1, bias=False)),
        b.mod(_bn(b, co)),
    ]
    if co != c or st != 1:
        ms.append(b.mod(nn.Conv2d(c, co, 1, st, bias=False)))
    return b.add("res", (cur,), tuple(ms))


def g_linear(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if not s:
        return None
    n = r.choice([1, 3, 7, 8, 16, 17, 24, 33, 64]) if not b.big else r.choice([128, 300, 512])
    m = nn.Linear(s[-1], n, bias=r.random() < 0.75)
    y = b.add("linear", (cur,), (b.mod(m),))
    if y is not None and r.random() < 0.35:
        y = g_act(b, y) or y
    return y


def g_res_linear(b: Builder, cur: int) -> int | None:
    """y = x + linear(x) (or (conv(x) + x)): the gemm / conv takes the add as its residual."""
    s = b.shape(cur)
    if not s:
        return None
    if len(s) == 4 and b.rng.random() < 0.5:
        m: nn.Module = nn.Conv2d(s[1], s[1], b.rng.choice([1, 3]), padding="same")
        op = "conv"
    else:
        m, op = nn.Linear(s[-1], s[-1], bias=b.rng.random() < 0.8), "linear"
    y = b.add(op, (cur,), (b.mod(m),))
    if y is None:
        return None
    if b.rng.random() < 0.3:
        y = b.add("clone", (y,)) or y
    o = b.add("bin", (y, cur) if b.rng.random() < 0.5 else (cur, y), fn="add", other="val")
    if o is not None and b.rng.random() < 0.5:
        o = g_act(b, o) or o
    return o


def g_matmul(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if len(s) < 2:
        return None
    kind = r.choice(["self", "const", "val", "constleft"])
    if kind == "self":  # x @ x^T (a bmm of two activations)
        t = b.add("transpose", (cur,), a=-1, b=-2)
        return None if t is None else b.add("matmul", (cur, t))
    if kind == "const":
        return b.add(
            "matmul", (cur,), (b.const(b.randn(s[-1], r.randint(1, 20), scale=0.3)),), const="right"
        )
    if kind == "constleft":
        return b.add(
            "matmul", (cur,), (b.const(b.randn(r.randint(1, 9), s[-2], scale=0.3)),), const="left"
        )
    o = b.input(b.randn(*s[:-2], s[-1], r.randint(1, 19)))
    return b.add("matmul", (cur, o))


def g_softmax(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if not s:
        return None
    kw: dict[str, Any] = {"dim": -1 if r.random() < 0.9 else r.randrange(len(s))}
    kw["log"] = r.random() < 0.2
    if r.random() < 0.5:
        kw["scale"] = r.choice([0.125, 0.5, 1 / math.sqrt(8), 2.0])
    ins: tuple[int, ...] = (cur,)
    mods: tuple[int, ...] = ()
    if r.random() < 0.6 and len(s) >= 1:
        pat = r.choice(["causal", "row", "full", "odd"])
        n = s[-1]
        if pat == "causal" and len(s) >= 2 and s[-2] == n:
            mk = torch.triu(torch.full((n, n), -1e4), 1).reshape([1] * (len(s) - 2) + [n, n])
        elif pat == "row":
            mk = torch.where(torch.rand(n, generator=b.gen) < 0.3, -1e4, 0.0).reshape(
                [1] * (len(s) - 1) + [n]
            )
        elif pat == "odd":
            mk = b.randn(*_bcast_shape(r, s))
        else:
            mk = b.randn(*s[-min(len(s), 2) :])
        kw["mask_right"] = r.random() < 0.5
        if r.random() < 0.3:
            ins = (cur, b.input(mk))
            kw["mask"] = "val"
        else:
            mods = (b.const(mk),)
            kw["mask"] = "const"
    return b.add("softmax", ins, mods, **kw)


def g_ln(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if not s:
        return None
    if len(s) == 4 and r.random() < 0.4:  # channels-last layer norm: permute, norm, permute back
        t = b.add("permute", (cur,), dims=[0, 2, 3, 1])
        if t is None:
            return None
        y = b.add("ln", (t,), (b.mod(nn.LayerNorm(s[1], eps=1e-6)),))
        return None if y is None else b.add("permute", (y,), dims=[0, 3, 1, 2])
    nd = 2 if len(s) >= 2 and r.random() < 0.25 else 1
    m = nn.LayerNorm(
        s[-nd:], eps=r.choice([1e-5, 1e-6, 1e-12]), elementwise_affine=r.random() < 0.8
    )
    if m.elementwise_affine:
        with torch.no_grad():
            m.weight.copy_(torch.rand(m.weight.shape, generator=b.gen) + 0.5)
            if m.bias is not None:
                m.bias.copy_(torch.randn(m.bias.shape, generator=b.gen) * 0.1)
    return b.add("ln", (cur,), (b.mod(m),))


def g_attn(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if len(s) != 3:
        return None
    d = s[2]
    heads = r.choice([h for h in (1, 2, 3, 4) if d % h == 0])
    ms = [b.mod(nn.Linear(d, d, bias=r.random() < 0.8)) for _ in range(4)]
    kw: dict[str, Any] = {
        "heads": heads,
        "scale": 1 / math.sqrt(d // heads),
        "res": r.random() < 0.6,
    }
    if r.random() < 0.6:
        n = s[1]
        mk = (
            torch.triu(torch.full((n, n), -1e4), 1).reshape(1, 1, n, n)
            if r.random() < 0.5
            else torch.where(torch.rand(1, 1, 1, n, generator=b.gen) < 0.3, -1e4, 0.0)
        )
        ms.append(b.const(mk))
        kw["mask"] = True
    return b.add("attn", (cur,), tuple(ms), **kw)


def g_permute(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if len(s) < 2:
        return None
    if r.random() < 0.4:
        i, j = r.sample(range(len(s)), 2)
        return b.add("transpose", (cur,), a=i, b=j)
    dims = list(range(len(s)))
    r.shuffle(dims)
    return b.add("permute", (cur,), dims=dims, contig=r.random() < 0.5)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def g_reshape(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    kind = r.choice(["merge", "split", "flatten", "unsqueeze", "squeeze", "expand", "clone"])
    if kind == "merge" and len(s) >= 2:
        i = r.randrange(len(s) - 1)
        return b.add("reshape", (cur,), shape=s[:i] + [s[i] * s[i + 1]] + s[i + 2 :])
    if kind == "split" and s and len(s) < 6:
        i = r.randrange(len(s))
        d = r.choice(_divisors(s[i]))
        return b.add("reshape", (cur,), shape=s[:i] + [d, s[i] // d] + s[i + 1 :])
    if kind == "flatten" and len(s) >= 2:
        i = r.randrange(len(s) - 1)
        return b.add("flatten", (cur,), s=i, e=r.randrange(i + 1, len(s)))
    if kind == "unsqueeze" and len(s) < 6:
        return b.add("unsqueeze", (cur,), d=r.randint(0, len(s)))
    if kind == "squeeze" and 1 in s:
        return b.add("squeeze", (cur,), d=r.choice([i for i, x in enumerate(s) if x == 1]))
    if kind == "expand" and 1 in s:
        i = r.choice([i for i, x in enumerate(s) if x == 1])
        return b.add("expand", (cur,), shape=s[:i] + [r.randint(2, 5)] + s[i + 1 :])
    if kind == "clone":
        return b.add("clone", (cur,))
    return None


def g_cat(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if not s:
        return None
    dim = r.randrange(len(s))
    others = [i for i in range(len(b.vals)) if i != cur and len(b.vals[i].shape) == len(s) and all(
        x == y for j, (x, y) in enumerate(zip(b.vals[i].shape, s, strict=True)) if j != dim
    )]  # fmt: skip
    ins = [cur] + r.sample(others, min(len(others), r.randint(0, 2)))
    if len(ins) > 1 and r.random() < 0.3:
        ins.append(cur)  # the same tensor twice
    n_const = r.randint(0 if len(ins) > 1 else 1, 5 - len(ins))  # 5: cats of up to 4
    mods = []
    for _ in range(n_const):
        cs = list(s)
        cs[dim] = r.randint(1, 4)
        mods.append(b.const(b.randn(*cs)))
    r.shuffle(ins)
    return b.add("cat", tuple(ins), tuple(mods), dim=dim if r.random() < 0.7 else dim - len(s))


def g_slice(b: Builder, cur: int) -> int | None:
    s = b.shape(cur)
    r = b.rng
    if not s:
        return None
    dim = r.randrange(len(s))
    n = s[dim]
    start = r.choice([None, 0, 1, -1, r.randint(0, n), -r.randint(1, n)])
    end = r.choice([None, n, n - 1, r.randint(0, n + 2), -1])
    return b.add("slice", (cur,), dim=dim, start=start, end=end, step=r.choice([1, 1, 2, 3]))


def g_pieces(b: Builder, cur: int) -> int | None:
    """One piece of a split / chunk / unbind (the others computed, unread), a select or a
    flip."""
    s = b.shape(cur)
    r = b.rng
    if not s:
        return None
    dim = r.randrange(len(s))
    n = s[dim]
    kind = r.choice(["split", "chunk", "unbind", "select", "flip"])
    d = dim if r.random() < 0.7 else dim - len(s)
    if kind == "flip":
        dims = sorted(r.sample(range(len(s)), r.randint(1, min(2, len(s)))))
        return b.add("pieces", (cur,), kind=kind, dim=d, dims=dims)
    if kind == "split":
        cuts = sorted(r.sample(range(1, n), min(n - 1, r.randint(1, 3)))) if n > 1 else []
        sizes = [e - s0 for s0, e in zip([0, *cuts], [*cuts, n], strict=True)]
        return b.add("pieces", (cur,), kind=kind, dim=d, sizes=sizes, i=r.randrange(len(sizes)))
    if kind == "chunk":
        return b.add("pieces", (cur,), kind=kind, dim=d, n=r.randint(1, 4), i=r.randrange(4))
    if kind == "unbind" and len(s) < 2:
        return None
    return b.add("pieces", (cur,), kind=kind, dim=d, i=r.randrange(-n, n))


def g_reduce(b: Builder, cur: int) -> int | None:
    """A sum or a vector norm of order 1 or 2 over adjacent dims (or all of them)."""
    s = b.shape(cur)
    r = b.rng
    if not s:
        return None
    i = r.randrange(len(s))
    dims: Any = list(range(i, r.randrange(i, len(s)) + 1)) if r.random() < 0.85 else None
    fn = r.choice(["sum", "sum", "norm"])
    if fn == "sum" and dims is None:
        dims = list(range(len(s)))
    return b.add("reduce", (cur,), fn=fn, ord=r.choice([1, 2, 2]), dims=dims, keep=r.random() < 0.5)


CNN_OPS: list[tuple[Callable[[Builder, int], int | None], float]] = [
    (g_conv, 5), (g_act, 3), (g_bn, 0.4), (g_pool, 2), (g_bin, 2), (g_res_linear, 1),
    (g_se, 0.3), (g_mb, 0.25), (g_res, 0.25), (g_dw_mean, 0.4), (g_unary, 0.6), (g_mean, 0.6),
    (g_cat, 0.5), (g_slice, 0.5), (g_permute, 0.4), (g_ln, 0.3), (g_convT, 0.15),
    (g_softmax, 0.2), (g_reshape, 0.2), (g_pieces, 0.3), (g_reduce, 0.2),
]  # fmt: skip
SEQ_OPS: list[tuple[Callable[[Builder, int], int | None], float]] = [
    (g_linear, 4), (g_act, 3), (g_ln, 1.5), (g_attn, 0.4), (g_bin, 2), (g_res_linear, 1.5),
    (g_softmax, 1.5), (g_matmul, 1.2), (g_permute, 1), (g_reshape, 1), (g_mean, 0.6),
    (g_unary, 0.6), (g_cat, 0.5), (g_slice, 0.5), (g_pieces, 0.4), (g_reduce, 0.3),
]  # fmt: skip
ELT_OPS: list[tuple[Callable[[Builder, int], int | None], float]] = [
    (g_bin, 4), (g_act, 3), (g_unary, 1.5), (g_permute, 1), (g_reshape, 1.5), (g_softmax, 1),
    (g_mean, 1), (g_cat, 0.8), (g_slice, 0.8), (g_ln, 0.5), (g_linear, 0.5), (g_pieces, 0.5),
    (g_reduce, 0.3),
]  # fmt: skip


def _make_input(b: Builder, shape: list[int], layout: str) -> torch.Tensor:
    """A tensor of ``shape``: contiguous, a permuted view or a strided slice."""
    if layout == "perm" and len(shape) >= 2:
        return b.randn(*shape[::-1]).permute(*range(len(shape) - 1, -1, -1))
    if layout == "strided":
        t = b.randn(*shape[:-1], 2 * shape[-1])
        return t[..., ::2]
    return b.randn(*shape)


@dataclass
class Case:
    seed: int
    sub: Sub
    inputs: tuple[torch.Tensor, ...]
    family: str

    def describe(self) -> str:
        shapes = [tuple(x.shape) for x in self.inputs]
        return f"seed {self.seed} ({self.family}, inputs {shapes}): {self.sub.describe()}"


def make_case(seed: int) -> Case:
    """The random graph of ``seed`` (deterministic: the same seed gives the same graph, inputs
    and weights)."""
    r = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # nn.Module initialisation
    b = Builder(r, gen)
    fam = r.choices(["cnn", "seq", "elt"], [0.5, 0.3, 0.2])[0]
    b.big = r.random() < 0.06
    layout = r.choices(["contig", "perm", "strided"], [0.7, 0.15, 0.15])[0]
    if fam == "cnn":
        n = r.choice([1, 1, 1, 2])
        if b.big:
            c, h = r.choice([32, 64, 128, 256, 288]), r.choice([4, 5, 7, 8, 14])
            w = h
        else:
            c = r.choice([1, 2, 3, 3, 4, 5, 8, 12, 16, 16, 24, 32])
            h, w = r.randint(1, 24), r.randint(1, 24)
            if r.random() < 0.1:
                h, w = r.choice([(14, 14), (28, 28), (30, 17)])
                c = r.choice([16, 17, 24])
        if r.random() < 0.15:  # NHWC input, permuted in the graph
            cur = b.input(_make_input(b, [n, h, w, c], layout))
            cur = b.add("permute", (cur,), dims=[0, 3, 1, 2]) or cur
        else:
            cur = b.input(_make_input(b, [n, c, h, w], layout))
        ops = CNN_OPS
    elif fam == "seq":
        d = (
            r.choice([1, 3, 4, 8, 12, 16, 24, 31, 32, 48])
            if not b.big
            else r.choice([256, 384, 520])
        )
        shape = r.choice([[r.randint(1, 3), r.randint(1, 17), d], [r.randint(1, 17), d]])
        cur = b.input(_make_input(b, shape, layout))
        ops = SEQ_OPS
    else:
        shape = [r.choice([1, 1, 2, 3, 5, 7, 8, 13]) for _ in range(r.randint(1, 5))]
        cur = b.input(_make_input(b, shape, layout))
        ops = ELT_OPS
    fns, weights = zip(*ops, strict=True)
    for _ in range(r.randint(1, 5)):
        for _attempt in range(6):
            src = cur if r.random() < 0.8 else r.randrange(len(b.vals))
            y = r.choices(fns, weights)[0](b, src)
            if y is not None:
                cur = y
                break
    inputs_idx = {i for i, st in enumerate(b.sub.steps) if st.op == "input"}
    if cur in inputs_idx:
        cur = b.add("act", (cur,), name="relu") or cur
    outs = [cur]
    extra = [i for i in range(len(b.vals)) if i not in inputs_idx and i != cur]
    if extra and r.random() < 0.3:  # an intermediate read outside too
        outs.append(r.choice(extra))
    b.sub.outs = outs
    return Case(seed, b.sub.eval(), tuple(b.inputs), fam)
