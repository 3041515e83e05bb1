"""Static int8 post-training quantization (ember.quant): qparams, weight quantization, the Q/DQ
module against its own arithmetic, export to a `.pte` and execution on Ember's C runtime."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import ember
import ember.quant as Q


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(20, 12), nn.ReLU(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 4)
    ).eval()


def test_qparams_affine_covers_range_and_zero() -> None:
    s, zp = Q.qparams_affine(-1.0, 3.0)
    assert s == pytest.approx(4.0 / 255)
    assert -128 <= zp <= 127
    # lo and hi map to the int8 ends (within one step), and 0 is exactly representable
    assert round(-1.0 / s) + zp == pytest.approx(-128, abs=1)
    assert round(3.0 / s) + zp == pytest.approx(127, abs=1)
    s, zp = Q.qparams_affine(0.0, 1.0)  # ReLU/image-like ranges: zero point at the bottom
    assert zp == -128 and s == pytest.approx(1 / 255)
    assert Q.qparams_affine(0.0, 0.0) == (1.0, 0)  # degenerate range stays usable


def test_weight_qparams_per_channel_symmetric() -> None:
    torch.manual_seed(1)
    w = torch.randn(6, 10) * torch.arange(1, 7).unsqueeze(1)  # channel scales differ
    q, scales = Q.weight_qparams(w)
    assert q.dtype == torch.int8 and q.shape == w.shape
    assert scales.shape == (6,)
    assert q.abs().max().item() == 127  # each row's largest weight maps to +-127
    err = (q.float() * scales[:, None] - w).abs()
    assert (err <= scales[:, None] / 2 + 1e-6).all()  # at most half a step per channel


def test_quantize_replaces_linears_and_matches_reference_arithmetic() -> None:
    model = _mlp()
    torch.manual_seed(2)
    calib = [torch.randn(16, 20) for _ in range(4)]
    qm = Q.quantize(model, calib, progress=False)
    layers = [m for m in qm.modules() if isinstance(m, Q.QuantizedLinear)]
    assert len(layers) == 3
    assert not any(isinstance(m, Q.QuantizedLinear) for m in model.modules())  # original kept
    # Reference: fake-quantize input and weights by hand, then a float linear.
    x = torch.randn(5, 20)
    lin0, ql0 = model[0], qm[0]
    xq = torch.clamp(torch.round(x / ql0.in_scale) + ql0.in_zp, -128, 127)
    xd = (xq - ql0.in_zp) * ql0.in_scale
    wq, ws = Q.weight_qparams(lin0.weight)
    ref = xd @ (wq.float() * ws[:, None]).t() + lin0.bias
    torch.testing.assert_close(ql0(x), ref, rtol=1e-5, atol=1e-5)
    # The whole quantized model stays close to the float one on calibration-like data.
    y, yq = model(x), qm(x)
    assert (y - yq).abs().max().item() < 0.05 * y.abs().max().item() + 0.02


def test_percentile_observer_ignores_outliers() -> None:
    model = nn.Sequential(nn.Linear(4, 2)).eval()
    x = torch.rand(1000, 4)
    x[0, 0] = 1000.0  # one outlier
    mm = Q.quantize(model, [x], observer="minmax", progress=False)[0]
    pc = Q.quantize(model, [x], observer="percentile", percentile=99.0, progress=False)[0]
    assert mm.in_scale > 1000 / 256
    assert pc.in_scale < 2 / 255


def test_quantize_errors() -> None:
    with pytest.raises(Q.QuantizationError, match="empty"):
        Q.quantize(_mlp(), [], progress=False)
    with pytest.raises(Q.QuantizationError, match="no nn.Linear"):
        Q.quantize(nn.Sequential(nn.ReLU()), [torch.randn(2, 3)], progress=False)
    with pytest.raises(Q.QuantizationError, match="observer"):
        Q.quantize(_mlp(), [torch.randn(2, 20)], observer="bogus", progress=False)
    assert issubclass(Q.QuantizationError, ember.EmberError)


def test_quantized_program_runs_on_ember_runtime(tmp_path) -> None:
    try:
        from ember.runtime import RuntimeProgram
    except Exception as e:  # pragma: no cover - depends on the C build
        pytest.skip(f"ember.runtime unavailable: {e}")
    model = _mlp(3)
    torch.manual_seed(4)
    qm = Q.quantize(model, [torch.randn(32, 20)], progress=False)
    x = torch.randn(1, 20)
    path = tmp_path / "q.pte"
    try:
        ember.export(qm, (x,), backend=None).save(path)  # the portable Q/DQ program
        rt = RuntimeProgram(path)
    except OSError as e:  # pragma: no cover - library not built
        pytest.skip(f"C runtime not built: {e}")
    for seed in range(3):
        torch.manual_seed(10 + seed)
        xi = torch.randn(1, 20)
        got = rt.run("forward", [xi])[0]
        torch.testing.assert_close(got, qm(xi).detach(), rtol=1e-5, atol=1e-5)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import pte_summary

    (plan,) = pte_summary.read_file(str(path))
    assert set(plan.operators) >= {
        "quantized_decomposed::quantize_per_tensor.out",
        "quantized_decomposed::dequantize_per_tensor.out",
        "quantized_decomposed::dequantize_per_channel.out",
    }
    # int8 weights are stored as int8 constants (1 byte per weight, not 4)
    consts = [v.tensor for v in plan.values if v.tensor is not None and v.tensor.constant]
    assert sum(t.nbytes for t in consts if t.dtype == 1) == 20 * 12 + 12 * 8 + 8 * 4


# -- integer-only lowering (ember::quantized_linear) --------------------------------------------
def _fused_small(seed: int = 5):
    import ember.quant.fused as F

    model = _mlp(seed)
    torch.manual_seed(seed)
    calib = [torch.randn(32, 20) for _ in range(2)]
    qm = Q.quantize(model, calib, progress=False)
    return F, qm, F.lower_to_integer(qm, calib), calib


def test_quantize_multiplier_represents_scale() -> None:
    import ember.quant.fused as F

    for scale in (1e-6, 0.0003, 0.25, 0.5, 0.999999, 1.0, 3.7):
        m, s = F.quantize_multiplier(scale)
        assert 1 << 30 <= m < 1 << 31
        assert m * 2.0 ** (s - 31) == pytest.approx(scale, rel=1e-9)
    with pytest.raises(Q.QuantizationError):
        F.quantize_multiplier(0.0)


def test_integer_lowering_tracks_qdq_model() -> None:
    F, qm, im, calib = _fused_small()
    layers = list(im.layers)
    assert len(layers) == 3
    assert layers[0].act_min == layers[0].out_zp  # ReLU folded into the clamp
    assert layers[-1].act_min == -128  # no ReLU after the last layer
    x = calib[0][:8]
    with torch.no_grad():
        y_q, y_i = qm(x), im(x)
    # One int8 step of the output scale per layer at most, roughly.
    assert (y_q - y_i).abs().max().item() <= 4 * layers[-1].out_scale + 1e-6
    # The reference's requantization equals float rescaling within one step.
    acc = torch.randint(-(1 << 20), 1 << 20, (1000,), dtype=torch.int64)
    m, s = F.quantize_multiplier(0.0123)
    r = (acc * m + (1 << (30 - s))) >> (31 - s)
    assert (r - torch.round(acc.double() * 0.0123)).abs().max().item() <= 1


def test_quantized_linear_c_kernel_is_bit_exact(tmp_path) -> None:
    try:
        from ember import _lib
        from ember.runtime import RuntimeProgram

        L = _lib.lib()
        L.em_register_quantized_kernels()
    except (ImportError, OSError, AttributeError) as e:
        pytest.skip(f"C runtime with kernels/quantized not built: {e}")
    F, _, im, _ = _fused_small(6)
    x = torch.randn(1, 20)
    path = tmp_path / "fused.pte"
    ember.export(im, (x,), oplist=F.oplist_with_fused()).save(path)
    rt = RuntimeProgram(path)
    for seed in range(20):
        torch.manual_seed(100 + seed)
        xi = torch.randn(1, 20) * (1 + seed % 3)  # some inputs saturate
        got = rt.run("forward", [xi])[0]
        assert torch.equal(got, im(xi).detach()), seed


def test_mse_observer_minimizes_quantization_error() -> None:
    """The MSE observer's range quantizes the calibration batch with no more error than the
    min/max or percentile ranges (at 8 bits it rarely clips much: outliers' clipping error
    outweighs the finer grid)."""
    model = nn.Sequential(nn.Linear(4, 2)).eval()
    g = torch.Generator().manual_seed(0)
    batches = {
        "gaussian": torch.randn(2000, 4, generator=g),
        "laplace+outliers": torch.distributions.Laplace(0.0, 1.0).sample((2000, 4)) * 0.1,
        "skewed": torch.rand(2000, 4, generator=g) ** 4 * 3 - 0.1,
    }
    batches["laplace+outliers"][:2, 0] = torch.tensor([4.0, -3.0])

    def qerr(x: torch.Tensor, scale: float, zp: int) -> float:
        q = torch.clamp(torch.round(x / scale) + zp, -128, 127)
        return ((q - zp) * scale - x).pow(2).mean().item()

    for name, x in batches.items():
        errs = {}
        for obs in ("minmax", "percentile", "mse"):
            ql = Q.quantize(model, [x], observer=obs, percentile=99.0, progress=False)[0]
            errs[obs] = qerr(x, ql.in_scale, ql.in_zp)
        assert errs["mse"] <= errs["minmax"] * (1 + 1e-6), (name, errs)
        assert errs["mse"] <= errs["percentile"] * (1 + 1e-6), (name, errs)
