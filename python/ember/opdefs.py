"""The one parser of the runtime's operator lists, ``kernels/{portable,prim,quantized}/ops*.def``.

Each line ``EM_OP("aten::add.out", em_add_out, 5, EM_DT_REALS)`` declares a kernel: full name,
C function, number of arguments including the returns (or ``EM_ARGS_VARIABLE``), and the dtype
mask of its primary tensor (``EM_DT_*`` names or-ed together, kernels/portable/kutil.h; bit
``code`` for ScalarType ``code``, as ``EM_DTYPE_BIT`` in C). ``#include "x.def"`` lines are
followed (beside the including file first, then from the kernels folder).

Read by the exporter's operator list (python/ember/oplist.py) and by the selective build
(tools/selective_build.py), which copies the entries it keeps into a generated C table.
Standard library only: the build tools load it without torch.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from ember import dtypes as _dtypes
else:  # loaded by path by the stdlib-only tools (tools/ember_tree.py), without the package
    import _ember_tree_dtypes as _dtypes  # type: ignore[import-not-found,no-redef]

MASK_BITS: dict[str, int] = _dtypes.MASK_BITS
MASK_GROUPS: dict[str, int] = _dtypes.MASK_GROUPS

log = logging.getLogger(__name__)

DTYPE_BITS = MASK_BITS
DTYPE_GROUPS = MASK_GROUPS
ALL_DTYPES_MASK = MASK_GROUPS["ALL"]

_EM_OP_RE = re.compile(
    r'^\s*EM_OP\(\s*"([^"]+)"\s*,\s*([A-Za-z_]\w*)\s*,\s*(-?\d+|EM_ARGS_VARIABLE)\s*,\s*(.*)\)'
)
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


@dataclass(frozen=True)
class KernelInfo:
    """One registered kernel: full name (``ns::op.overload``), arg count (-1 = any), dtype mask;
    from a ``.def`` file also its C function, the mask's C expression, the file and the line."""

    name: str
    n_args: int
    dtype_mask: int
    c_function: str = ""
    dtype_expr: str = ""
    source: str = ""
    line: str = ""


def parse_dtype_mask(expr: str) -> int:
    """Evaluate ``EM_DT_F32 | EM_DT_F64``-style masks (also accepts integer literals)."""
    mask = 0
    for tok in re.split(r"[\s|()]+", expr):
        if not tok:
            continue
        if tok.startswith("EM_DT_"):
            key = tok[len("EM_DT_") :]
            if key in MASK_BITS:
                mask |= MASK_BITS[key]
            elif key in MASK_GROUPS:
                mask |= MASK_GROUPS[key]
            else:
                raise ValueError(f"unknown dtype mask name {tok!r}")
        else:
            mask |= int(tok, 0)
    return mask


def parse_ops_def(text: str, source: str = "<string>") -> dict[str, KernelInfo]:
    """Parse the text of an ``ops.def`` file into ``{kernel name: KernelInfo}``.

    Lines that are not ``EM_OP(...)`` (comments, blank lines, preprocessor) are skipped; an entry
    whose mask names an unknown ``EM_DT_`` is logged and skipped.
    """
    out: dict[str, KernelInfo] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _EM_OP_RE.match(line)
        if not m:
            continue
        name, fn, nargs, expr = m.groups()
        try:
            n = -1 if nargs == "EM_ARGS_VARIABLE" else int(nargs)
            out[name] = KernelInfo(
                name, n, parse_dtype_mask(expr), fn, expr.strip(), source, line.strip()
            )
        except ValueError as e:
            log.warning("%s:%d: %s", source, lineno, e)
    return out


def read_ops_def(path: Path, root: Path, _depth: int = 0) -> dict[str, KernelInfo]:
    """Parse an ``ops.def`` file, following ``#include "x.def"`` lines (resolved against the
    including file's folder, then ``root``, the kernels folder)."""
    out: dict[str, KernelInfo] = {}
    if _depth > 8:
        return out
    for line in path.read_text().splitlines():
        m = _INCLUDE_RE.match(line)
        if m:
            for cand in (path.parent / m.group(1), root / m.group(1)):
                if cand.is_file():
                    out.update(read_ops_def(cand, root, _depth + 1))
                    break
            else:
                log.warning("%s: cannot find included %s", path, m.group(1))
            continue
        out.update(parse_ops_def(line, str(path)))
    return out


DEF_FILES = ("portable", "prim", "quantized")


def read_kernels_dir(kernels_dir: Path) -> dict[str, KernelInfo]:
    """Every kernel of ``kernels_dir/{portable,prim,quantized}/ops.def`` (a later one replaces)."""
    out: dict[str, KernelInfo] = {}
    for sub in DEF_FILES:
        p = kernels_dir / sub / "ops.def"
        if p.is_file():
            out.update(read_ops_def(p, kernels_dir))
    return out
