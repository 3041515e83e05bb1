"""Plain residual sums and free-standing activations under int8 PTQ (ember.quant, issue #7):
``a + b`` / ``torch.add`` / ``Tensor.add`` become calibrated Q/DQ adds lowered to
``ember::quantized_add``; a ReLU / ReLU6 / hardtanh that no producer can absorb lowers to
``ember::quantized_clamp``; reshape / view pass int8 through. The Q/DQ file must match eager
fake-quant on Ember's runtime, the integer-only file must equal the Python references bit for
bit, and both must stay close to the float model."""

from __future__ import annotations

import math
import sys
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


def _operators(path: Path) -> set[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import pte_summary

    (plan,) = pte_summary.read_file(str(path))
    return set(plan.operators)


class _ResidualPlus(nn.Module):
    """conv -> relu -> conv, skip summed with a plain `+`, pooled, flattened by view."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0, self.conv1 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.pool, self.fc = nn.AvgPool2d(2), nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv0(x))
        h = h + self.conv1(h)
        return self.fc(self.pool(h).view(x.size(0), -1))


class _PoolRelu(nn.Module):
    """A ReLU after a max pool (nothing to fold it into), then flatten and linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.pool = nn.Conv2d(1, 4, 3, padding=1), nn.MaxPool2d(2)
        self.relu, self.fc = nn.ReLU(), nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.relu(self.pool(self.conv(x))), 1))


class _Both(nn.Module):
    """Residual `torch.add` and `Tensor.add`, a ReLU whose producer has two users, a ReLU6
    folded into an add, a ReLU after a pool, a reshape with a computed shape."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0, self.conv1 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.conv2, self.pool = nn.Conv2d(4, 4, 3, padding=1), nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv0(x)
        h = torch.relu(c)  # c also feeds the second sum: no folding, a quantized_clamp
        h = F.relu6(torch.add(h, self.conv1(h)))  # folded into the add's clamp
        h = h.add(self.conv2(c))
        h = F.relu(self.pool(h))
        return self.fc(h.reshape(h.shape[0], -1))


def _data(seed: int):
    gen = torch.Generator().manual_seed(seed)
    calib = [torch.rand(16, 1, 8, 8, generator=gen) for _ in range(4)]
    return calib, torch.rand(8, 1, 8, 8, generator=gen)


def _check(tmp_path: Path, model: nn.Module, name: str, seed: int) -> QF.IntegerGraph:
    """Quantize, export Q/DQ and integer-only files, run both on Ember, compare (see module)."""
    rt_cls = _runtime()
    calib, x = _data(seed)
    qm = Q.quantize(model, calib, progress=False)
    with torch.no_grad():
        y, yq = model(x), qm(x)
    # int8 drift of the Q/DQ model: a few percent of the output range
    assert (y - yq).abs().max().item() < 0.05 * y.abs().max().item() + 0.01
    qpath = tmp_path / f"{name}_qdq.pte"
    ember.export(qm, (x[:1],), backend=None).save(qpath)  # the portable Q/DQ file
    assert {"quantized_decomposed::quantize_per_tensor.out",
            "quantized_decomposed::dequantize_per_tensor.out"} <= _operators(qpath)  # fmt: skip
    rt = rt_cls(qpath)
    for i in range(len(x)):
        got = rt.run("forward", [x[i : i + 1]])[0]
        torch.testing.assert_close(got, yq[i : i + 1], rtol=1e-5, atol=1e-5)
    im = QF.lower_graph_to_integer(qm, calib)
    with torch.no_grad():
        yi = im(x)
    assert (yq - yi).abs().max().item() <= 6 * im.out_scale + 0.02 * yq.abs().max().item()
    ipath = tmp_path / f"{name}_int.pte"
    ember.export(im, (x[:1],), oplist=QF.oplist_with_fused()).save(ipath)
    ops = _operators(ipath)
    assert not any(o.startswith("aten::add") or o.startswith("aten::relu") for o in ops), ops
    rt = rt_cls(ipath)
    for i in range(len(x)):
        assert torch.equal(rt.run("forward", [x[i : i + 1]])[0], im(x[i : i + 1])), i
    return im


def _kinds(im: QF.IntegerGraph) -> list[str]:
    return [type(im.layers[s[0]]).__name__ for s in im.steps]


def test_plain_residual_add_is_quantized_and_lowered(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _ResidualPlus().eval()
    qm = Q.quantize(model, _data(1)[0], progress=False)
    assert isinstance(qm, torch.fx.GraphModule)
    assert sum(isinstance(m, Q.QuantizedAdd) for m in qm.modules()) == 1
    im = _check(tmp_path, model, "res_plus", 1)
    assert _kinds(im) == [
        "FusedQuantizedConv2d", "FusedQuantizedConv2d", "FusedQuantizedAdd",
        "QuantizedAvgPool2d", "QuantizedReshape", "FusedQuantizedLinear",
    ]  # fmt: skip
    assert im.steps[2][1] == ["conv0", "conv1"]
    conv0 = im.layers["conv0"]
    assert conv0.act_min == conv0.out_zp  # the ReLU folded into conv0 (its only user)


def test_relu_after_pool_becomes_quantized_clamp(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = _PoolRelu().eval()
    im = _check(tmp_path, model, "pool_relu", 2)
    assert _kinds(im) == ["FusedQuantizedConv2dMaxPool2d", "QuantizedClamp", "Flatten",
                          "FusedQuantizedLinear"]  # fmt: skip
    conv, clamp = (im.layers[s[0]] for s in im.steps[:2])
    # the clamp sits at the zero point of the pooled values (= the conv output's)
    assert (clamp.act_min, clamp.act_max) == (conv.out_zp, 127) and conv.out_zp > -128


def test_residual_and_free_activations_together(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = _Both().eval()
    im = _check(tmp_path, model, "both", 3)
    kinds = _kinds(im)
    assert kinds.count("FusedQuantizedAdd") == 2 and kinds.count("QuantizedClamp") == 2
    first_add = im.layers[im.steps[kinds.index("FusedQuantizedAdd")][0]]
    six = QF.activation_clamp(0.0, 6.0, first_add.out_scale, first_add.out_zp)
    assert (first_add.act_min, first_add.act_max) == six  # ReLU6 folded into the add


def test_sequential_with_free_relu_and_relu6() -> None:
    torch.manual_seed(4)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU6(), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(),
        nn.Linear(4 * 4 * 4, 5),
    ).eval()  # fmt: skip
    calib, x = _data(5)
    qm = Q.quantize(model, calib, progress=False)
    assert isinstance(qm, nn.Sequential)  # no sum: the model keeps its class
    im = QF.lower_to_integer(qm, calib, fuse_pool=False)
    assert [type(m).__name__ for m in im.layers] == [
        "FusedQuantizedConv2d", "QuantizedMaxPool2d", "QuantizedClamp", "Flatten",
        "FusedQuantizedLinear",
    ]  # fmt: skip
    conv = im.layers[0]
    assert (conv.act_min, conv.act_max) == QF.activation_clamp(0, 6, conv.out_scale, conv.out_zp)
    with torch.no_grad():
        y, yq, yi = model(x), qm(x), im(x)
    assert (y - yq).abs().max().item() < 0.05 * y.abs().max().item() + 0.01
    assert (yq - yi).abs().max().item() <= 6 * im.out_scale + 0.02 * yq.abs().max().item()


def test_activation_clamp_bounds() -> None:
    assert QF.activation_clamp(0.0, math.inf, 0.1, -5) == (-5, 127)
    assert QF.activation_clamp(0.0, 6.0, 0.1, -5) == (-5, 55)
    assert QF.activation_clamp(0.0, 6.0, 0.01, -5) == (-5, 127)  # 6 beyond the int8 range
    assert QF.activation_clamp(-1.0, 1.0, 0.02, 3) == (-47, 53)
    assert QF.activation_clamp(-math.inf, 0.0, 0.5, 7) == (-128, 7)
    with pytest.raises(Q.QuantizationError, match="empty"):
        QF.activation_clamp(1.0, 0.0, 0.1, 0)


@pytest.mark.parametrize("bounds", [(-128, 127), (-5, 127), (-20, 40), (3, 3)])
def test_quantized_clamp_c_matches_reference(tmp_path: Path, bounds: tuple[int, int]) -> None:
    QF.register_ops()
    rt_cls = _runtime()
    gen = torch.Generator().manual_seed(7)
    x = torch.randint(-128, 128, (2, 3, 5, 7), generator=gen, dtype=torch.int8)
    mod = QF.QuantizedClamp(*bounds)
    ref = mod(x)
    assert torch.equal(ref, torch.clamp(x.int(), *bounds).to(torch.int8))
    path = tmp_path / "clamp.pte"
    ember.export(mod, (x,), oplist=QF.oplist_with_fused()).save(path)
    assert "ember::quantized_clamp.out" in _operators(path)
    assert torch.equal(rt_cls(path).run("forward", [x])[0], ref)


def test_plain_add_errors_and_non_tensor_sums() -> None:
    class Broadcast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.fc1 = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) + self.fc1(x)  # [N, 4] + [N, 1]: broadcasting

    torch.manual_seed(5)
    calib = [torch.rand(8, 4)]
    qb = Q.quantize(Broadcast().eval(), calib, progress=False)
    assert sum(isinstance(m, Q.QuantizedAdd) for m in qb.modules()) == 1  # Q/DQ handles it
    with pytest.raises(Q.QuantizationError, match="broadcasting"):
        QF.lower_graph_to_integer(qb, calib)

    class Scalar(nn.Module):  # x + 1.0 and size arithmetic are not tensor sums
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x + 1.0).view(x.size(0) + 0, -1)

    qs = Q.quantize(Scalar().eval(), calib, progress=False)
    assert not any(isinstance(m, Q.QuantizedAdd) for m in qs.modules())
    assert not isinstance(qs, torch.fx.GraphModule)


def test_reshapes_pass_int8_through(tmp_path: Path) -> None:
    torch.manual_seed(6)
    gen = torch.Generator().manual_seed(6)
    calib, x = [torch.rand(16, 16, generator=gen)], torch.rand(4, 16, generator=gen)
    seq = nn.Sequential(
        nn.Linear(16, 16), nn.Unflatten(1, (1, 4, 4)), nn.Conv2d(1, 2, 3), nn.Flatten(),
        nn.Linear(8, 3),
    ).eval()  # fmt: skip
    qs = Q.quantize(seq, calib, progress=False)
    ims = QF.lower_to_integer(qs, calib)
    assert [type(m).__name__ for m in ims.layers] == [
        "FusedQuantizedLinear", "Unflatten", "FusedQuantizedConv2d", "Flatten",
        "FusedQuantizedLinear",
    ]  # fmt: skip

    class Views(nn.Module):  # a constant-shape view and a method flatten
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.conv, self.fc2 = seq[0], seq[2], seq[4]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(self.conv(self.fc1(x).view(-1, 1, 4, 4)).flatten(1))

    qv = Q.quantize(Views().eval(), calib, progress=False)
    imv = QF.lower_graph_to_integer(qv, calib)
    reshape = next(m for m in imv.layers.values() if isinstance(m, QF.QuantizedReshape))
    assert (reshape.shape, reshape.keep_batch) == ([-1, 1, 4, 4], False)
    with torch.no_grad():
        for im in (ims, imv):
            assert (qs(x) - im(x)).abs().max().item() <= 6 * im.out_scale + 0.05
    rt_cls = _runtime()
    path = tmp_path / "views.pte"
    ember.export(imv, (x[:1],), oplist=QF.oplist_with_fused()).save(path)
    assert torch.equal(rt_cls(path).run("forward", [x[:1]])[0], imv(x[:1]))


def test_untraceable_model_keeps_its_class(caplog: pytest.LogCaptureFixture) -> None:
    class Branchy(nn.Module):  # data-dependent control flow: torch.fx cannot trace it
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            return y + x if y.sum() > 0 else y

    with caplog.at_level("INFO", logger="ember.quant"):
        qm = Q.quantize(Branchy().eval(), [torch.rand(8, 4)], progress=False)
    assert type(qm).__name__ == "Branchy" and isinstance(qm.fc, Q.QuantizedLinear)
    assert "not torch.fx-traceable" in caplog.text
