"""Out-variant schemas of ExecuTorch's ``quantized_decomposed`` operators.

PyTorch defines only the functional Q/DQ operators; ExecuTorch adds ``.out`` overloads (with the
same schemas as here, `kernels/quantized/quantized.yaml`) and its runtime calls those. Registering
them lets the exporter's out-variant pass find the overload the runtime's kernel table names
(``quantized_decomposed::quantize_per_tensor.out``...), for the per-tensor, per-channel and
per-token operators and dynamic per-tensor quantization (``choose_qparams.tensor``). Idempotent.
"""

from __future__ import annotations

import torch

import torch.ao.quantization.fx._decomposed  # noqa: F401  isort: skip

_SCHEMAS = {
    "quantize_per_tensor.out": "quantize_per_tensor.out(Tensor input, float scale, int zero_point, "
    "int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)",
    "dequantize_per_tensor.out": "dequantize_per_tensor.out(Tensor input, float scale, "
    "int zero_point, int quant_min, int quant_max, ScalarType dtype, *, "
    "ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    "dequantize_per_channel.out": "dequantize_per_channel.out(Tensor input, Tensor scales, "
    "Tensor? zero_points, int axis, int quant_min, int quant_max, ScalarType dtype, *, "
    "ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    "choose_qparams_per_token_asymmetric.out": "choose_qparams_per_token_asymmetric.out("
    "Tensor input, ScalarType dtype, *, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> "
    "(Tensor(a!), Tensor(b!))",
    "quantize_per_token.out": "quantize_per_token.out(Tensor input, Tensor scales, "
    "Tensor zero_points, int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> "
    "Tensor(a!)",
    "dequantize_per_token.out": "dequantize_per_token.out(Tensor input, Tensor scales, "
    "Tensor zero_points, int quant_min, int quant_max, ScalarType dtype, "
    "ScalarType output_dtype, *, Tensor(a!) out) -> Tensor(a!)",
    # dynamic per-tensor quantization (XNNPACKQuantizer's is_dynamic=True): qparams computed at
    # run time, then quantize / dequantize with tensor qparams
    "choose_qparams.Tensor_out": "choose_qparams.Tensor_out(Tensor input, int quant_min, "
    "int quant_max, float eps, ScalarType dtype, *, Tensor(a!) scale_out, "
    "Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))",
    "quantize_per_tensor.Tensor_out": "quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, "
    "Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> "
    "Tensor(a!)",
    "dequantize_per_tensor.Tensor_out": "dequantize_per_tensor.Tensor_out(Tensor input, "
    "Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, "
    "ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
}
# The functional overload each out variant computes (``default`` unless named here).
_FUNCTIONAL = {
    "choose_qparams.Tensor_out": "tensor",
    "quantize_per_tensor.Tensor_out": "tensor",
    "dequantize_per_tensor.Tensor_out": "tensor",
}

_LIB: torch.library.Library | None = None


def _impl(functional):
    def run(*args, out, **kwargs):
        out.copy_(functional(*args, **kwargs))
        return out

    return run


def _impl2(functional):
    """Two results written to ``scale_out`` / ``zero_point_out``."""

    def run(*args, scale_out, zero_point_out):
        s, z = functional(*args)
        scale_out.copy_(s)
        zero_point_out.copy_(z)
        return scale_out, zero_point_out

    return run


def register_out_variants() -> None:
    """Defines the ``.out`` overloads that PyTorch itself lacks (once per process)."""
    global _LIB
    if _LIB is not None:
        return
    qd = torch.ops.quantized_decomposed
    missing = {
        k: v
        for k, v in _SCHEMAS.items()
        if k.split(".")[1] not in getattr(qd, k.split(".")[0]).overloads()
    }
    lib = torch.library.Library("quantized_decomposed", "FRAGMENT")
    for name, schema in missing.items():
        base = name.split(".")[0]
        lib.define(schema)
        make = _impl2 if "scale_out" in schema else _impl
        functional = getattr(getattr(qd, base), _FUNCTIONAL.get(name, "default"))
        lib.impl(name, make(functional), "CompositeExplicitAutograd")
    _LIB = lib
