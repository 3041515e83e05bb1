"""Every instruction type runs on Ember's runtime.

A hand-built program (written with Ember's own schema and serializer) exercises KernelCall,
MoveCall, JumpFalseCall (taken and not taken, on a Bool value and on a bool tensor) and FreeCall;
``torch.cond`` programs exercise the exporter's JumpFalse/Move emission; DelegateCall is covered by
the CPU-backend tests (tests/python/test_backend_cpu_*.py).
"""

from __future__ import annotations

import pytest
import torch

import ember
from ember import schema as S
from ember.runtime import EmberRuntimeError, RuntimeProgram
from ember.serialize import serialize_pte

F32 = 6


def planned(offset: int, n: int) -> S.EValue:
    return S.EValue(
        S.K_TENSOR, S.Tensor(F32, [n], [0], allocation_info=S.AllocationDetails(1, offset))
    )


def hand_program(cond: bool) -> bytes:
    # values: 0 x, 1 alpha=1, 2 y=x+x, 3 z, 4 cond, 5 const False, 6 out, 7 tmp (freed)
    values = [
        planned(0, 4),
        S.EValue(S.K_INT, 1),
        planned(16, 4),
        planned(32, 4),
        S.EValue(S.K_BOOL, cond),
        S.EValue(S.K_BOOL, False),
        planned(48, 4),
        planned(64, 4),
    ]
    ins = [
        S.Instruction(S.I_KERNEL, (0, [0, 0, 1, 2, 2])),  # 0: y = x + x
        S.Instruction(S.I_JUMPFALSE, (4, 4)),  # 1: if not cond goto 4
        S.Instruction(S.I_KERNEL, (0, [2, 2, 1, 6, 6])),  # 2: out = y + y   (true branch)
        S.Instruction(S.I_JUMPFALSE, (5, 5)),  # 3: goto 5
        S.Instruction(S.I_KERNEL, (0, [2, 0, 1, 6, 6])),  # 4: out = y + x   (false branch)
        S.Instruction(S.I_MOVE, (6, 3)),  # 5: z = out (alias)
        S.Instruction(S.I_KERNEL, (0, [3, 3, 1, 7, 7])),  # 6: tmp = z + z
        S.Instruction(S.I_FREE, (7,)),  # 7: free tmp
    ]
    plan = S.ExecutionPlan(
        name="forward",
        encoded_inp_str="",
        encoded_out_str="",
        values=values,
        inputs=[0],
        outputs=[3],
        instructions=ins,
        operators=[S.Operator("aten::add", "out")],
        non_const_buffer_sizes=[0, 80],
    )
    return serialize_pte([plan], [b""])


def test_kernel_move_jump_free() -> None:
    x = torch.tensor([1.0, 2.0, -3.0, 0.5])
    for cond, expect in ((True, 4 * x), (False, 3 * x)):
        prog = RuntimeProgram(hand_program(cond))
        (z,) = prog.run("forward", [x])
        torch.testing.assert_close(z, expect, rtol=0, atol=0)
        # FreeCall forgot tmp's data: the value now reads as "no data", and a second execute
        # that would write through it is refused instead of writing to a null pointer.
        assert prog.values("forward")[7] is None
        with pytest.raises(EmberRuntimeError, match="no data bound"):
            prog.run("forward", [x])


class CondModel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t * 2.0, lambda t: t - 1.0, (x,))


def test_cond_both_branches_on_runtime() -> None:
    prog = ember.export(CondModel(), (torch.ones(3),))
    rt = RuntimeProgram(prog.buffer)
    for x in (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, 0.5])):
        (y,) = rt.run("forward", [x])
        torch.testing.assert_close(y, CondModel()(x), rtol=0, atol=0)
