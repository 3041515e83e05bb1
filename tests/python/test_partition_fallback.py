"""The default path never fails an export that the portable path accepts (issue 27).

Regressions of the first failures found outside the zoo (each failed on the main of 2026-12-01),
and the partitioner's fallbacks forced on purpose: a lowering that raises, a fusion that raises,
a blob the runtime refuses. Every case is checked against eager PyTorch.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

import ember
from ember.backends.cpu import partition as P
from ember.errors import UnsupportedValueError

TOL = 1e-4


def _check(prog: ember.Program, model: torch.nn.Module, *inputs: torch.Tensor) -> None:
    with torch.no_grad():
        want = model(*inputs)
    got = prog.run(*inputs)
    scale = max(float(want.abs().max()), 1e-6)
    assert float((got - want).abs().max()) <= TOL * scale


def _n_delegates(prog: ember.Program) -> int:
    report = prog._irs["forward"].partition_report
    return len({d.why for d in report if d.delegated})


class _ConstMuls(torch.nn.Module):
    """Two ops of one kind reading the same input with constant operands: comparing their
    records with ``==`` compared numpy arrays (``ValueError: The truth value of an array``)."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(1, 4, 1, 1))
        self.w2 = torch.nn.Parameter(torch.randn(1, 4, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.w1) + torch.relu(x * self.w2)


def test_ops_with_array_attributes_compare_by_identity() -> None:
    torch.manual_seed(0)
    m = _ConstMuls().eval()
    x = torch.randn(1, 4, 5, 5)
    prog = ember.export(m, (x,))
    assert _n_delegates(prog) == 1
    _check(prog, m, x)


@pytest.mark.parametrize("padding", ["valid", "same", 0, (1, 2)])
def test_conv_with_one_element_padding_list_delegates(padding: Any) -> None:
    """``padding="valid"`` decomposes to a one-element padding list, which the blob carried as
    is and the runtime refused at load."""
    torch.manual_seed(0)
    m = torch.nn.Conv2d(3, 8, 3, padding=padding).eval()
    x = torch.randn(1, 3, 9, 9)
    prog = ember.export(m, (x,))
    assert _n_delegates(prog) == 1, prog.explain()
    _check(prog, m, x)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.lin = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).mean((2, 3))
        return torch.sigmoid(self.lin(y))


def test_a_lowering_that_raises_stays_portable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = P.lower

    def broken(ins: Any, only_here: Any) -> Any:
        if ins.kernel == "aten::convolution.out":
            raise RuntimeError("a bug in the conv lowering")
        return real(ins, only_here)

    monkeypatch.setattr(P, "lower", broken)
    torch.manual_seed(0)
    m = _Net().eval()
    x = torch.randn(1, 3, 8, 8)
    with caplog.at_level(logging.WARNING, logger="ember.backends.cpu.partition"):
        prog = ember.export(m, (x,))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("aten::convolution.out" in w and "a bug in the conv lowering" in w for w in warned)
    report = prog._irs["forward"].partition_report
    conv = [d for d in report if d.kernel == "aten::convolution.out"]
    assert conv and not conv[0].delegated
    assert any(d.delegated for d in report)  # the rest still delegates
    _check(prog, m, x)


def test_a_fusion_that_raises_splits_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ops: list[Any], u: Any) -> None:
        if any(o.kind == "conv2d" for o in ops) and any(o.kind == "gemm" for o in ops):
            raise IndexError("a bug in a fusion")

    monkeypatch.setattr(P, "_FUSIONS", (broken, *P._FUSIONS))
    torch.manual_seed(0)
    m = _Net().eval()
    x = torch.randn(1, 3, 8, 8)
    prog = ember.export(m, (x,))
    assert _n_delegates(prog) >= 2  # the run was split until each part packed
    _check(prog, m, x)


def test_a_blob_the_runtime_refuses_never_leaves_the_exporter(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = P.build_blob

    def corrupt(ops: list[Any], *a: Any) -> tuple[bytes, int]:
        data, arena = real(ops, *a)
        if any(o.kind == "conv2d" for o in ops):
            b = bytearray(data)
            b[4:8] = (99).to_bytes(4, "little")  # an unknown blob version
            data = bytes(b)
        return data, arena

    monkeypatch.setattr(P, "build_blob", corrupt)
    torch.manual_seed(0)
    m = _Net().eval()
    x = torch.randn(1, 3, 8, 8)
    with caplog.at_level(logging.WARNING, logger="ember.backends.cpu.partition"):
        prog = ember.export(m, (x,))
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "the runtime refused its blob" in warned and "version 99" in warned
    report = prog._irs["forward"].partition_report
    assert not [d for d in report if d.kernel == "aten::convolution.out"][0].delegated
    assert any(d.delegated for d in report)
    _check(prog, m, x)  # loads and runs: the refused blob is not in the file


def test_explain_names_every_decision(capsys: pytest.CaptureFixture[str]) -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).cumsum(1) * 2

    x = torch.randn(2, 5)
    prog = ember.export(M(), (x,), explain=True)
    err = capsys.readouterr().err
    assert "forward:" in err and "delegated" in err
    assert "aten::cumsum.out" in err and "portable:" in err
    assert err.strip() == prog.explain().strip()
    _check(prog, M(), x)


def _tiny_llama() -> Any:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_hf_causal_lm_with_cache_on_exports_logits(caplog: pytest.LogCaptureFixture) -> None:
    """``use_cache=True`` (transformers' default) stopped torch.export on a DynamicCache."""
    m = _tiny_llama()
    assert m.config.use_cache
    ids = torch.randint(0, 64, (1, 8))
    with caplog.at_level(logging.INFO, logger="ember.passes.capture"):
        prog = ember.export(m, (ids,))
    assert any("use_cache=False" in r.getMessage() for r in caplog.records)
    assert m.config.use_cache  # restored
    got = prog.run(ids)
    logits = got.logits if hasattr(got, "logits") else got[0]
    want = m(ids, use_cache=False).logits
    assert float((logits - want).abs().max()) <= TOL * float(want.abs().max())


def test_unsupported_output_types_are_named_with_their_path() -> None:
    m = _tiny_llama()

    class Cached(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, ids: torch.Tensor) -> Any:
            return self.m(ids, use_cache=True)

    ids = torch.randint(0, 64, (1, 8))
    with pytest.raises(UnsupportedValueError, match=r"DynamicCache at output\..*use_cache=False"):
        ember.export(Cached(), (ids,), backend=None)

    class Box:
        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

    class Boxed(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return {"a": x + 1, "b": [x, Box(x)]}

    with pytest.raises(UnsupportedValueError, match=r"Box at output\.b\[1\]"):
        ember.export(Boxed(), (torch.randn(3),), backend=None)


class _MaskBetween(torch.nn.Module):
    """f32 work, then integer mask arithmetic the CPU backend declines (it reads only the
    input ids), then more f32 work that uses the mask: the mask moves above the first f32 run,
    so both runs are one delegate. With ``dependent`` the portable op reads the first run's
    output, so it cannot move and the runs stay apart."""

    def __init__(self, dependent: bool) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
        self.dependent = dependent

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        src = (h > 0).to(torch.int64).sum(-1, keepdim=True) if self.dependent else ids
        keep = torch.arange(16).unsqueeze(0) < src  # int64 / bool: stays portable
        return self.b(h * keep.to(h.dtype))


@pytest.mark.parametrize("dependent", [False, True])
def test_portable_ops_move_above_a_run_they_commute_with(dependent: bool) -> None:
    torch.manual_seed(0)
    m = _MaskBetween(dependent).eval()
    x, ids = torch.randn(4, 16), torch.tensor([[3], [16], [0], [9]])
    prog = ember.export(m, (x, ids))
    report = prog._irs["forward"].partition_report
    portable = [d.kernel for d in report if not d.delegated]
    assert portable, prog.explain()
    assert _n_delegates(prog) == (2 if dependent else 1), prog.explain()
    if not dependent:  # the portable ops come first, then the one delegate
        first = [d.delegated for d in report]
        assert first == sorted(first), first
    _check(prog, m, x, ids)
    _check(prog, m, torch.randn(4, 16), torch.tensor([[1], [5], [16], [2]]))


def test_hoisting_keeps_order_dependencies_and_state() -> None:
    """The hoist on a hand-made instruction list: a portable op that reads a lowered op's
    output, writes what a lowered op reads, or touches mutable state stays where it is; an
    independent one moves above the whole run, before a dependent one's place."""
    from ember.backends.runs import hoist_portable
    from ember.passes.ir import MUTABLE, Arg, KernelInstr, MethodIR, TensorSpec

    def spec(name: str, kind: str = "activation") -> TensorSpec:
        return TensorSpec(name, torch.float32, (4,), kind=kind)

    def call(name: str, ins: list[TensorSpec], out: TensorSpec) -> KernelInstr:
        args = [Arg("tensor", t) for t in ins] + [Arg("tensor", out)]
        return KernelInstr(name, args, outputs=[args[-1]])

    x, a, b, c, d, e = (spec(n) for n in "xabcde")
    st = spec("state", MUTABLE)
    instrs = [
        call("L0", [x], a),  # lowered
        call("L1", [a], b),  # lowered
        call("P_indep", [x], c),  # portable, commutes: moves up
        call("P_dep", [b], d),  # portable, reads L1: stays
        call("L2", [d], e),  # lowered
        call("P_state", [x], st),  # portable, mutable state: stays
    ]
    ir = MethodIR("forward", None, instrs=list(instrs))
    lowered = [True, True, False, False, True, False]
    assert hoist_portable(ir, lowered)
    assert [i.kernel for i in ir.instrs] == ["P_indep", "L0", "L1", "P_dep", "L2", "P_state"]
    assert lowered == [False, True, True, False, True, False]
    assert not hoist_portable(ir, lowered)  # nothing more moves

    # a portable op writing a root the run reads (an out= buffer reused): it stays after it
    y = spec("y")
    ir = MethodIR("forward", None, instrs=[call("L0", [x], a), call("L1", [a, y], b)])
    ir.instrs.append(call("P_war", [x], y))
    lowered = [True, True, False]
    assert not hoist_portable(ir, lowered)
    assert [i.kernel for i in ir.instrs] == ["L0", "L1", "P_war"]
