"""What an engine does to the raw logits before its cuts: penalties, bans and extra warpers (torch-free).

The expected distribution of a draw is built from the model's raw logits and the request's
declared settings, never from what the engine says it did. :func:`process` applies, in the
engine's declared order, everything that moves or bans logits before temperature:

- ``hf`` (Hugging Face ``generate``, ``_get_logits_processor``): repetition penalty (a logit
  of a token seen in the context after its left padding is divided by the penalty when
  positive, multiplied when negative), no-repeat-ngram (a token that would complete an n-gram
  already in the context is banned), bad words (a sequence's last token is banned when the
  context ends with the rest of it), min length (EOS banned while the context is shorter)
  and min new tokens (EOS banned while fewer were generated);
- ``vllm`` (v1 ``Sampler.forward``) and ``sglang`` (penaltylib): bad words, min tokens (EOS
  banned), repetition penalty over prompt and output tokens (``> 0`` divided, else
  multiplied), then ``logit -= frequency * count + presence * (count > 0)`` over the output
  tokens only.

Presence and frequency penalties are applied under any order when declared (HF has none, so a
declared one is a request the HF engine cannot honour). After temperature, the cuts
(:mod:`ikdata.sampling.distribution`) follow the same order; Hugging Face's typical, epsilon and
eta warpers come last, in that order, each on what the one before left (:func:`apply_warpers`):
typical sampling keeps the tokens whose surprise is closest to the entropy (not a prefix by
probability, so those positions join the PIT test only); epsilon and eta drop tokens whose
probability is below epsilon, or below ``min(eta, sqrt(eta) exp(-entropy))`` (the top token stays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ikdata.core.errors import RecordError
from ikdata.sampling.distribution import BOUNDARY, OK, ORDERS, Judged, Settings

NO_TOKEN = -1  # padding in token tensors (context, eos, bad words separators)


@dataclass(frozen=True)
class Extras:
    """Per-position settings beyond temperature and the four cuts, and the context penalties look at.

    ``context`` [n, L]: the token ids before this position (engine's input ids; ``-1`` for none);
    ``pad`` [n]: leading context entries a repetition penalty ignores (HF: left padding);
    ``generated`` [n]: how many trailing context entries are the engine's output (the rest is prompt).
    Off: penalties 1 / 0 / 0, ngram 0, min tokens 0, typical 1, epsilon 0, eta 0.
    """

    context: np.ndarray
    pad: np.ndarray
    generated: np.ndarray
    repetition_penalty: np.ndarray
    presence_penalty: np.ndarray
    frequency_penalty: np.ndarray
    no_repeat_ngram: np.ndarray
    min_new_tokens: np.ndarray
    min_length: np.ndarray
    typical_p: np.ndarray
    epsilon: np.ndarray
    eta: np.ndarray
    eos: tuple[int, ...] = ()
    bad_words: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, n: int, *, context: Any = None, pad: Any = 0, generated: Any = 0, repetition_penalty: Any = 1.0,
           presence_penalty: Any = 0.0, frequency_penalty: Any = 0.0, no_repeat_ngram: Any = 0,
           min_new_tokens: Any = 0, min_length: Any = 0, typical_p: Any = 1.0, epsilon: Any = 0.0, eta: Any = 0.0,
           eos: Sequence[int] = (), bad_words: Sequence[Sequence[int]] = ()) -> Extras:
        """Broadcast scalars to ``n`` positions and check them.

        Raises:
            RecordError: a value out of range (naming the setting and the value).
        """
        def vec(value: Any, dtype: Any) -> np.ndarray:
            return np.broadcast_to(np.asarray(value, dtype), (n,)).copy()

        ctx = np.zeros((n, 0), np.int64) if context is None else np.asarray(context, np.int64).reshape(n, -1)
        made = cls(ctx, vec(pad, np.int64), vec(generated, np.int64), vec(repetition_penalty, np.float64),
                   vec(presence_penalty, np.float64), vec(frequency_penalty, np.float64),
                   vec(no_repeat_ngram, np.int64), vec(min_new_tokens, np.int64), vec(min_length, np.int64),
                   vec(typical_p, np.float64), vec(epsilon, np.float64), vec(eta, np.float64),
                   tuple(int(e) for e in eos if int(e) >= 0),
                   tuple(tuple(int(t) for t in w) for w in bad_words if len(w)))
        problem = made.problem()
        if problem:
            raise RecordError(problem)
        return made

    def problem(self) -> str | None:
        """The first out-of-range setting, as a message; None when all are valid."""
        checks = (("repetition_penalty", self.repetition_penalty, ~(self.repetition_penalty > 0), "must be > 0 (1: off)"),
                  ("presence_penalty", self.presence_penalty, ~np.isfinite(self.presence_penalty), "must be finite"),
                  ("frequency_penalty", self.frequency_penalty, ~np.isfinite(self.frequency_penalty),
                   "must be finite"),
                  ("no_repeat_ngram", self.no_repeat_ngram, self.no_repeat_ngram < 0, "must be >= 0 (0: off)"),
                  ("typical_p", self.typical_p, ~((self.typical_p > 0) & (self.typical_p <= 1)), "must be in (0, 1]"),
                  ("epsilon", self.epsilon, ~((self.epsilon >= 0) & (self.epsilon < 1)), "must be in [0, 1)"),
                  ("eta", self.eta, ~((self.eta >= 0) & (self.eta < 1)), "must be in [0, 1)"))
        for name, values, bad, what in checks:
            if bad.any():
                i = int(np.argmax(bad))
                return f"{name} {values[i]!r} at position {i} {what}"
        return None

    @property
    def any_on(self) -> bool:
        return bool((self.repetition_penalty != 1).any() or (self.presence_penalty != 0).any()
                    or (self.frequency_penalty != 0).any() or (self.no_repeat_ngram > 0).any()
                    or (self.min_new_tokens > 0).any() or (self.min_length > 0).any() or bool(self.bad_words))


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys and how often each occurs (by a sort: faster here than np.unique's hashing)."""
    keys = np.sort(keys.reshape(-1))
    if not len(keys):
        return keys, keys
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[starts], np.diff(np.r_[starts, len(keys)])


def _ngram_bans(context: np.ndarray, size: int) -> list[int]:
    """Tokens that would complete an n-gram of ``size`` already in ``context`` (HF's NoRepeatNGram)."""
    length = len(context)
    if size <= 0 or length < size:
        return []
    prefix = tuple(context[length + 1 - size:]) if size > 1 else ()
    return [int(context[j + size - 1]) for j in range(length - size + 1)
            if tuple(context[j:j + size - 1]) == prefix]


def _bad_word_bans(context: np.ndarray, words: Sequence[Sequence[int]]) -> list[int]:
    """Last tokens of bad-word sequences whose other tokens end the context (HF's NoBadWords)."""
    out = []
    for word in words:
        head = list(word[:-1])
        if not head or (len(context) >= len(head) and list(context[len(context) - len(head):]) == head):
            out.append(int(word[-1]))
    return out


def process(logits: np.ndarray, extras: Extras, order: str) -> np.ndarray:
    """The logits after the engine's penalties and bans (a copy; banned tokens ``-inf``), before temperature.

    Raises:
        RecordError: an unknown order, or shapes that disagree.
    """
    if order not in ORDERS:
        raise RecordError(f"order {order!r} is unknown; expected one of {', '.join(ORDERS)}")
    x = np.array(logits, np.result_type(np.asarray(logits).dtype, np.float32))  # the engine's precision, a copy
    n, vocab = x.shape
    if extras.context.shape[0] != n:
        raise RecordError(f"context has {extras.context.shape[0]} rows for {n} positions")
    if not extras.any_on:
        return x
    eos = [e for e in extras.eos if e < vocab]
    ctx = extras.context
    length = ctx.shape[1]  # HF counts every input id, padding included
    cols = np.arange(length)[None, :]
    valid = (ctx >= 0) & (ctx < vocab)
    rows = np.broadcast_to(np.arange(n)[:, None], ctx.shape)
    flat = x.reshape(-1)  # penalties touch only the (row, token) pairs seen: sparse, never a dense pass
    rp = extras.repetition_penalty
    if (rp != 1).any():  # once per distinct token seen after the padding
        take = valid & (cols >= extras.pad[:, None])
        pairs, _ = _distinct(rows[take] * vocab + ctx[take])
        factor = rp[pairs // vocab].astype(x.dtype)
        v = flat[pairs]
        flat[pairs] = (np.where(v < 0, v * factor, v / factor) if order == "hf"
                       else np.where(v > 0, v / factor, v * factor))
    if (extras.frequency_penalty != 0).any() or (extras.presence_penalty != 0).any():
        take = valid & (cols >= length - extras.generated[:, None]) & (extras.generated[:, None] > 0)
        pairs, counts = _distinct(rows[take] * vocab + ctx[take])
        r = pairs // vocab
        flat[pairs] -= (extras.frequency_penalty[r] * counts + extras.presence_penalty[r]).astype(x.dtype)
    bans = (extras.no_repeat_ngram > 0).any() or bool(extras.bad_words) or (
        bool(eos) and ((extras.min_new_tokens > 0).any() or (extras.min_length > 0).any()))
    for i in range(n) if bans else ():
        row = ctx[i]
        whole = row[row >= 0] if (row < 0).any() else row
        banned: list[int] = []
        if extras.no_repeat_ngram[i] > 0:
            banned += _ngram_bans(whole, int(extras.no_repeat_ngram[i]))
        banned += _bad_word_bans(whole, extras.bad_words)
        if order == "hf":
            if extras.min_length[i] > 0 and length < extras.min_length[i]:
                banned += eos
            if extras.min_new_tokens[i] > 0 and extras.generated[i] < extras.min_new_tokens[i]:
                banned += eos
        elif extras.generated[i] < max(extras.min_new_tokens[i], 0):
            banned += eos
        if banned:
            x[i, [b for b in banned if 0 <= b < vocab]] = -np.inf
    return x


@dataclass
class Warped:
    """What Hugging Face's typical, epsilon and eta warpers left (:func:`apply_warpers`).

    ``irregular``: positions whose kept set is not a prefix by probability (typical sampling): they join
    the PIT test only; ``kept_probs``: position -> its final kept probabilities in descending order (every
    position the warpers changed) and their token ids, for the power computation and the aimed tests.
    """

    irregular: np.ndarray
    kept_probs: dict[int, np.ndarray]
    kept_ids: dict[int, np.ndarray]  # position -> the kept token ids, in the order of kept_probs


def _near(p: np.ndarray, threshold: float, slack: float) -> bool:
    return bool(((p > threshold / slack) & (p < threshold * slack)).any())


def apply_warpers(x: np.ndarray, settings: Settings, extras: Extras, drawn: np.ndarray, judged: Judged, *,
                  tol: float, rng: np.random.Generator) -> Warped:
    """Hugging Face's typical, epsilon and eta warpers after the cuts, in its order, each on the set the one
    before left (renormalised), on the rows that set them (in place).

    typical: over the kept tokens' probabilities p (H = -sum p log p), tokens sorted by |-log p - H| are kept
    while the mass before them is < typical_p (the first always); epsilon: tokens with p < epsilon dropped;
    eta: tokens with p < min(eta, sqrt(eta) exp(-H)) dropped (both keep the top token). A score, mass or
    probability within the tolerance of its cut is ``boundary``. The drawn token's u is recomputed over the
    final set in descending order of value.
    """
    irregular, kept_probs, kept_ids = [], {}, {}
    on = (extras.typical_p < 1) | (extras.epsilon > 0) | (extras.eta > 0)
    for i in np.flatnonzero(on & (judged.status == OK) & ~judged.greedy & ~judged.outside):
        t = float(settings.temperature[i])
        order = np.argsort(-x[i], kind="stable")[:int(judged.kept[i])]
        values = x[i, order].astype(np.float64)
        keep = np.ones(len(values), bool)
        ambiguous = False
        ratio = math.exp(2 * tol / t)
        if extras.typical_p[i] < 1:
            p = _renormalised(values, keep, t)
            logp = np.log(p)
            entropy = float(-(p * logp).sum())
            shifted = np.abs(-logp - entropy)
            rank = np.argsort(shifted, kind="stable")
            cum = np.cumsum(p[rank])
            last = min(int((cum < extras.typical_p[i]).sum()), len(rank) - 1)
            cutoff = shifted[rank[last]]
            slack = 2 * tol / t
            near = np.abs(shifted - cutoff) < slack
            near[rank[last]] = False
            ambiguous = bool(near.any()) or (last > 0 and abs(cum[last - 1] - extras.typical_p[i]) < slack)
            keep = shifted <= cutoff
            keep[rank[0]] = True
        for name in ("epsilon", "eta"):
            value = float(getattr(extras, name)[i])
            if ambiguous or value <= 0:
                continue
            p = _renormalised(values, keep, t)
            threshold = value
            if name == "eta":
                nz = p[p > 0]
                threshold = min(value, math.sqrt(value) * math.exp(float((nz * np.log(nz)).sum())))
            ambiguous = _near(p[keep], threshold, ratio)
            drop = keep & (p < threshold)
            drop[0] = False  # the top token stays (min_tokens_to_keep 1)
            keep &= ~drop
        if ambiguous:
            judged.status[i], judged.kept[i], judged.u[i] = BOUNDARY, 0, np.nan
            continue
        count = int(keep.sum())
        prefix = bool(keep[:count].all())
        q = _renormalised(values, keep, t)
        kept_probs[int(i)], kept_ids[int(i)] = q[keep], order[keep]
        judged.kept[i] = count
        hit = np.flatnonzero(order == drawn[i])
        if not len(hit) or not keep[hit[0]]:
            judged.outside[i], judged.u[i] = True, np.nan
            continue
        value = values[hit[0]]
        judged.u[i] = q[values > value].sum() + rng.random() * q[values == value].sum()
        if not prefix:
            irregular.append(i)
    return Warped(np.asarray(irregular, np.int64), kept_probs, kept_ids)


def _renormalised(values: np.ndarray, keep: np.ndarray, temperature: float) -> np.ndarray:
    """Probabilities of the kept values (descending) at the temperature; 0 elsewhere."""
    w = np.where(keep, np.exp((values - values[0]) / temperature), 0.0)
    return w / w.sum()


__all__ = ["Extras", "NO_TOKEN", "Warped", "apply_warpers", "process"]
