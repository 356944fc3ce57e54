"""Test samplers: a correct one under each cut order (vectorised, by a full sort) and the buggy ones the judge
must catch. Independent of ikdata.sampling.distribution's implementation (a second reading of the same rules)."""

from __future__ import annotations

import numpy as np


def kept_probs(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
               order: str = "hf") -> np.ndarray:
    """[n, V] kept distribution: rows of raw logits, one setting for all rows."""
    x = np.asarray(logits, np.float64)
    n, vocab = x.shape
    z = x / temperature
    ranks = np.argsort(-z, axis=1, kind="stable")
    zs = np.take_along_axis(z, ranks, axis=1)
    w = np.exp(zs - zs[:, :1])
    cols = np.arange(vocab)[None, :]
    n_k = top_k if 0 < top_k < vocab else vocab
    in_k = cols < n_k
    in_m = (w >= min_p) if min_p > 0 else np.ones_like(in_k)

    def nucleus(mask: np.ndarray, over_all: bool = False) -> np.ndarray:
        if top_p >= 1:
            return mask
        weights = w * (np.ones_like(mask) if over_all else mask)
        before = np.cumsum(weights, axis=1) - weights
        return mask & (before / weights.sum(axis=1, keepdims=True) < top_p)

    if order == "hf":
        keep = nucleus(in_k) & in_m
    elif order == "vllm":
        keep = nucleus(in_k & in_m)
    else:  # sglang: top-p over the whole distribution, then the first top_k, then min-p
        keep = nucleus(np.ones_like(in_k), over_all=True) & in_k & in_m
    sorted_probs = np.where(keep, w, 0.0)
    sorted_probs /= sorted_probs.sum(axis=1, keepdims=True)
    probs = np.zeros_like(sorted_probs)
    np.put_along_axis(probs, ranks, sorted_probs, axis=1)
    return probs


def draw(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of a [n, V] distribution."""
    cum = np.cumsum(probs, axis=1)
    return np.minimum((rng.random(len(probs))[:, None] > cum).sum(axis=1), probs.shape[1] - 1)


def logits(rng: np.random.Generator, n: int, vocab: int = 64, scale: float = 2.0) -> np.ndarray:
    return (rng.standard_normal((n, vocab)) * scale).astype(np.float32)
