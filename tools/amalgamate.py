#!/usr/bin/env python3
"""amalgamate.py — Ember's runtime core + portable kernels as one ``ember.c`` and one ``ember.h``.

Like SQLite's amalgamation: a project can drop two files into its tree and build Ember with
``cc -std=c11 -c ember.c`` (link with ``-lm -lpthread``), no CMake, no include paths::

    python3 tools/amalgamate.py                 # writes build/amalgamation/ember.{c,h}
    python3 tools/amalgamate.py -o DIR --cc gcc # another directory; check with another compiler
    python3 tools/amalgamate.py --no-check      # do not compile (no collision detection)

What goes in (``sources()``): the runtime core (``src/*.c``), its POSIX platform layer
(``src/platform/{posix,log,format,threadpool}.c``), the portable kernels (``kernels/portable``),
the prim ops (``kernels/prim``), the file / mmap data loaders and ``em_module``
(``extension/data_loader.c``, ``extension/module.c``). Not in it: the CPU backend, the
portable kernels' optional SIMD layer (``kernels/optimized``) and the quantized kernels (their ISA
files need per-file ``-m`` flags), the tokenizers and the LLM runner: the amalgamation runs the
portable kernels' plain C loops, the same bits as ``EMBER_CPU_ISA=scalar``.
A program using the amalgamation calls ``em_register_prim_ops()`` and
``em_register_portable_kernels()``, then ``em_module_open`` or, with its own memory,
``em_program_load`` / ``em_method_prepare`` (tests/amalgamation/run_fixture.c).

``ember.h`` is the public API: ``include/ember/ember.h`` and ``extension/ember_ext/{data_loader,
module}.h`` with every project header they include inlined once, in the order the preprocessor
meets them.
``ember.c`` is self-contained (it does not include ``ember.h``; it carries the same text, under the
same include guards, so a file including both is fine):

1. the feature-test macros (``#define _POSIX_C_SOURCE ...``) that any source defines, hoisted to
   the top, before the first system header (in the source they become a comment);
2. the public headers, then every project header a source includes outside any ``#if``, each
   inlined once, in first-include order (nested ``#include "..."`` inlined recursively);
3. each source in turn. Its ``#include "x.h"`` lines at file level become a comment (the header is
   above); an include inside ``#if`` (``ember/vmath_exp.h`` under the x86 guard) is inlined in
   place, where its include guard makes a second copy empty; a ``.def`` X-macro list is inlined at
   every include, as the preprocessor would. System includes are kept as they are.

Every inlined piece starts with a ``#line N "path"`` directive (and one follows each inlined
include), so compiler errors, warnings and debugger line tables point at the original files.

Names that collide once all files share one translation unit. Two kinds:

* *File-level macros*: after each source, every macro it ``#define``s (and that no project header
  defines) is ``#undef``-ed, so one file's helper macros never reach the next.
* *File-scope identifiers*: two ``static`` functions, file-scope variables, enumerators, ``struct``
  tags or typedefs of the same name in two sources are fine in two objects and an error in one.
  They are renamed in the later source with a ``#define x x__<file>`` before it and ``#undef x``
  after it. Renaming through the preprocessor keeps every use inside that file consistent (calls,
  ``sizeof``, ``struct`` tags) without parsing C, and touches nothing outside the file. Which names
  to rename is found in two steps: a regex scan of each source's file-level names without linkage
  (``static`` functions and variables, enumerators, tags, typedefs; one defined in two sources and
  in no header is renamed in all but the first), then the compiler: the script
  compiles the generated ``ember.c`` with ``-fsyntax-only`` and the project's warning flags, reads
  its ``redefinition of 'x'`` / ``conflicting types for 'x'`` / ``redeclaration of enumerator``
  errors (which, thanks to ``#line``, name the original files of both definitions), renames each
  such name in the source the error points at, and repeats until the file compiles (at most
  ``MAX_ROUNDS`` rounds; today the regex finds them all and the first compile passes). A name
  that a project header mentions is never renamed (it may have external linkage; such a clash is
  a real bug) and the script stops with the compiler's message. ``--no-check`` skips the compile
  (regex only).

Standard library only; a C compiler (``cc`` by default) for the collision check.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("amalgamate")

INCLUDE_DIRS = ("include", "src", "kernels", "extension")
PUBLIC_HEADERS = (
    "include/ember/ember.h",
    "extension/ember_ext/data_loader.h",
    "extension/ember_ext/module.h",
)
PLATFORM = ("posix.c", "log.c", "format.c", "threadpool.c")
MAX_ROUNDS = 20

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
_IF = re.compile(r"^\s*#\s*(if|ifdef|ifndef)\b")
_ENDIF = re.compile(r"^\s*#\s*endif\b")
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)")
_FEATURE = re.compile(r"^\s*#\s*define\s+(_[A-Z_]*_SOURCE)\b")
_STATIC = re.compile(r"^(?:__attribute__\(\(.*?\)\)\s+)?static\s+([^;{=]*?)(\w+)\s*[(\[=;]", re.M)
_FNPTR = re.compile(r"^(?:__attribute__\(\(.*?\)\)\s+)?static\s+[^;{=(]*\(\s*\*\s*(\w+)\s*\)", re.M)
_ENUM = re.compile(r"^(?:typedef\s+)?enum\s*\w*\s*\{([^}]*)\}", re.M)
_TAG = re.compile(r"^(?:typedef\s+)?(?:struct|union|enum)\s+(\w+)\s*\{", re.M)
_TYPEDEF = re.compile(r"^\}\s*(\w+)\s*;|^typedef\s[^;{]*?\b(\w+)\s*;", re.M)
_NOT_NAMES = {"void", "int", "char", "float", "double", "long", "short", "unsigned", "signed"}
_ERROR = re.compile(
    r"^(?P<file>[^:\n]+):\d+:\d+: error: (?:redefinition of|conflicting types for|"
    r"static declaration of|redeclaration of enumerator|redeclaration of|"
    r"non-static declaration of)\s+"
    r"(?:(?:struct|union|enum|typedef)\s+)?['‘](?:(?:struct|union|enum)\s+)?(?P<name>\w+)['’]",
    re.M,
)
_NOTE = re.compile(r"^(?P<file>[^:\n]+):\d+:\d+: note: previous (?:definition|declaration)", re.M)


def sources() -> list[Path]:
    """The amalgamated sources, in a fixed order (core, platform, portable, prim, extension)."""
    out = sorted((ROOT / "src").glob("*.c"))
    out += [ROOT / "src" / "platform" / p for p in PLATFORM]
    out += sorted((ROOT / "kernels" / "portable").glob("*.c"))
    out += sorted((ROOT / "kernels" / "prim").glob("*.c"))
    out += [ROOT / "extension" / "data_loader.c", ROOT / "extension" / "module.c"]
    return out


def rel(p: Path) -> str:
    """A repository path as the #line directives and logs show it."""
    return p.relative_to(ROOT).as_posix()


def resolve(name: str, including: Path) -> Path:
    """Finds a quoted include the way the build does: beside the file, then the -I dirs."""
    for d in (including.parent, *(ROOT / i for i in INCLUDE_DIRS)):
        if (d / name).is_file():
            return (d / name).resolve()
    raise SystemExit(f'amalgamate: {rel(including)}: cannot find #include "{name}"')


def strip_comments(text: str) -> str:
    """Comments and string literals blanked (newlines kept), for the regex scans."""
    pat = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pat.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def file_statics(path: Path) -> set[str]:
    """File-level names of a source without linkage outside it (regex scan): ``static``
    functions and variables, enumerators, ``struct`` / ``union`` / ``enum`` tags, typedefs."""
    text = strip_comments(path.read_text())
    names = {m.group(2) for m in _STATIC.finditer(text)} - _NOT_NAMES
    names |= {m.group(1) for m in _FNPTR.finditer(text)}
    names |= {m.group(1) for m in _TAG.finditer(text)}
    names |= {m.group(1) or m.group(2) for m in _TYPEDEF.finditer(text)}
    for m in _ENUM.finditer(text):
        names |= {e.split("=")[0].strip() for e in m.group(1).split(",")} - {""}
    return names


def file_macros(path: Path) -> list[str]:
    """Macros a file defines at any level (feature-test macros excluded: they are hoisted)."""
    seen: list[str] = []
    for line in strip_comments(path.read_text()).splitlines():
        m = _DEFINE.match(line)
        if m and not _FEATURE.match(line) and m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


@dataclass
class Amalgamation:
    """Builds the two files' text; ``renames[source] = {name, ...}`` are applied per source."""

    renames: dict[str, set[str]] = field(default_factory=dict)
    emitted: set[Path] = field(default_factory=set)
    features: list[str] = field(default_factory=list)

    def hoist(self, line: str) -> None:
        """Keeps a feature-test macro for the top of ember.c (first definition of each name)."""
        words = re.sub(r"^\s*#\s*define\s+", "", strip_comments(line)).split()
        if not any(f.split()[1] == words[0] for f in self.features):
            self.features.append(" ".join(["#define", *words]))

    def copy_line(self, line: str, out: list[str]) -> None:
        """A source line as is, or a hoisted feature-test macro's placeholder."""
        if _FEATURE.match(line):
            self.hoist(line)
            out.append(f"// hoisted to the top: {line.strip()}")
        else:
            out.append(line)

    def inline(self, path: Path, out: list[str], once: bool = True) -> None:
        """Appends ``path`` with its project includes inlined (headers once, .def every time)."""
        if once and path.suffix != ".def":
            if path in self.emitted:
                return
            self.emitted.add(path)
        out.append(f'#line 1 "{rel(path)}"')
        for i, line in enumerate(path.read_text().splitlines(), start=1):
            m = _INCLUDE.match(line)
            if m:
                out.append(f"/* {line.strip()} */")
                self.inline(resolve(m.group(1), path), out)
                out.append(f'#line {i + 1} "{rel(path)}"')
            else:
                self.copy_line(line, out)

    def header_section(self, srcs: list[Path], out: list[str]) -> None:
        """Every project header a source includes outside any ``#if``, once, in include order."""
        for src in srcs:
            depth = 0
            for line in src.read_text().splitlines():
                if _IF.match(line):
                    depth += 1
                elif _ENDIF.match(line):
                    depth -= 1
                m = _INCLUDE.match(line)
                if m and depth == 0:
                    target = resolve(m.group(1), src)
                    if target.suffix != ".def":
                        self.inline(target, out)

    def source(self, src: Path, header_macros: set[str], out: list[str]) -> None:
        """One source: renames around it, its own macros undefined after it."""
        name = rel(src)
        prefix = re.sub(r"\W", "_", src.relative_to(ROOT).with_suffix("").as_posix())
        renames = sorted(self.renames.get(name, ()))
        out.append(f"/************** {name} **************/")
        out.extend(f"#define {n} {n}__{prefix}" for n in renames)
        out.append(f'#line 1 "{name}"')
        depth = 0
        for i, line in enumerate(src.read_text().splitlines(), start=1):
            if _IF.match(line):
                depth += 1
            elif _ENDIF.match(line):
                depth -= 1
            m = _INCLUDE.match(line)
            if not m:
                self.copy_line(line, out)
                continue
            target = resolve(m.group(1), src)
            out.append(f"/* {line.strip()} */")
            if target.suffix == ".def" or depth > 0:
                self.inline(target, out, once=False)
                out.append(f'#line {i + 1} "{name}"')
            elif target not in self.emitted:  # cannot happen: the header section has it
                raise SystemExit(f"amalgamate: {name}: {rel(target)} missing above")
        out.extend(f"#undef {n}" for n in renames)
        out.extend(f"#undef {m}" for m in file_macros(src) if m not in header_macros)

    def build(self) -> tuple[str, str]:
        """Returns (ember.h, ember.c) text."""
        srcs = sources()
        self.emitted = set()
        self.features = []
        pub: list[str] = []
        for h in PUBLIC_HEADERS:
            self.inline(ROOT / h, pub)
        priv: list[str] = []
        self.header_section(srcs, priv)
        header_macros = {m for h in self.emitted for m in file_macros(h)}
        body: list[str] = []
        for src in srcs:
            self.source(src, header_macros, body)
        banner = [
            "/*",
            " * Ember amalgamation — generated by tools/amalgamate.py from the Ember sources;",
            f" * do not edit. {len(srcs)} sources ({rel(srcs[0])} ... {rel(srcs[-1])}), "
            f"{len(self.emitted)} headers.",
            " * Build: cc -std=c11 -O2 -c ember.c   (link with -lm -lpthread)",
            " */",
        ]
        h_text = "\n".join([*banner, *pub, ""])
        c_text = "\n".join([*banner, *self.features, "", *pub, *priv, *body, ""])
        return h_text, c_text


def seed_renames() -> dict[str, set[str]]:
    """A file-level name defined in more than one source (and in no header): renamed in every
    source but the first."""
    seen: dict[str, str] = {}
    renames: dict[str, set[str]] = {}
    shared = header_words()
    for src in sources():
        for n in sorted(file_statics(src) - shared):
            if n in seen:
                renames.setdefault(rel(src), set()).add(n)
            else:
                seen[n] = rel(src)
    return renames


def header_words() -> set[str]:
    """Identifiers a project header mentions: never renamed (they may have external linkage)."""
    words: set[str] = set()
    for d in INCLUDE_DIRS:
        for h in (ROOT / d).rglob("*.h"):
            words |= set(re.findall(r"\b\w+\b", strip_comments(h.read_text())))
    return words


def compile_check(c_text: str, cc: str, flags: list[str]) -> str:
    """The compiler's errors (empty when ember.c compiles cleanly)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ember.c"
        path.write_text(c_text)
        r = subprocess.run(
            [cc, "-std=c11", "-fsyntax-only", *flags, str(path)], capture_output=True, text=True
        )
        return "" if r.returncode == 0 else r.stderr


def generate(cc: str | None, flags: list[str]) -> Amalgamation:
    """Builds the amalgamation, renaming colliding file-scope names until ``cc`` accepts it."""
    am = Amalgamation(renames=seed_renames())
    if cc is None:
        return am
    srcs = {rel(s) for s in sources()}
    shared = header_words()
    for _ in range(MAX_ROUNDS):
        err = compile_check(am.build()[1], cc, flags)
        if not err:
            return am
        new = 0
        for m in _ERROR.finditer(err):
            where, name = m.group("file"), m.group("name")
            note = _NOTE.search(err, m.end())
            cands = [where] + ([note.group("file")] if note else [])
            target = next((f for f in cands if f in srcs and name not in shared), None)
            if target is None:
                continue
            if name not in am.renames.setdefault(target, set()):
                am.renames[target].add(name)
                LOG.info("renaming %s in %s", name, target)
                new += 1
        if new == 0:
            sys.stderr.write(err)
            raise SystemExit("amalgamate: ember.c does not compile (see the errors above)")
    raise SystemExit(f"amalgamate: still colliding after {MAX_ROUNDS} rounds")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("-o", "--out-dir", type=Path, default=ROOT / "build" / "amalgamation")
    ap.add_argument("--cc", default="cc", help="compiler for the collision check (default: cc)")
    ap.add_argument("--no-check", action="store_true", help="do not compile; regex renames only")
    ap.add_argument(
        "--cflags",
        default="-Wall -Wextra -Wpedantic -Werror",
        help="flags of the check compile (default: the project's warning flags)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    am = generate(None if args.no_check else args.cc, args.cflags.split())
    h_text, c_text = am.build()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "ember.h").write_text(h_text)
    (args.out_dir / "ember.c").write_text(c_text)
    LOG.info(
        "wrote %s/ember.c (%d lines, %d bytes) and ember.h (%d lines); %d names renamed",
        args.out_dir,
        c_text.count("\n"),
        len(c_text.encode()),
        h_text.count("\n"),
        sum(len(v) for v in am.renames.values()),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
