#!/usr/bin/env python3
"""gen_model.py — turn a `.pte` into the firmware's model_data.h.

Writes a C header holding: the file as a 16-byte-aligned const array (it stays in flash; constants
are used in place), one static buffer per planned arena with the sizes the file records, and test
cases: inputs (seeded pseudo-random values, or given as .npy files) and the outputs the host build
of Ember computes for them (``ember run --input ... --output-dir``). The firmware compares its
outputs with these. Standard library only.

    python3 mcu/gen_model.py model.pte --ember build/ember -o build-mcu/gen/model_data.h
    python3 mcu/gen_model.py mlp.pte --input images.npy --cases 8 --ember build/ember -o ...

With ``--input X.npy --cases N`` the array holds N cases of that input one after the other
(shape ``[N, *input_shape]`` or any shape with N times the input's elements).
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
from pte_summary import TAG_TENSOR, read_file  # noqa: E402

# em_dtype -> (npy descr, struct code, C type)
DTYPES = {
    0: ("|u1", "B", "uint8_t"),
    1: ("|i1", "b", "int8_t"),
    2: ("<i2", "h", "int16_t"),
    3: ("<i4", "i", "int32_t"),
    4: ("<i8", "q", "int64_t"),
    6: ("<f4", "f", "float"),
    7: ("<f8", "d", "double"),
    11: ("|b1", "B", "uint8_t"),
}
DESCR_TO_DTYPE = {v[0]: k for k, v in DTYPES.items()}
DESCR_TO_DTYPE.update({"<u1": 0, "<i1": 1, "<b1": 11})


def npy_write(path: str, dtype: int, shape: list[int], values: list) -> None:
    descr, code, _ = DTYPES[dtype]
    shape_s = "(" + "".join(f"{s}," for s in shape) + ")" if shape else "()"
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_s}, }}"
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(values)}{code}", *values))


def npy_read(path: str) -> tuple[int, list[int], list]:
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    if major == 1:
        hlen, start = struct.unpack_from("<H", data, 8)[0], 10
    else:
        hlen, start = struct.unpack_from("<I", data, 8)[0], 12
    hdr = ast.literal_eval(data[start : start + hlen].decode("latin1"))
    if hdr["fortran_order"]:
        raise ValueError(f"{path}: Fortran order is not supported")
    if hdr["descr"] not in DESCR_TO_DTYPE:
        raise ValueError(f"{path}: dtype {hdr['descr']} is not supported")
    dtype = DESCR_TO_DTYPE[hdr["descr"]]
    shape = list(hdr["shape"])
    n = 1
    for s in shape:
        n *= s
    code = DTYPES[dtype][1]
    vals = list(struct.unpack_from(f"<{n}{code}", data, start + hlen))
    return dtype, shape, vals


def random_values(dtype: int, n: int, rng: random.Random) -> list:
    if dtype in (6, 7):
        return [struct.unpack("<f", struct.pack("<f", rng.uniform(-1.0, 1.0)))[0] for _ in range(n)]
    if dtype == 11:
        return [rng.randint(0, 1) for _ in range(n)]
    if dtype == 0:
        return [rng.randint(0, 9) for _ in range(n)]
    return [rng.randint(-4, 4) for _ in range(n)]


def c_values(dtype: int, vals: list) -> str:
    if dtype in (6, 7):
        items = [repr(float(v)) if v == v and abs(v) != float("inf") else "0.0f" for v in vals]
        items = [s + ("f" if dtype == 6 else "") for s in items]
    else:
        items = [str(int(v)) + ("LL" if dtype == 4 else "") for v in vals]
    lines = []
    for i in range(0, len(items), 8):
        lines.append("    " + ", ".join(items[i : i + 8]) + ",")
    return "\n".join(lines) or "    0,"


def c_bytes(data: bytes) -> str:
    return "\n".join(
        "    " + ", ".join(f"0x{b:02x}" for b in data[i : i + 16]) + ","
        for i in range(0, len(data), 16)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--ember", default=str(REPO / "build" / "ember"), help="host ember CLI")
    ap.add_argument("--method", default="forward")
    ap.add_argument("--input", action="append", default=[], help=".npy per input (in order)")
    ap.add_argument("--cases", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--labels", help=".npy of class labels per case (firmware counts argmax hits)")
    ap.add_argument(
        "--expected",
        action="append",
        default=[],
        help=".npy per output holding the expected values of all cases (instead of "
        "running the host build; e.g. a bit-exact Python reference)",
    )
    args = ap.parse_args(argv)

    pte = Path(args.model).read_bytes()
    plans = [p for p in read_file(args.model) if p.name == args.method]
    if not plans:
        print(f"gen_model: no method '{args.method}' in {args.model}", file=sys.stderr)
        return 1
    plan = plans[0]
    rng = random.Random(args.seed)
    given = [npy_read(p) for p in args.input]

    cases: list[list[tuple[int, list[int], list] | None]] = []
    for c in range(args.cases):
        case = []
        for i, vi in enumerate(plan.inputs):
            v = plan.values[vi]
            if v.tag != TAG_TENSOR or v.tensor is None:
                case.append(None)
                continue
            t = v.tensor
            if t.dtype not in DTYPES:
                print(f"gen_model: input {i} has unsupported dtype {t.dtype}", file=sys.stderr)
                return 1
            if i < len(given):
                gd, _, gv = given[i]
                n = t.numel
                if len(gv) < (c + 1) * n:
                    print(f"gen_model: {args.input[i]} has {len(gv)} values, need "
                          f"{args.cases} x {n}", file=sys.stderr)  # fmt: skip
                    return 1
                vals = gv[c * n : (c + 1) * n]
                if gd != t.dtype:
                    vals = [float(x) if t.dtype in (6, 7) else int(x) for x in vals]
            else:
                vals = random_values(t.dtype, t.numel, rng)
            case.append((t.dtype, list(t.sizes), vals))
        cases.append(case)

    # Expected outputs: given as .npy, or from running the same file on the host build of Ember.
    expected: list[list[tuple[int, list[int], list] | None]] = []
    if args.expected:
        given_out = [npy_read(p) for p in args.expected]
        for c in range(args.cases):
            outs = []
            for o in range(len(plan.outputs)):
                if o >= len(given_out):
                    outs.append(None)
                    continue
                d, shape, vals = given_out[o]
                n = len(vals) // args.cases
                outs.append((d, shape[1:] if shape and shape[0] == args.cases else shape,
                             vals[c * n : (c + 1) * n]))  # fmt: skip
            expected.append(outs)
        return _write(args, pte, plan, cases, expected)
    with tempfile.TemporaryDirectory() as tmp:
        for c, case in enumerate(cases):
            cmd = [args.ember, "run", args.model, "--method", args.method]
            for i, inp in enumerate(case):
                if inp is None:
                    continue
                path = os.path.join(tmp, f"c{c}_in{i}.npy")
                npy_write(path, *inp)
                cmd += ["--input", path]
            out_dir = os.path.join(tmp, f"out{c}")
            os.makedirs(out_dir)
            cmd += ["--output-dir", out_dir]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"gen_model: host run failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}",
                      file=sys.stderr)  # fmt: skip
                return 1
            outs = []
            for o in range(len(plan.outputs)):
                p = os.path.join(out_dir, f"output_{o}.npy")
                outs.append(npy_read(p) if os.path.exists(p) else None)
            expected.append(outs)

    return _write(args, pte, plan, cases, expected)


def _write(args, pte: bytes, plan, cases, expected) -> int:
    n_in, n_out = len(plan.inputs), len(plan.outputs)
    arenas = plan.arena_sizes
    L = [
        "/*",
        f" * model_data.h — GENERATED by mcu/gen_model.py from {Path(args.model).name}.",
        f" * {len(pte)} bytes of program; {len(arenas)} planned arena(s): {arenas} bytes;",
        f" * {args.cases} test case(s) whose expected outputs come from {Path(args.ember).name} "
        "(host).",
        " */",
        "#ifndef EMBER_MCU_MODEL_DATA_H",
        "#define EMBER_MCU_MODEL_DATA_H",
        "",
        "#include <stdint.h>",
        '#include "mcu_model.h"',
        "",
        f'#define EM_MODEL_NAME "{Path(args.model).name}"',
        f'#define EM_MODEL_METHOD "{args.method}"',
        f"#define EM_MODEL_N_ARENAS {len(arenas)}",
        f"#define EM_MODEL_N_INPUTS {n_in}",
        f"#define EM_MODEL_N_OUTPUTS {n_out}",
        f"#define EM_MODEL_N_CASES {args.cases}",
        f"#define EM_MODEL_ARENA_BYTES {sum(arenas)}",
        "",
        "/* The program, in flash: 16-byte aligned as the loader requires. */",
        f"static const uint8_t em_model_pte[{len(pte)}] __attribute__((aligned(16))) = {{",
        c_bytes(pte),
        "};",
        "",
        "/* Planned memory (memory_id i + 1), in RAM. */",
    ]
    for i, s in enumerate(arenas):
        L.append(f"static uint8_t em_model_arena_{i}[{max(s, 1)}] __attribute__((aligned(16)));")
    L.append(
        f"static uint8_t *em_model_arenas[{max(len(arenas), 1)}] = {{"
        + (", ".join(f"em_model_arena_{i}" for i in range(len(arenas))) or "0")
        + "};"
    )
    L.append(
        f"static const uint64_t em_model_arena_sizes[{max(len(arenas), 1)}] = {{"
        + (", ".join(str(s) for s in arenas) or "0")
        + "};"
    )
    L.append("")

    def tensor_decl(name: str, t) -> str:
        if t is None:
            return "{-1, 0, {0}, 0, 0}"
        dtype, shape, vals = t
        ctype = DTYPES[dtype][2]
        L.append(f"static const {ctype} {name}[{max(len(vals), 1)}] = {{")
        L.append(c_values(dtype, vals))
        L.append("};")
        sizes = ", ".join(str(s) for s in shape) or "0"
        return f"{{{dtype}, {len(shape)}, {{{sizes}}}, {len(vals)}, {name}}}"

    in_rows, out_rows = [], []
    for c in range(args.cases):
        in_rows.append([tensor_decl(f"em_case{c}_in{i}", cases[c][i]) for i in range(n_in)])
        out_rows.append([tensor_decl(f"em_case{c}_out{o}", expected[c][o]) for o in range(n_out)])
    L.append("")

    def table(name: str, rows: list[list[str]], n: int) -> None:
        L.append(f"static const mcu_tensor {name}[{args.cases}][{max(n, 1)}] = {{")
        for r in rows:
            L.append("    {" + (", ".join(r) or "{-1, 0, {0}, 0, 0}") + "},")
        L.append("};")

    if args.labels:
        _, _, labels = npy_read(args.labels)
        L.append("#define EM_MODEL_HAS_LABELS 1")
        L.append(f"static const int32_t em_model_labels[{args.cases}] = {{")
        L.append("    " + ", ".join(str(int(v)) for v in labels[: args.cases]) + ",")
        L.append("};")
    table("em_model_inputs", in_rows, n_in)
    table("em_model_expected", out_rows, n_out)
    L += ["", "#endif /* EMBER_MCU_MODEL_DATA_H */", ""]
    text = "\n".join(L)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)
    print(f"gen_model: {args.model} -> {out} ({len(pte)} B program, arenas {arenas}, "
          f"{args.cases} case(s))")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
