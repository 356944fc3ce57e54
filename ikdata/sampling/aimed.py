"""Aimed tests: the positions and tokens a penalty changes, tested on their own (torch-free).

A pooled PIT test dilutes a bug that only matters where a penalty touches a token: a repetition
penalty applied to the prompt only changes the distribution only where a generated token could
repeat. Each penalty names the tokens it changes at each position (a stratum):

- ``prompt tokens``: tokens of the prompt (after its padding) that were not generated, where a
  repetition penalty is declared;
- ``output tokens``: tokens generated so far, where a repetition, presence or frequency penalty is
  declared.

At every judged position the stratum's tokens hold a known mass p under the expected distribution
(raw logits, declared settings, the engine's order), and the draw either is one of them or not. Over
positions the number of hits follows a Poisson-binomial law: the two-sided exact tail (by convolution,
up to :data:`EXACT_MAX` positions; Bernstein's bound beyond, valid and conservative) is the test.
A penalty skipped, applied twice, to the wrong tokens or with its sign flipped moves the hits away
from their expectation. Each stratum is one more test of the definition's Bonferroni split.
Bans (no-repeat-ngram, bad words, min length, min new tokens) need no stratum: a banned token
drawn is outside the kept set at that very position.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

PROMPT = "prompt tokens"
OUTPUT = "output tokens"
STRATA = (PROMPT, OUTPUT)
EXACT_MAX = 20_000  # positions up to which the Poisson-binomial tail is computed exactly
DIGITS = 6  # p rounded in the record (a report holds one number per aimed position)


def stratum_tokens(context: np.ndarray, pad: int, generated: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt-only tokens, output tokens) of one position's context: distinct ids inside the vocabulary."""
    row = np.asarray(context, np.int64)
    length = len(row)
    cut = max(length - max(int(generated), 0), 0)
    prompt = row[max(int(pad), 0):cut]
    output = row[cut:]
    prompt = np.unique(prompt[(prompt >= 0) & (prompt < vocab)])
    output = np.unique(output[(output >= 0) & (output < vocab)])
    return np.setdiff1d(prompt, output, assume_unique=True), output


def kept_of(x_row: np.ndarray, kept: int, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """The top ``kept`` token ids of one processed row and their probabilities at the temperature."""
    kept = max(1, min(int(kept), len(x_row)))
    ids = np.argpartition(-x_row, kept - 1)[:kept] if kept < len(x_row) else np.arange(len(x_row))
    values = x_row[ids].astype(np.float64)
    w = np.exp((values - values.max()) / temperature)
    return ids, w / w.sum()


def strata(x: np.ndarray, temperature: np.ndarray, extras: Any, drawn: np.ndarray, judged: np.ndarray,
           kept: np.ndarray, kept_ids: Mapping[int, np.ndarray],
           kept_probs: Mapping[int, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Per stratum: the mass p of its tokens at each judged position (0 < p < 1) and how many draws hit them.

    ``judged``: the positions judged with a real draw (not greedy, not outside, not excluded).
    """
    rp = extras.repetition_penalty
    output_on = (rp != 1) | (extras.presence_penalty != 0) | (extras.frequency_penalty != 0)
    rows = np.flatnonzero(judged & output_on)
    found: dict[str, dict[str, Any]] = {}
    vocab = x.shape[1]
    for i in rows:
        prompt, output = stratum_tokens(extras.context[i], int(extras.pad[i]), int(extras.generated[i]), vocab)
        if int(i) in kept_ids:
            ids, probs = kept_ids[int(i)], kept_probs[int(i)]
        else:
            ids, probs = kept_of(x[i], int(kept[i]), float(temperature[i]))
        for name, tokens, on in ((PROMPT, prompt, rp[i] != 1), (OUTPUT, output, True)):
            if not on or not len(tokens):
                continue
            mass = float(probs[np.isin(ids, tokens)].sum())
            mass = round(mass, DIGITS)
            if not 0 < mass < 1:
                continue
            entry = found.setdefault(name, {"p": [], "hits": 0})
            entry["p"].append(mass)
            entry["hits"] += int(np.isin(int(drawn[i]), tokens))
    return found


def poisson_binomial_pmf(p: Sequence[float]) -> np.ndarray:
    """The exact distribution of the number of successes of independent Bernoulli(p_i) (by convolution)."""
    pmf = np.zeros(len(p) + 1)
    pmf[0] = 1.0
    for j, q in enumerate(p):
        head = pmf[:j + 2].copy()
        pmf[1:j + 2] = head[1:] * (1 - q) + head[:-1] * q
        pmf[0] = head[0] * (1 - q)
    return pmf


def two_sided_p(p: Sequence[float], hits: int) -> tuple[float, str]:
    """(p-value, null) of ``hits`` successes: twice the smaller tail, exact up to :data:`EXACT_MAX` positions."""
    p = np.asarray(p, np.float64)
    if not len(p):
        return 1.0, "none"
    if len(p) <= EXACT_MAX:
        pmf = poisson_binomial_pmf(p)
        lower, upper = float(pmf[:hits + 1].sum()), float(pmf[hits:].sum())
        return min(1.0, 2 * min(lower, upper)), "exact Poisson-binomial"
    mean, var = float(p.sum()), float((p * (1 - p)).sum())
    t = abs(hits - mean)
    bound = math.exp(-t * t / (2 * (var + t / 3))) if var + t > 0 else 1.0
    return min(1.0, 2 * bound), "Bernstein bound (conservative)"


def aimed_test(name: str, p: Sequence[float], hits: int, *, alpha: float) -> dict[str, Any]:
    """The aimed test of one stratum, as the report's test record."""
    p_value, null = two_sided_p(p, hits)
    p = np.asarray(p, np.float64)
    return {"test": "aimed", "stratum": name, "n": int(len(p)), "hits": int(hits), "expected": float(p.sum()),
            "sd": float(math.sqrt(float((p * (1 - p)).sum()))), "p_value": p_value, "alpha": alpha, "null": null,
            "too_small": False, "passed": p_value >= alpha}


def describe(test: Mapping[str, Any]) -> str:
    """One line: the stratum, how many draws hit its tokens against how many were expected, p-value vs alpha."""
    return (f"aimed test at the {test['n']} position(s) where a penalty touches {test['stratum']}: {test['hits']} "
            f"draw(s) of those tokens, expected {test['expected']:.1f} (sd {test['sd']:.1f}), p = "
            f"{test['p_value']:.3g} vs alpha {test['alpha']:.3g}")


__all__ = ["EXACT_MAX", "OUTPUT", "PROMPT", "STRATA", "aimed_test", "describe", "kept_of", "poisson_binomial_pmf",
           "strata", "stratum_tokens", "two_sided_p"]
