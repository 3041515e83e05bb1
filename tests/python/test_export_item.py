"""``Tensor.item()`` in exported graphs: ``aten::_local_scalar_dense`` writes a runtime Int that
later SymInt arguments read, ``torch._check`` bounds drive memory planning and are not emitted,
and the result matches eager PyTorch on Ember's runtime (and on stock ExecuTorch when present)."""

from __future__ import annotations

import pytest
import torch

import ember
from ember.runtime import RuntimeProgram

MAX = 16


class CacheWrite(torch.nn.Module):
    """Writes x into a buffer at a position read from a tensor, returns the filled prefix."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(MAX, 4))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = pos[0].item()
        torch._check(p >= 0)
        torch._check(p + x.shape[0] <= MAX)
        self.cache[p : p + x.shape[0]] = x
        return self.cache[: p + x.shape[0]] * 2.0, self.cache.sum(0)


class Unbounded(torch.nn.Module):
    def forward(self, n: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n.item()) + 1  # UNBOUNDED


def _export(**kw: object) -> ember.Program:
    s = torch.export.Dim("s", min=1, max=8)
    return ember.export(
        CacheWrite(), (torch.ones(2, 4), torch.tensor([3])), dynamic_shapes=({0: s}, None), **kw
    )


CASES = [(2, 3), (5, 5), (1, 0), (8, 8), (3, 1)]


def test_item_runs_on_ember_like_eager() -> None:
    prog = _export()
    rt = RuntimeProgram(prog.buffer)
    ref = CacheWrite()
    g = torch.Generator().manual_seed(0)
    for n, p in CASES:  # one program instance: the buffer state carries over, as in eager
        x = torch.randn(n, 4, generator=g)
        got = rt.run("forward", [x, torch.tensor([p])])
        want = ref(x, torch.tensor([p]))
        for a, b in zip(got, want, strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b)


def test_item_kernel_and_no_asserts_emitted() -> None:
    prog = _export()
    kernels = [d.kernel for d in prog.debug_info()]
    assert "aten::_local_scalar_dense" in kernels
    # torch._check(...) becomes _assert_scalar of a sym comparison: neither is emitted.
    assert not any("assert" in k or k.endswith((".le.Scalar", ".ge.Scalar")) for k in kernels)


def test_item_bounds_plan_memory() -> None:
    prog = _export()
    # Output [p + s, 4] is planned at its bound MAX (f32), next to the MAX x 4 cache.
    assert prog.arena_bytes["forward"] >= 2 * MAX * 4 * 4


def test_item_without_bound_is_refused() -> None:
    with pytest.raises((ember.DataDependentShapeError, ember.MemoryPlanError)) as ei:
        ember.export(Unbounded(), (torch.tensor(3),))
    assert "torch._check" in str(ei.value) or "upper bound" in str(ei.value)


def test_item_runs_on_stock_executorch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rt_mod = pytest.importorskip("executorch.runtime")
    # the portable kernels only: stock ExecuTorch has no EmberCpuBackend (the default path
    # delegates the buffer's sum to it)
    path = _export(backend=None).save(tmp_path / "item.pte")
    method = rt_mod.Runtime.get().load_program(str(path)).load_method("forward")
    ref = CacheWrite()
    g = torch.Generator().manual_seed(1)
    for n, p in CASES:
        x = torch.randn(n, 4, generator=g)
        got = method.execute([x, torch.tensor([p])])
        want = ref(x, torch.tensor([p]))
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)
