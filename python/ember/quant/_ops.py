"""Out-variant schemas of ExecuTorch's ``quantized_decomposed`` operators.

PyTorch defines only the functional Q/DQ operators; ExecuTorch adds ``.out`` overloads (with the
same schemas as here, `kernels/quantized/quantized.yaml`) and its runtime calls those. Registering
them lets the exporter's out-variant pass find the overload the runtime's kernel table names
(``quantized_decomposed::quantize_per_tensor.out``...). Idempotent.
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
}

_LIB: torch.library.Library | None = None


def _impl(functional):
    def run(*args, out, **kwargs):
        out.copy_(functional(*args, **kwargs))
        return out

    return run


def register_out_variants() -> None:
    """Defines the ``.out`` overloads that PyTorch itself lacks (once per process)."""
    global _LIB
    if _LIB is not None:
        return
    qd = torch.ops.quantized_decomposed
    missing = {
        k: v for k, v in _SCHEMAS.items() if "out" not in getattr(qd, k.split(".")[0]).overloads()
    }
    lib = torch.library.Library("quantized_decomposed", "FRAGMENT")
    for name, schema in missing.items():
        base = name.split(".")[0]
        lib.define(schema)
        lib.impl(name, _impl(getattr(qd, base).default), "CompositeExplicitAutograd")
    _LIB = lib
