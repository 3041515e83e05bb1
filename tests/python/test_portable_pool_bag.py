"""Portable kernels aten::adaptive_max_pool2d.out, aten::max_pool3d_with_indices.out and
aten::_embedding_bag.out (kernels/portable/nn_pool.c, nn_embed_bag.c) against eager PyTorch.

Each case is a small module, exported with ``ember.export(m, inputs)`` (the default backend,
whose partition leaves these operators to the portable kernels), with ``backend=None`` (the
portable path, which may also decompose what stock ExecuTorch lacks) and with ``backend=None,
stock_ops="off"`` (the portable path kept on Ember's kernels), then run on the C runtime. Every
output is compared with eager: float values within 1e-6 (NaN where eager has NaN), indices and
integer outputs exactly, shapes and dtypes equal. The pools return values and indices; the
embedding bag cases call ``aten._embedding_bag`` (all four outputs: output, offset2bag,
bag_size, max_indices) or ``nn.EmbeddingBag`` / ``F.embedding_bag`` (the output only). Direct
kernel calls (``ember._lib.call_kernel``) cover dtypes and the inputs the kernels must refuse.

Run: .venv/bin/python -m pytest -q tests/python/test_portable_pool_bag.py
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember
from ember._lib import Out, call_kernel
from ember.runtime import RuntimeProgram

aten = torch.ops.aten
NAN = float("nan")

# name -> export keyword arguments
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "portable": {"backend": None},
    "portable-ember": {"backend": None, "stock_ops": "off"},
}


class Fn(nn.Module):
    """forward(*xs) = fn(self, *xs); ``params`` become the module's parameters (p0, p1, ...)."""

    def __init__(self, fn: Callable[..., Any], *params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        for i, p in enumerate(params):
            self.register_parameter(f"p{i}", nn.Parameter(p, requires_grad=False))

    def forward(self, *xs: torch.Tensor) -> Any:
        return self.fn(self, *xs)


def _flat(x: Any) -> list[torch.Tensor]:
    return [t for v in x for t in _flat(v)] if isinstance(x, (tuple, list)) else [x]


def assert_same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6, equal_nan=True, msg=what)
    else:
        assert torch.equal(got, want), f"{what}:\n got {got}\nwant {want}"


def check(
    m: nn.Module, xs: tuple[torch.Tensor, ...], variant: str, only: tuple[int, ...] | None = None
) -> None:
    """Exports ``m`` as ``variant``, runs it on the C runtime and compares every output (or
    those numbered in ``only``)."""
    m.eval()
    with torch.no_grad():
        want = _flat(m(*xs))
    prog = ember.export(m, xs, **VARIANTS[variant])
    got = RuntimeProgram(prog.buffer, threads=1).run("forward", list(xs))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if only is None or i in only:
            assert_same(g, w, f"output {i}")


def with_nan(x: torch.Tensor, *flat: int) -> torch.Tensor:
    x = x.clone()
    for i in flat:
        x.view(-1)[i] = NAN
    return x


# ---------------------------------------------------------------------------------------------
# adaptive_max_pool2d
# ---------------------------------------------------------------------------------------------
def _amp(size: Any) -> Fn:
    return Fn(lambda m, x: F.adaptive_max_pool2d(x, size, return_indices=True))


torch.manual_seed(0)
AMP_CASES: dict[str, tuple[Any, torch.Tensor]] = {
    "divides": ((3, 2), torch.randn(2, 3, 6, 4)),
    "not-divides": ((3, 4), torch.randn(1, 2, 5, 7)),
    "not-divides-2": ((4, 3), torch.randn(2, 2, 9, 8)),
    "1x1": (1, torch.randn(2, 3, 5, 5)),
    "larger-than-input": ((5, 4), torch.randn(1, 2, 3, 2)),
    "3d-input": ((4, 3), torch.randn(3, 7, 6)),
    "none-in-size": ((None, 3), torch.randn(1, 2, 5, 7)),
    "nan": ((2, 3), with_nan(torch.randn(1, 2, 5, 7), 0, 3, 4, 40, 41)),
    "nan-1x1": (1, with_nan(torch.randn(1, 2, 4, 4), 2, 9, 20)),
    "channels-last": ((3, 2), torch.randn(1, 4, 7, 5).to(memory_format=torch.channels_last)),
    "ties": ((2, 2), torch.tensor([[[1.0, 1.0, 0.0], [1.0, -1.0, 1.0], [0.0, 1.0, 1.0]]])),
    "neg-inf": ((2, 2), torch.full((1, 1, 3, 3), float("-inf"))),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(AMP_CASES))
def test_adaptive_max_pool2d(name: str, variant: str) -> None:
    size, x = AMP_CASES[name]
    if name == "nan-1x1" and variant == "portable":
        pytest.xfail(
            "backend=None decomposes a 1x1 adaptive max pool for stock ExecuTorch into "
            "amax + argmax: argmax returns the first NaN's index, ATen's kernel the last"
        )
    check(_amp(size), (x,), variant)


def test_adaptive_max_pool2d_module() -> None:
    m = Fn(lambda m, x: m.pool(x) * 2)
    m.pool = nn.AdaptiveMaxPool2d((2, 5))
    check(m, (torch.randn(2, 3, 7, 9),), "default")


# ---------------------------------------------------------------------------------------------
# max_pool3d_with_indices
# ---------------------------------------------------------------------------------------------
def _mp3(k: Any, s: Any = None, p: Any = 0, d: Any = 1, ceil: bool = False) -> Fn:
    return Fn(
        lambda m, x: F.max_pool3d(
            x, k, stride=s, padding=p, dilation=d, ceil_mode=ceil, return_indices=True
        )
    )


torch.manual_seed(1)
MP3_CASES: dict[str, tuple[Fn, torch.Tensor]] = {
    "k2": (_mp3(2), torch.randn(1, 2, 4, 4, 4)),
    "k3-s2-p1": (_mp3(3, 2, 1), torch.randn(2, 3, 7, 6, 5)),
    "mixed": (_mp3((2, 3, 2), (1, 2, 3), (1, 1, 0), (2, 1, 1)), torch.randn(1, 2, 6, 7, 8)),
    "ceil": (_mp3(3, 2, 0, 1, True), torch.randn(1, 2, 6, 8, 7)),
    "ceil-pad": (_mp3((2, 3, 3), (2, 2, 3), (1, 1, 1), 1, True), torch.randn(1, 1, 5, 6, 8)),
    "ceil-dilated": (_mp3(2, 2, 1, 2, True), torch.randn(1, 2, 7, 6, 9)),
    "stride1": (_mp3((1, 2, 3), 1), torch.randn(1, 2, 3, 4, 5)),
    "4d-input": (_mp3(2, (1, 2, 2)), torch.randn(3, 4, 5, 6)),
    "4d-input-pad": (_mp3(3, 2, 1, 1, True), torch.randn(2, 5, 5, 5)),
    "nan": (_mp3(2, 2), with_nan(torch.randn(1, 2, 4, 4, 4), 0, 1, 21, 63, 70)),
    "int32": (_mp3(2, 1, 1), torch.randint(-9, 9, (1, 2, 3, 4, 3), dtype=torch.int32)),
    # every tap of the one window lies in the padding: -inf at the first tap's index
    "empty-window": (_mp3(2, 1, 1, 4), torch.randn(1, 1, 3, 3, 3)),
    "channels-last": (
        _mp3(2, (1, 2, 2), 1),
        torch.randn(1, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d),
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(MP3_CASES))
def test_max_pool3d(name: str, variant: str) -> None:
    m, x = MP3_CASES[name]
    if name in ("nan", "empty-window") and variant == "portable":
        pytest.xfail(
            "backend=None decomposes max_pool3d for stock ExecuTorch with PyTorch's table, whose "
            "indices for NaN and all -inf windows are not ATen's kernel's (the values are)"
        )
    check(m, (x,), variant)


def test_max_pool3d_module() -> None:
    m = Fn(lambda m, x: m.pool(x) + 1)
    m.pool = nn.MaxPool3d((2, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1))
    check(m, (torch.randn(2, 3, 5, 6, 7),), "default")


# ---------------------------------------------------------------------------------------------
# _embedding_bag
# ---------------------------------------------------------------------------------------------
def _bag(
    mode: int,
    psw: bool = False,
    last: bool = False,
    pad: int = -1,
    weight: torch.Tensor | None = None,
    op: Any = aten._embedding_bag.default,
) -> Fn:
    """All four outputs of aten._embedding_bag (or ``op``); inputs (indices, offsets[,
    per_sample_weights])."""
    w = torch.randn(10, 3) if weight is None else weight

    def fn(m: Fn, i: torch.Tensor, o: torch.Tensor, *s: torch.Tensor) -> Any:
        return op(m.p0, i, o, False, mode, False, s[0] if psw else None, last, pad)

    return Fn(fn, w)


torch.manual_seed(2)
IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 7])
PSW = torch.randn(10)
BAG_CASES: dict[str, tuple[Fn, tuple[torch.Tensor, ...]]] = {}
for _mode, _mname in ((0, "sum"), (1, "mean"), (2, "max")):
    for _pad in (-1, 4):
        for _last in (False, True):
            _offs = torch.tensor([0, 2, 2, 5, 10] if _last else [0, 2, 2, 5, 8])
            BAG_CASES[f"{_mname}-pad{_pad}-last{int(_last)}"] = (
                _bag(_mode, last=_last, pad=_pad),
                (IDX, _offs),
            )
    # include_last_offset with a last offset short of the end of indices (ATen's fast and slow
    # paths disagree on which indices the last bag holds; both are reproduced)
    BAG_CASES[f"{_mname}-last-short"] = (_bag(_mode, last=True), (IDX, torch.tensor([0, 2, 5, 7])))
    BAG_CASES[f"{_mname}-f64"] = (
        _bag(_mode, weight=torch.randn(7, 4, dtype=torch.float64)),
        (torch.tensor([6, 0, 0, 3, 2]), torch.tensor([0, 1, 1, 4])),
    )
    BAG_CASES[f"{_mname}-int32"] = (
        _bag(_mode, pad=3),
        (IDX.int(), torch.tensor([0, 3, 3, 3, 9], dtype=torch.int32)),
    )
    BAG_CASES[f"{_mname}-all-padding"] = (
        _bag(_mode, pad=2),
        (torch.tensor([2, 2, 1, 2]), torch.tensor([0, 2])),
    )
    BAG_CASES[f"{_mname}-nan-weight"] = (
        _bag(_mode, weight=with_nan(torch.randn(6, 3), 3, 7, 11)),
        (torch.tensor([1, 0, 2, 3, 5, 1]), torch.tensor([0, 2, 4])),
    )
    BAG_CASES[f"{_mname}-single-bag"] = (_bag(_mode), (IDX, torch.tensor([0])))
    # equal values in different rows: max keeps the first winner (its row in max_indices)
    BAG_CASES[f"{_mname}-ties"] = (
        _bag(_mode, weight=torch.randint(-1, 2, (6, 4)).float()),
        (torch.tensor([0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0]), torch.tensor([0, 6])),
    )
for _pad in (-1, 4):
    for _last in (False, True):
        _offs = torch.tensor([0, 2, 2, 5, 10] if _last else [0, 2, 2, 5, 8])
        BAG_CASES[f"sum-psw-pad{_pad}-last{int(_last)}"] = (
            _bag(0, psw=True, last=_last, pad=_pad),
            (IDX, _offs, PSW),
        )
BAG_CASES["sum-psw-f64"] = (
    _bag(0, psw=True, pad=1, weight=torch.randn(5, 2, dtype=torch.float64)),
    (torch.tensor([1, 2, 3, 1]), torch.tensor([0, 1, 3]), torch.randn(4, dtype=torch.float64)),
)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(BAG_CASES))
def test_embedding_bag_all_outputs(name: str, variant: str) -> None:
    m, xs = BAG_CASES[name]
    check(m, xs, variant)


FWD_ONLY = aten._embedding_bag_forward_only.default


@pytest.mark.parametrize("variant", ["default", "portable-ember"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize(("pad", "psw"), [(-1, False), (4, False), (-1, True), (4, True)])
def test_embedding_bag_forward_only(mode: int, pad: int, psw: bool, variant: str) -> None:
    """F.embedding_bag on a weight that does not require grad: _embedding_bag_forward_only."""
    if psw and mode != 0:
        pytest.skip("per_sample_weights: sum only")
    xs = (IDX, torch.tensor([0, 2, 2, 5, 8]), PSW)[: 3 if psw else 2]
    check(_bag(mode, psw=psw, pad=pad, op=FWD_ONLY), xs, variant)
    # include_last_offset: PyTorch's shape function and its CPU kernel disagree on the length
    # of bag_size (mean, max) and max_indices (sum); the exported program follows the former
    xs = (IDX, torch.tensor([0, 2, 2, 5, 10]), PSW)[: 3 if psw else 2]
    same = (0, 1, 2) if mode == 0 else (0, 1, 3)
    check(_bag(mode, psw=psw, last=True, pad=pad, op=FWD_ONLY), xs, variant, only=same)


def _module_bag(**kw: Any) -> Fn:
    torch.manual_seed(3)
    m = Fn(lambda m, *xs: m.bag(*xs))
    m.bag = nn.EmbeddingBag(12, 5, **kw)
    return m


MODULE_BAG_CASES: dict[str, tuple[Callable[[], Fn], tuple[torch.Tensor, ...]]] = {}
for _mname in ("sum", "mean", "max"):
    MODULE_BAG_CASES[f"{_mname}-offsets"] = (
        lambda mname=_mname: _module_bag(mode=mname),
        (torch.tensor([3, 1, 4, 1, 5, 9, 2, 6]), torch.tensor([0, 3, 3, 6])),
    )
    MODULE_BAG_CASES[f"{_mname}-2d-input"] = (
        lambda mname=_mname: _module_bag(mode=mname),
        (torch.tensor([[3, 1, 4], [1, 5, 9], [2, 6, 5], [11, 0, 0]]),),
    )
    MODULE_BAG_CASES[f"{_mname}-padding-idx"] = (
        lambda mname=_mname: _module_bag(mode=mname, padding_idx=1),
        (torch.tensor([3, 1, 4, 1, 1, 9, 2, 6]), torch.tensor([0, 3, 4, 5, 8])),
    )
    MODULE_BAG_CASES[f"{_mname}-include-last"] = (
        lambda mname=_mname: _module_bag(mode=mname, include_last_offset=True),
        (torch.tensor([3, 1, 4, 1, 5, 9, 2, 6]), torch.tensor([0, 3, 3, 6, 8])),
    )
MODULE_BAG_CASES["sum-per-sample-weights"] = (
    lambda: _module_bag(mode="sum"),
    (torch.tensor([3, 1, 4, 1, 5, 9, 2, 6]), torch.tensor([0, 3, 3, 6]), torch.randn(8)),
)
MODULE_BAG_CASES["sum-per-sample-weights-2d"] = (
    lambda: _module_bag(mode="sum", padding_idx=4),
    (torch.tensor([[3, 1, 4], [1, 5, 9]]), None, torch.randn(2, 3)),
)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(MODULE_BAG_CASES))
def test_embedding_bag_module(name: str, variant: str) -> None:
    make, xs = MODULE_BAG_CASES[name]
    m = make()
    if any(x is None for x in xs):  # F.embedding_bag(input, weight, None, per_sample_weights=)
        inner = m
        m = Fn(lambda _, i, s: inner.bag(i, per_sample_weights=s))
        xs = tuple(x for x in xs if x is not None)
    check(m, xs, variant)


def test_functional_embedding_bag_max_f64() -> None:
    w = torch.randn(8, 3, dtype=torch.float64)
    m = Fn(lambda m, i, o: F.embedding_bag(i, m.p0, o, mode="max"), w)
    check(m, (torch.tensor([7, 0, 3, 3, 5]), torch.tensor([0, 0, 2])), "default")


def test_embedding_bag_index_out_of_range_is_an_error() -> None:
    m = _bag(0)
    i, o = torch.tensor([1, 2, 3]), torch.tensor([0, 2])
    prog = ember.export(m, (i, o))
    rp = RuntimeProgram(prog.buffer, threads=1)
    assert_same(rp.run("forward", [i, o])[0], m(i, o)[0], "in range")
    for bad in (torch.tensor([1, 10, 3]), torch.tensor([-1, 2, 3])):
        with pytest.raises(RuntimeError, match=r"_embedding_bag.*num_embeddings"):
            rp.run("forward", [bad, o])
    # the program still runs correct inputs afterwards
    assert_same(rp.run("forward", [i, o])[0], m(i, o)[0], "after the error")


# ---------------------------------------------------------------------------------------------
# direct kernel calls: dtypes and refused inputs
# ---------------------------------------------------------------------------------------------
def _call_pool(op: str, args: list[Any], want: tuple[torch.Tensor, torch.Tensor]) -> None:
    o, oi = torch.empty_like(want[0]), torch.empty_like(want[1])
    call_kernel(op, [*args, o, oi, [o, oi]])
    assert_same(o, want[0], f"{op} values")
    assert_same(oi, want[1], f"{op} indices")


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_adaptive_max_pool2d_kernel_dtypes(dt: torch.dtype) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 7, 5, generator=g).to(dt)
    _call_pool("aten::adaptive_max_pool2d.out", [x, [3, 4]], aten.adaptive_max_pool2d(x, [3, 4]))
    _call_pool("aten::adaptive_max_pool2d.out", [x, [0, 4]], aten.adaptive_max_pool2d(x, [0, 4]))
    e = torch.randn(0, 3, 7, 5).to(dt)
    _call_pool("aten::adaptive_max_pool2d.out", [e, [2, 2]], aten.adaptive_max_pool2d(e, [2, 2]))


@pytest.mark.parametrize(
    "dt",
    [torch.float16, torch.bfloat16, torch.float64, torch.uint8, torch.int8, torch.int16]
    + [torch.int32, torch.int64],
)
def test_max_pool3d_kernel_dtypes(dt: torch.dtype) -> None:
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(2, 2, 5, 4, 6, generator=g) * 20).to(dt)
    for args in (
        ([2, 2, 2], [], [0], [1], False),
        ([3, 2, 3], [2, 1, 2], [1, 1, 1], [1, 2, 1], True),
    ):
        _call_pool(
            "aten::max_pool3d_with_indices.out",
            [x, *args],
            aten.max_pool3d_with_indices(x, *args),
        )
    # a window wholly in the padding: the dtype's lowest value (ATen's starting maximum)
    y = x[:1, :1, :3, :3, :3].contiguous()
    args = ([2, 2, 2], [1], [1], [4], False)
    _call_pool(
        "aten::max_pool3d_with_indices.out", [y, *args], aten.max_pool3d_with_indices(y, *args)
    )
    e = torch.randn(0, 2, 4, 4, 4).to(dt)
    _call_pool(
        "aten::max_pool3d_with_indices.out",
        [e, [2], [], [0], [1], False],
        aten.max_pool3d_with_indices(e, [2]),
    )


@pytest.mark.parametrize("dt", [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float32])
def test_max_pool2d_window_in_padding(dt: torch.dtype) -> None:
    """The 2-D pool shares the window loop: a window wholly in the padding gives the dtype's
    lowest value (-inf for floats) at its first tap's index, as ATen."""
    x = (torch.randn(1, 3, 3, 3) * 10).to(dt)
    args = ([2, 2], [1], [1], [4], False)
    _call_pool(
        "aten::max_pool2d_with_indices.out", [x, *args], aten.max_pool2d_with_indices(x, *args)
    )


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_kernel_half_dtypes(dt: torch.dtype, mode: int) -> None:
    g = torch.Generator().manual_seed(6)
    w = torch.randn(10, 4, generator=g).to(dt)
    for pad, psw in ((-1, None), (3, None), (-1, torch.randn(10, generator=g).to(dt))):
        if psw is not None and mode != 0:
            continue
        want = aten._embedding_bag(
            w, IDX, torch.tensor([0, 2, 2, 5]), False, mode, False, psw, False, pad
        )
        outs = [Out(torch.empty_like(t)) for t in want]
        args = [w, IDX, torch.tensor([0, 2, 2, 5]), False, mode, False, psw, False, pad]
        call_kernel("aten::_embedding_bag.out", [*args, *outs, list(outs)])
        for k, (o, t) in enumerate(zip(outs, want, strict=True)):
            got = o.view()
            if k == 0:  # f16/bf16 sums: ATen accumulates in float and rounds once, as here
                assert got.dtype == t.dtype and got.shape == t.shape
                torch.testing.assert_close(got, t, rtol=0, atol=0, equal_nan=True)
            else:
                assert_same(got, t, f"output {k}")


def _raises(op: str, args: list[Any], match: str) -> None:
    """The kernel fails (a RuntimeError carrying its message), it does not crash."""
    with pytest.raises(RuntimeError, match="failed") as e:
        call_kernel(op, args)
    assert match in str(e.value), str(e.value)


AMP = "aten::adaptive_max_pool2d.out"
MP3 = "aten::max_pool3d_with_indices.out"
BAG = "aten::_embedding_bag.out"


def _i64(*s: int) -> torch.Tensor:
    return torch.empty(*s, dtype=torch.int64)


def _amp_args(x: torch.Tensor, size: list[int], idx_dtype: torch.dtype = torch.int64) -> list[Any]:
    """adaptive_max_pool2d.out arguments with outs of the rank (and dtype) of ``x``."""
    shape = [*x.shape[:-2], 2, 2]
    return [x, size, torch.empty(shape, dtype=x.dtype), torch.empty(shape, dtype=idx_dtype)]


def _mp3_args(x: torch.Tensor, k: list[int], s: list[int], p: list[int]) -> list[Any]:
    """max_pool3d_with_indices.out arguments (dilation 1, floor mode), outs of x's rank."""
    shape = [*x.shape[:-3], 1, 1, 1]
    return [x, k, s, p, [1], False, torch.empty(shape, dtype=x.dtype), _i64(*shape)]


X5 = torch.randn(1, 1, 4, 4, 4)
BAD_CASES: dict[str, tuple[str, Callable[[], list[Any]], str]] = {
    "amp-rank": (AMP, lambda: _amp_args(torch.randn(4, 4), [2, 2]), "3-D or 4-D"),
    "amp-neg-size": (AMP, lambda: _amp_args(torch.randn(1, 4, 4), [-1, 2]), "non-negative"),
    "amp-int-dtype": (AMP, lambda: _amp_args(torch.ones(1, 4, 4, dtype=torch.int32), [2]), "dtype"),
    "amp-empty-channels": (AMP, lambda: _amp_args(torch.randn(1, 0, 4, 4), [2]), "non-zero"),
    "amp-empty-height": (AMP, lambda: _amp_args(torch.randn(1, 0, 4), [2]), "non-empty"),
    "amp-size-list": (AMP, lambda: _amp_args(torch.randn(1, 4, 4), [2, 2, 2]), "output_size"),
    "amp-idx-dtype": (
        AMP,
        lambda: _amp_args(torch.randn(1, 4, 4), [2, 2], torch.int32),
        "int64",
    ),
    "mp3-rank": (MP3, lambda: _mp3_args(torch.randn(1, 4, 4), [2], [], [0]), "4-D or 5-D"),
    "mp3-pad": (MP3, lambda: _mp3_args(X5, [2], [], [2]), "half of the kernel"),
    "mp3-neg-kernel": (MP3, lambda: _mp3_args(X5, [-2], [], [0]), "positive"),
    "mp3-zero-stride": (MP3, lambda: _mp3_args(X5, [2], [0], [0]), "positive"),
    "mp3-too-small": (MP3, lambda: _mp3_args(X5[:, :, :2], [3], [], [0]), "too small"),
    "mp3-list-len": (MP3, lambda: _mp3_args(X5, [2, 2], [], [0]), "kernel_size"),
    "mp3-empty-channels": (MP3, lambda: _mp3_args(X5[:, :0], [2], [], [0]), "positive length"),
    "mp3-bool": (MP3, lambda: _mp3_args(X5 > 0, [2], [], [0]), "dtype"),
}


def _bag_args(
    w: torch.Tensor | None = None,
    i: torch.Tensor | None = None,
    o: torch.Tensor | None = None,
    mode: int = 0,
    psw: torch.Tensor | None = None,
    last: bool = False,
    pad: int = -1,
) -> list[Any]:
    w = torch.randn(10, 3) if w is None else w
    i = torch.tensor([1, 2, 3, 4]) if i is None else i
    o = torch.tensor([0, 2]) if o is None else o
    outs = [Out(torch.empty(16, 4)), Out(_i64(64)), Out(_i64(64))]
    outs.append(Out(_i64(16, 4)) if mode == 2 else Out(_i64(64)))
    return [w, i, o, False, mode, False, psw, last, pad, *outs, list(outs)]


BAD_CASES.update(
    {
        "bag-index-high": (BAG, lambda: _bag_args(i=torch.tensor([1, 10, 3, 4])), "idx"),
        "bag-index-negative": (
            BAG,
            lambda: _bag_args(i=torch.tensor([1, 2, -1, 4]), mode=2),
            "idx",
        ),
        "bag-index-high-mean": (
            BAG,
            lambda: _bag_args(i=torch.tensor([1, 2, 3, 99]), mode=1),
            "idx",
        ),
        "bag-mode": (BAG, lambda: _bag_args(mode=3), "mode"),
        "bag-weight-rank": (BAG, lambda: _bag_args(w=torch.randn(10)), "2-D"),
        "bag-weight-int": (BAG, lambda: _bag_args(w=torch.ones(10, 3, dtype=torch.int32)), "float"),
        "bag-indices-2d": (BAG, lambda: _bag_args(i=torch.tensor([[1, 2], [3, 4]])), "1-D"),
        "bag-indices-float": (BAG, lambda: _bag_args(i=torch.tensor([1.0, 2.0])), "int32 or int64"),
        "bag-offset0": (BAG, lambda: _bag_args(o=torch.tensor([1, 2])), "offsets[0]"),
        "bag-offset-past-end": (BAG, lambda: _bag_args(o=torch.tensor([0, 5])), "greater"),
        "bag-offset-decreasing": (
            BAG,
            lambda: _bag_args(o=torch.tensor([0, 3, 2])),
            "non-decreasing",
        ),
        "bag-psw-mean": (BAG, lambda: _bag_args(mode=1, psw=torch.randn(4)), "mode='sum'"),
        "bag-psw-len": (BAG, lambda: _bag_args(psw=torch.randn(3)), "per_sample_weights"),
        "bag-psw-dtype": (BAG, lambda: _bag_args(psw=torch.randn(4, dtype=torch.float64)), "dtype"),
        "bag-last-no-offsets": (BAG, lambda: _bag_args(o=_i64(0), last=True), "at least 1"),
        "bag-no-bags-max": (BAG, lambda: _bag_args(o=_i64(0), mode=2), "no bags"),
    }
)


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_inputs_are_refused(name: str) -> None:
    op, make, match = BAD_CASES[name]
    args = make()
    if op != BAG:  # the pools: the returned (out, indices)
        args.append([args[-2], args[-1]])
    _raises(op, args, match)
