"""fold_constants: weight transposes are evaluated at export; shared weights are stored once."""

from __future__ import annotations

import torch

import ember


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(1024, 64)
        self.head = torch.nn.Linear(64, 1024, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids))


def _kernels(prog: ember.Program) -> list[str]:
    return [d.kernel for d in prog.debug_info("forward") if d.kernel]


def test_linear_weight_transpose_is_folded() -> None:
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 8)
    prog = ember.export(m, (x,), backend=None)  # fold_constants is the portable path
    assert not any("permute" in k or "t_copy" in k for k in _kernels(prog)), _kernels(prog)
    torch.testing.assert_close(prog.run(x), m(x), rtol=1e-5, atol=1e-6)


def test_tied_weight_is_stored_once() -> None:
    m = Tied().eval()
    ids = torch.randint(0, 1024, (1, 8))
    prog = ember.export(m, (ids,), backend=None)  # EmberCpuBackend packs its own copy
    weight_bytes = 1024 * 64 * 4
    assert len(prog.buffer) < 1.5 * weight_bytes
    torch.testing.assert_close(prog.run(ids), m(ids), rtol=1e-5, atol=1e-5)
