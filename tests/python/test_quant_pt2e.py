"""ember.quant.quantize_exported: int8 quantization on the torch.export graph (BatchNorm folding,
Q/DQ on every quantized operator's edges, shared qparams, dynamic per-token linears), the `.pte`
on Ember's portable kernels against the quantized graph's eager output and against fp32, a zoo
MobileNetV2 without a rewrite, and graphs PyTorch's own PT2E flow quantized passing through."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import EmberMethod, randomize_bn, xnnpack_static
from torch import nn

import ember
import ember.quant as Q
from ember.quant.pt2e import quantize_exported, summarize

log = logging.getLogger(__name__)
aten = torch.ops.aten
qd = torch.ops.quantized_decomposed


class ResBlock(nn.Module):
    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


class InvertedResidual(nn.Module):
    def __init__(self, c: int = 8, e: int = 4) -> None:
        super().__init__()
        h = c * e
        self.body = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = torch.cat([nn.functional.max_pool2d(y, 2), nn.functional.avg_pool2d(y, 2)], 1)
        y = nn.functional.hardswish(y) * torch.sigmoid(y) + nn.functional.silu(y)
        y = nn.functional.gelu(y)
        return self.head(nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


class Transposed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(8, 6, 2, stride=2, groups=2)
        self.bn = nn.BatchNorm2d(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.up(x)))


class Grouped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Conv2d(8, 12, 3, padding=1, groups=4)
        self.p = nn.Conv2d(12, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.p(nn.functional.relu6(self.g(x))) + x


class TransformerBlock(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1, self.f2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        a = torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1) @ v
        x = x + self.o(a)
        return x + self.f2(nn.functional.gelu(self.f1(self.ln2(x))))


def _count(ep: torch.export.ExportedProgram, *targets) -> int:
    return sum(n.op == "call_function" and n.target in targets for n in ep.graph.nodes)


def _check(model: nn.Module, shape: tuple[int, ...], *, adds: int, dynamic: bool = False,
           fp_tol: float = 0.1) -> torch.export.ExportedProgram:  # fmt: skip
    """Quantizes, checks the graph's Q/DQ and adds, exports and runs it on Ember's runtime."""
    torch.manual_seed(1)
    model = randomize_bn(model.eval())
    x = torch.randn(*shape)
    calib = None if dynamic else [torch.randn(*shape) for _ in range(4)]
    qep = quantize_exported(model, (x,), calib, dynamic=dynamic, progress=False)
    s = summarize(qep)
    log.info("%s: %s", type(model).__name__, s)
    assert s.quantize == s.dequantize > 0
    assert s.adds == adds  # every residual add quantized (dynamic: only linears are)
    assert s.adds_quantized == (0 if dynamic else adds)
    layers = {f"{k}.weight" for k, m in model.named_modules()
              if isinstance(m, nn.Conv2d | nn.ConvTranspose2d | nn.Linear)}  # fmt: skip
    n_w = len(layers)
    assert s.weights == n_w
    # every weight is an int8 constant; no float copy of it nor BatchNorm is left
    int8 = [t for t in qep.state_dict.values() if t.dtype == torch.int8]
    assert len(int8) == n_w
    assert not any("running" in k or k in layers for k in qep.state_dict)
    assert _count(qep, aten._native_batch_norm_legit_no_training.default) == 0
    prog = ember.export(qep, (x,), backend=None)
    run = EmberMethod(prog)
    with torch.no_grad():
        for seed in range(2):
            torch.manual_seed(10 + seed)
            xi = torch.randn(*shape)
            got, want, fp = run(xi)[0], qep.module()(xi), model(xi)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # same arithmetic
            err = (want - fp).abs().max() / fp.abs().max()
            assert err < fp_tol, err  # int8 error
            assert err > 0  # and it is quantized
    return qep


def test_resnet_block_bn_folded_residual_add_quantized() -> None:
    qep = _check(ResBlock(), (1, 8, 8, 8), adds=1)
    # relu fused: the add's and the convs' outputs are quantized only after their relu
    add = next(n for n in qep.graph.nodes if n.target == aten.add.Tensor)
    (relu,) = add.users
    assert relu.target == aten.relu.default
    assert [u.target for u in relu.users] == [qd.quantize_per_tensor.default]


def test_mobilenet_inverted_residual() -> None:
    qep = _check(InvertedResidual(), (1, 8, 8, 8), adds=1)
    dw = [n for n in qep.graph.nodes if n.target == aten.convolution.default and n.args[8] > 1]
    assert len(dw) == 1 and dw[0].args[1].target == qd.dequantize_per_channel.default


def _qparams_of(n: torch.fx.Node) -> tuple[float, int]:
    assert n.target in (qd.dequantize_per_tensor.default, qd.quantize_per_tensor.default), n
    return n.args[1], n.args[2]


def test_cat_pools_and_activations_share_where_required() -> None:
    qep = _check(Mixed(), (2, 4, 8, 8), adds=1)
    g = {n.target: n for n in qep.graph.nodes if n.op == "call_function"}
    cat = g[aten.cat.default]
    outs = {_qparams_of(u) for u in cat.users}
    ins = {_qparams_of(a) for a in cat.args[0]}
    assert len(outs) == 1 and ins == outs  # one set of qparams for cat's inputs and output
    mp = g[aten.max_pool2d_with_indices.default]
    (get0,) = [u for u in mp.users if u.args[1] == 0]
    assert _qparams_of(mp.args[0]) == _qparams_of(next(iter(get0.users)))
    for op in (aten.hardswish.default, aten.sigmoid.default, aten.silu.default, aten.gelu.default,
               aten.avg_pool2d.default, aten.mean.dim, aten.mul.Tensor):  # fmt: skip
        n = g[op]
        assert all(a.target == qd.dequantize_per_tensor.default
                   for a in n.args if isinstance(a, torch.fx.Node)), op  # fmt: skip
        assert [u.target for u in n.users] == [qd.quantize_per_tensor.default], op


def test_transposed_grouped_conv_with_bn() -> None:
    # 48 outputs from 4 calibration batches: clipping beyond the calibrated range dominates
    qep = _check(Transposed(), (1, 8, 4, 4), adds=0, fp_tol=0.2)
    (dq,) = [n for n in qep.graph.nodes if n.target == qd.dequantize_per_channel.default]
    assert dq.args[3] == 1  # [in, out/groups, kh, kw]: output channels on axis 1


def test_grouped_conv_relu6_residual() -> None:
    _check(Grouped(), (1, 8, 6, 6), adds=1)


def test_transformer_block_dynamic_per_token() -> None:
    qep = _check(TransformerBlock(), (1, 6, 16), adds=2, dynamic=True, fp_tol=0.05)
    assert _count(qep, qd.choose_qparams_per_token_asymmetric.default) == 4
    assert _count(qep, qd.quantize_per_tensor.default) == 0  # no static activations


def test_quantize_method_export_and_modules_default() -> None:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    calib = [torch.randn(4, 8) for _ in range(3)]
    qep = Q.quantize(model, calib, method="export", progress=False)
    assert isinstance(qep, torch.export.ExportedProgram)
    assert summarize(qep).weights == 2
    assert isinstance(Q.quantize(model, calib, progress=False), nn.Module)  # unchanged
    with pytest.raises(Q.QuantizationError, match="method"):
        Q.quantize(model, calib, method="nope")
    with pytest.raises(Q.QuantizationError, match="already quantized"):
        quantize_exported(qep, (calib[0],), calib)


def test_zoo_mobilenet_v2_all_residual_adds() -> None:
    pytest.importorskip("transformers")
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    class Logits(nn.Module):
        def __init__(self, m: nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.m(pixel_values=x).logits

    torch.manual_seed(0)
    cfg = MobileNetV2Config(num_labels=10, tf_padding=False, depth_multiplier=0.35, image_size=64)
    model = randomize_bn(Logits(MobileNetV2ForImageClassification(cfg)))
    with torch.no_grad():  # HF's init leaves activations ~1e-25; give weights a usable scale
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
    x = torch.randn(1, 3, 64, 64)
    qep = quantize_exported(model, (x,), [torch.randn(1, 3, 64, 64) for _ in range(2)],
                            progress=False)  # fmt: skip
    s = summarize(qep)
    log.info("zoo MobileNetV2: %d/%d residual adds quantized, %s", s.adds_quantized, s.adds, s)
    assert s.adds == 10 and s.adds_quantized == 10
    assert s.weights == 53  # 52 convs + classifier
    prog = ember.export(qep, (x,), backend=None)
    with torch.no_grad():
        got, want, fp = EmberMethod(prog)(x)[0], qep.module()(x), model(x)
    # 50+ layers: a float sum rounded in another order may flip an int8 value on the way; the
    # logits stay within two steps of their own quantization
    (out_dq,) = next(n for n in qep.graph.nodes if n.op == "output").args[0]
    step = _qparams_of(out_dq)[0]
    torch.testing.assert_close(got, want, rtol=0, atol=2.01 * step)
    assert (got == want).float().mean() >= 0.5
    assert (want - fp).abs().max() < 0.25 * fp.abs().max()


def test_pt2e_xnnpack_quantized_graph_passes_through() -> None:
    torch.manual_seed(0)
    model = randomize_bn(nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Flatten(), nn.Linear(8 * 8 * 8, 10),
    ))  # fmt: skip
    x = torch.randn(1, 3, 8, 8)
    converted = xnnpack_static(model, x, 3)
    qdq = (qd.quantize_per_tensor.default, qd.dequantize_per_tensor.default,
           qd.dequantize_per_channel.default)  # fmt: skip
    before = sum(n.op == "call_function" and n.target in qdq for n in converted.graph.nodes)
    assert before > 0
    for src in (converted, torch.export.export(converted, (x,))):  # module or ExportedProgram
        prog = ember.export(src, (x,), backend=None)
        after = sum(n.op == "call_function" and n.target in qdq
                    for n in prog._exported["forward"].graph.nodes)  # fmt: skip
        assert after == before  # Q/DQ unchanged
        with torch.no_grad():
            for seed in range(2):
                torch.manual_seed(20 + seed)
                xi = torch.randn(1, 3, 8, 8)
                torch.testing.assert_close(EmberMethod(prog)(xi)[0], converted(xi),
                                           rtol=1e-5, atol=1e-5)  # fmt: skip
