"""Checks random graphs (tests/python/random_graphs.py) quantized to int8 on Ember's two paths.

Each seed's graph goes through :func:`ember.quant.pt2e.quantize_exported`, static (calibrated on
five seeded batches around the example input) or dynamic (int8 weights, activations quantized per
token at run time); or, as a user of the stock PT2E flow would, through ExecuTorch's
XNNPACKQuantizer (``xnnpack``: static per-channel, calibrated the same way; ``xnnpack-dynamic``:
its dynamic per-tensor form), prepare_pt2e and convert_pt2e (needs executorch and torchao, as the
benchmarks do). The quantized graph run by PyTorch (its Q/DQ operators in float) is the
reference; Ember must give the same within ``Q8_RTOL`` of each output's largest
magnitude on

- the default path: ``ember.export(qep, inputs)`` (EmberCpuBackend's integer operators), at each
  of ``threads``;
- the portable path: ``ember.export(qep, inputs, backend=None)``.

Both reproduce the Q/DQ graph's arithmetic (the integer kernels' sums are exact, their rounding
PT2E's), so they land within float rounding of the reference, but where a float sum sits on a
rounding boundary: a mean of dequantized values over an even count can land exactly on one, and
PyTorch's summation order and the kernels' may round it to neighbouring levels. So every value
must be within ``Q8_RTOL`` of the output's largest magnitude or two of its own levels
(``_level``), except a few (``_TIES``) that may be off by two steps of the graph's coarsest
quantizer (``_tie_step``): far below what a wrong zero point, scale, rounding or layout costs,
which moves most values.

A graph the quantizer finds nothing in ("no operator this quantizer handles": a dynamic
quantization of a graph without linear layers) is counted as skipped, not as a failure; any other
exception, a mismatch, or a lowering the partitioner survived only by keeping it portable (a
WARNING of its own: :class:`random_graph_check._Fallbacks`) is a :class:`Failure` naming the
seed. :class:`Q8Stats` also counts the int8 operators the delegates hold (``blob_features``'s
``:q8`` variants, ``dq_linear``, ``token_fq``, fused fake-quants), so a change that stops
lowering them shows. Used by tests/python/test_quant_random_graphs.py and
``tools/random_graphs.py --int8``.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from random_graph_check import Failure, _export, _Fallbacks, _run, _short, delegation, gather
from random_graphs import make_case

Q8_RTOL = 2e-2  # of the reference output's largest magnitude
Q8_ATOL = 1e-6
_TIES = 0.25  # the share of an output's values a rounding tie may move
NOTHING = "no operator this quantizer handles"


@dataclass
class Q8Stats:
    """What a run of int8 random graphs checked and found."""

    graphs: int = 0  # seeds tried
    quantized: int = 0  # ... whose graph the quantizer changed (the others are skipped)
    failures: list[Failure] = field(default_factory=list)
    features: Counter[str] = field(default_factory=Counter)  # the delegates' blob records
    outside: Counter[str] = field(default_factory=Counter)  # kernels left portable (default)
    worst: float = 0.0  # the largest error seen, relative to its output's largest magnitude

    def merge(self, o: Q8Stats) -> None:
        self.graphs += o.graphs
        self.quantized += o.quantized
        self.failures += o.failures
        self.features.update(o.features)
        self.outside.update(o.outside)
        self.worst = max(self.worst, o.worst)

    def int8_records(self) -> int:
        """Int8 operators inside the delegates."""
        return sum(n for k, n in self.features.items() if k.endswith(":q8") or "fakequant" in k
                   or "_fq" in k or k in ("dq_linear", "token_fq"))  # fmt: skip


def _calibration(inputs: tuple, seed: int) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(4):
        out.append(tuple(x + 0.1 * torch.randn(x.shape, generator=g)
                         if x.is_floating_point() else x for x in inputs))  # fmt: skip
    return out + [inputs]


def _outputs(y: Any) -> list[Any]:
    return list(y) if isinstance(y, (tuple, list)) else [y]


def _error(got: Any, want: Any, tie: float, cond: float = 0.0) -> tuple[float, str | None]:
    """(|got - want|'s max ÷ want's largest magnitude, why it fails or None). Every element must
    be within ``Q8_RTOL`` of the largest magnitude, or two of the output's own quantization
    levels (``_level``), plus 4x ``cond`` (the float model's own float32 error: its distance to
    float64, for ill-conditioned graphs, as random_graph_check.mismatch allows); up to ``_TIES``
    of them may instead be off by up to ``tie``."""
    if not isinstance(want, torch.Tensor) or not want.is_floating_point():
        return 0.0, None if torch.equal(torch.as_tensor(got), torch.as_tensor(want)) else "differs"
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
        return float("inf"), f"shape {getattr(got, 'shape', type(got))} != {tuple(want.shape)}"
    if want.numel() == 0:
        return 0.0, None
    finite = torch.isfinite(want)
    if not torch.equal(torch.isfinite(got), finite):
        return float("inf"), "non-finite values where the reference has none (or the reverse)"
    if not bool(finite.any()):
        return 0.0, None
    w, d = want[finite], (got[finite] - want[finite]).abs()
    scale, err = float(w.abs().max()), float(d.max())
    rel = err / max(scale, 1e-30)
    tol = max(Q8_RTOL * scale, 2 * _level(w, scale)) + Q8_ATOL + 4 * cond
    off = int((d > tol).sum())
    if off and (err > max(tol, tie) or off > max(2, int(_TIES * d.numel()))):
        return rel, (
            f"max |err| {err:.3g} > {tol:.3g} at {off} of {d.numel()} values (largest |value| "
            f"{scale:.3g}, shape {tuple(want.shape)}; ties allow {tie:.3g})"
        )
    return rel, None


def _level(v: torch.Tensor, scale: float) -> float:
    """The quantization step of a dequantized output (the smallest gap between its distinct
    values, when that is at least 1 % of its largest magnitude: a grid of few levels), else 0."""
    u = torch.unique(v.double())
    if u.numel() < 2:
        return 0.0
    gap = float((u[1:] - u[:-1]).min())
    return gap if gap >= 0.01 * scale else 0.0


def _conditioning(m: torch.nn.Module, inputs: tuple) -> list[float]:
    """Per output, the float model's float32 error: max |f32 eager - f64 eager| (0 where not a
    float tensor). A graph that normalizes rounding noise (a layer norm of a mean of a layer
    norm's rows) is itself a few percent off in float32, and its quantized form with it."""
    with torch.no_grad():
        y32 = _outputs(m(*inputs))
        y64 = _outputs(copy.deepcopy(m).double()(
            *[x.double() if x.is_floating_point() else x for x in inputs]))  # fmt: skip
    out = []
    for a, b in zip(y32, y64, strict=True):
        ok = isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() > 0
        out.append(float((a.double() - b).abs().nan_to_num().max()) if ok else 0.0)
    return out


def _tie_step(graph: torch.fx.Graph) -> float:
    """Two of the largest step among the graph's static activation quantizers: how far a value
    can move when a float sum lands exactly on a rounding boundary (a mean of grid values over
    an even count does, structurally) and PyTorch's order and the kernels' round it apart."""
    steps = [
        float(n.args[1])
        for n in graph.nodes
        if n.op == "call_function" and "quantize_per_tensor" in str(n.target)
        and len(n.args) > 1 and isinstance(n.args[1], float)
    ]  # fmt: skip
    return 2 * max(steps, default=0.0)


MODES = ("static", "dynamic", "xnnpack", "xnnpack-dynamic")


def _xnnpack(m: torch.nn.Module, inputs: tuple, calib: list[tuple] | None) -> torch.nn.Module:
    """m quantized by ExecuTorch's XNNPACKQuantizer through PT2E (per-channel symmetric weights;
    static activations calibrated on ``calib``, or dynamic ones when it is None)."""
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer as xq
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = xq.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=calib is None)
    quantizer = xq.XNNPACKQuantizer().set_global(config)
    prepared = prepare_pt2e(torch.export.export(m, inputs).module(), quantizer)
    with torch.no_grad():
        for batch in calib or [inputs]:
            prepared(*batch)
    return convert_pt2e(prepared)


def _quantized(target: Any) -> bool:
    """Whether a quantized graph holds any quantize operator."""
    gm = target.graph_module if isinstance(target, torch.export.ExportedProgram) else target
    return any(n.op == "call_function" and "quantize_per" in str(n.target)
               and "dequantize" not in str(n.target) for n in gm.graph.nodes)  # fmt: skip


def check_q8_seed(seed: int, mode: str, threads: tuple[int, ...] = (1,)) -> Q8Stats:
    """Quantize seed's graph (``mode``: one of MODES) and check both paths."""
    from ember.quant.pt2e import quantize_exported

    st = Q8Stats(graphs=1)
    try:
        case = make_case(seed)
    except Exception as e:  # noqa: BLE001 - a generator bug is a finding too
        st.failures.append(Failure(seed, "generator exception", _short(e)))
        return st
    m, inputs = case.sub.eval(), tuple(case.inputs)
    dynamic = mode.endswith("dynamic")
    calib = None if dynamic else _calibration(inputs, seed)
    try:
        if mode.startswith("xnnpack"):
            converted = _xnnpack(m, inputs, calib)
            if not _quantized(converted):
                raise ValueError(NOTHING)
            with torch.no_grad():
                want = _outputs(converted(*inputs))
            qep = torch.export.export(converted, inputs)  # once, for both of Ember's paths
        else:
            qep = quantize_exported(m, inputs, calib, dynamic=dynamic, progress=False)
            with torch.no_grad():
                want = _outputs(qep.module()(*inputs))
        tie = _tie_step(qep.graph_module.graph)
        cond = _conditioning(m, inputs)
    except Exception as e:  # noqa: BLE001
        if NOTHING not in str(e):
            st.failures.append(Failure(seed, f"{mode} quantize exception",
                                       f"{_short(e)} | {case.describe()}"))  # fmt: skip
        return st
    st.quantized = 1
    for path in ("default", "portable"):
        try:
            with _Fallbacks() as fell:
                prog = _export(qep, inputs, path)
            if fell.messages:
                st.failures.append(Failure(seed, f"{mode} {path} fallback",
                                           " | ".join(fell.messages)[:600]))  # fmt: skip
            runs = {th: _run(prog, inputs, th) for th in (threads if path == "default" else (1,))}
        except Exception as e:  # noqa: BLE001
            st.failures.append(Failure(seed, f"{mode} {path} exception",
                                       f"{_short(e)} | {case.describe()}"))  # fmt: skip
            continue
        if path == "default":
            _, outside, _, feats = delegation(prog)
            st.features.update(feats)
            st.outside.update(outside)
        bad = None
        for th, got in runs.items():
            for j, w in enumerate(want):
                rel, why = _error(got[j] if j < len(got) else None, w, tie, cond[j])
                if rel != float("inf"):
                    st.worst = max(st.worst, rel)
                if why is not None and bad is None:
                    bad = f"output {j}, {th} thread(s): {why}"
        if bad is not None:
            st.failures.append(Failure(seed, f"{mode} {path} mismatch",
                                       f"{bad} | {case.describe()}"))  # fmt: skip
    return st


def _work(job: tuple[list[int], str, tuple[int, ...]]) -> Q8Stats:
    torch.set_num_threads(1)
    seeds, mode, threads = job
    st = Q8Stats()
    for s in seeds:
        st.merge(check_q8_seed(s, mode, threads))
    return st


def run_q8(
    seeds: Sequence[int],
    mode: str,
    jobs: int = 1,
    threads: tuple[int, ...] = (1,),
    chunk: int = 8,
    done: Callable[[Q8Stats], None] | None = None,
) -> Q8Stats:
    """Check ``seeds`` in ``mode`` on ``jobs`` forked processes, ``chunk`` seeds a task; ``done``
    is called with each chunk's stats as it finishes. Returns the merged stats."""
    seeds = list(seeds)
    work = [(seeds[i : i + chunk], mode, threads) for i in range(0, len(seeds), chunk)]
    return gather(_work, work, jobs, Q8Stats(), done)
