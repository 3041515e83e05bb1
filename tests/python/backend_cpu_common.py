"""Shared helpers of the EmberCpuBackend tests (tests/python/test_backend_cpu_*.py): run a
program, list what stayed outside the delegate, check a model against eager PyTorch and the
undelegated Ember run (``_check_model``), the models more than one file exports, and readers of
the delegate's EMC blob (its span, operator records, conv ip[] slots), and the fused chains'
checks (the same bytes with the chains off, the backend's profile lines).
"""

from __future__ import annotations

import os
import struct
import subprocess
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import ember
from ember.backends.delegate import DelegateInstr
from ember.passes.ir import KernelInstr

RTOL, ATOL = 1e-4, 1e-5


def _runtime():
    from ember.runtime import RuntimeProgram

    return RuntimeProgram


def _run(prog: ember.Program, inputs: tuple, threads: int = 1) -> torch.Tensor:
    return _runtime()(prog.buffer, threads=threads).run("forward", list(inputs))[0]


def _static_int8(
    make: Callable[[], nn.Module], shape: tuple[int, ...], seed: int
) -> tuple[ember.Program, tuple]:
    """The module ``make()`` builds after torch.manual_seed(0), statically quantized by
    ``ember.quant.pt2e.quantize_exported`` on 4 seeded random batches of ``shape`` and exported to
    the CPU backend; with a test input of the same generator."""
    from ember.quant.pt2e import quantize_exported

    torch.manual_seed(0)
    m = make().eval()
    g = torch.Generator().manual_seed(seed)
    cal = [(torch.randn(*shape, generator=g) * 2.0,) for _ in range(4)]
    ep = quantize_exported(m, cal[0], cal, progress=False)
    inputs = (torch.randn(*shape, generator=g) * 2.0,)
    return ember.export(ep, inputs, backend="cpu"), inputs


def _assert_close_to_portable(
    make: Callable[[], nn.Module], prog: ember.Program, inputs: tuple, seed: int, threads: int = 1
) -> None:
    """The program's output (a ``_static_int8(make, shape, seed)`` export) against the same model
    quantized the same way and run on the portable kernels: the same int8 levels up to a rounding
    tie between the f32 kernels, one output step at most."""
    from ember.quant.pt2e import quantize_exported

    got = _run(prog, inputs, threads)
    torch.manual_seed(0)
    m = make().eval()
    g = torch.Generator().manual_seed(seed)
    shape = tuple(inputs[0].shape)
    cal = [(torch.randn(*shape, generator=g) * 2.0,) for _ in range(4)]
    ep = quantize_exported(m, cal[0], cal, progress=False)
    want = _run(ember.export(ep, inputs, backend=None), inputs)
    step = want.abs().max().item() / 64 + 1e-6
    assert (got - want).abs().max().item() <= step


def _assert_fused_same_as_apart(prog: ember.Program, inputs: tuple) -> None:
    """The program's bytes at 1 and 2 threads with the backend's chains and plans on, and with
    them off (its ``no_fuse`` option: every operator one by one): all the same."""
    from ember._lib import configure_cpu_backend

    fused = [_run(prog, inputs, th) for th in (1, 2)]
    configure_cpu_backend(no_fuse=True)
    try:
        apart = [_run(prog, inputs, th) for th in (1, 2)]
    finally:
        configure_cpu_backend(no_fuse=False)
    for th in range(2):
        assert torch.equal(fused[th], apart[th]), (fused[th] - apart[th]).abs().max()
    assert torch.equal(fused[0], fused[1])


def _profile_lines(pte: str, no_fuse: bool = False) -> list[str]:
    """The backend's per-operator profile lines of one ``ember run`` of pte (chains off with
    no_fuse): what ran, one line per operator or chain."""
    from ember._lib import repo_root

    env = dict(os.environ, EMBER_CPU_PROFILE="1")
    env.pop("EMBER_CPU_NO_FUSE", None)
    if no_fuse:
        env["EMBER_CPU_NO_FUSE"] = "1"
    cmd = [str(repo_root() / "build" / "ember"), "run", pte, "--iters", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return [ln for ln in r.stderr.splitlines() if "emc op" in ln]


def _pixel_major_tile() -> bool:
    """Whether the backend here has the pixel-major int8 tile: AVX-512 VNNI, not capped below it
    by EMBER_CPU_ISA (which the CLI maps onto the backend as the bindings do)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    tile = os.environ.get("EMBER_CPU_ISA", "") in ("", "avx512f", "amx")
    return tile and "avx512_vnni" in flags and "avx512bw" in flags


def _outside(prog: ember.Program) -> list[str]:
    ir = prog._irs["forward"]
    return [
        i.kernel
        for i in ir.instrs
        if isinstance(i, KernelInstr) and not isinstance(i, DelegateInstr)
    ]


def _n_delegates(prog: ember.Program) -> int:
    return sum(isinstance(i, DelegateInstr) for i in prog._irs["forward"].instrs)


def _check_model(
    m: nn.Module, inputs: tuple, *, outside_ok: int = 0, threads: tuple = (1, 2)
) -> ember.Program:
    m = m.eval()
    with torch.inference_mode():
        want = m(*inputs)
    prog = ember.export(m, inputs, backend="cpu")
    assert _n_delegates(prog) >= 1
    assert len(_outside(prog)) <= outside_ok, _outside(prog)
    for th in threads:
        got = _run(prog, inputs, th)
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    plain = _run(ember.export(m, inputs, backend=None), inputs)
    torch.testing.assert_close(got, plain, rtol=RTOL, atol=ATOL)
    return prog


class Fn(nn.Module):
    """A module of one function of its input (the single-operator tests' models)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _inside_and_equal(
    m: nn.Module,
    x: torch.Tensor,
    *,
    inside: bool = True,
    rtol: float = RTOL,
    atol: float = ATOL,
    exact: bool = False,
) -> ember.Program:
    """Export ``m`` on the default path, check that nothing (``inside``) or something stays
    outside the delegate, and compare the runtime at 1 and 2 threads with eager: bit for bit
    (``exact``, NaN where eager has NaN) or within ``rtol`` / ``atol``."""
    m = m.eval()
    with torch.no_grad():
        want = m(x)
    prog = ember.export(m, (x,))
    assert (not _outside(prog)) == inside, _outside(prog)
    for t in (1, 2):
        got = _run(prog, (x,), t)
        if exact:
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return prog


def _seed_bn(m: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) * 0.2 - 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.rand(mod.num_features, generator=g) * 0.2 - 0.1)
    return m


class ConvZoo(nn.Module):
    """Every conv flavour, folded batch norm, each fused activation, pooling, residual adds."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.dw5 = nn.Conv2d(16, 16, 5, stride=2, padding=2, groups=16, bias=False)
        self.pw = nn.Conv2d(16, 26, 1)
        self.grouped = nn.Conv2d(26, 26, 3, padding=2, dilation=2, groups=2)
        self.rect = nn.Conv2d(26, 13, (3, 1), stride=(1, 2), padding=(1, 0))
        self.bn2 = nn.BatchNorm2d(13)
        self.fc = nn.Linear(13, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn(self.stem(x)))
        y = y + F.relu6(self.dw(y))
        y = F.hardswish(self.dw5(y))
        y = F.silu(self.pw(y)) * torch.sigmoid(y.mean(1, keepdim=True))
        y = F.gelu(self.grouped(y)) - 0.5
        y = self.bn2(F.hardtanh(self.rect(y), -0.5, 2.0))  # unfolded batch norm (affine)
        a = F.max_pool2d(y, 3, 2, 1)
        b = F.avg_pool2d(y, 3, 2, 1)
        y = a + b
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return F.hardsigmoid(self.fc(y))


class SqueezeExcite(nn.Module):
    """MobileNetV3's depthwise conv + squeeze-and-excitation, on a map big enough for banded
    depthwise threads (40 rows) and one that is not."""

    def __init__(self, c: int = 24) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.fc1, self.fc2 = nn.Conv2d(c, 8, 1), nn.Conv2d(8, c, 1)
        self.pw = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.dw(x))
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return self.pw(y * s)


# ---- the EMC blob -------------------------------------------------------------------------
def _blob_span(buf: bytes) -> tuple[int, int]:
    at = buf.index(b"EMC1")
    n_tensors, n_ops = struct.unpack_from("<II", buf, at + 8)
    data_off, data_n = struct.unpack_from("<QQ", buf, at + 48)
    return at, data_off + data_n


def _load_and_run(buf: bytes, x: torch.Tensor) -> str:
    try:
        _runtime()(buf).run("forward", [x])
        return "ok"
    except Exception as e:  # the runtime's error, with its status name
        return str(e)


def _op_table(buf: bytes) -> tuple[int, list[tuple[int, ...]]]:
    """Where the first EMC blob's operator records start in buf, and each record's (kind, act,
    in[0..3], out[0..1])."""
    at, _ = _blob_span(buf)
    n_ops = struct.unpack_from("<I", buf, at + 12)[0]
    base = at + struct.unpack_from("<Q", buf, at + 40)[0]
    return base, [struct.unpack_from("<II4i2i", buf, base + 160 * i) for i in range(n_ops)]


def _blob_ops(prog: ember.Program) -> list[tuple[int, int, tuple[int, ...]]]:
    """(kind, blob offset of the op, ip[0:9]) of every op of every delegate's blob."""
    out = []
    for ins in prog._irs["forward"].instrs:
        if isinstance(ins, DelegateInstr):
            blob = bytes(ins.processed)
            n_ops = struct.unpack_from("<I", blob, 12)[0]
            off = struct.unpack_from("<Q", blob, 40)[0]
            for i in range(n_ops):
                at = off + 160 * i
                ip = struct.unpack_from("<9i", blob, at + 32)
                out.append((struct.unpack_from("<I", blob, at)[0], at, ip))
    return out


def _patched_ip_checks(
    prog: ember.Program, kind: int, patches: list[tuple[int, int]]
) -> list[tuple[int, int, str | None]]:
    """The runtime's check of the program's first delegate blob (a 1 MiB arena) with ip slot
    ``slot`` of its first op of ``kind`` set to ``value``, one patch at a time: (slot, value,
    the refusal or None). The unpatched blob must pass."""
    from ember.backends.check import runtime_check

    d = next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr))
    blob = bytes(d.processed)
    at = next(o[1] for o in _blob_ops(prog) if o[0] == kind)
    assert runtime_check("EmberCpuBackend", blob, 1 << 20) is None
    out = []
    for slot, value in patches:
        bad = bytearray(blob)
        struct.pack_into("<i", bad, at + 32 + 4 * slot, value)
        out.append((slot, value, runtime_check("EmberCpuBackend", bytes(bad), 1 << 20)))
    return out


def _conv_ops(buf: bytes, every_blob: bool = False) -> list[tuple[int, ...]]:
    """The ip[] slots of every conv2d operator in the program's first EMC blob (or in all)."""
    found = []
    at = buf.find(b"EMC1")
    while at >= 0:
        n_ops = struct.unpack_from("<I", buf, at + 12)[0]
        ops_off = struct.unpack_from("<Q", buf, at + 40)[0]
        ops = [struct.unpack_from("<I", buf, at + ops_off + 160 * i)[0] for i in range(n_ops)]
        found += [
            struct.unpack_from("<24i", buf, at + ops_off + 160 * i + 32)
            for i, kind in enumerate(ops)
            if kind == 1
        ]
        at = buf.find(b"EMC1", at + 4) if every_blob else -1
    return found


WINO, WINO_SLOTS, PAIRS = 13, 14, 15  # EMC_CONV_WINOGRAD, EMC_CONV_WINO_SLOTS, EMC_CONV_PAIRS
IN_SCALE = 16  # EMC_CONV_IN_SCALE


def _run_per_isa(
    prog: ember.Program,
    x: torch.Tensor,
    tmp_path: Any,
    isas: tuple[str | None, ...],
    threads: int = 1,
    which: int = 0,
) -> dict[str | None, torch.Tensor]:
    """The program's output `which` (the first by default) on x in a fresh process per ISA
    (EMBER_CPU_ISA=isa; None: the best this CPU runs), keyed by isa: the CPU backend's ISA is
    chosen once per process."""
    import os
    import subprocess
    import sys

    pte = tmp_path / "isa_m.pte"
    prog.save(pte)
    torch.save(x, tmp_path / "isa_x.pt")
    outs: dict[str | None, torch.Tensor] = {}
    for isa in isas:
        y = tmp_path / f"isa_y_{isa}.pt"
        code = (
            "import torch; from ember.runtime import RuntimeProgram;"
            f"x = torch.load({str(tmp_path / 'isa_x.pt')!r});"
            f"p = RuntimeProgram(open({str(pte)!r}, 'rb').read(), threads={threads});"
            f"torch.save(p.run('forward', [x])[{which}], {str(y)!r})"
        )
        env = dict(os.environ)
        env.pop("EMBER_CPU_ISA", None)
        if isa:
            env["EMBER_CPU_ISA"] = isa
        r = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, r.stderr[-2000:]
        outs[isa] = torch.load(y)
    return outs


def _out_step(plain: ember.Program) -> float:
    """The scale of the program's last per-tensor dequantize: one quantization step of its
    output."""
    return [
        float(i.args[1].value)
        for i in plain._irs["forward"].instrs
        if getattr(i, "kernel", "").startswith("quantized_decomposed::dequantize_per_tensor")
    ][-1]


def _assert_within_one_step(
    prog: ember.Program, plain: ember.Program, inputs: tuple, threads: tuple[int, ...] = (1, 2)
) -> None:
    """Every output of prog within one output step of the portable program's (the int8 paths
    sum in another order: a value an ulp from a rounding boundary may land one step apart), at
    most 2 % of them off, at each thread count."""
    step, want = _out_step(plain), _run(plain, inputs)
    for th in threads:
        diff = (_run(prog, inputs, th) - want).abs()
        assert diff.max().item() <= step * 1.001, (th, diff.max().item(), step)
        assert (diff > 0).float().mean().item() <= 0.02, th


class _Block(nn.Module):
    """A transformer-ish block: Q, K, V projections of one input, an output projection with a
    residual, an MLP with GELU (the dq linear tests quantize it)."""

    def __init__(self, d: int = 48) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2) / 7.0, dim=-1) @ self.v(x)
        h = x + self.o(a)
        return h + self.down(nn.functional.gelu(self.up(h)))


def _delegate_blob(prog: ember.Program) -> bytes:
    """The EMC blob of the program's first EmberCpuBackend delegate."""
    return next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr)).processed


def _assert_refused(blob: bytes, edits: Any, arena: int = 1 << 24) -> None:
    """The blob loads; each of `edits` ((byte offset, int32 value, words)) written into a copy of
    it makes the load refuse it with a message containing the words."""
    from ember.backends.check import runtime_check

    assert runtime_check("EmberCpuBackend", blob, arena) is None
    for off, value, what in edits:
        bad = bytearray(blob)
        struct.pack_into("<i", bad, off, value)
        why = runtime_check("EmberCpuBackend", bytes(bad), arena)
        assert why is not None and what in why, (off, value, why)


def _export_patched(ep: Any, x: tuple, patches: Any = ()) -> tuple[ember.Program, ember.Program]:
    """``ep`` exported for the CPU backend and for the portable kernels, each (object, name,
    value) of ``patches`` set meanwhile (a fusion switched off for an A/B of its bits)."""
    import pytest

    mp = pytest.MonkeyPatch()
    for obj, name, value in patches:
        mp.setattr(obj, name, value)
    try:
        return ember.export(ep, x, backend="cpu"), ember.export(ep, x, backend=None)
    finally:
        mp.undo()


def _assert_same_on_every_isa(prog: ember.Program, x: torch.Tensor, tmp_path: Any) -> None:
    """The program's first output on x is the same bits with the best ISA this CPU runs, AVX2
    and scalar rows (a fresh process each, _run_per_isa)."""
    outs = _run_per_isa(prog, x, tmp_path, (None, "avx2", "scalar"))
    assert torch.equal(outs[None], outs["avx2"]) and torch.equal(outs[None], outs["scalar"])


def _hostile(x: torch.Tensor, case: str) -> torch.Tensor:
    """A copy of 2-d ``x`` with one kind of hostile value: ``zeros``, a ``nan``, an ``inf``, a
    ``neg_inf``, one ``huge`` value (the rest round to the zero point of a per-tensor
    quantization), all ``tiny``, ``one_sided`` (every value positive); anything else: as is."""
    x2 = x.clone()
    r, c = x.shape
    if case == "zeros":
        x2.zero_()
    elif case == "nan":
        x2[1 % r, 5 % c] = float("nan")
    elif case == "inf":
        x2[2 % r, 0] = float("inf")
    elif case == "neg_inf":
        x2[r - 1, c - 1] = -float("inf")
    elif case == "huge":
        x2[0, 3 % c] = 2e30
    elif case == "tiny":
        x2 *= 1e-30
    elif case == "one_sided":
        x2 = x2.abs() + 5
    return x2


def _xnnpack_dynamic(m: nn.Module, x: torch.Tensor) -> tuple[nn.Module, Any]:
    """``m`` quantized by PT2E with ExecuTorch's XNNPACKQuantizer in its dynamic per-channel form
    (calibrated on ``x``), as a user's code does: (the converted module, its exported program).
    Skips the test when torchao or ExecuTorch is missing."""
    import pytest

    pytest.importorskip("torchao")
    xq = pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    cfg = xq.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    prepared = prepare_pt2e(
        torch.export.export(m, (x,)).module(), xq.XNNPACKQuantizer().set_global(cfg)
    )
    prepared(x)
    converted = convert_pt2e(prepared)
    return converted, torch.export.export(converted, (x,))
