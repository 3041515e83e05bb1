"""test_layering.py — the three former call circles of the C sources stay broken (issue 28 item 4).

Each group below lists files from the top layer down. A file may call functions of the files below
it, never one defined only in a file above it: for every pair (upper, lower) the non-static
functions the upper file defines (a definition starts at column 0 and its parameter list is
followed by ``{``) must not appear as ``name(`` in the lower file (comments stripped). A regex over
the source text, no C parser: it fails as soon as a lower file calls back up, which is how the
circles ``program.c`` <-> ``verify.c``, the tokenizer loaders <-> ``tokenizer.c`` and
``linear_q.c`` <-> ``linear_q4.c`` / ``linear_q8.c`` began.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Top layer first. The files of one tuple form one layer: each is checked against every file of
# every layer above it.
LAYERS: dict[str, list[tuple[str, ...]]] = {
    "program": [
        ("src/program.c",),
        ("src/verify.c",),
        ("src/program_segments.c",),
    ],
    "tokenizer": [
        ("extension/tokenizer.c",),
        (
            "extension/tokenizer_json.c",
            "extension/tokenizer_gguf.c",
            "extension/tokenizer_compact.c",
        ),
        ("extension/tokenizer_model.c",),
        ("extension/tokenizer_pretok.c",),
        ("extension/tokenizer_unicode.c",),
    ],
    "linear_q": [
        ("kernels/quantized/linear_q.c",),
        (
            "kernels/quantized/linear_q4.c",
            "kernels/quantized/linear_q8.c",
            "kernels/quantized/linear_q_gemm__avx2.c",
            "kernels/quantized/linear_q_gemm__avx512vnni.c",
            "kernels/quantized/linear_q_prefill__avx512vnni.c",
        ),
    ],
}

# A few functions each top file must be found to define: guards the definition regex itself.
EXPECTED = {
    "src/program.c": {"em_program_load", "em_program_method_meta"},
    "extension/tokenizer.c": {"em_tokenizer_encode", "em_tokenizer_load"},
    "kernels/quantized/linear_q.c": {"em_linear_q_run", "em_linear_q4_out", "em_linear_q8_out"},
}

_DEF = re.compile(
    r"^(?!static\b|typedef\b|extern\b|return\b)"  # column 0, not a static or a declaration
    r"[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{",  # type name(params) {
    re.M,
)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _strip_comments(text: str) -> str:
    return _COMMENT.sub(" ", text)


def defined_functions(text: str) -> set[str]:
    """Names of the non-static functions defined in C source `text`."""
    return set(_DEF.findall(_strip_comments(text)))


def upward_calls(upper: str, lower: str) -> list[str]:
    """Functions defined only in source `upper` that source `lower` calls (or names with `(`)."""
    own = defined_functions(lower)
    body = _strip_comments(lower)
    return sorted(
        name
        for name in defined_functions(upper) - own
        if re.search(r"\b" + re.escape(name) + r"\s*\(", body)
    )


def _read(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def _pairs() -> list[tuple[str, str]]:
    out = []
    for layers in LAYERS.values():
        for i, upper_layer in enumerate(layers):
            for lower_layer in layers[i + 1 :]:
                out += [(u, lo) for u in upper_layer for lo in lower_layer]
    return out


def test_definition_regex_finds_the_entry_points() -> None:
    for rel, names in EXPECTED.items():
        found = defined_functions(_read(rel))
        assert names <= found, f"{rel}: {sorted(names - found)} not found among {sorted(found)}"


def test_checker_catches_a_call_up() -> None:
    upper = (
        "static int helper(void) { return 1; }\n"
        "int top_api(int x,\n            int y) {\n  return x;\n}\n"
        "int top_api(int x, int y);\n"
    )
    assert defined_functions(upper) == {"top_api"}
    assert upward_calls(upper, "int low(void) { return top_api(1, 2); }\n") == ["top_api"]
    assert upward_calls(upper, "/* top_api() is above */ int low(void) { return 0; }\n") == []
    assert upward_calls(upper, "int low(void) { return helper(); }\n") == []


@pytest.mark.parametrize(("upper", "lower"), _pairs())
def test_lower_file_does_not_call_up(upper: str, lower: str) -> None:
    bad = upward_calls(_read(upper), _read(lower))
    assert not bad, (
        f"{lower} calls {bad}, defined in {upper} above it: a dependency circle; move the "
        f"function down into {lower}'s layer (or below) instead"
    )
