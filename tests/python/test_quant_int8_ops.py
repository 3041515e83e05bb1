"""Integer-only int8 operators (ember.quant.fused, kernels/quantized): each C kernel run through
Ember's runtime must equal its Python reference bit for bit, and each reference must agree with
float arithmetic within quantization error; the lowering of a small CNN tracks its Q/DQ model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ember
import ember.quant as Q
import ember.quant.fused as QF


def _runtime():
    try:
        from ember import _lib
        from ember.runtime import RuntimeProgram

        _lib.lib().em_register_quantized_kernels()
    except (ImportError, OSError, AttributeError) as e:
        pytest.skip(f"C runtime with kernels/quantized not built: {e}")
    return RuntimeProgram


def _run_c(tmp_path: Path, module: nn.Module, inputs: tuple[torch.Tensor, ...], name: str):
    """Exports `module` (calling one ember:: op) and runs it on Ember's C runtime."""
    rt_cls = _runtime()
    path = tmp_path / f"{name}.pte"
    ember.export(module, inputs, oplist=QF.oplist_with_fused()).save(path)
    return rt_cls(path).run("forward", list(inputs))[0]


def _i8(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-128, 128, shape, generator=gen, dtype=torch.int8)


class _Call(nn.Module):
    def __init__(self, fn, *args, **buffers: torch.Tensor) -> None:
        super().__init__()
        self.fn, self.args = fn, args
        for k, v in buffers.items():
            self.register_buffer(k, v)
        self.names = list(buffers)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs, *[getattr(self, n) for n in self.names], *self.args)


CONV_CASES = [
    # (N, C, H, W, O, K, stride, padding, dilation, groups, relu)
    (1, 1, 9, 9, 4, 3, 1, 1, 1, 1, True),
    (2, 8, 7, 6, 6, 3, 2, 0, 1, 1, False),
    (1, 4, 8, 8, 8, 3, 1, 2, 2, 2, False),
    (1, 6, 5, 5, 6, 1, 1, 0, 1, 6, True),  # depthwise 1x1
    (1, 3, 6, 7, 5, 5, 1, 2, 1, 1, False),  # K = 75: DSP loop + tail
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_quantized_conv2d_c_matches_reference(tmp_path: Path, case) -> None:
    QF.register_ops()
    n, c, h, w, o, k, s, p, d, g, relu = case
    gen = torch.Generator().manual_seed(hash(case) % 1000)
    x = _i8(n, c, h, w, gen=gen)
    wt = torch.randint(-127, 128, (o, c // g, k, k), generator=gen, dtype=torch.int8)
    bias = torch.randint(-5000, 5000, (o,), generator=gen, dtype=torch.int32)
    scales = [0.0007 * (1 + i) for i in range(o)]
    mult = torch.tensor([QF.quantize_multiplier(v)[0] for v in scales], dtype=torch.int32)
    shift = torch.tensor([QF.quantize_multiplier(v)[1] for v in scales], dtype=torch.int32)
    in_zp, out_zp = -7, 3
    args = ([s, s], [p, p], [d, d], g, in_zp, out_zp, out_zp if relu else -128, 127)
    mod = _Call(torch.ops.ember.quantized_conv2d, *args, w=wt, b=bias, m=mult, sh=shift)
    ref = QF.quantized_conv2d_ref(x, wt, bias, mult, shift, *args)
    got = _run_c(tmp_path, mod, (x,), "conv")
    assert got.dtype == torch.int8 and got.shape == ref.shape
    assert torch.equal(got, ref)
    # Against float: before the clamp, within one output step of the real-valued result.
    acc = F.conv2d(x.double() - in_zp, wt.double(), bias.double(), s, p, d, g)
    real = acc * torch.tensor(scales, dtype=torch.float64).view(1, -1, 1, 1) + out_zp
    want = real.clamp(out_zp if relu else -128, 127)
    assert (ref.double() - want).abs().max().item() <= 0.5 + 1e-6


@pytest.mark.parametrize("case", CONV_CASES[:3])
@pytest.mark.parametrize("pool", [(2, 2), (3, 2), (2, 1)])
def test_quantized_conv2d_max_pool2d_c_matches_reference(tmp_path: Path, case, pool) -> None:
    QF.register_ops()
    n, c, h, w, o, k, s, p, d, g, relu = case
    gen = torch.Generator().manual_seed(7 + hash(case) % 100)
    x = _i8(n, c, h, w, gen=gen)
    wt = torch.randint(-127, 128, (o, c // g, k, k), generator=gen, dtype=torch.int8)
    bias = torch.randint(-5000, 5000, (o,), generator=gen, dtype=torch.int32)
    pairs = [QF.quantize_multiplier(0.0009 * (1 + i)) for i in range(o)]
    mult = torch.tensor([q[0] for q in pairs], dtype=torch.int32)
    shift = torch.tensor([q[1] for q in pairs], dtype=torch.int32)
    args = ([s, s], [p, p], [d, d], g, 5, -4, -4 if relu else -128, 127)
    pk, ps = [pool[0], pool[0]], [pool[1], pool[1]]
    oh, ow = ((v + 2 * p - d * (k - 1) - 1) // s + 1 for v in (h, w))
    if pool[0] > min(oh, ow):
        pytest.skip(f"pool {pool[0]} larger than the {oh}x{ow} conv output")
    ref = QF.quantized_conv2d_max_pool2d_ref(x, wt, bias, mult, shift, *args, pk, ps)
    conv = QF.quantized_conv2d_ref(x, wt, bias, mult, shift, *args)
    assert torch.equal(ref, F.max_pool2d(conv.float(), pk, ps).to(torch.int8))
    mod = _Call(torch.ops.ember.quantized_conv2d_max_pool2d, *args, pk, ps, w=wt, b=bias,
                m=mult, sh=shift)  # fmt: skip
    got = _run_c(tmp_path, mod, (x,), "convpool")
    assert got.shape == ref.shape and torch.equal(got, ref)


def test_quantized_add_c_matches_reference(tmp_path: Path) -> None:
    QF.register_ops()
    gen = torch.Generator().manual_seed(3)
    a, b = _i8(2, 3, 5, 7, gen=gen), _i8(2, 3, 5, 7, gen=gen)
    for sa, za, sb, zb, so, zo, relu in [
        (0.02, -3, 0.05, 10, 0.06, -20, False),
        (0.1, 0, 0.1, 0, 0.15, -128, True),
        (0.003, 127, 0.2, -128, 0.25, 5, False),
    ]:
        add = QF.FusedQuantizedAdd(sa, za, sb, zb, so, zo, relu)
        ref = add(a, b)
        got = _run_c(tmp_path, add, (a, b), "add")
        assert torch.equal(got, ref)
        real = ((a.double() - za) * sa + (b.double() - zb) * sb) / so + zo
        want = real.clamp(zo if relu else -128, 127)
        assert (ref.double() - want).abs().max().item() <= 0.5 + 1e-3


POOL_CASES = [
    # (H, W, kernel, stride, padding, count_include_pad)
    (8, 8, 2, 2, 0, True),
    (7, 9, 3, 2, 1, True),
    (7, 9, 3, 2, 1, False),
    (5, 6, 3, 1, 0, True),
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_quantized_pools_c_match_reference(tmp_path: Path, case) -> None:
    QF.register_ops()
    h, w, k, s, p, cip = case
    gen = torch.Generator().manual_seed(h * w + k)
    x = _i8(2, 3, h, w, gen=gen)
    mp = QF.QuantizedMaxPool2d(nn.MaxPool2d(k, s, p))
    ref = mp(x)
    torch.testing.assert_close(ref, F.max_pool2d(x.float(), k, s, p).to(torch.int8))
    assert torch.equal(_run_c(tmp_path, mp, (x,), "maxpool"), ref)
    zp = -9
    ap = QF.QuantizedAvgPool2d(nn.AvgPool2d(k, s, p, count_include_pad=cip), zp)
    ref = ap(x)
    real = F.avg_pool2d(x.double() - zp, k, s, p, count_include_pad=cip) + zp
    assert (ref.double() - real).abs().max().item() <= 0.5 + 1e-9
    assert torch.equal(_run_c(tmp_path, ap, (x,), "avgpool"), ref)


def test_avg_pool_rounds_half_away_from_zero() -> None:
    x = torch.tensor([[[[1, 2], [0, 0]], [[-1, -2], [0, 0]]]], dtype=torch.int8)
    y = QF.quantized_avg_pool2d_ref(x, [2, 2], [2, 2], [0, 0], True, 0)
    # sums 3 and -3 over 4: 0.75 -> 1, -0.75 -> -1; sums 2 / -2: 0.5 -> 1, -0.5 -> -1
    assert y.flatten().tolist() == [1, -1]
    x = torch.tensor([[[[1, 1], [0, 0]], [[-1, -1], [0, 0]]]], dtype=torch.int8)
    assert QF.quantized_avg_pool2d_ref(x, [2, 2], [2, 2], [0, 0], True, 0).flatten().tolist() == [
        1,
        -1,
    ]


def _cnn(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(6 * 2 * 2, 5),
    ).eval()  # fmt: skip


@pytest.mark.parametrize("observer", ["minmax", "percentile", "mse"])
def test_quantize_conv_model_and_lower(tmp_path: Path, observer: str) -> None:
    model = _cnn()
    gen = torch.Generator().manual_seed(1)
    calib = [torch.rand(16, 1, 12, 12, generator=gen) for _ in range(3)]
    qm = Q.quantize(model, calib, observer=observer, progress=False)
    assert sum(isinstance(m, Q.QuantizedConv2d) for m in qm) == 2
    x = torch.rand(8, 1, 12, 12, generator=gen)
    with torch.no_grad():
        y, yq = model(x), qm(x)
    assert (y - yq).abs().max().item() < 0.05 * y.abs().max().item() + 0.01
    im = QF.lower_to_integer(qm, calib)
    kinds = [type(m).__name__ for m in im.layers]
    assert kinds == ["FusedQuantizedConv2dMaxPool2d", "FusedQuantizedConv2d",
                     "QuantizedAvgPool2d", "Flatten", "FusedQuantizedLinear"]  # fmt: skip
    assert im.layers[0].conv.act_min == im.layers[0].conv.out_zp  # ReLU folded
    unfused = QF.lower_to_integer(qm, calib, fuse_pool=False)
    assert isinstance(unfused.layers[1], QF.QuantizedMaxPool2d)
    with torch.no_grad():
        assert torch.equal(unfused(x), im(x))  # the fusion changes no bit
    with torch.no_grad():
        yi = im(x)
    assert (yq - yi).abs().max().item() <= 6 * im.out_scale + 0.02 * yq.abs().max().item()
    if observer != "minmax":
        return
    # The whole integer network on the C runtime: bit-exact with the Python references.
    rt_cls = _runtime()
    path = tmp_path / "cnn_int.pte"
    ember.export(im, (x[:1],), oplist=QF.oplist_with_fused()).save(path)
    rt = rt_cls(path)
    for i in range(len(x)):
        assert torch.equal(rt.run("forward", [x[i : i + 1]])[0], im(x[i : i + 1]).detach()), i


def test_quantize_conv_errors() -> None:
    m = nn.Sequential(nn.Conv2d(1, 2, 3, padding="same")).eval()
    with pytest.raises(Q.QuantizationError, match="padding"):
        Q.quantize(m, [torch.rand(1, 1, 5, 5)], progress=False)
    qm = Q.quantize(_cnn(), [torch.rand(2, 1, 12, 12)], progress=False)
    bad = nn.Sequential(nn.ReLU(), *list(qm))
    with pytest.raises(Q.QuantizationError, match="ReLU"):
        QF.lower_to_integer(bad, [torch.rand(2, 1, 12, 12)])
    with pytest.raises(Q.QuantizationError, match="Sigmoid"):
        QF.lower_to_integer(nn.Sequential(*list(qm), nn.Sigmoid()), [torch.rand(2, 1, 12, 12)])
    with pytest.raises(Q.QuantizationError, match="ceil_mode"):
        QF.QuantizedMaxPool2d(nn.MaxPool2d(2, ceil_mode=True))


class _Residual(nn.Module):
    """conv -> relu -> [conv -> relu -> conv] + skip -> relu -> avgpool -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0, self.relu0 = nn.Conv2d(1, 4, 3, padding=1), nn.ReLU()
        self.conv1, self.relu1 = nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.add, self.relu2 = Q.Add(), nn.ReLU()
        self.pool, self.flat, self.fc = nn.AvgPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu0(self.conv0(x))
        y = self.conv2(self.relu1(self.conv1(x)))
        return self.fc(self.flat(self.pool(self.relu2(self.add(x, y)))))


def test_residual_add_quantized_and_lowered(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Residual().eval()
    gen = torch.Generator().manual_seed(2)
    calib = [torch.rand(8, 1, 8, 8, generator=gen) for _ in range(3)]
    qm = Q.quantize(model, calib, progress=False)
    assert isinstance(qm.add, Q.QuantizedAdd)
    x = torch.rand(6, 1, 8, 8, generator=gen)
    with torch.no_grad():
        y, yq = model(x), qm(x)
    assert (y - yq).abs().max().item() < 0.05 * y.abs().max().item() + 0.01
    im = QF.lower_graph_to_integer(qm, calib)
    assert [s[0] for s in im.steps] == ["conv0", "conv1", "conv2", "add", "pool", "flat", "fc"]
    assert im.steps[3][1] == ["conv0", "conv2"]  # the skip connection reads conv0's int8 output
    assert im.layers["add"].act_min == im.layers["add"].out_zp  # relu2 folded into the add
    with torch.no_grad():
        yi = im(x)
    assert (yq - yi).abs().max().item() <= 6 * im.out_scale + 0.02 * yq.abs().max().item()
    rt_cls = _runtime()
    path = tmp_path / "res_int.pte"
    ember.export(im, (x[:1],), oplist=QF.oplist_with_fused()).save(path)
    rt = rt_cls(path)
    for i in range(len(x)):
        assert torch.equal(rt.run("forward", [x[i : i + 1]])[0], im(x[i : i + 1]).detach()), i


def test_graph_lowering_of_sequential_and_errors() -> None:
    model = _cnn()
    calib = [torch.rand(8, 1, 12, 12)]
    qm = Q.quantize(model, calib, progress=False)
    im = QF.lower_graph_to_integer(qm, calib)
    x = torch.rand(4, 1, 12, 12)
    with torch.no_grad():
        assert (qm(x) - im(x)).abs().max().item() <= 6 * im.out_scale + 0.05

    class Raw(nn.Module):  # a bare `+` is calibrated like ember.quant.Add; sigmoid is not lowered
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(self.fc(x) + x)

    qr = Q.quantize(Raw().eval(), [torch.rand(4, 4)], progress=False)
    assert isinstance(qr.get_submodule("add"), Q.QuantizedAdd)
    with pytest.raises(Q.QuantizationError, match="call_function sigmoid has no integer lowering"):
        QF.lower_graph_to_integer(qr, [torch.rand(4, 4)])


def test_graph_lowering_accepts_functional_relu_and_flatten(tmp_path: Path) -> None:
    class Fn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.pool, self.fc = nn.Conv2d(1, 3, 3), nn.MaxPool2d(2), nn.Linear(12, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.flatten(self.pool(F.relu(self.conv(x))), 1))

    torch.manual_seed(3)
    model = Fn().eval()
    calib = [torch.rand(8, 1, 6, 6)]
    qm = Q.quantize(model, calib, progress=False)
    im = QF.lower_graph_to_integer(qm, calib)
    assert [type(im.layers[s[0]]).__name__ for s in im.steps] == [
        "FusedQuantizedConv2dMaxPool2d",
        "Flatten",
        "FusedQuantizedLinear",
    ]
    x = torch.rand(3, 1, 6, 6)
    with torch.no_grad():
        assert (qm(x) - im(x)).abs().max().item() <= 6 * im.out_scale + 0.05
    rt_cls = _runtime()
    path = tmp_path / "fn.pte"
    ember.export(im, (x[:1],), oplist=QF.oplist_with_fused()).save(path)
    assert torch.equal(rt_cls(path).run("forward", [x[:1]])[0], im(x[:1]).detach())
