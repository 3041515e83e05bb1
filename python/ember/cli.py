"""``ember-py``: the Ember exporter's command line.

    ember-py export package.module:make_model out.pte [--external-constants] [--strict]
                    [--backend auto|cpu|portable] [--target host|cortex-m33|...]

``make_model()`` returns ``(model, example_inputs)`` (or ``(model, example_inputs,
dynamic_shapes)``). With ``--external-constants`` the weights go to ``out.ptd``. ``--backend``
(default ``auto``: EmberCpuBackend on a host, portable kernels for a microcontroller
``--target``) and ``--target`` are ``ember.export``'s arguments.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from collections.abc import Sequence

log = logging.getLogger("ember.cli")


def _load_callable(spec: str):  # noqa: ANN202
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"expected module:callable, got {spec!r}")
    sys.path.insert(0, ".")
    obj = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _cmd_export(args: argparse.Namespace) -> int:
    import ember

    made = _load_callable(args.factory)()
    model, inputs = made[0], made[1]
    dyn = made[2] if len(made) > 2 else None
    t0 = time.perf_counter()
    prog = ember.export(
        model,
        inputs,
        dynamic_shapes=dyn,
        strict=args.strict,
        external_constants=args.external_constants,
        progress=True,
        backend=None if args.backend == "portable" else args.backend,
        target=args.target,
        pack=args.pack,
        half=args.half,
    )
    path = prog.save(args.output)
    log.info(
        "exported %s in %.2fs: %s (%d bytes), arena %s",
        args.factory,
        time.perf_counter() - t0,
        path,
        len(prog.buffer),
        prog.arena_bytes,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ember-py``."""
    p = argparse.ArgumentParser(prog="ember-py", description=__doc__.split("\n")[0])
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="export module:callable to a .pte")
    e.add_argument("factory", help="module:callable returning (model, example_inputs)")
    e.add_argument("output", help="output .pte path")
    e.add_argument("--external-constants", action="store_true", help="write weights to .ptd")
    e.add_argument("--strict", action="store_true", help="strict torch.export tracing")
    e.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "cpu", "portable"],
        help="kernels: auto (default: cpu on a host, portable for a microcontroller target), "
        "cpu (EmberCpuBackend delegate), portable (portable kernels only)",
    )
    e.add_argument("--target", default=None, help="host (default), x86-64, aarch64, cortex-m33...")
    e.add_argument(
        "--pack",
        default="load",
        choices=["load", "export"],
        help="Winograd conv filters: transformed by the runtime at load (default: smaller file) "
        "or stored transformed in the file (faster load)",
    )
    e.add_argument(
        "--half",
        default="f32",
        choices=["f32", "keep"],
        help="a float16 / bfloat16 model on the CPU backend: computed in f32 (default; the "
        "inputs' and outputs' dtypes kept) or kept in half precision on the portable kernels",
    )
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.cmd == "export":
            return _cmd_export(args)
    except Exception as ex:  # report cleanly on the command line
        from ember.errors import EmberError

        if isinstance(ex, EmberError):
            log.error("%s: %s", type(ex).__name__, ex)
            return 1
        raise
    return 2


if __name__ == "__main__":
    sys.exit(main())
