"""Exact attention implementations that may be swapped in while a denoiser runs: the noise floor.

Two exact attention kernels disagree by rounding alone, and a denoiser amplifies that over its
layers. The floor ``f`` of a step is ‖out_alt − out_ref‖ / ‖out_ref‖ where ``out_ref`` comes from
the reference attention and ``out_alt`` from another exact one, on the same inputs: how far the
reference differs from itself. An engine's step passes when ``e ≤ k·f + ε``.

Implementations (by name, recorded in the report):

- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` as PyTorch dispatches it
  (flash / memory-efficient / math kernel, whichever it picks for the device and inputs);
- ``sdpa-reversed``: the dispatched call with the keys and values in reverse order (exact: attention does
  not depend on the keys' order; the kernel sums in another order): the default floor, as cheap as the
  reference itself;
- ``math``: the same call restricted to PyTorch's math backend (``SDPBackend.MATH``);
- ``eager``: a plain softmax(QKᵀ·scale + mask)·V written out in tensor ops, in the inputs' dtype.

Swapping works by replacing ``torch.nn.functional.scaled_dot_product_attention`` for the duration
of a ``with`` block: Diffusers' attention dispatch looks it up at every call.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

DEFAULT_REFERENCE = "sdpa"
DEFAULT_ALT = "sdpa-reversed"
_ORIGINAL = F.scaled_dot_product_attention


def eager_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                    dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                    enable_gqa: bool = False) -> torch.Tensor:
    """softmax(Q Kᵀ · scale + mask) V, the textbook formula (no dropout: replay runs in eval mode)."""
    if dropout_p:
        raise ValueError("eager attention: dropout is not replayed (the denoiser must be in eval mode)")
    heads_q, heads_k = query.shape[-3] if query.dim() >= 3 else 1, key.shape[-3] if key.dim() >= 3 else 1
    if enable_gqa and heads_q != heads_k:
        key = key.repeat_interleave(heads_q // heads_k, dim=-3)
        value = value.repeat_interleave(heads_q // heads_k, dim=-3)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    if is_causal:
        length_q, length_k = query.shape[-2], key.shape[-2]
        causal = torch.ones(length_q, length_k, dtype=torch.bool, device=query.device).tril(length_k - length_q)
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return torch.matmul(torch.softmax(scores, dim=-1), value)


def reversed_keys(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                  dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                  **kwargs: Any) -> torch.Tensor:
    """PyTorch's dispatched SDPA over the keys (and values, and the mask's key axis) in reverse order.

    Attention is invariant under a permutation of the keys, so this is exact; the kernel accumulates
    over the keys in another order, so it rounds differently: the reference's own floor, at the cost
    of one more forward of the same kernel (the materializing ``math`` and ``eager`` cost 3-4x more
    than a flash kernel at a few thousand tokens).
    """
    if is_causal:
        length_q, length_k = query.shape[-2], key.shape[-2]
        attn_mask = torch.ones(length_q, length_k, dtype=torch.bool, device=query.device).tril(length_k - length_q)
        is_causal = False
    if attn_mask is not None and attn_mask.shape[-1] == key.shape[-2]:
        attn_mask = attn_mask.flip(-1)
    return _ORIGINAL(query, key.flip(-2), value.flip(-2), attn_mask=attn_mask, dropout_p=dropout_p,
                     is_causal=is_causal, scale=scale, **kwargs)


def _math(*args: Any, **kwargs: Any) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        return _ORIGINAL(*args, **kwargs)


IMPLEMENTATIONS: dict[str, Callable[..., torch.Tensor]] = {"sdpa": _ORIGINAL, "sdpa-reversed": reversed_keys,
                                                           "math": _math, "eager": eager_attention}


def check_name(name: str) -> str:
    """``name`` if it is a known implementation.

    Raises:
        ValueError: naming the known ones.
    """
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown attention implementation {name!r}; known: {', '.join(IMPLEMENTATIONS)}")
    return name


@contextlib.contextmanager
def attention(name: str) -> Iterator[None]:
    """Run the block with ``name`` as the process's scaled-dot-product attention."""
    function = IMPLEMENTATIONS[check_name(name)]
    previous = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = function
    torch.nn.functional.scaled_dot_product_attention = function
    try:
        yield
    finally:
        F.scaled_dot_product_attention = previous


__all__ = ["DEFAULT_ALT", "DEFAULT_REFERENCE", "IMPLEMENTATIONS", "attention", "check_name", "eager_attention",
           "reversed_keys"]
