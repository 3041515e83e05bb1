"""Many small single-purpose models, exported once and run on stock ExecuTorch and on Ember's
runtime: each exercises an
operator's out-variant argument convention (scalars, lists, optional args, multi-output ops,
``-> ()`` ops, dtype arguments...)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from conftest import RUNTIMES, assert_close, export_for_tests, make_runner


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _slice_assign(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x.clone()
    z[:, 0:2] = y
    return z


CASES: dict[str, tuple[Callable[..., object], tuple[torch.Tensor, ...]]] = {
    "add_scalar": (lambda x: x + 3, (_x(3, 4),)),
    "sub_alpha": (lambda x, y: torch.sub(x, y, alpha=2), (_x(3, 4), _x(4))),
    "rsub": (lambda x: 1 - x, (_x(5),)),
    "mul_div": (lambda x, y: x * y / (y.abs() + 1), (_x(2, 3), _x(2, 3))),
    "pow_sqrt_exp": (lambda x: (x.abs() + 1).sqrt().pow(2) + x.exp(), (_x(6),)),
    "activations": (
        lambda x: F.gelu(x) + F.silu(x) + torch.sigmoid(x) + torch.tanh(x) + F.leaky_relu(x, 0.1),
        (_x(4, 4),),
    ),
    "hardtanh_clamp": (lambda x: F.hardtanh(x) + x.clamp(-0.5, 0.5), (_x(8),)),
    "softmax_logsoftmax": (lambda x: x.softmax(-1) + x.log_softmax(0), (_x(3, 5),)),
    "reductions": (lambda x: x.sum(1) + x.mean(1) + x.amax(1) + x.var(1), (_x(3, 7),)),
    "argmax_keepdim": (lambda x: x.argmax(-1, keepdim=True), (_x(3, 7),)),
    "max_dim": (lambda x: x.max(dim=1)[0] + x.min(dim=1)[0], (_x(3, 7),)),
    "cat_stack": (
        lambda x, y: torch.cat([x, y], 0) + torch.stack([x, y]).sum(0).repeat(2, 1),
        (_x(2, 3), _x(2, 3)),
    ),
    "slice_select": (lambda x: x[:, 1:3] * x[0, 2] + x[-1:, ::2].sum(), (_x(4, 5),)),
    "split_unbind": (
        lambda x: sum(t.sum() for t in x.split([1, 3], 1)) + x.unbind(0)[1],
        (_x(3, 4),),
    ),
    "chunk": (lambda x: torch.chunk(x, 2, dim=0)[1] * 2, (_x(4, 3),)),
    "permute_transpose": (
        lambda x: x.permute(2, 0, 1).transpose(1, 2).contiguous() + 1,
        (_x(2, 3, 4),),
    ),
    "expand": (lambda x: x.expand(3, 4, 5) + 1, (_x(4, 1),)),
    "where_masked_fill": (
        lambda x: torch.where(x > 0, x, 0.5 * x).masked_fill(x < -1, 0.0),
        (_x(6, 3),),
    ),
    "comparisons": (
        lambda x, y: ((x > y) & (x != 0)).to(torch.float32) + (x <= 0.5).float(),
        (_x(5), _x(5)),
    ),
    "embedding": (lambda w, i: F.embedding(i, w), (_x(10, 4), torch.tensor([[1, 3], [9, 0]]))),
    "index_tensor": (lambda x, i: x[i], (_x(6, 2), torch.tensor([5, 0, 2]))),
    "gather": (
        lambda x, i: torch.gather(x, 1, i),
        (_x(3, 4), torch.tensor([[0, 1], [3, 3], [2, 0]])),
    ),
    "cumsum": (lambda x: x.cumsum(0), (_x(5, 2),)),
    "layer_norm": (lambda x: F.layer_norm(x, (6,)), (_x(2, 3, 6),)),
    "group_norm": (lambda x: F.group_norm(x, 2), (_x(2, 4, 3, 3),)),
    "avg_pool": (
        lambda x: F.avg_pool2d(x, 2) + F.adaptive_avg_pool2d(x, 1).mean(),
        (_x(1, 2, 4, 4),),
    ),
    "conv1d_groups": (lambda x, w: F.conv1d(x, w, groups=2, padding=1), (_x(1, 4, 9), _x(4, 2, 3))),
    "conv_transpose": (
        lambda x, w: F.conv_transpose2d(x, w, stride=2),
        (_x(1, 2, 3, 3), _x(2, 3, 2, 2)),
    ),
    "bmm_matmul": (lambda a, b: a @ b, (_x(2, 3, 4), _x(2, 4, 5))),
    "constant_pad": (lambda x: F.pad(x, (1, 2)), (_x(2, 3),)),
    "to_dtype": (lambda x: (x * 10).to(torch.int32).to(torch.float32), (_x(6),)),
    "int_ops": (lambda x: (x * 3 + 1) // 2, (torch.arange(8),)),
    "full_arange": (
        lambda x: x + torch.arange(4, dtype=torch.float32) + torch.ones(4) * 2,
        (_x(3, 4),),
    ),
    "upsample": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (_x(1, 1, 2, 3),)),
    "tril_flip": (lambda x: torch.tril(x) + x.flip(0), (_x(4, 4),)),
    "topk": (lambda x: x.topk(2, dim=-1)[0], (_x(3, 6),)),
    "bool_logic": (lambda x: (~(x > 0)).logical_or(x > 1).float(), (_x(6),)),
    "unsqueeze_squeeze_view": (lambda x: x.unsqueeze(0).squeeze(0).view(-1, 2) * 1.5, (_x(3, 4),)),
    "scalar_tensor_out": (lambda x: x.sum(), (_x(3, 4),)),
    "slice_assign": (_slice_assign, (_x(3, 4), _x(3, 2))),
    "index_put": (lambda x, i, v: x.index_put((i,), v), (_x(5, 2), torch.tensor([0, 3]), _x(2, 2))),
    "zeros_full_like": (lambda x: torch.zeros_like(x) + torch.full_like(x, 3.0), (_x(4),)),
    "sdpa_causal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        (_x(1, 2, 4, 8), _x(1, 2, 4, 8), _x(1, 2, 4, 8)),
    ),
    "matmul_broadcast": (lambda a, b: torch.matmul(a, b), (_x(2, 3, 4), _x(4, 5))),
    "rms_norm": (lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), (_x(2, 8),)),
    "half_roundtrip": (lambda x: (x.half() * 2).float(), (_x(4),)),
}


@functools.cache
def _exported(name: str) -> tuple[Fn, object]:
    fn, inputs = CASES[name]
    m = Fn(fn)
    return m, export_for_tests(m, inputs)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_op(name: str, rt: str) -> None:
    m, prog = _exported(name)
    inputs = CASES[name][1]
    outs = make_runner(rt, prog)(*inputs)
    assert len(outs) == 1
    assert_close(outs[0], m(*inputs))
