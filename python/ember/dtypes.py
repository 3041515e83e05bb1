"""The one table of tensor element types: ExecuTorch's ScalarType codes (schema/scalar_type.fbs),
which are also the runtime's ``em_dtype`` numbers (include/ember/tensor.h), with the name
``em_dtype_name()`` prints, the element size ``em_dtype_size()`` gives (src/tensor.c) and the
``torch`` dtype of the same name.

Every Python module that needs one of these facts reads it here: the exporter (ScalarType codes of
tensors), the ctypes runtime binding (which torch dtypes cross it), the ``.def`` parser (the
``EM_DT_*`` mask bits: bit ``code``, as ``EM_DTYPE_BIT`` in C), the ``.pte`` reader (names, sizes).
tests/python/test_dtypes.py checks this table against the C sources.

Standard library only (the build tools load it without torch): the torch side is built on first
use by :func:`torch_to_code`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DType:
    """One ScalarType."""

    code: int  # ScalarType / em_dtype number
    name: str  # as em_dtype_name() prints it
    size: int  # bytes per element (packed sub-byte types: 1)
    kind: str  # int | uint | float | complex | bool | quantized | bits | float8
    torch: str | None  # the attribute of the torch module, when torch has the type


TABLE: tuple[DType, ...] = (
    DType(0, "u8", 1, "uint", "uint8"),
    DType(1, "i8", 1, "int", "int8"),
    DType(2, "i16", 2, "int", "int16"),
    DType(3, "i32", 4, "int", "int32"),
    DType(4, "i64", 8, "int", "int64"),
    DType(5, "f16", 2, "float", "float16"),
    DType(6, "f32", 4, "float", "float32"),
    DType(7, "f64", 8, "float", "float64"),
    DType(8, "c32", 4, "complex", "complex32"),
    DType(9, "c64", 8, "complex", "complex64"),
    DType(10, "c128", 16, "complex", "complex128"),
    DType(11, "bool", 1, "bool", "bool"),
    DType(12, "qi8", 1, "quantized", "qint8"),
    DType(13, "qu8", 1, "quantized", "quint8"),
    DType(14, "qi32", 4, "quantized", "qint32"),
    DType(15, "bf16", 2, "float", "bfloat16"),
    DType(16, "qu4x2", 1, "quantized", "quint4x2"),
    DType(17, "qu2x4", 1, "quantized", "quint2x4"),
    DType(18, "bits1x8", 1, "bits", None),
    DType(19, "bits2x4", 1, "bits", None),
    DType(20, "bits4x2", 1, "bits", None),
    DType(21, "bits8", 1, "bits", None),
    DType(22, "bits16", 2, "bits", "bits16"),
    DType(23, "f8e5m2", 1, "float8", "float8_e5m2"),
    DType(24, "f8e4m3fn", 1, "float8", "float8_e4m3fn"),
    DType(25, "f8e5m2fnuz", 1, "float8", "float8_e5m2fnuz"),
    DType(26, "f8e4m3fnuz", 1, "float8", "float8_e4m3fnuz"),
    DType(27, "u16", 2, "uint", "uint16"),
    DType(28, "u32", 4, "uint", "uint32"),
    DType(29, "u64", 8, "uint", "uint64"),
)
BY_CODE: dict[int, DType] = {d.code: d for d in TABLE}
NAMES: dict[int, str] = {d.code: d.name for d in TABLE}
SIZES: dict[int, int] = {d.code: d.size for d in TABLE}
CODES: dict[str, int] = {d.name: d.code for d in TABLE}

# The types the kernels' dtype masks name (``EM_DT_<NAME>``, kernels/portable/kutil.h), each the
# bit EM_DTYPE_BIT(code), and the groups kutil.h defines from them.
MASK_BITS: dict[str, int] = {
    n.upper(): 1 << CODES[n]
    for n in ("u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64", "bool")
}
MASK_GROUPS: dict[str, int] = {
    "FLOATS": MASK_BITS["F16"] | MASK_BITS["BF16"] | MASK_BITS["F32"] | MASK_BITS["F64"],
    "INTS": MASK_BITS["U8"]
    | MASK_BITS["I8"]
    | MASK_BITS["I16"]
    | MASK_BITS["I32"]
    | MASK_BITS["I64"],
}
MASK_GROUPS["REALS"] = MASK_GROUPS["FLOATS"] | MASK_GROUPS["INTS"]
MASK_GROUPS["ALL"] = MASK_GROUPS["REALS"] | MASK_BITS["BOOL"]
MASK_GROUPS["INDEX"] = MASK_BITS["I32"] | MASK_BITS["I64"]  # kernels/portable/shape_util.h


@functools.cache
def torch_to_code(kinds: frozenset[str] | None = None) -> dict[Any, int]:
    """``{torch.dtype: code}`` for the types this torch has (of the given kinds; all if None)."""
    import torch

    return {
        getattr(torch, d.torch): d.code
        for d in TABLE
        if d.torch and hasattr(torch, d.torch) and (kinds is None or d.kind in kinds)
    }


# The element types a tensor may have when it crosses the runtime binding (python/ember/_lib.py):
# plain numbers, not the quantized, bit-packed or float8 ones.
PLAIN_KINDS = frozenset({"int", "uint", "float", "complex", "bool"})


def code_of(dtype: Any) -> int:
    """The ScalarType code of a torch dtype (KeyError for a type the table lacks)."""
    return torch_to_code()[dtype]


def size_of(dtype: Any) -> int:
    """Bytes per element of a torch dtype."""
    return SIZES[code_of(dtype)]
