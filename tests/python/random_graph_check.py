"""Checks random graphs (tests/python/random_graphs.py) on Ember's two paths against eager.

:func:`check_seeds` builds the cases of a list of seeds, puts them side by side in one module
(one ``torch.export`` per Ember export, one run per path), and compares, for every output of
every case, eager PyTorch with

- the default path: ``ember.export(m, inputs)`` (``backend="auto"`` -> EmberCpuBackend), run by
  Ember's runtime at each of ``threads``;
- the portable path: ``ember.export(m, inputs, backend=None)``;

within ``RTOL`` of the output's largest magnitude (+ ``ATOL``). Exceptions (export, load, run)
and mismatches become :class:`Failure` records naming the seed: a batch that raises is re-run
case by case, and a case that mismatches in its batch is re-checked alone. It also reads what
the delegates hold (:func:`blob_features`: operator kinds, fused activations, residuals,
Winograd / transposed / depthwise convs, masked softmax...) and how many instructions ran
inside and outside them, so that a change that stops delegating or fusing shows.
"""

from __future__ import annotations

import copy
import importlib
import logging
import multiprocessing
import re
import struct
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from random_graph_ops import Batch
from random_graphs import ATOL, RTOL, Case, make_case

log = logging.getLogger(__name__)

_OP = struct.Struct("<II4i2i24i8f")
_KIND = {
    1: "conv2d", 2: "gemm", 3: "binary", 4: "unary", 5: "maxpool2d", 6: "avgpool2d", 7: "mean",
    8: "softmax", 9: "layernorm", 10: "permute", 11: "copy", 12: "cat", 13: "slice",
    14: "channel_affine", 15: "rmsnorm", 16: "token_fq", 17: "pad", 18: "dq_linear",
    19: "tensor_fq", 20: "embedding", 21: "resize", 22: "gather",
}  # fmt: skip
_ACT = [
    "none", "clamp", "hardswish", "sigmoid", "silu", "gelu", "gelu_tanh", "tanh", "hardsigmoid",
    "exp", "sqrt", "rsqrt", "neg", "abs", "fakequant", "hardswish_fq", "leaky_relu", "elu",
    "cube",
]  # fmt: skip
_BIN = ["add", "sub", "mul", "div", "rsub"]


@dataclass
class Failure:
    seed: int  # -1: only the batch fails, not any case alone (see detail)
    # "<path> exception" / "<path> mismatch" / "<path> fallback" (the partitioner kept something
    # portable after an error of its own) / "batch-only ..." / "generator exception"
    kind: str
    detail: str


@dataclass
class Stats:
    graphs: int = 0
    failures: list[Failure] = field(default_factory=list)
    features: Counter[str] = field(default_factory=Counter)
    inside: int = 0  # instructions replaced by delegates
    outside: Counter[str] = field(default_factory=Counter)  # kernels left outside
    delegates: int = 0
    families: Counter[str] = field(default_factory=Counter)

    def merge(self, o: Stats) -> None:
        self.graphs += o.graphs
        self.failures += o.failures
        self.features.update(o.features)
        self.inside += o.inside
        self.outside.update(o.outside)
        self.delegates += o.delegates
        self.families.update(o.families)


def blob_features(blob: bytes) -> Counter[str]:
    """What an EMC1 blob's operators are: kind, kind+activation and the variants."""
    f: Counter[str] = Counter()
    n_ops = struct.unpack_from("<I", blob, 12)[0]
    base = struct.unpack_from("<Q", blob, 40)[0]
    for i in range(n_ops):
        r = _OP.unpack_from(blob, base + _OP.size * i)
        kind, act = _KIND.get(r[0], str(r[0])), _ACT[r[1]] if r[1] < len(_ACT) else str(r[1])
        ins, outs, ip = r[2:6], r[6:8], r[8:32]
        f[kind] += 1
        if act != "none":
            f[f"{kind}+{act}"] += 1
        if kind == "conv2d":
            dw = bool(ip[9])
            for name, on in (
                ("depthwise", dw),
                ("grouped", ip[0] > 1 and not dw),
                ("strided", ip[3] > 1 or ip[4] > 1),
                ("dilated", ip[7] > 1 or ip[8] > 1),
                ("transposed", ip[12] and not ip[13]),
                (f"winograd{ip[13]}{'T' if ip[12] else ''}", ip[13]),
                ("residual", ins[3] >= 0),
                ("in_scale", ip[16]),
                ("plane_means", outs[1] >= 0),
                ("q8", ip[17]),
            ):
                if on:
                    f[f"conv2d:{name}"] += 1
        elif kind == "gemm":
            for name, on in (
                ("batched", ip[0] > 1),
                ("packed_b", ip[7]),
                ("bias", ins[2] >= 0),
                ("residual", ins[3] >= 0),
            ):
                if on:
                    f[f"gemm:{name}"] += 1
        elif kind == "slice" and ip[6]:
            f["slice:reverse"] += 1
        elif kind == "mean" and ip[3]:
            f["mean:sum"] += 1
        elif kind == "resize":
            modes = ("bilinear", "nearest", "adaptive_avg")
            f[f"resize:{modes[ip[5]] if 0 <= ip[5] < len(modes) else ip[5]}"] += 1
        elif kind == "binary":
            f[f"binary:{_BIN[ip[0]]}{':scalar' if ins[1] < 0 else ''}"] += 1
            if ip[1]:
                f["binary:q8"] += 1
        elif kind == "unary" and ip[0]:
            f["unary:q8"] += 1
        elif kind == "maxpool2d" and ip[10]:
            f["maxpool2d:q8"] += 1
        elif kind == "softmax":
            for name, on in (("log", ip[3]), ("scale", ip[4]), ("mask", ins[1] >= 0)):
                if on:
                    f[f"softmax:{name}"] += 1
    return f


def delegation(prog: Any) -> tuple[int, Counter[str], int, Counter[str]]:
    """(instructions inside delegates, kernels left outside, delegates, blob features)."""
    from ember.backends.delegate import DelegateInstr
    from ember.passes.ir import KernelInstr

    inside, outside, n, feats = 0, Counter[str](), 0, Counter[str]()
    for ir in prog._irs.values():
        for ins in ir.instrs:
            if isinstance(ins, DelegateInstr):
                n += 1
                m = re.match(r"(\d+) instructions", ins.summary)
                inside += int(m.group(1)) if m else 0
                feats.update(blob_features(ins.processed))
            elif isinstance(ins, KernelInstr):
                outside[ins.kernel] += 1
    return inside, outside, n, feats


class _Fallbacks(logging.Handler):
    """Collects, while attached to the ``ember`` loggers, the records that say the partitioner
    kept something portable after an error of its own: WARNINGs (a lowering that raised, a
    single instruction whose blob the runtime refused) and the INFO lines of a run split in two
    after its fusion or packing raised or the runtime refused its blob. Each is a lowering bug
    the exporter survived (the numbers stay right), so the check reports it."""

    PARTITIONER = "ember.backends.cpu.partition"

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []
        self.level = logging.NOTSET

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if record.levelno >= logging.WARNING or " split in two: " in msg:
            self.messages.append(msg)

    def __enter__(self) -> _Fallbacks:
        logging.getLogger("ember").addHandler(self)
        part = logging.getLogger(self.PARTITIONER)
        self.level = part.level
        part.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("ember").removeHandler(self)
        logging.getLogger(self.PARTITIONER).setLevel(self.level)


class _Fell(Exception):
    """A batch's export fell back (see :class:`_Fallbacks`): its cases are checked one by one."""


class _Shared:
    """While entered, ``ember.export`` reuses what it traced before for the same module: its
    stage-1 ``torch.export`` and stage-2 Core ATen decomposition (~90 % of an export's time here,
    and the same for both backends) are memoised per module / program, across entries.
    Everything after them runs as in a plain export. Without those stage functions (renamed),
    exports just trace again. The trace records no stack traces (``torch.fx.config``): 20 % less
    tracing time; the nodes' source lines only feed messages and debug info."""

    def __init__(self) -> None:
        self.memo: dict[tuple[str, int], tuple[Any, Any]] = {}
        self.saved: dict[str, Callable[..., Any]] = {}
        self.stack_traces = False

    def __enter__(self) -> None:
        self.stack_traces = torch.fx.config.do_not_emit_stack_traces
        torch.fx.config.do_not_emit_stack_traces = True
        stages = importlib.import_module("ember.export")
        for n in ("capture", "decompose"):
            f = getattr(stages, n, None)
            if callable(f):
                self.saved[n] = f
                setattr(stages, n, self._memoised(n, f))

    def __exit__(self, *exc: object) -> None:
        torch.fx.config.do_not_emit_stack_traces = self.stack_traces
        stages = importlib.import_module("ember.export")
        for n, f in self.saved.items():
            setattr(stages, n, f)
        self.saved = {}

    def _memoised(self, name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def g(first: Any, *a: Any, **k: Any) -> Any:
            key = (name, id(first))
            if key not in self.memo:  # the key object is kept alive: its id stays unique
                self.memo[key] = (first, f(first, *a, **k))
            return self.memo[key][1]

        return g


def _export(m: torch.nn.Module, inputs: tuple, path: str) -> Any:
    import ember

    if path == "default":
        return ember.export(m, inputs)
    return ember.export(m, inputs, backend=None)


def _run(prog: Any, inputs: tuple, threads: int) -> list[torch.Tensor]:
    from ember.runtime import RuntimeProgram

    return list(RuntimeProgram(prog.buffer, threads=threads).run("forward", list(inputs)))


def mismatch(got: Any, want: torch.Tensor, want64: Any = None) -> str | None:
    """Why ``got`` is not ``want`` within RTOL of want's largest magnitude + ATOL, or None.
    ``want64``: the same in float64 (or a pair: it, and it with f32-sized rounding noise put on
    every intermediate); 4x eager's own float32 error (its distance to it), or the distance the
    noise moves the outputs, is allowed on top, for ill-conditioned graphs (a layer norm of
    nearly constant rows, a sum that cancels to nearly nothing)."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
        return f"shape {getattr(got, 'shape', type(got))} != {tuple(want.shape)}"
    if want.numel() == 0:
        return None
    if not bool(torch.isfinite(got).all()):
        return "non-finite values"
    scale = float(want.abs().max())
    err = float((got - want).abs().max())
    cond = 0.0
    if want64 is not None:  # (or a pair: it, and it with rounding noise on every intermediate)
        ref, noisy = want64 if isinstance(want64, tuple) else (want64, want64)
        cond = max(float((want.double() - ref).abs().max()), float((noisy - ref).abs().max()))
    if err > RTOL * scale + ATOL + 4 * cond:
        return (
            f"max |err| {err:.3g} > {RTOL:g} x {scale:.3g} + 4 x {cond:.3g} "
            f"(shape {tuple(want.shape)})"
        )
    return None


def _short(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename.split('/')[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__name__}: {str(e)[:300]}{where}"


def check_cases(cases: list[Case], threads: tuple[int, ...] = (1,), alone: bool = False) -> Stats:
    """Check ``cases`` side by side (see the module docstring)."""
    st = Stats(graphs=len(cases))
    st.families.update(c.family for c in cases)
    batch = Batch([c.sub for c in cases], [len(c.inputs) for c in cases]).eval()
    inputs = tuple(x for c in cases for x in c.inputs)
    with torch.no_grad():
        want = batch(*inputs)
        b64 = copy.deepcopy(batch).double()
        want64 = b64(*[x.double() for x in inputs])
        for sub in b64.subs:  # every intermediate off by f32 rounding: how much the outputs move
            sub.noise = 2.0**-24
        noisy = b64(*[x.double() for x in inputs])
        want64 = [(w, n) for w, n in zip(want64, noisy, strict=True)]
    spans, k = [], 0
    for c in cases:
        spans.append((k, k + len(c.sub.outs)))
        k += len(c.sub.outs)
    bad: dict[int, tuple[str, str]] = {}  # case index -> (kind, detail)
    trace = _Shared()
    for path in ("default", "portable"):
        runs = threads if path == "default" else (1,)
        try:
            with trace, _Fallbacks() as fell:
                prog = _export(batch, inputs, path)
            if fell.messages and (len(cases) == 1 or alone):
                for i in range(len(cases)):
                    bad.setdefault(i, (f"{path} fallback", " | ".join(fell.messages)[:600]))
            elif fell.messages:
                raise _Fell(fell.messages[0])
            outs = {th: _run(prog, inputs, th) for th in runs}
        except Exception as e:  # noqa: BLE001 - every exception is a finding
            if len(cases) == 1 or alone:
                for i in range(len(cases)):
                    bad.setdefault(i, (f"{path} exception", _short(e)))
                continue
            log.info("batch %d-%d: %s raised %s; case by case", cases[0].seed, cases[-1].seed,
                     path, _short(e))  # fmt: skip
            for c in cases:
                one = check_cases([c], threads, alone=True)
                one.graphs, one.families = 0, Counter()  # counted above
                st.merge(one)
            if not st.failures:
                where = f"batch {cases[0].seed}-{cases[-1].seed}"
                st.failures.append(Failure(-1, f"batch-only {path} exception", f"{where}: {e}"))
            return st
        if path == "default":
            st.inside, st.outside, st.delegates, st.features = delegation(prog)
        for i, (a, b) in enumerate(spans):
            for th, got in outs.items():
                for j in range(a, b):
                    why = mismatch(got[j], want[j], want64[j])
                    if why is not None and i not in bad:
                        bad[i] = (f"{path} mismatch", f"output {j - a}, {th} thread(s): {why}")
    for i, (kind, detail) in sorted(bad.items()):
        c = cases[i]
        if len(cases) > 1 and not alone and kind.endswith("mismatch"):
            again = check_cases([c], threads, alone=True)
            if not again.failures:
                st.failures.append(
                    Failure(
                        -1,
                        f"batch-only {kind}",
                        f"seed {c.seed} in batch {cases[0].seed}-{cases[-1].seed}: {detail}",
                    )  # fmt: skip
                )
                continue
            st.failures += again.failures
            continue
        st.failures.append(Failure(c.seed, kind, f"{detail} | {c.describe()}"))
    return st


def check_seeds(seeds: list[int], threads: tuple[int, ...] = (1,)) -> Stats:
    """Make and check the cases of ``seeds`` in one batch; a seed whose generation itself raises
    is a failure too (a generator bug)."""
    cases, st = [], Stats()
    for s in seeds:
        try:
            cases.append(make_case(s))
        except Exception as e:  # noqa: BLE001
            st.failures.append(Failure(s, "generator exception", _short(e)))
    if cases:
        st.merge(check_cases(cases, threads))
    return st


def _work(job: tuple[list[int], tuple[int, ...]]) -> Stats:
    torch.set_num_threads(1)
    return check_seeds(*job)


def run_batches(
    seeds: Sequence[int],
    batch: int = 40,
    jobs: int = 1,
    threads: tuple[int, ...] = (1,),
    done: Callable[[Stats], None] | None = None,
) -> Stats:
    """Check ``seeds`` in batches of ``batch`` cases, on ``jobs`` processes (forked: the
    workers inherit the imported torch and Ember); ``done`` is called with each batch's Stats as
    it finishes. Returns the merged Stats."""
    seeds = list(seeds)
    work = [(seeds[i : i + batch], threads) for i in range(0, len(seeds), batch)]
    return gather(_work, work, jobs, Stats(), done)


def gather(
    fn: Callable[[Any], Any],
    work: Sequence[Any],
    jobs: int,
    total: Any,
    done: Callable[[Any], None] | None,
) -> Any:
    """Merges ``fn`` over ``work`` into ``total`` (a Stats-like object), in order, on ``jobs``
    processes (forked: the workers inherit the imported torch and Ember; the caller alone when
    ``jobs`` <= 1), calling ``done`` with each item's result as it comes. Returns ``total``."""
    ctx = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(jobs, mp_context=ctx) if jobs > 1 else None
    try:
        results: Iterator[Any] = pool.map(fn, work) if pool else map(fn, work)
        for st in results:
            total.merge(st)
            if done is not None:
                done(st)
    finally:
        if pool:
            pool.shutdown()
    return total
