#!/usr/bin/env python3
"""selective_build.py — register only the kernels a model uses.

Reads one or more `.pte` files (and/or an explicit operator list), finds every operator their
methods call and the dtypes of the tensors passed to each, and writes into OUTDIR:

* ``selected_ops.txt`` — one operator a line, with the dtypes it is called with as a comment;
* ``selected_kernels.c`` — a definition of ``em_register_portable_kernels()`` that registers only
  those operators, made of the matching ``EM_OP`` lines copied from ``kernels/portable/ops*.def``
  and ``kernels/prim/ops.def`` (the one operator list of the runtime). Compile it instead of the
  full table (``-DEMBER_SELECTIVE_BUILD`` makes kernels/portable/register.c drop its own) and link
  with ``--gc-sections``: kernels nobody registers are not in the binary;
* ``kernel_sources.txt`` — the kernel .c files those kernels need (transitively, by a textual
  scan), so a firmware build can compile only them;
* ``selected_dtypes.h`` — ``EMBER_SELECTED_DTYPE_MASK``, the dtypes any selected operator sees
  (EM_DTYPE_BIT numbering), for kernels that compile dtype branches conditionally.

An operator no ``.def`` file provides is reported by name and the exit status is 1 (unless
``--allow-missing``, which leaves it out and lets the runtime report it at prepare time).

    python3 tools/selective_build.py model.pte -o build/selected
    python3 tools/selective_build.py --ops aten::add.out,aten::mm.out -o build/selected

Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pte_summary import DTYPE_NAMES, PteError, read_file  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
EM_OP_RE = re.compile(
    r'^\s*EM_OP\(\s*"([^"]+)"\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*(-?\d+|EM_ARGS_VARIABLE)\s*,'
    r"\s*(.*)\)\s*$"
)
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
DT_BITS = {"U8": 0, "I8": 1, "I16": 2, "I32": 3, "I64": 4, "F16": 5, "F32": 6, "F64": 7,
           "BOOL": 11, "BF16": 15}  # fmt: skip
DT_GROUPS = {
    "FLOATS": ["F16", "BF16", "F32", "F64"],
    "INTS": ["U8", "I8", "I16", "I32", "I64"],
}
DT_GROUPS["REALS"] = DT_GROUPS["FLOATS"] + DT_GROUPS["INTS"]
DT_GROUPS["ALL"] = DT_GROUPS["REALS"] + ["BOOL"]


@dataclass
class DefEntry:
    name: str
    fn: str
    n_args: str
    dtypes: str  # the C expression, copied verbatim
    line: str
    source: str  # the .def file it came from

    def dtype_mask(self) -> int | None:
        """The mask as em_dtype bits, or None if the expression is not made of EM_DT_ names."""
        mask = 0
        for tok in re.split(r"[\s|()]+", self.dtypes.strip()):
            if not tok:
                continue
            m = re.fullmatch(r"EM_DT_([A-Z0-9]+)", tok)
            if not m:
                return None
            names = DT_GROUPS.get(m.group(1), [m.group(1)])
            for n in names:
                if n not in DT_BITS:
                    return None
                mask |= 1 << DT_BITS[n]
        return mask


def read_defs(path: Path, kernels_dir: Path, seen: set[Path] | None = None) -> list[DefEntry]:
    """EM_OP entries of `path`, following its #include lines (relative to `kernels_dir`)."""
    seen = set() if seen is None else seen
    path = path.resolve()
    if path in seen or not path.exists():
        return []
    seen.add(path)
    out: list[DefEntry] = []
    for line in path.read_text().splitlines():
        m = INCLUDE_RE.match(line)
        if m:
            inc = kernels_dir / m.group(1)
            if not inc.exists():
                inc = path.parent / m.group(1)
            out += read_defs(inc, kernels_dir, seen)
            continue
        m = EM_OP_RE.match(line)
        if m:
            out.append(DefEntry(m.group(1), m.group(2), m.group(3), m.group(4).strip(),
                                line.strip(), str(path)))  # fmt: skip
    return out


def kernel_table(kernels_dir: Path) -> dict[str, DefEntry]:
    """Every operator the runtime can register, by full name (a later entry replaces)."""
    table: dict[str, DefEntry] = {}
    for d in (
        kernels_dir / "portable" / "ops.def",
        kernels_dir / "prim" / "ops.def",
        kernels_dir / "quantized" / "ops.def",
    ):
        for e in read_defs(d, kernels_dir):
            table[e.name] = e
    return table


def model_ops(paths: list[str]) -> tuple[dict[str, set[int]], dict[str, set[int]], list[str]]:
    """Operators of `paths` with the dtypes of all their tensor arguments, with the dtypes of
    their primary (first) tensor argument, and the delegate ids."""
    ops: dict[str, set[int]] = {}
    primary: dict[str, set[int]] = {}
    delegates: list[str] = []
    for p in paths:
        for plan in read_file(p):
            for op, dts in plan.op_dtypes().items():
                ops.setdefault(op, set()).update(dts)
            for op, dts in plan.op_primary_dtypes().items():
                primary.setdefault(op, set()).update(dts)
            delegates += [d for d in plan.delegates if d not in delegates]
    return ops, primary, delegates


DEF_RE = re.compile(
    r"^(?!static\b|typedef\b|extern\b|return\b)[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)\s*\("
)
CALL_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def kernel_sources(kernels_dir: Path, fns: list[str]) -> list[Path]:
    """The kernel .c files the functions `fns` need, transitively (a textual approximation of
    what the linker would pull from an archive: a file is needed when it defines, at column 0,
    a function a needed file calls). Lets a firmware build compile only those files."""
    defs: dict[str, Path] = {}
    calls: dict[Path, set[str]] = {}
    for src in sorted(kernels_dir.glob("*/*.c")):
        text = re.sub(r"/\*.*?\*/", "", src.read_text(errors="replace"), flags=re.S)
        for line in text.splitlines():
            m = DEF_RE.match(line)
            if m and not line.rstrip().endswith(";"):
                defs.setdefault(m.group(1), src)
        calls[src] = set(CALL_RE.findall(text))
    need: list[Path] = []
    todo = [f for f in fns]
    seen: set[str] = set()
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        src = defs.get(fn)
        if src is None or src in need:
            continue
        need.append(src)
        todo += [c for c in calls[src] if c in defs and c not in seen]
    return sorted(need)


def render_c(selected: list[DefEntry], sources: list[str]) -> str:
    lines = [
        "/*",
        " * selected_kernels.c — GENERATED by tools/selective_build.py; do not edit.",
        f" * Operators used by: {', '.join(sources) or '(explicit list)'}.",
        " * Registers only these kernels; compile with -DEMBER_SELECTIVE_BUILD so",
        " * kernels/portable/register.c drops the full table, and link with --gc-sections.",
        " */",
        '#include "portable/kutil.h"',
        "",
    ]
    for e in selected:
        lines.append(f"em_status {e.fn}(em_kernel_ctx *ctx, em_evalue **args);")
    lines += ["", "static const em_kernel_entry k_selected[] = {"]
    for e in selected:
        src = Path(e.source).name
        lines.append(f'    {{"{e.name}", {e.fn}, {e.n_args}, {e.dtypes}}}, /* {src} */')
    lines += [
        "    {NULL, NULL, 0, 0}};",
        "",
        "em_status em_register_portable_kernels(void) {",
        "  return em_register_kernels(k_selected, sizeof k_selected / sizeof k_selected[0] - 1);",
        "}",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help=".pte files whose operators to keep")
    ap.add_argument("--ops", default="", help="extra operators, comma-separated (full names)")
    ap.add_argument("-o", "--out-dir", required=True)
    ap.add_argument("--kernels-dir", default=str(REPO / "kernels"))
    ap.add_argument("--allow-missing", action="store_true",
                    help="leave out operators no .def provides instead of failing")  # fmt: skip
    args = ap.parse_args(argv)

    try:
        ops, primary, delegates = model_ops(args.models)
    except (OSError, PteError) as e:
        print(f"selective_build: {e}", file=sys.stderr)
        return 2
    for name in filter(None, (s.strip() for s in re.split(r"[,;\s]+", args.ops))):
        if name.endswith(".pte") or name.endswith(".bpte"):
            more, more_primary, _ = model_ops([name])
            for k, v in more.items():
                ops.setdefault(k, set()).update(v)
            for k, v in more_primary.items():
                primary.setdefault(k, set()).update(v)
        else:
            ops.setdefault(name, set())
    table = kernel_table(Path(args.kernels_dir))

    missing = sorted(op for op in ops if op not in table)
    selected = [table[op] for op in sorted(ops) if op in table]
    warnings = []
    used_mask = 0
    for e in selected:
        mask = e.dtype_mask()
        for dt in sorted(ops[e.name]):
            used_mask |= 1 << dt
        for dt in sorted(primary.get(e.name, ())):
            if mask is not None and not mask >> dt & 1:
                warnings.append(f"{e.name}: called with {DTYPE_NAMES.get(dt, dt)}, "
                                f"which its kernel does not list ({e.dtypes})")  # fmt: skip

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "selected_ops.txt", "w") as f:
        for op in sorted(ops):
            dts = ",".join(DTYPE_NAMES.get(d, str(d)) for d in sorted(ops[op]))
            flag = "  MISSING" if op in missing else ""
            f.write(f"{op}  # dtypes: {dts or '-'}{flag}\n")
    _write_if_changed(out / "selected_kernels.c", render_c(selected, args.models))
    _write_if_changed(
        out / "selected_dtypes.h",
        "/* GENERATED by tools/selective_build.py: dtypes the selected operators see. */\n"
        "#ifndef EMBER_SELECTED_DTYPES_H\n#define EMBER_SELECTED_DTYPES_H\n"
        f"#define EMBER_SELECTED_DTYPE_MASK 0x{used_mask:08x}u\n#endif\n",
    )
    srcs = kernel_sources(Path(args.kernels_dir), [e.fn for e in selected])
    _write_if_changed(out / "kernel_sources.txt", "".join(f"{p}\n" for p in srcs))
    print(f"selective_build: {len(selected)} of {len(table)} kernels selected -> {out}")
    for e in selected:
        dts = ",".join(DTYPE_NAMES.get(d, str(d)) for d in sorted(ops[e.name]))
        print(f"  {e.name:48s} {e.fn:40s} dtypes: {dts or '-'}")
    for d in delegates:
        print(f"selective_build: note: delegate '{d}' is used; link its backend yourself")
    for w in warnings:
        print(f"selective_build: warning: {w}", file=sys.stderr)
    if missing:
        print("selective_build: missing kernel(s): " + ", ".join(missing), file=sys.stderr)
        if not args.allow_missing:
            return 1
    return 0


def _write_if_changed(path: Path, text: str) -> None:
    """Writes `text` unless the file already holds it (keeps make/ninja from rebuilding)."""
    if path.exists() and path.read_text() == text:
        return
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
