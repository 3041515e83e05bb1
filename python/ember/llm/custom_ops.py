"""PyTorch-side definitions of ExecuTorch's LLM attention ops, so models can call them and
``torch.export`` can trace them without importing ExecuTorch:

- ``llama::update_cache(Tensor value, Tensor(a!) cache, SymInt start_pos) -> Tensor`` writes
  ``value`` [B, S, H, D] into ``cache`` rows ``[start_pos, start_pos + S)`` (dim 1) in place and
  returns a dummy 1-element tensor;
- ``llama::custom_sdpa(Tensor query, Tensor key, Tensor value, SymInt start_pos,
  Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None) -> Tensor``
  attends query [B, S, Hq, D] (row s at absolute position ``start_pos + s``) over the cache rows
  ``[0, start_pos + S)`` of key / value [B, L, Hkv, D]; query head h reads kv head
  ``h // (Hq // Hkv)``; ``is_causal`` hides keys after the query's position; the default scale is
  ``1 / sqrt(D)``; an f32 query may attend over f16 key / value caches (an f16 KV cache: an
  Ember extension, computed as over the caches' f32 values; the output is f32);

plus their ``.out`` overloads (the names Ember's and ExecuTorch's runtimes register). Schemas
are ExecuTorch's (``extension/llm/custom_ops``). When the namespace already has them (ExecuTorch's
AOT library was loaded first), nothing is redefined; a process that needs both must load
ExecuTorch's library first (it would refuse to redefine ours). Importing this module registers
the ops.
"""

from __future__ import annotations

import math

import torch

__all__ = ["update_cache", "custom_sdpa", "update_cache_ref", "custom_sdpa_ref"]

_SCHEMAS = {
    "update_cache": "(Tensor value, Tensor(a!) cache, SymInt start_pos) -> Tensor",
    "update_cache.out": (
        "(Tensor value, Tensor(a!) cache, SymInt start_pos, *, Tensor(b!) out) -> Tensor(b!)"
    ),
    "custom_sdpa": (
        "(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None, "
        "float drpout_p=0., bool is_causal=False, float? scale=None) -> Tensor"
    ),
    "custom_sdpa.out": (
        "(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None, "
        "float drpout_p=0., bool is_causal=False, float? scale=None, *, Tensor(a!) out) "
        "-> Tensor(a!)"
    ),
}


def _check_update_cache(value: torch.Tensor, cache: torch.Tensor, start_pos: int) -> None:
    torch._check(value.dim() == 4 and cache.dim() == 4, lambda: "value and cache must be 4-D")
    torch._check(value.dtype == cache.dtype, lambda: "value and cache dtypes differ")
    for i in (0, 2, 3):
        torch._check(
            value.size(i) == cache.size(i),
            lambda i=i: f"value and cache differ in dim {i}: {value.size(i)} vs {cache.size(i)}",
        )
    torch._check(start_pos >= 0, lambda: "start_pos must be non-negative")
    torch._check(
        start_pos + value.size(1) <= cache.size(1),
        lambda: "start_pos + seq_len exceeds the cache length",
    )


def _check_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos: int, mask: torch.Tensor | None
) -> None:
    torch._check(q.dim() == 4 and k.dim() == 4 and v.dim() == 4, lambda: "q, k, v must be 4-D")
    torch._check(
        k.dtype == v.dtype
        and (q.dtype == k.dtype or (q.dtype == torch.float32 and k.dtype == torch.float16)),
        lambda: "q, k, v dtypes differ (an f32 query may read f16 caches)",
    )
    torch._check(k.size(2) > 0 and q.size(2) % k.size(2) == 0, lambda: "Hq % Hkv != 0")
    torch._check(start_pos >= 0, lambda: "start_pos must be non-negative")
    torch._check(
        start_pos + q.size(1) <= k.size(1), lambda: "start_pos + seq_len exceeds the cache"
    )
    if mask is not None:
        torch._check(mask.dim() == 2, lambda: "attn_mask must be 2-D [S, >= start_pos + S]")


def update_cache_ref(value: torch.Tensor, cache: torch.Tensor, start_pos: int) -> torch.Tensor:
    """Reference semantics of ``llama::update_cache`` (eager)."""
    _check_update_cache(value, cache, start_pos)
    cache[:, start_pos : start_pos + value.size(1)] = value
    return torch.empty((1,), dtype=value.dtype, device=value.device)


def custom_sdpa_ref(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    start_pos: int,
    attn_mask: torch.Tensor | None = None,
    drpout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Reference semantics of ``llama::custom_sdpa`` (eager, in the inputs' dtype)."""
    _check_sdpa(query, key, value, start_pos, attn_mask)
    if drpout_p != 0.0:
        raise ValueError("llama::custom_sdpa: dropout is not supported")
    if attn_mask is not None and is_causal:
        raise ValueError("llama::custom_sdpa: attn_mask and is_causal cannot both be set")
    S, Hq, D = query.size(1), query.size(2), query.size(3)
    n = start_pos + S
    rep = Hq // key.size(2)
    k = key[:, :n].to(query.dtype).transpose(1, 2).repeat_interleave(rep, dim=1)  # [B, Hq, n, D]
    v = value[:, :n].to(query.dtype).transpose(1, 2).repeat_interleave(rep, dim=1)
    q = query.transpose(1, 2)  # [B, Hq, S, D]
    sc = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(D) if scale is None else scale)
    if is_causal:
        pos = torch.arange(S, device=query.device)[:, None] + start_pos
        sc = sc.masked_fill(torch.arange(n, device=query.device)[None, :] > pos, float("-inf"))
    if attn_mask is not None:
        m = attn_mask[:, :n]
        sc = sc.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else sc + m
    w = torch.softmax(sc, dim=-1).nan_to_num(0.0)  # fully masked rows give zeros
    return (w @ v).transpose(1, 2).contiguous()


def _registered(name: str) -> bool:
    base, _, ov = name.partition(".")
    packet = getattr(torch.ops.llama, base, None)
    return packet is not None and (ov or "default") in packet.overloads()


_lib: torch.library.Library | None = None


def _register() -> None:
    global _lib
    missing = [n for n in _SCHEMAS if not _registered(n)]
    if not missing:
        return
    _lib = torch.library.Library("llama", "FRAGMENT")
    for name in missing:
        _lib.define(name + _SCHEMAS[name])
    if "update_cache" in missing:

        def _uc_fake(value: torch.Tensor, cache: torch.Tensor, start_pos: int) -> torch.Tensor:
            _check_update_cache(value, cache, start_pos)
            return value.new_empty((1,))

        _lib.impl("update_cache", update_cache_ref, "CompositeExplicitAutograd")
        torch.library.register_fake("llama::update_cache", _uc_fake, lib=_lib)
    if "update_cache.out" in missing:

        def _uc_out(
            value: torch.Tensor, cache: torch.Tensor, start_pos: int, *, out: torch.Tensor
        ) -> torch.Tensor:
            update_cache_ref(value, cache, start_pos)
            return out

        _lib.impl("update_cache.out", _uc_out, "CompositeExplicitAutograd")
    if "custom_sdpa" in missing:

        def _sdpa_fake(
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            start_pos: int,
            attn_mask: torch.Tensor | None = None,
            drpout_p: float = 0.0,
            is_causal: bool = False,
            scale: float | None = None,
        ) -> torch.Tensor:
            _check_sdpa(query, key, value, start_pos, attn_mask)
            return torch.empty_like(query, memory_format=torch.contiguous_format)

        _lib.impl("custom_sdpa", custom_sdpa_ref, "CompositeExplicitAutograd")
        torch.library.register_fake("llama::custom_sdpa", _sdpa_fake, lib=_lib)
    if "custom_sdpa.out" in missing:

        def _sdpa_out(
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            start_pos: int,
            attn_mask: torch.Tensor | None = None,
            drpout_p: float = 0.0,
            is_causal: bool = False,
            scale: float | None = None,
            *,
            out: torch.Tensor,
        ) -> torch.Tensor:
            r = custom_sdpa_ref(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale)
            out.resize_(r.shape).copy_(r)
            return out

        _lib.impl("custom_sdpa.out", _sdpa_out, "CompositeExplicitAutograd")


_register()

update_cache = torch.ops.llama.update_cache.default
custom_sdpa = torch.ops.llama.custom_sdpa.default
