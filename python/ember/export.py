"""``ember.export``: the exporter pipeline, stage by stage.

torch.export -> Core ATen decompositions -> Edge verification -> out variants -> view elision
-> spec propagation -> memory planning -> emission -> serialization. Each stage is a function
in :mod:`ember.passes` (or :mod:`ember.emit` / :mod:`ember.serialize`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions
from tqdm import tqdm

from ember.backends import AUTO, HOST_TARGETS, auto_backend_for, partition, resolve_backend
from ember.backends.cpu.partition import PACK_MODES
from ember.backends.vulkan.blob import STORAGE as VULKAN_STORAGE
from ember.emit import InstrDebug, ProgramTables, emit_method
from ember.oplist import OpList, load_oplist
from ember.passes.capture import capture
from ember.passes.conv1d import conv1d_as_2d
from ember.passes.decompose import decompose, decompose_unsupported
from ember.passes.fold import fold_constants
from ember.passes.fold_graph import fold_constant_subgraphs
from ember.passes.half import MODES as HALF_MODES
from ember.passes.half import half_as_f32
from ember.passes.ir import MethodIR
from ember.passes.memory_plan import plan_memory
from ember.passes.out_variants import to_out_variants
from ember.passes.prelu import prelu_as_clamps
from ember.passes.spec_prop import propagate_specs
from ember.passes.stock_ops import MODES as STOCK_MODES
from ember.passes.stock_ops import check_stock, decompositions_for, non_stock
from ember.passes.verify import lacks_kernel, verify_arity, verify_edge
from ember.passes.views import elide_views
from ember.program import Program
from ember.serialize import serialize_ptd, serialize_pte_pieces

log = logging.getLogger(__name__)

ModelLike = torch.nn.Module | Callable[..., Any]


def _as_tuple(x: Any) -> tuple[Any, ...]:
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _runs_on_cpu(backend: str | tuple[str, ...] | None) -> bool:
    return backend == "cpu" or (isinstance(backend, tuple) and "cpu" in backend)


def lower_method(
    name: str,
    model: ModelLike,
    example_inputs: tuple[Any, ...],
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    oplist: OpList | None = None,
    backend: str | None = None,
    external: bool = False,
    auto: bool = False,
    target: str | None = None,
    stock_ops: str = "warn",
    step: Callable[[str], None] = lambda s: None,
    pack: str = "load",
    vulkan_storage: str = "f32",
    half: str = "f32",
) -> MethodIR:
    """Run every stage up to memory planning for one method. ``backend`` is a resolved backend
    (``"cpu"`` or ``None`` for the portable kernels; :func:`ember.backends.resolve_backend`);
    ``auto``: it came from ``backend="auto"``, so a method with int8 Q/DQ, fused integer or LLM
    operators keeps the portable kernels (:func:`ember.backends.auto_backend_for`). ``target``
    (as :func:`export`'s) decides what the backend stores for which CPUs; ``stock_ops`` (as
    :func:`export`'s) what to do when a portable method needs kernels stock ExecuTorch lacks;
    ``pack`` (as :func:`export`'s) where the CPU backend's Winograd filters are transformed;
    ``vulkan_storage`` (as :func:`export`'s) the Vulkan backend's tensor storage; ``half`` (as
    :func:`export`'s) how the CPU backend runs float16 / bfloat16 tensors."""
    t0 = time.perf_counter()
    step(f"{name}: torch.export")
    ep = capture(model, example_inputs, dynamic_shapes=dynamic_shapes, strict=strict)
    step(f"{name}: decompose")
    ep = decompose(ep)
    if half == "f32" and _runs_on_cpu(backend):
        ep = half_as_f32(ep)
    ol = oplist if oplist is not None else load_oplist()
    ep = prelu_as_clamps(decompose_unsupported(ep, lambda n: lacks_kernel(n, ol)))
    ep = fold_constant_subgraphs(conv1d_as_2d(ep), external=external)
    if any(getattr(n.target, "namespace", None) == "quantized_decomposed" for n in ep.graph.nodes):
        # Q/DQ from PyTorch's own PT2E flow: make their .out overloads known without ember.quant.
        from ember.quant._ops import register_out_variants

        register_out_variants()
    step(f"{name}: verify")

    def to_ir(ep: torch.export.ExportedProgram) -> MethodIR:
        verify_edge(ep, oplist)
        ir = to_out_variants(ep, name)
        ir = fold_constants(ir, external=external)
        ir = elide_views(ir)
        return verify_arity(ir, oplist)

    ir = to_ir(ep)
    step(f"{name}: lower")
    chosen = auto_backend_for(ir, backend) if auto else backend
    if chosen is None and stock_ops != "off":
        # A portable method must run on stock ExecuTorch: decompose what it lacks.
        table = decompositions_for(non_stock(ir))
        if table:
            log.info(
                "%s: decomposing %s for stock ExecuTorch",
                name,
                ", ".join(sorted({str(op) for op in table})),
            )
            # with the Core ATen table: what a decomposition calls (max_pool3d's aten.pad) is
            # decomposed to Core ATen too
            ep = ep.run_decompositions({**core_aten_decompositions(), **table})
            ir = to_ir(ep)
        check_stock(ir, stock_ops)
    ir = partition(ir, chosen, target, pack, vulkan_storage)
    ir = propagate_specs(ir)
    step(f"{name}: plan memory")
    ir = plan_memory(ir)
    log.info(
        "lowered %s: %d instructions, arena %d bytes (%.2fs)",
        name,
        len(ir.executable()),
        ir.arena_bytes,
        time.perf_counter() - t0,
    )
    return ir


def export(
    model: ModelLike | dict[str, tuple[ModelLike, Any]],
    example_inputs: Any = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    external_constants: bool = False,
    oplist: OpList | None = None,
    progress: bool | None = None,
    backend: str | None = AUTO,
    target: str | None = None,
    explain: bool = False,
    stock_ops: str = "warn",
    bundle: Any = None,
    etrecord: str | os.PathLike | None = None,
    pack: str = "load",
    vulkan_storage: str = "f32",
    half: str = "f32",
) -> Program:
    """Export ``model`` to an ExecuTorch-format program.

    ``model`` is an ``nn.Module`` (or callable, or ``ExportedProgram``: re-exported from its
    ``.module()``, e.g. a quantized one) called with ``example_inputs`` (a tuple of
    positional arguments, or a single tensor), or a dict ``{method_name: (module_or_callable,
    example_inputs)}`` for a multi-method program whose methods share (deduplicated) constants.
    ``dynamic_shapes`` follows torch.export (for a dict of methods: a dict by method name);
    every dynamic dim needs a ``max``. With ``external_constants`` the weights go to
    ``Program.ptd_buffer`` keyed by fully-qualified name. ``progress`` shows a progress bar
    (default: when stderr is a terminal).

    ``backend`` chooses the kernels: ``"cpu"`` delegates the subgraphs it supports to
    ``EmberCpuBackend`` (packed weights, SIMD micro-kernels picked at run time; the rest stays on
    the portable kernels), ``None`` (or ``"portable"``) keeps every operator on the portable
    kernels (what stock ExecuTorch runs too), and the default ``"auto"`` picks ``"cpu"`` for a
    desktop / host target and the portable kernels for a microcontroller target (logged at
    INFO); on a host, a method calling fused integer or LLM (``ember::``, ``llama::``)
    operators keeps the portable kernels too, while int8 Q/DQ graphs (``quantized_decomposed::``,
    PT2E's representation) go to the CPU backend (fake-quant pairs, int8 convs; see
    docs/quantization.md). ``target`` is
    ``None`` (this host), ``"host"``, ``"x86-64"``, ``"aarch64"`` or a microcontroller
    (``"cortex-m33"``, ``"cortex-m33-nofpu"``); for a microcontroller the memory and kernel
    budget of each method is computed (:mod:`ember.quant.budget`), logged and returned as
    ``program.budget`` (a dict by method name). For ``"x86-64"``, and for this host when its CPU
    has AMX-BF16, the CPU backend also stores conv weights as bf16 pairs that its AMX path reads
    in place (ResNet-50 1.3x faster at 1 thread on a Sapphire Rapids core; the file grows by
    the pairs, ~80 %); ``"aarch64"`` and hosts without AMX get none. An unknown ``backend`` or
    ``target`` raises ``ValueError`` before anything is traced.

    The backend never fails an export that the portable kernels accept: what it cannot lower
    (or what raises while lowering or packing, or a blob its runtime half refuses) stays
    portable, logged with the reason. ``explain=True`` writes to stderr which instructions were
    delegated and why each other one was not (also :meth:`Program.explain`).

    A method on the portable kernels (``backend=None``, or what ``"auto"`` keeps portable) is
    checked against stock ExecuTorch 1.5's operator list: an operator it lacks is decomposed
    into ones it has where PyTorch knows how; otherwise ``stock_ops="warn"`` (the default) logs a
    warning naming the operator, ``"error"`` raises :class:`UnsupportedOperatorError` and
    ``"off"`` says nothing (Ember's runtime runs the file either way).

    ``bundle``: test cases ``[(inputs, expected_or_None), ...]`` (for a dict of methods: a dict
    by method name) kept as ``program.bundle``, with ``None`` replaced by the model's eager
    outputs now; :meth:`Program.save_bundled` writes them as an ExecuTorch BundledProgram
    (``.bpte``) that ``ember run --bundled`` checks (docs/devtools.md §6).

    ``pack``: where the CPU backend transforms the filters of the 3x3 convs it runs as Winograd
    F(m x m, 3 x 3): ``"load"`` (the default) stores each weight once and the runtime transforms
    them at init (ResNet-18: a file 1.0x its f32 weights, ~50 ms more to load); ``"export"``
    stores the transformed filters ((m + 2)^2 / 9 their bytes: ResNet-18's file 1.75x), nothing
    to do at init. The same filters either way, so the same results (bench/results/file_size_*.md).

    ``vulkan_storage``: how ``EmberVulkanBackend`` (``backend="vulkan"``) stores tensors on the
    device: ``"f32"`` (the default) or ``"f16"`` (weights and activations as IEEE halves, half
    the memory and bandwidth; the shaders compute in f32 and the delegate's inputs and outputs
    stay f32; bench/results/vulkan_zoo_* gives the error vs eager per zoo model). A
    device without 16-bit storage buffers runs an f16 file with f32 storage
    (backends/vulkan/README.md).

    ``half``: how a float16 / bfloat16 model runs when the CPU backend is chosen: ``"f32"``
    (the default) computes it in f32 inside the backend (weights it keeps as they are stored as
    16-bit halves and widened once at load, others, e.g. convs with a batch norm folded in, as
    f32; half inputs cast to f32 where they enter and outputs back to their half type: the
    caller's dtypes are kept, the values are the model's computed in f32 and rounded once, so
    they may differ from eager half by its rounding; MobileNetV2 in f16: 400 -> ~7 ms);
    ``"keep"`` keeps the half dtypes on the portable kernels (ATen's half results, ~50x
    slower). The portable path
    (``backend=None``) always keeps them. See :mod:`ember.passes.half`.

    ``etrecord``: also write an ETRecord there (:meth:`Program.save_etrecord`, with the example
    inputs of ``forward`` as its representative inputs) for ExecuTorch's Inspector.
    """
    if stock_ops not in STOCK_MODES:
        raise ValueError(f"stock_ops={stock_ops!r}: expected one of {', '.join(STOCK_MODES)}")
    if pack not in PACK_MODES:
        raise ValueError(f"pack={pack!r}: expected one of {', '.join(PACK_MODES)}")
    if vulkan_storage not in VULKAN_STORAGE:
        raise ValueError(
            f"vulkan_storage={vulkan_storage!r}: expected one of {', '.join(VULKAN_STORAGE)}"
        )
    if half not in HALF_MODES:
        raise ValueError(f"half={half!r}: expected one of {', '.join(HALF_MODES)}")
    auto = backend == AUTO
    backend = resolve_backend(backend, target)
    if isinstance(model, dict):
        methods = {k: (v[0], _as_tuple(v[1])) for k, v in model.items()}
        dyn = dynamic_shapes or {}
    else:
        methods = {"forward": (model, _as_tuple(example_inputs))}
        dyn = {"forward": dynamic_shapes}
    names = sorted(methods)
    bar = tqdm(
        total=len(names) * 5 + 1,
        desc="ember.export",
        unit="step",
        leave=False,
        disable=(not progress) if progress is not None else None,
    )

    def step(msg: str) -> None:
        bar.set_postfix_str(msg)
        bar.update(1)
        log.debug("%s", msg)

    try:
        irs: dict[str, MethodIR] = {}
        for name in names:
            m, inputs = methods[name]
            irs[name] = lower_method(
                name,
                m,
                inputs,
                dynamic_shapes=dyn.get(name),
                strict=strict,
                oplist=oplist,
                backend=backend,
                external=external_constants,
                auto=auto,
                target=target,
                stock_ops=stock_ops,
                step=step,
                pack=pack,
                vulkan_storage=vulkan_storage,
                half=half,
            )
        step("serialize")
        tables = ProgramTables(external=external_constants)
        plans = []
        debug: dict[str, list[InstrDebug]] = {}
        for name in names:
            plan, dbg = emit_method(irs[name], tables)
            plans.append(plan)
            debug[name] = dbg
        # Joined now (one copy of the weights): the pieces point into the model's own
        # parameters, which the caller may change after export.
        pte = b"".join(
            serialize_pte_pieces(plans, tables.constants.buffers, tables.mutables.buffers)
        )
        ptd = serialize_ptd(list(tables.ptd.values())) if external_constants else None
    finally:
        bar.close()
    log.info(
        "exported %s: %d bytes%s",
        names,
        len(pte),
        f" + {len(ptd)} bytes of external data" if ptd is not None else "",
    )
    prog = Program(pte, ptd, debug=debug, exported={n: irs[n].ep for n in names}, irs=irs)
    if target is not None and target not in HOST_TARGETS:
        from ember.quant.budget import budget_of

        prog.budget = {n: budget_of(prog.buffer, target, n) for n in names}
        for b in prog.budget.values():
            log.info("%s", b.summary())
    if explain:
        sys.stderr.write(prog.explain() + "\n")
    if bundle is not None:
        prog.bundle = _eager_bundle(bundle, methods)
    if etrecord is not None:
        prog.save_etrecord(etrecord, methods["forward"][1] if "forward" in methods else None)
    return prog


def _eager_bundle(bundle: Any, methods: dict[str, tuple[Any, tuple[Any, ...]]]) -> dict:
    """``{method: [(inputs, expected)]}`` with missing expected outputs from the eager model."""
    by_method = bundle if isinstance(bundle, dict) else {"forward": bundle}
    out: dict[str, list[tuple[Any, Any]]] = {}
    for name, cases in by_method.items():
        if name not in methods:
            raise ValueError(f"bundle: no method '{name}' (methods: {sorted(methods)})")
        model = methods[name][0]
        out[name] = []
        for k, case in enumerate(cases):
            if not isinstance(case, (tuple, list)) or len(case) != 2:
                raise TypeError(f"bundle case {k}: expected an (inputs, expected_or_None) pair")
            inputs, expected = _as_tuple(case[0]), case[1]
            if expected is None:
                with torch.no_grad():
                    expected = model(*inputs)
            out[name].append((inputs, expected))
    return out
