"""Backends (delegates) of the Ember exporter.

A backend pass runs on a :class:`~ember.passes.ir.MethodIR` after view elision and before
lifetimes and memory planning: it replaces runs of supported instructions with
:class:`DelegateInstr` calls whose ``processed`` blob the backend's runtime half executes.

Which backend an export uses (:func:`resolve_backend`): ``"cpu"`` (``EmberCpuBackend``),
``"vulkan"`` (``EmberVulkanBackend``, backends/vulkan/README.md), an ordered list of them
(``["vulkan", "cpu"]``: each instruction goes to the first that takes it), the
portable kernels (``None``, or the spellings ``"portable"`` / ``"none"`` / ``""``), or
``"auto"`` — the default of ``ember.export`` — which picks ``"cpu"`` for a desktop / host target
(``target=None``, ``"host"``, ``"x86-64"``, ``"aarch64"``) and the portable kernels for a
microcontroller target (``"cortex-m33"``..., :data:`ember.quant.budget.TARGETS`), whose
firmware links no delegate; on a host, a method that calls int8 Q/DQ, fused integer or LLM
operators keeps the portable kernels too (:func:`auto_backend_for`).
"""

from __future__ import annotations

import logging

from ember.backends.delegate import DelegateInstr
from ember.passes.ir import KernelInstr, MethodIR

log = logging.getLogger(__name__)

BACKENDS = ("cpu", "vulkan")
PORTABLE = (None, "", "portable", "none")
AUTO = "auto"
HOST_TARGETS = ("host", "x86-64", "aarch64")
# Operator namespaces whose methods "auto" keeps on the portable kernels (auto_backend_for).
# PT2E's int8 Q/DQ (``quantized_decomposed::``) is not among them: EmberCpuBackend folds the
# weights' dequantize and runs each activation's Q/DQ pair as a fused fake-quant.
PORTABLE_NAMESPACES = ("ember::", "llama::")


def mcu_targets() -> tuple[str, ...]:
    """The microcontroller targets ``ember.export(..., target=...)`` knows (portable kernels)."""
    from ember.quant.budget import TARGETS

    return TARGETS


def check_target(target: str | None) -> None:
    """Raise ``ValueError`` naming the known targets unless ``target`` is ``None`` or one."""
    if target is None or target in HOST_TARGETS or target in mcu_targets():
        return
    known = ", ".join((*HOST_TARGETS, *mcu_targets()))
    raise ValueError(f"unknown target {target!r} (known: {known}; None: this host)")


def resolve_backend(
    backend: str | list[str] | tuple[str, ...] | None, target: str | None = None
) -> str | tuple[str, ...] | None:
    """The backend an export with ``backend`` for ``target`` uses: ``"cpu"`` or ``None``
    (portable kernels). ``"auto"`` is ``"cpu"`` for ``target`` ``None`` or a host target and
    ``None`` for a microcontroller target; an explicit backend is kept as given (portable
    spellings become ``None``; a list becomes a tuple of backends, tried in order by
    :func:`partition`). Raises ``ValueError`` for an unknown backend or target."""
    check_target(target)
    if isinstance(backend, (list, tuple)):
        picked = tuple(b for b in (resolve_backend(x, target) for x in backend) if b is not None)
        if any(isinstance(b, tuple) for b in picked) or len(set(picked)) != len(picked):
            raise ValueError(f"backend list {backend!r}: nested or repeated backends")
        return (picked[0] if len(picked) == 1 else picked) if picked else None
    if backend == AUTO:
        picked = None if target in mcu_targets() else "cpu"
        log.info(
            "backend='auto' for target %s: %s",
            target or "host",
            "EmberCpuBackend (backend='cpu')" if picked else "portable kernels (backend=None)",
        )
        return picked
    if backend in PORTABLE:
        return None
    if backend in BACKENDS:
        return backend
    raise ValueError(
        f"unknown backend {backend!r} (known: 'auto', {', '.join(repr(b) for b in BACKENDS)}, "
        "None / 'portable' for the portable kernels)"
    )


def auto_backend_for(ir: MethodIR, backend: str | None) -> str | None:
    """``backend`` (what ``"auto"`` picked for the target) for one method, or ``None`` when the
    method calls fused integer (``ember::``) or LLM (``llama::``, ``ember::linear_q4``)
    operators (:data:`PORTABLE_NAMESPACES`): those flows are built, tested and benchmarked on
    the portable kernels, and their f32 islands belong to the quantized arithmetic. Int8 Q/DQ
    methods (PT2E's representation) take the backend."""
    if backend is None:
        return None
    custom = sorted(
        {
            i.kernel
            for i in ir.instrs
            if isinstance(i, KernelInstr)
            and not isinstance(i, DelegateInstr)
            and i.kernel.startswith(PORTABLE_NAMESPACES)
        }
    )
    if custom:
        log.info(
            "backend='auto': %s calls %s: portable kernels (backend=None)",
            ir.name,
            ", ".join(custom[:4]) + (", ..." if len(custom) > 4 else ""),
        )
        return None
    return backend


def partition(
    ir: MethodIR,
    backend: str | tuple[str, ...] | None,
    target: str | None = None,
    pack: str = "load",
    vulkan_storage: str = "f32",
) -> MethodIR:
    """Hand the subgraphs ``backend`` supports to it (``None`` / ``"portable"``: no change).
    ``"auto"`` must have been resolved first (:func:`resolve_backend`: it needs the target).
    ``target`` (``None``: this host) decides what the backend stores for which CPUs (the CPU
    backend's bf16-pair weights: :func:`ember.backends.cpu.partition.amx_pairs_for`); ``pack``
    where its Winograd filters are transformed (``"load"`` / ``"export"``); ``vulkan_storage``
    the element type EmberVulkanBackend stores tensors as (``"f32"`` / ``"f16"``)."""
    if backend == AUTO:
        raise ValueError("partition() takes a resolved backend: call resolve_backend() first")
    backend = resolve_backend(backend, target)
    if backend is None:
        return ir
    if isinstance(backend, tuple):  # each backend takes what the ones before it left
        report: list = []
        for b in backend:
            ir = partition(ir, b, target, pack, vulkan_storage)
            report.extend(d for d in getattr(ir, "partition_report", []) if d.delegated)
        # what each backend took, then why the last one left the rest portable
        last = getattr(ir, "partition_report", [])
        ir.partition_report = report + [
            d for d in last if not d.delegated and d.why != "not a kernel call"
        ]
        return ir
    if backend == "vulkan":
        from ember.backends.vulkan.partition import partition_vulkan

        return partition_vulkan(ir, storage=vulkan_storage)
    from ember.backends.cpu.partition import amx_pairs_for, partition_cpu

    return partition_cpu(ir, pairs=amx_pairs_for(target), pack=pack)


__all__ = [
    "AUTO",
    "BACKENDS",
    "HOST_TARGETS",
    "PORTABLE_NAMESPACES",
    "DelegateInstr",
    "auto_backend_for",
    "check_target",
    "mcu_targets",
    "partition",
    "resolve_backend",
]
