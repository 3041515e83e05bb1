"""One source for each fact: the dtype table (ember.dtypes) agrees with the C runtime, the one
``.def`` parser (ember.opdefs) reads every EM_OP line and serves both the exporter and the
selective build, and the one ``.pte`` reader (ember.reader) serves the build tools without torch.

Cost: about 2 s (one subprocess of the selective build).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import torch

from ember import dtypes, opdefs, oplist
from ember.reader import read_program

ROOT = Path(__file__).resolve().parents[2]


def test_table_matches_the_c_runtime() -> None:
    header = (ROOT / "include/ember/tensor.h").read_text()
    enum = {int(v): n.lower() for n, v in re.findall(r"EM_DTYPE_(\w+) = (\d+)", header)}
    del enum[30]  # EM_DTYPE_COUNT
    traits = re.findall(
        r'\[EM_DTYPE_(\w+)\] = \{"(\w+)", (\d+)\}', (ROOT / "src/tensor.c").read_text()
    )
    assert len(traits) == len(dtypes.TABLE) == len(enum)
    for cname, name, size in traits:
        code = next(c for c, n in enum.items() if n == cname.lower())
        d = dtypes.BY_CODE[code]
        assert (d.name, d.size) == (name, int(size)), cname
    # The mask names of kernels/portable/kutil.h: EM_DT_<X> is EM_DTYPE_BIT(EM_DTYPE_<X>).
    kutil = (ROOT / "kernels/portable/kutil.h").read_text()
    singles = re.findall(r"#define EM_DT_(\w+)\s+EM_DTYPE_BIT\(EM_DTYPE_(\w+)\)", kutil)
    assert {a: 1 << next(c for c, n in enum.items() if n == b.lower()) for a, b in singles} == (
        dtypes.MASK_BITS
    )
    for group, expr in re.findall(r"#define EM_DT_(\w+)\s+\(([^)]*)\)", kutil):
        assert opdefs.parse_dtype_mask(expr) == dtypes.MASK_GROUPS[group], group


def test_torch_side() -> None:
    for t, code in dtypes.torch_to_code().items():
        assert dtypes.SIZES[code] == t.itemsize, t
    assert dtypes.code_of(torch.float32) == 6 and dtypes.code_of(torch.bfloat16) == 15
    plain = dtypes.torch_to_code(dtypes.PLAIN_KINDS)
    assert torch.qint8 not in plain and torch.complex64 in plain and torch.uint64 in plain


def test_every_em_op_line_is_parsed() -> None:
    lines = [
        ln
        for p in (ROOT / "kernels").glob("*/*.def")
        for ln in p.read_text().splitlines()
        if ln.lstrip().startswith("EM_OP(")
    ]
    table = opdefs.read_kernels_dir(ROOT / "kernels")
    assert len(table) == len(lines) > 300
    assert oplist.load_oplist().kernels.keys() == table.keys()
    add = table["aten::add.out"]
    assert add.c_function == "em_add_out" and add.dtype_mask & dtypes.MASK_BITS["F32"]


def test_build_tools_share_the_parser_and_reader_without_torch(tmp_path: Path) -> None:
    """tools/selective_build.py (run by CMake with any Python) imports neither torch nor the
    ember package, and selects from the same table as the exporter."""
    code = (
        "import sys, runpy; sys.modules['torch'] = None; sys.modules['ember'] = None; "
        f"sys.argv = ['selective_build.py', {str(ROOT / 'tests/fixtures/mlp.pte')!r}, "
        f"'-o', {str(tmp_path)!r}]; runpy.run_path({str(ROOT / 'tools/selective_build.py')!r}, "
        "run_name='__main__')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    selected = (tmp_path / "selected_ops.txt").read_text().split()
    (plan,) = read_program((ROOT / "tests/fixtures/mlp.pte").read_bytes())
    assert sorted(plan.operators) == sorted(s for s in selected if "::" in s)
    assert f"of {len(opdefs.read_kernels_dir(ROOT / 'kernels'))} kernels" in r.stdout
