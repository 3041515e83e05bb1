"""Leaky ReLU and ELU in EmberCpuBackend (blob version 17: EMC_ACT_LEAKY_RELU, EMC_ACT_ELU, their
parameters in fp[3..5]): lowered as activations and fused into the convolution, GEMM, binary or
channel affine before them, instead of a portable operator between two delegates (Darknet /
YOLO-style conv + batch norm + leaky ReLU nets, GANs, SELU MLPs). Checked: the values
against eager PyTorch on every ISA over hostile inputs (leaky ReLU exactly; ELU's expm1 within a
few f32 ulps), the fusions with nothing left outside against the portable run at 1 and 2
threads, and the runtime refusing non-finite parameters.

Run: .venv/bin/python -m pytest tests/python/test_backend_cpu_leaky_elu.py
"""

from __future__ import annotations

import struct

import pytest
import torch
from backend_cpu_common import _outside, _run_per_isa
from torch import nn

import ember
from ember.backends.check import runtime_check
from ember.backends.delegate import DelegateInstr
from ember.runtime import RuntimeProgram

LEAKY, ELU = 16, 17  # EMC_ACT_LEAKY_RELU, EMC_ACT_ELU
CONV2D, GEMM, BINARY, UNARY = 1, 2, 3, 4

ACTS = {
    "leaky": lambda x: nn.functional.leaky_relu(x, 0.1),
    "leaky_neg": lambda x: nn.functional.leaky_relu(x, -0.3),
    "leaky_big": lambda x: nn.functional.leaky_relu(x, 3.0),
    "leaky_zero": lambda x: nn.functional.leaky_relu(x, 0.0),
    "elu": nn.functional.elu,
    "elu_alpha": lambda x: nn.functional.elu(x, 0.37),
    "selu": nn.functional.selu,
}


def _acts(prog: ember.Program) -> list[tuple[int, int]]:
    """(kind, act) of every op in the program's delegate blobs."""
    out = []
    for ins in prog._irs["forward"].instrs:
        if isinstance(ins, DelegateInstr):
            blob = bytes(ins.processed)
            for kind, at, _ in _blob_ops_of(blob):
                out.append((kind, struct.unpack_from("<I", blob, at + 4)[0]))
    return out


def _blob_ops_of(blob: bytes) -> list[tuple[int, int, None]]:
    n_ops = struct.unpack_from("<I", blob, 12)[0]
    off = struct.unpack_from("<Q", blob, 40)[0]
    return [
        (struct.unpack_from("<I", blob, off + 160 * i)[0], off + 160 * i, None)
        for i in range(n_ops)
    ]


class _Act(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ACTS[self.name](x * 1.0 + 0.0)


def _hostile() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.cat(
        [
            torch.linspace(-30, 30, 4001),
            torch.linspace(-1e-3, 1e-3, 401),
            torch.randn(2000, generator=g) * 4,
            torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-45, -1e-45, 88.0, -88.0, -200.0, 3e38]),
            torch.tensor([-3e38, float("inf"), -float("inf"), float("nan"), -0.5, 0.5, -0.49999]),
        ]
    )
    return x.reshape(1, -1)


@pytest.mark.parametrize("name", sorted(ACTS))
def test_values_as_eager_on_every_isa(name: str, tmp_path) -> None:  # noqa: ANN001
    m = _Act(name).eval()
    x = _hostile()
    prog = ember.export(m, (x,), backend="cpu")
    want_act = LEAKY if name.startswith("leaky") else ELU
    assert want_act in [a for _, a in _acts(prog)] and not _outside(prog), _outside(prog)
    want = m(x)
    outs = _run_per_isa(prog, x, tmp_path, (None, "avx2", "scalar"), threads=1)
    for isa, got in outs.items():
        if want_act == LEAKY:
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=str(isa))
        else:
            torch.testing.assert_close(
                got, want, rtol=2e-6, atol=1e-37, equal_nan=True, msg=str(isa)
            )
    torch.testing.assert_close(outs["scalar"], outs[None], rtol=2e-6, atol=1e-37, equal_nan=True)


class _Darknet(nn.Module):
    """Conv + batch norm + leaky ReLU blocks (YOLO's), a residual add with a leaky ReLU after it,
    then linears with ELU and SELU."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16))
        self.c2 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32))
        self.c3 = nn.Sequential(nn.Conv2d(32, 32, 1), nn.BatchNorm2d(32))
        self.l1, self.l2 = nn.Linear(32, 24), nn.Linear(24, 10)
        for bn in (self.c1[1], self.c2[1], self.c3[1]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.leaky_relu(self.c1(x), 0.1)
        y = nn.functional.leaky_relu(self.c2(y), 0.1)
        y = nn.functional.leaky_relu(self.c3(y) + y, 0.1)
        y = y.mean((2, 3))
        return nn.functional.selu(self.l2(nn.functional.elu(self.l1(y))))


def test_fused_into_their_producers() -> None:
    torch.manual_seed(0)
    m = _Darknet().eval()
    x = torch.randn(1, 3, 24, 24)
    prog = ember.export(m, (x,))
    acts = _acts(prog)
    assert not _outside(prog), _outside(prog)
    assert [k for k, a in acts if a == LEAKY].count(CONV2D) == 3, acts
    assert [k for k, a in acts if a == ELU] == [GEMM, GEMM], acts
    assert UNARY not in [k for k, _ in acts], acts
    x2 = torch.randn(1, 3, 24, 24) * 2
    plain = ember.export(m, (x,), backend=None)
    want = RuntimeProgram(plain.buffer).run("forward", [x2])[0]
    for t in (1, 2):
        got = RuntimeProgram(prog.buffer, threads=t).run("forward", [x2])[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, m(x2), rtol=1e-4, atol=1e-4)


def test_after_a_binary_and_a_channel_affine() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = nn.Parameter(torch.randn(1, 6, 1, 1))

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            a = nn.functional.leaky_relu(x * y, 0.05)
            return nn.functional.elu(a * self.s + 0.5, 1.3)

    m = M().eval()
    x, y = torch.randn(2, 6, 5, 7), torch.randn(2, 6, 5, 7)
    prog = ember.export(m, (x, y))
    assert not _outside(prog), _outside(prog)
    assert {a for _, a in _acts(prog)} >= {LEAKY, ELU}, _acts(prog)
    got = RuntimeProgram(prog.buffer, threads=2).run("forward", [x * 3, y])[0]
    torch.testing.assert_close(got, m(x * 3, y), rtol=1e-5, atol=1e-6)


def test_runtime_refuses_non_finite_parameters() -> None:
    prog = ember.export(_Act("selu").eval(), (torch.randn(2, 30),), backend="cpu")
    d = next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr))
    blob = bytes(d.processed)
    at = next(
        at for _, at, _ in _blob_ops_of(blob) if struct.unpack_from("<I", blob, at + 4)[0] == ELU
    )
    assert runtime_check("EmberCpuBackend", blob, 1 << 20) is None
    for slot in (3, 4, 5):
        for v in (float("nan"), float("inf")):
            bad = bytearray(blob)
            struct.pack_into("<f", bad, at + 128 + 4 * slot, v)
            why = runtime_check("EmberCpuBackend", bytes(bad), 1 << 20)
            assert why is not None and "elu" in why, (slot, v, why)
    bad = bytearray(blob)
    struct.pack_into("<I", bad, at + 4, 64)  # past the last activation
    assert "activation" in (runtime_check("EmberCpuBackend", bytes(bad), 1 << 20) or "")
