"""bench/llm.py's Ember variants (``--ember QUANT[:oBITS][:kvDTYPE]``): what each passes to
``ember.llm.export`` and the KV cache dtype the memory table charges it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench_llm():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_llm", ROOT / "bench" / "llm.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_variants_parse_into_export_arguments() -> None:
    B = _bench_llm()
    assert B.parse_variant("4w32h") == {"quant": "4w32h"}
    assert B.parse_variant("4w32sh:o4") == {"quant": "4w32sh", "output_bits": 4}
    assert B.parse_variant("4w32:kv32") == {"quant": "4w32", "kv_cache": "f32"}
    assert B.parse_variant("8w:o8:kv16") == {"quant": "8w", "output_bits": 8, "kv_cache": "f16"}
    with pytest.raises(SystemExit, match="bad variant"):
        B.parse_variant("4w32h:x1")
    # quantized exports default to an f16 cache (ember.llm.DEFAULT_KV_CACHE)
    assert B.kv_bytes_per_elem("4w32h") == 2 and B.kv_bytes_per_elem("4w32:kv32") == 4
    assert B.runtime_name("pte:4w32sh:o4") == "Ember 4w32sh:o4"
    assert B.runtime_name("Q4_0") == "llama.cpp Q4_0" and B.is_ember("pte:8w")
