"""Memory planning: no two simultaneously live tensors overlap, offsets are 16-aligned, every
range fits the arena, memory is reused, mutable buffers are never shared."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import (
    MLP,
    Accumulator,
    Block,
    CondModel,
    SmallCNN,
    export_for_tests,
    randomize_bn,
)

from ember.passes.ir import ACTIVATION, MUTABLE, MethodIR, TensorSpec
from ember.passes.memory_plan import check_plan, plan_memory


def _assert_disjoint_when_live(plan: list[dict], arena: int) -> None:
    for p in plan:
        assert p["offset"] % 16 == 0, p
        assert p["offset"] + p["nbytes"] <= arena, p
    for i, a in enumerate(plan):
        for b in plan[i + 1 :]:
            live_together = (
                a["lifetime"][0] <= b["lifetime"][1] and b["lifetime"][0] <= a["lifetime"][1]
            )
            if not live_together or not a["nbytes"] or not b["nbytes"]:
                continue
            disjoint = (
                a["offset"] + a["nbytes"] <= b["offset"] or b["offset"] + b["nbytes"] <= a["offset"]
            )
            assert disjoint, (a, b)


def _file_level_check(buf: bytes, arena: int) -> None:
    """From the .pte alone: every planned tensor fits the arena; two values used by instructions
    in overlapping ranges overlap in memory only if they are the same bytes (an elided view)."""
    de = pytest.importorskip("executorch.exir._serialize._program")
    p = de.deserialize_pte_binary(buf)
    plan = getattr(p, "program", p).execution_plan[0]
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    n = len(plan.chains[0].instructions)
    for i in plan.inputs:
        first[i] = 0
    for i, ins in enumerate(plan.chains[0].instructions):
        for v in getattr(ins.instr_args, "args", []):
            items = getattr(plan.values[v].val, "items", None)
            for u in [v] + (
                list(items) if type(plan.values[v].val).__name__ == "TensorList" else []
            ):
                first.setdefault(u, i)
                last[u] = i
    for o in plan.outputs:
        last[o] = n
    spans = []
    for v, t in enumerate(plan.values):
        t = t.val
        if type(t).__name__ != "Tensor" or t.allocation_info is None or v not in first:
            continue
        nbytes = 1
        for s in t.sizes:
            nbytes *= s
        nbytes *= {6: 4, 4: 8, 11: 1, 3: 4}[t.scalar_type.value]
        off = t.allocation_info.memory_offset_low
        assert off % 16 == 0 and off + nbytes <= arena
        spans.append((v, first[v], last.get(v, first[v]), off, nbytes))
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if a[1] <= b[2] and b[1] <= a[2] and a[4] and b[4]:
                overlap = a[3] < b[3] + b[4] and b[3] < a[3] + a[4]
                assert not overlap or (a[3], a[4]) == (b[3], b[4]), (a, b)


@pytest.mark.parametrize(
    ("name", "make", "shape"),
    [
        ("mlp", lambda: MLP().eval(), (4, 16)),
        ("cnn", lambda: randomize_bn(SmallCNN()), (2, 3, 8, 8)),
        ("block", lambda: Block().eval(), (2, 8, 32)),
        ("cond", CondModel, (2, 4)),
    ],
)
def test_no_overlap_between_live_tensors(name: str, make, shape) -> None:  # noqa: ANN001
    prog = export_for_tests(make(), (torch.randn(*shape),))
    plan = prog.memory_plan()
    arena = prog.arena_bytes["forward"]
    assert plan and arena > 0
    _assert_disjoint_when_live(plan, arena)
    if name != "cond":  # Move targets alias their source after the move
        _file_level_check(prog.buffer, arena)


def test_memory_is_reused() -> None:
    layers = [torch.nn.Linear(64, 64) for _ in range(8)]
    m = torch.nn.Sequential(*[x for lin in layers for x in (lin, torch.nn.ReLU())])
    prog = export_for_tests(m, (torch.randn(4, 64),))
    plan = prog.memory_plan()
    total = sum(p["nbytes"] for p in plan)
    assert prog.arena_bytes["forward"] < total / 3


def test_mutable_buffers_live_whole_method() -> None:
    prog = export_for_tests(Accumulator(), (torch.ones(4),))
    plan = prog.memory_plan()
    n_instr = max(p["lifetime"][1] for p in plan)
    muts = [p for p in plan if p["kind"] == MUTABLE]
    assert len(muts) == 2
    for mb in muts:
        assert mb["lifetime"] == (0, n_instr)
        for p in plan:
            if p is not mb and p["nbytes"]:
                assert (
                    p["offset"] + p["nbytes"] <= mb["offset"]
                    or mb["offset"] + mb["nbytes"] <= p["offset"]
                )


@pytest.mark.parametrize("seed", range(10))
def test_random_lifetimes(seed: int) -> None:
    """The planner on 150 random tensors: check_plan and an independent pairwise check."""
    rng = random.Random(seed)
    ir = MethodIR(name="r", ep=None)
    for i in range(150):
        s = TensorSpec(
            f"t{i}", torch.float32, (rng.choice([1, 3, 16, 100, 257, 1024]),), ACTIVATION
        )
        a = rng.randrange(60)
        s.lifetime = [a, a + rng.randrange(1, 20)]
        ir.specs.append(s)
    plan_memory(ir)
    check_plan(ir)
    plan = [
        {"offset": s.mem_offset, "nbytes": s.nbytes, "lifetime": tuple(s.lifetime)}
        for s in ir.specs
    ]
    _assert_disjoint_when_live(plan, ir.arena_bytes)
    # Best fit keeps the arena within 2x of the peak live bytes on these inputs.
    peak = max(
        sum(-(-s.nbytes // 16) * 16 for s in ir.specs if s.lifetime[0] <= t <= s.lifetime[1])
        for t in range(80)
    )
    assert peak <= ir.arena_bytes <= 2 * peak
