"""Ember's fused LLM operators, defined for PyTorch so a model can call them and ``torch.export``
keeps each as one node (the C kernels are ``kernels/portable/llm_fused.c``):

- ``ember::rms_norm(Tensor input, Tensor weight, float eps) -> Tensor``:
  ``input * rsqrt(mean(input * input, -1, keepdim=True) + eps) * weight``;
- ``ember::rope(Tensor input, Tensor cos, Tensor sin) -> Tensor``:
  ``input * cos + rotate_half(input) * sin`` with ``rotate_half(x) = cat(-x2, x1)`` over the
  last dim's halves, ``cos`` / ``sin`` broadcast to ``input``;
- ``ember::swiglu(Tensor input) -> Tensor``: ``silu(g) * u`` with ``g`` / ``u`` the first and
  second halves of the last dim (a fused gate / up projection's output);

plus their ``.out`` overloads. The references below are the decomposed forms the operators
replace, so eager results are unchanged; on the runtime each is one kernel instead of 6, 7 and
4 (per layer of a Llama: 46 -> 24 instructions). Stock ExecuTorch has no kernels for them:
:func:`ember.llm.llama.use_fused_ops` decides whether a model calls them. Importing this module
registers the operators (idempotent).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["rms_norm_ref", "rope_ref", "swiglu_ref"]

_ARGS = {
    "rms_norm": "Tensor input, Tensor weight, float eps",
    "rope": "Tensor input, Tensor cos, Tensor sin",
    "swiglu": "Tensor input",
}


def _check_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> None:
    torch._check(
        x.dim() >= 1 and weight.dim() == 1 and weight.size(0) == x.size(-1),
        lambda: (
            f"rms_norm: weight {tuple(weight.shape)} must be 1-D with the input's last dim "
            f"(input {tuple(x.shape)})"
        ),
    )


def _check_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    _halves(x, "rope")
    torch._check(
        cos.shape == sin.shape
        and cos.dim() <= x.dim()
        and cos.dim() >= 1
        and cos.size(-1) == x.size(-1)
        and all(c in (1, s) for c, s in zip(cos.shape[::-1], x.shape[::-1], strict=False)),
        lambda: (
            f"rope: cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must have one shape "
            f"that broadcasts to the input's {tuple(x.shape)} with its last dim"
        ),
    )


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Reference of ``ember::rms_norm``."""
    _check_rms_norm(x, weight)
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def _halves(x: torch.Tensor, what: str) -> int:
    torch._check(x.dim() >= 1 and x.size(-1) % 2 == 0, lambda: f"{what}: last dim must be even")
    return x.size(-1) // 2


def rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Reference of ``ember::rope``."""
    _check_rope(x, cos, sin)
    h = x.size(-1) // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


def swiglu_ref(x: torch.Tensor) -> torch.Tensor:
    """Reference of ``ember::swiglu``."""
    h = _halves(x, "swiglu")
    return F.silu(x[..., :h]) * x[..., h:]


def _fake_swiglu(x: torch.Tensor) -> torch.Tensor:
    h = _halves(x, "swiglu")
    return x.new_empty((*x.shape[:-1], h))


def _fake_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    _check_rms_norm(x, weight)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    _check_rope(x, cos, sin)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


_REFS = {"rms_norm": rms_norm_ref, "rope": rope_ref, "swiglu": swiglu_ref}
_FAKES = {"rms_norm": _fake_rms_norm, "rope": _fake_rope, "swiglu": _fake_swiglu}
_lib: torch.library.Library | None = None


def _out_impl(ref):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
    def impl(*args, out: torch.Tensor):  # type: ignore[no-untyped-def]  # noqa: ANN002, ANN202
        r = ref(*args)
        out.resize_(r.shape).copy_(r)
        return out

    return impl


def _register() -> None:
    global _lib
    packet = getattr(torch.ops, "ember", None)
    if _lib is not None or (packet is not None and hasattr(packet, "rms_norm")):
        return
    _lib = torch.library.Library("ember", "FRAGMENT")
    for name, args in _ARGS.items():
        _lib.define(f"{name}({args}) -> Tensor")
        _lib.define(f"{name}.out({args}, *, Tensor(a!) out) -> Tensor(a!)")
        _lib.impl(name, _REFS[name], "CompositeExplicitAutograd")
        _lib.impl(f"{name}.out", _out_impl(_REFS[name]), "CompositeExplicitAutograd")
        torch.library.register_fake(f"ember::{name}", _FAKES[name], lib=_lib)


_register()

rms_norm = torch.ops.ember.rms_norm.default
rope = torch.ops.ember.rope.default
swiglu = torch.ops.ember.swiglu.default
