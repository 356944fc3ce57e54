"""Turn one workload's draws into the record its report case keeps (``case["sampling"]``), torch-free.

Two sources: full raw logits (:func:`record_logits`, what capture at the sampler gives)
and a server's top-K log-probabilities with the draws of n seeded requests
(:func:`record_top_logprobs`, what ``ikdata import`` of completions gives). Both give the
same record, which :func:`ikdata.sampling.groups.decide` pools per definition:

- ``positions``, ``judged``, ``greedy``, ``excluded`` (reason -> count);
- ``outside`` and ``outside_examples``: draws outside the kept set (a failure at once);
- ``pit``: n, the sums of L_1..L_4 of u and a 10-bin histogram, over draws whose kept set
  is large (more than :data:`SMALL_KEPT` tokens);
- ``moments``: temperature-error moments of (a sample of) those positions, for the power;
- ``draws`` and ``distributions``: for positions with a small kept set, each draw as
  (distribution key, slot, seed tag, u) and the kept distribution itself (descending,
  tied values merged), so that draws of one distribution can be tested together by TV;
- ``aimed``: per stratum of tokens a penalty touches (:mod:`ikdata.sampling.aimed`), each
  position's mass of those tokens and how many draws hit them;
- ``seeded``: per row drawn from a request's own generator (:mod:`ikdata.sampling.seeded`), its generator
  state, a digest of its kept logits, the token and its replay from the seed; such rows' single draws go
  to ``pit_shared`` (state, u) instead of ``pit``, and their small-set draws carry the state as their tag,
  so that each generator state is counted once by the pooled tests.
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np

from ikdata.core.digest import bytes_digest
from ikdata.sampling.aimed import kept_blocks, strata, top_p_stratum
from ikdata.sampling import independence, seeded
from ikdata.sampling.distribution import (ANY, BAD_LOGPROBS, DEFAULT_TOL, LOGPROB_TOL, OK, REASONS, Settings,
                                          judge_logits)
from ikdata.sampling.pipeline import Extras, Warped, apply_warpers, process
from ikdata.sampling.topk import implied
from ikdata.sampling.stats import legendre, temperature_moments

SMALL_KEPT = 64  # kept sets up to this size are recorded whole (their draws may form a TV test)
MOMENT_SAMPLE = 256  # positions per case whose temperature moments are computed
EXAMPLES = 10


def _distribution(sorted_values: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """Kept probabilities (descending, ties merged into their first slot) and each value's slot."""
    w = np.exp((sorted_values - sorted_values[0]) / temperature)
    slots = np.searchsorted(-sorted_values, -sorted_values, side="left")  # first index of each tied value
    probs = np.zeros(len(w))
    np.add.at(probs, slots, w)
    return probs / probs.sum(), slots


def _key(probs: np.ndarray) -> str:
    return bytes_digest(np.round(probs, 7).astype(np.float64).tobytes())[:16]


def _pit_part(us: np.ndarray) -> dict[str, Any]:
    return {"n": int(len(us)), "sums": [float(v) for v in legendre(us).sum(axis=0)] if len(us) else [0.0] * 4,
            "histogram": [int(v) for v in np.histogram(us, 10, (0.0, 1.0))[0]]}


def _judge(logits: np.ndarray, settings: Settings, extras: Extras | None, drawn: np.ndarray, order: str, tol: float,
           seed: int) -> tuple[np.ndarray, Any, Warped]:
    """The processed logits (penalties and bans applied in the engine's order), the judged positions, and what
    HF's typical, epsilon and eta warpers left (positions whose kept set is not a prefix: PIT only)."""
    if extras is None:
        return logits, judge_logits(logits, settings, drawn, order=order, tol=tol, seed=seed), Warped(
            np.zeros(0, np.int64), {}, {})
    x = process(logits, extras, "hf" if order == ANY else order)
    with np.errstate(invalid="ignore"):
        judged = judge_logits(x, settings, drawn, order=order, tol=tol, seed=seed)
    drawn = np.asarray(drawn, np.int64)
    banned = np.isneginf(x[np.arange(len(drawn)), drawn]) & (judged.status != BAD_LOGPROBS)
    judged.status[banned], judged.outside[banned], judged.u[banned] = OK, True, np.nan
    judged.kept[:] = np.minimum(judged.kept, np.isfinite(x).sum(axis=1))
    warped = apply_warpers(x, settings, extras, drawn, judged, tol=tol, rng=np.random.default_rng(seed + 1))
    return x, judged, warped


def record_logits(logits: np.ndarray, settings: Settings, drawn: np.ndarray, seeds: Sequence[int] | None = None, *,
                  order: str = ANY, tol: float = DEFAULT_TOL, seed: int = 0,
                  extras: Extras | None = None,
                  generators: Sequence[Mapping[str, Any] | None] | None = None) -> dict[str, Any]:
    """The record of one sampler call: raw logits [B, V], settings, drawn ids [B], seeds [B] (-1: unknown);
    ``extras``: penalties, bans and extra warpers, applied to the raw logits in the engine's order;
    ``generators``: per row, what its seed fixes (:mod:`ikdata.sampling.seeded`; None: no generator of its own).

    Raises:
        RecordError: a drawn id outside the vocabulary, or shapes that disagree.
    """
    logits, judged, warped = _judge(np.asarray(logits), settings, extras, drawn, order, tol, seed)
    irregular = warped.irregular
    n = len(drawn)
    ok = judged.status == OK
    record: dict[str, Any] = {"kind": "logits", "order": order, "positions": n, "judged": int(ok.sum()),
                              "greedy": int((ok & judged.greedy).sum()), "excluded": judged.reasons(),
                              "outside": int(judged.outside.sum()), "outside_examples": [
                                  {"position": int(i), "token": int(drawn[i]), "kept": int(judged.kept[i])}
                                  for i in np.flatnonzero(judged.outside)[:EXAMPLES]]}
    regular = ok & ~judged.greedy & ~judged.outside
    regular[irregular] = False
    sampled = np.flatnonzero(regular)
    small = sampled[judged.kept[sampled] <= SMALL_KEPT]
    large = sampled[judged.kept[sampled] > SMALL_KEPT]
    states = [seeded.state_of(g) for g in generators] if generators is not None else [None] * n
    replayed: set[int] = set()
    if any(s is not None for s in states):
        record["seeded"] = _seeded(logits, settings, judged, np.asarray(drawn, np.int64), generators, states,
                                   irregular)
        replayed = {int(e[0]) for e in record["seeded"] if e[4] == "match"}
        record["replayed"] = len(replayed)  # each drawn exactly as its seed's noise gives: judged, not pooled
    singles = [int(i) for i in np.concatenate([large, irregular]) if int(i) not in replayed]
    record["pit"] = _pit_part(np.asarray([judged.u[i] for i in singles if states[i] is None], np.float64))
    if any(s is not None for s in states):
        record["pit_shared"] = [[states[i], float(judged.u[i])] for i in singles if states[i] is not None]
    small = np.asarray([i for i in small if int(i) not in replayed], np.int64)
    drawn_ok = ok & ~judged.greedy & ~judged.outside
    rows = np.flatnonzero(drawn_ok)
    wanted = np.zeros(n, bool)
    wanted[rows[:independence.MAX_ROWS]] = True
    if extras is not None:
        wanted |= drawn_ok & ((extras.repetition_penalty != 1) | (extras.presence_penalty != 0)
                              | (extras.frequency_penalty != 0))
    blocks = list(kept_blocks(logits, judged.kept, settings.temperature, np.flatnonzero(wanted), warped.kept_ids,
                              warped.kept_probs))  # each judged row's kept distribution, read once for both
    aimed_ok = drawn_ok.copy()  # a draw replayed from its seed is judged exactly: its noise may be shared (seeded)
    aimed_ok[list(replayed)] = False
    found = strata(extras, np.asarray(drawn, np.int64), aimed_ok, logits.shape[1], blocks) if extras is not None else {}
    cut = np.flatnonzero(aimed_ok & (settings.top_p < 1) & ~wanted)  # top-p rows the blocks above did not read
    found.update(top_p_stratum(settings.top_p, np.asarray(drawn, np.int64), aimed_ok, itertools.chain(blocks, kept_blocks(
        logits, judged.kept, settings.temperature, cut, warped.kept_ids, warped.kept_probs) if len(cut) else ())))
    if found:
        record["aimed"] = found  # the positions and tokens a penalty or a top-p cut touches, tested on their own
    record["independence"] = _independence(extras, np.asarray(drawn, np.int64), seeds, rows, blocks, seed, states)
    draws, distributions = [], {}
    vocab = logits.shape[1]
    width = min(vocab, SMALL_KEPT)
    tops = logits[small]  # the top SMALL_KEPT values of each small row, by one partition
    tops = np.partition(tops, vocab - width, axis=1)[:, vocab - width:] if width < vocab else tops
    tops = -np.sort(-tops.astype(np.float64), axis=1)
    for j, i in enumerate(small):
        values = tops[j, :judged.kept[i]]
        probs, slots = _distribution(values, float(settings.temperature[i]))
        key = _key(probs)
        distributions[key] = [float(v) for v in probs]
        slot = int(np.searchsorted(-values, -float(logits[i, drawn[i]]), side="left"))
        tag = (f"generator {states[i]}" if states[i] is not None else
               f"{int(seeds[i])}:{i}" if seeds is not None and int(seeds[i]) >= 0 else None)
        draws.append([key, int(slots[min(slot, len(slots) - 1)]), tag, float(judged.u[i])])
    record["draws"], record["distributions"] = draws, distributions
    moment_rows = np.concatenate([large, irregular]).astype(np.int64)  # typical sampling's positions too
    sample = (moment_rows[np.linspace(0, len(moment_rows) - 1, min(len(moment_rows), MOMENT_SAMPLE)).astype(int)]
              if len(moment_rows) else moment_rows)
    if len(sample):
        rows = []
        for i in sample:
            if int(i) in warped.kept_probs:
                rows.append(-np.sort(-warped.kept_probs[int(i)]))
                continue
            values = -np.sort(-logits[i].astype(np.float64))[:judged.kept[i]]
            rows.append(_distribution(values, float(settings.temperature[i]))[0])
        padded = np.zeros((len(rows), max(len(r) for r in rows)))
        for j, r in enumerate(rows):
            padded[j, :len(r)] = r
        # moments summed over the sample, scaled to every position of the PIT part
        record["moments"] = {"n": int(len(moment_rows)),
                             "sums": (temperature_moments(padded) * (len(moment_rows) / len(sample))).tolist()}
    return record


def _seeded(logits: np.ndarray, settings: Settings, judged: Any, drawn: np.ndarray,
            generators: Sequence[Mapping[str, Any] | None], states: list[str | None],
            irregular: np.ndarray) -> list[list[Any]]:
    """Per row with a generator of its own: [row, state, digest of its kept logits / T, token, replay]; replay
    (:func:`ikdata.sampling.seeded.replay`) only for judged random draws of a plain kept prefix."""
    out = []
    skip = set(np.asarray(irregular, np.int64).tolist())
    for i, state in enumerate(states):
        if state is None or judged.status[i] != OK:
            continue
        kept = int(judged.kept[i])
        values = (np.asarray(logits[i], np.float32) / np.float32(settings.temperature[i])
                  if settings.temperature[i] > 0 else np.asarray(logits[i], np.float32))
        ids = np.argsort(-values, kind="stable")[:max(kept, 1)]
        key = bytes_digest(np.asarray(ids, np.int64).tobytes() + values[ids].astype(np.float32).tobytes())[:16]
        found = None
        if not judged.greedy[i] and not judged.outside[i] and i not in skip and kept > 0:
            found = seeded.replay(values, ids, int(drawn[i]), generators[i] or {})
        out.append([i, state, key, int(drawn[i]), found])
    return out


def _independence(extras: Extras | None, drawn: np.ndarray, seeds: Sequence[int] | None, rows: np.ndarray,
                  blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]], seed: int,
                  states: list[str | None] | None = None) -> dict[str, Any]:
    """Token-order PITs of (at most MAX_ROWS of) the judged rows, paired as neighbours, keyed by seed and step.
    A row drawn from a generator of its own (``states``) is not keyed: draws of one generator state are equal
    by design (:mod:`ikdata.sampling.seeded`), and draws of different states are not expected to agree."""
    rows = rows[:independence.MAX_ROWS]
    rng = np.random.default_rng(seed + 3)
    given = np.asarray(seeds, np.int64) if seeds is not None else np.full(len(drawn), -1)
    shared = len(rows) > 1 and len(set(given[rows].tolist())) == 1
    wanted = set(rows.tolist())
    v = {}
    for block, ids, probs in blocks:
        mine = drawn[block][:, None]
        before = (probs * (ids < mine)).sum(axis=1)
        atom = (probs * (ids == mine)).sum(axis=1)
        for i, value in zip(block, before + rng.random(len(block)) * atom):
            if int(i) in wanted:
                v[int(i)] = float(value)
    draws, keys = [], []
    for i in rows:
        draws.append((int(i), v[int(i)]))
        if extras is None or given[i] < 0 or (states is not None and states[int(i)] is not None):
            keys.append(None)
        else:
            step = int(extras.generated[i])
            keys.append(f"{int(given[i])}:{step}:{int(i)}" if shared else f"{int(given[i])}:{step}")
    return independence.record_part(draws, keys)


def record_top_logprobs(logprobs: Sequence[float], draws: Sequence[int], seeds: Sequence[int] | None = None, *,
                        temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                        vocab_size: int = 0, order: str = ANY, tol: float = LOGPROB_TOL,
                        seed: int = 0) -> dict[str, Any]:
    """The record of one prompt position: the listed raw log-probabilities, and the slot each request drew
    (0..K-1: the listed token in the order given, K: a token not listed)."""
    found = implied(logprobs, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                    vocab_size=vocab_size, order=order, tol=tol)
    n = len(draws)
    record: dict[str, Any] = {"kind": "top_logprobs", "order": order, "positions": n, "judged": 0, "greedy": 0,
                              "excluded": {}, "outside": 0, "outside_examples": [], "pit": _pit_part(np.zeros(0)),
                              "draws": [], "distributions": {}}
    if found.status != "ok":
        record["excluded"] = {found.status: n}
        record["detail"] = found.detail
        return record
    big_k = len(logprobs)
    probs = np.asarray(found.probs + (0.0,))  # the last slot: any unlisted token
    ranked = np.argsort(-probs, kind="stable")
    ordered = probs[ranked]
    rank_of = np.empty(len(probs), np.int64)
    rank_of[ranked] = np.arange(len(probs))
    kept = ordered[ordered > 0]
    key = _key(kept)
    rng = np.random.default_rng(seed)
    greedy = temperature < 1e-5
    judged = 0
    for i, slot in enumerate(draws):
        slot = int(slot)
        if probs[slot] <= 0:
            if slot == big_k and found.unseen > 0:  # an unlisted token whose weight was ignored as negligible
                record["excluded"]["beyond_top"] = record["excluded"].get("beyond_top", 0) + 1
                continue
            record["outside"] += 1
            if len(record["outside_examples"]) < EXAMPLES:
                record["outside_examples"].append({"position": i, "token": slot, "kept": found.kept})
            continue
        judged += 1
        if greedy:
            continue
        r = rank_of[slot]
        u = float(ordered[:r].sum() + rng.random() * ordered[r])
        tag = f"{int(seeds[i])}:0" if seeds is not None and int(seeds[i]) >= 0 else None
        record["draws"].append([key, int(r), tag, u])
    record["judged"] = judged
    record["greedy"] = judged if greedy else 0
    if record["draws"]:
        record["distributions"][key] = [float(v) for v in kept]
    return record


__all__ = ["EXAMPLES", "MOMENT_SAMPLE", "REASONS", "SMALL_KEPT", "record_logits", "record_top_logprobs"]
