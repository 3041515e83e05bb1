"""Byte-level checks of the .pte / .ptd files against the ExecuTorch format rules
(docs/pte-format.md), independent of Ember's own reader."""

from __future__ import annotations

import struct

import pytest
import torch
from conftest import Accumulator, CondModel, DynMLP, SmallCNN, export_for_tests, randomize_bn

from ember import pytree_str


class FB:
    """A tiny independent flatbuffer reader."""

    def __init__(self, b: bytes, base: int = 0) -> None:
        self.b = b

    def u(self, fmt: str, p: int) -> int:
        return struct.unpack_from("<" + fmt, self.b, p)[0]

    def field(self, t: int, slot: int) -> int:
        vt = t - self.u("i", t)
        o = 4 + 2 * slot
        if o >= self.u("H", vt):
            return 0
        off = self.u("H", vt + o)
        return t + off if off else 0

    def ref(self, t: int, slot: int) -> int:
        a = self.field(t, slot)
        return a + self.u("I", a) if a else 0

    def scalar(self, t: int, slot: int, fmt: str, default: int = 0) -> int:
        a = self.field(t, slot)
        return self.u(fmt, a) if a else default

    def tables(self, t: int, slot: int) -> list[int]:
        v = self.ref(t, slot)
        n = self.u("I", v)
        return [v + 4 + 4 * i + self.u("I", v + 4 + 4 * i) for i in range(n)]

    def vec(self, t: int, slot: int, fmt: str) -> list[int]:
        v = self.ref(t, slot)
        if not v:
            return []
        n = self.u("I", v)
        return list(struct.unpack_from(f"<{n}{fmt}", self.b, v + 4))

    def string(self, t: int, slot: int) -> str:
        v = self.ref(t, slot)
        return self.b[v + 4 : v + 4 + self.u("I", v)].decode()


def _deserialize(buf: bytes):  # noqa: ANN202
    de = pytest.importorskip("executorch.exir._serialize._program")
    p = de.deserialize_pte_binary(buf)
    return getattr(p, "program", p)


def test_header_segments_and_constant_layout() -> None:
    m = randomize_bn(SmallCNN())
    prog = export_for_tests(m, (torch.randn(1, 3, 8, 8),))
    b = prog.buffer
    assert b[4:8] == b"ET12" and b[8:12] == b"eh00"
    hlen, program_size, base, data_size = struct.unpack_from("<IQQQ", b, 12)
    assert hlen == 32
    assert base % 128 == 0 and base >= program_size
    assert len(b) == base + data_size
    assert all(x == 0 for x in b[program_size:base])
    fb = FB(b)
    root = fb.u("I", 0)
    assert fb.scalar(root, 0, "I") == 0  # version
    segs = [(fb.scalar(s, 0, "Q"), fb.scalar(s, 1, "Q")) for s in fb.tables(root, 4)]
    assert segs[0][0] == 0 and all(off % 128 == 0 for off, _ in segs)
    cseg = fb.ref(root, 5)
    assert fb.scalar(cseg, 0, "I") == 0
    offsets = fb.vec(cseg, 1, "Q")
    assert offsets[0] == 0 and all(o % 16 == 0 for o in offsets)
    assert fb.vec(root, 2, "I") == []  # legacy constant_buffer empty
    # Every parameter's bytes sit at base + offsets[i] for some i (16-aligned, deduplicated);
    # linear weights are stored transposed (fold_constants evaluates their permute at export).
    seg_start = base + segs[0][0]
    for name, p in m.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        data = p.detach().contiguous().numpy().tobytes()
        pos = b.find(data, seg_start)
        if pos < 0 and p.dim() == 2:
            pos = b.find(p.detach().t().contiguous().numpy().tobytes(), seg_start)
        assert pos >= 0, name
        assert (pos - seg_start) in offsets, name
    # Plan: non_const_buffer_sizes = [0, arena], a single chain, delegates present but empty.
    (plan,) = fb.tables(root, 1)
    assert fb.string(plan, 0) == "forward"
    assert fb.vec(plan, 8, "q") == [0, prog.arena_bytes["forward"]]
    assert len(fb.tables(plan, 5)) == 1
    assert fb.tables(plan, 7) == []
    cmt = fb.ref(plan, 1)
    assert fb.string(cmt, 0) == "T2#1#0(T1#1($),D0())"
    assert fb.string(cmt, 1) == "$"


def test_no_segment_data_means_no_header() -> None:
    class Add(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + b

    prog = export_for_tests(Add(), (torch.randn(2), torch.randn(2)))
    b = prog.buffer
    assert b[4:8] == b"ET12" and b[8:12] != b"eh00"
    fb = FB(b)
    root = fb.u("I", 0)
    assert fb.vec(fb.ref(root, 5), 1, "Q") == [0]


def _ops(plan) -> list[str]:  # noqa: ANN001
    return [o.name + (f".{o.overload}" if o.overload else "") for o in plan.operators]


def test_out_variant_argument_convention() -> None:
    m = randomize_bn(SmallCNN())
    p = _deserialize(export_for_tests(m, (torch.randn(1, 3, 8, 8),)).buffer)
    plan = p.execution_plan[0]
    ops = _ops(plan)
    vals = plan.values
    seen = set()
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        if not hasattr(a, "op_index"):
            continue
        name = ops[a.op_index]
        seen.add(name)
        args = a.args
        if name == "aten::add.out":  # [self, other, alpha, out, out]
            assert len(args) == 5 and args[3] == args[4]
            assert type(vals[args[2]].val).__name__ == "Int"
        if name == "aten::_native_batch_norm_legit_no_training.out":
            # 7 schema args + 3 outs + TensorList(outs)
            assert len(args) == 11
            tl = vals[args[10]].val
            assert type(tl).__name__ == "TensorList" and list(tl.items) == args[7:10]
        if name == "aten::convolution.out":
            assert len(args) == 11 and args[9] == args[10]
            stride = vals[args[3]].val
            assert type(stride).__name__ == "IntList"
            assert all(i < args[3] and type(vals[i].val).__name__ == "Int" for i in stride.items)
        if name == "aten::max_pool2d_with_indices.out":
            # 6 schema args + out + indices + TensorList(out, indices)
            assert len(args) == 9
            assert list(vals[args[8]].val.items) == args[6:8]
    assert {"aten::convolution.out", "aten::add.out", "aten::addmm.out"} <= seen
    # View elision: flatten became no instruction; reshapes share their base's memory.
    assert "aten::view_copy.out" not in seen


def test_mutable_buffer_encoding() -> None:
    prog = export_for_tests(Accumulator(), (torch.ones(4),))
    pte = _deserialize(prog.buffer)
    plan = pte.execution_plan[0]
    ops = _ops(plan)
    tensors = {i: v.val for i, v in enumerate(plan.values) if type(v.val).__name__ == "Tensor"}
    bufs = {
        i: t
        for i, t in tensors.items()
        if t.extra_tensor_info is not None and t.extra_tensor_info.fully_qualified_name
    }
    assert {t.extra_tensor_info.fully_qualified_name for t in bufs.values()} == {"total", "calls"}
    for t in bufs.values():
        assert t.allocation_info is not None and t.data_buffer_idx > 0
    copies = [
        ins.instr_args
        for ins in plan.chains[0].instructions
        if hasattr(ins.instr_args, "op_index") and ops[ins.instr_args.op_index] == "aten::copy_"
    ]
    assert len(copies) == 2
    for c in copies:  # [self, src, non_blocking, ret=self]
        assert len(c.args) == 4 and c.args[0] == c.args[3] and c.args[0] in bufs
        assert plan.values[c.args[2]].val.bool_val is False
    # Raw bytes: mutable_data_segments[0] holds the initial state (5.0 x4 then int64 0).
    fb = FB(prog.buffer)
    root = fb.u("I", 0)
    (mseg,) = fb.tables(root, 6)
    seg_idx = fb.scalar(mseg, 0, "I")
    offs = fb.vec(mseg, 1, "Q")
    base = struct.unpack_from("<Q", prog.buffer, 24)[0]
    seg_off = [fb.scalar(s, 0, "Q") for s in fb.tables(root, 4)][seg_idx]
    start = base + seg_off
    total = next(t for t in bufs.values() if t.extra_tensor_info.fully_qualified_name == "total")
    o = offs[total.data_buffer_idx]
    assert prog.buffer[start + o : start + o + 16] == torch.full((4,), 5.0).numpy().tobytes()


def test_cond_instruction_layout() -> None:
    pte = _deserialize(export_for_tests(CondModel(), (torch.randn(2, 4),)).buffer)
    plan = pte.execution_plan[0]
    kinds = [type(i.instr_args).__name__ for i in plan.chains[0].instructions]
    jf = [i for i, k in enumerate(kinds) if k == "JumpFalseCall"]
    mv = [i for i, k in enumerate(kinds) if k == "MoveCall"]
    assert len(jf) == 2 and len(mv) == 2
    instrs = plan.chains[0].instructions
    first, second = instrs[jf[0]].instr_args, instrs[jf[1]].instr_args
    # JF(pred -> false branch start), true branch, Move, JF(False -> end), false branch, Move.
    assert first.destination_instruction == jf[1] + 1
    assert mv[0] == jf[1] - 1
    assert second.destination_instruction == mv[1] + 1
    assert plan.values[second.cond_value_index].val.bool_val is False
    pred = plan.values[first.cond_value_index].val
    assert type(pred).__name__ == "Tensor" and pred.scalar_type.name == "BOOL"
    a, b = instrs[mv[0]].instr_args, instrs[mv[1]].instr_args
    assert a.move_to == b.move_to


def test_dynamic_bound_tensors() -> None:
    n = torch.export.Dim("n", max=16)
    prog = export_for_tests(DynMLP(), (torch.randn(4, 8),), dynamic_shapes=({0: n},))
    plan = _deserialize(prog.buffer).execution_plan[0]
    inp = plan.values[plan.inputs[0]].val
    out = plan.values[plan.outputs[0]].val
    assert inp.shape_dynamism.name == "DYNAMIC_BOUND" and list(inp.sizes) == [16, 8]
    assert out.shape_dynamism.name == "DYNAMIC_BOUND" and list(out.sizes) == [64]
    # Planned at the bound: the arena holds at least input + output at full size.
    assert prog.arena_bytes["forward"] >= (16 * 8 + 64) * 4


def test_ptd_file() -> None:
    m = randomize_bn(SmallCNN())
    prog = export_for_tests(m, (torch.randn(1, 3, 8, 8),), external_constants=True)
    d = prog.ptd_buffer
    assert d[4:8] == b"FT01" and d[8:12] == b"FH01"
    hlen, fb_off, fb_size, base, data_size = struct.unpack_from("<IQQQQ", d, 12)
    assert hlen == 40 and fb_off == 48
    assert base % 128 == 0 and base >= fb_off + fb_size and len(d) >= base + data_size
    fb = FB(d)
    root = fb.u("I", 0)
    segs = [(fb.scalar(s, 0, "Q"), fb.scalar(s, 1, "Q")) for s in fb.tables(root, 1)]
    assert all(off % 128 == 0 for off, _ in segs)
    named = {}
    for nd in fb.tables(root, 2):
        layout = fb.ref(nd, 2)
        named[fb.string(nd, 0)] = (fb.scalar(nd, 1, "I"), fb.vec(layout, 1, "i"))
    params = {k: v for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert set(params) <= set(named)
    for k, t in params.items():
        seg, sizes = named[k]
        assert sizes == list(t.shape)
        off, size = segs[seg]
        assert d[base + off : base + off + size] == t.detach().numpy().tobytes()
    # The .pte refers to them by FQN, EXTERNAL, with no data of its own.
    plan = _deserialize(prog.buffer).execution_plan[0]
    ext = {
        v.val.extra_tensor_info.fully_qualified_name
        for v in plan.values
        if type(v.val).__name__ == "Tensor"
        and v.val.extra_tensor_info is not None
        and v.val.extra_tensor_info.location.name == "EXTERNAL"
    }
    assert set(params) <= ext
    assert prog.buffer.find(params["conv1.weight"].numpy().tobytes()) < 0


def test_save_and_load(tmp_path) -> None:  # noqa: ANN001
    import ember

    m = randomize_bn(SmallCNN())
    prog = export_for_tests(m, (torch.randn(1, 3, 8, 8),), external_constants=True)
    path = prog.save(tmp_path / "model.pte")
    assert (tmp_path / "model.ptd").read_bytes() == prog.ptd_buffer
    back = ember.load(path)
    assert back.buffer == prog.buffer and back.ptd_buffer == prog.ptd_buffer
    assert back.methods == ["forward"] and back.arena_bytes == prog.arena_bytes
    assert back.output_spec().num_leaves == 1


@pytest.mark.parametrize(
    "obj",
    [((1,), {}), ((1, 2, [3, 4]),), {"a": 1, "b": (2, 3)}, [1, {"x": [2]}], ((), {}), 5],
)
def test_pytree_strings_round_trip(obj: object) -> None:
    import torch.utils._pytree as pt

    spec = pt.tree_structure(obj)
    s = pytree_str.encode(spec)
    assert pytree_str.decode(s) == spec


def test_pytree_string_examples() -> None:
    import torch.utils._pytree as pt

    assert pytree_str.encode(pt.tree_structure((1, 2, [3, 4]))) == "T3#1#1#2($,$,L2#1#1($,$))"
    assert pytree_str.encode(pt.tree_structure(((1,), {}))) == "T2#1#0(T1#1($),D0())"


def test_weights_snapshotted_at_export() -> None:
    from conftest import MLP

    m = MLP().eval()
    prog = export_for_tests(m, (torch.randn(1, 16),))
    before = bytes(prog.buffer)
    with torch.no_grad():
        m.fc1.weight.add_(1.0)
    assert prog.buffer == before
    assert before.find(m.fc1.weight.detach().numpy().tobytes()) < 0
