"""FlashInfer's sampling APIs judged by the sampling family, with the API's own semantics.

A call of ``top_k_sampling_from_probs``, ``top_p_sampling_from_probs``, ``min_p_sampling_from_probs``,
``top_k_top_p_sampling_from_probs`` / ``_from_logits`` or ``sampling_from_probs`` / ``_from_logits``
draws token ids at random: comparing them with the reference's draws for equality fails every
honest engine. :func:`judge_of` gives such a definition the sampling judge (the draws are tested
against the distribution the inputs and settings imply, :mod:`ikdata.sampling`), and
:func:`sampler_inputs` reads the workload's inputs in the sampling judge's terms: probabilities as
log-probabilities (temperature 1; a zero probability can never be drawn), ``logits`` as given, each
setting off when the API was not given it (top_k 0, top_p 1, min_p 0), rows picked by ``indices``
when the call passed them (``indices=None``: row i draws from row i). Settings are read per row,
as FlashInfer takes them (a scalar or a ``[batch_size]`` tensor). torch-free.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

SAMPLING_INPUTS = ("probs", "logits")
SETTINGS = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}
JUDGE = {"name": "sampling", "order": "any", "alpha": 0.001,
         "reason": "a FlashInfer sampling API draws at random: its draws are judged statistically against the "
                   "distribution its probabilities (or logits) and settings imply, not compared for equality "
                   "(docs/flashinfer.md)"}


def judge_of(fi: Mapping[str, Any]) -> dict | None:
    """The sampling judge for a FlashInfer definition whose one output is the drawn ``samples`` from ``probs``
    or ``logits``; None for any other (a renorm or mask API is an operator: its output is deterministic)."""
    outputs = fi.get("outputs") or {}
    inputs = fi.get("inputs") or {}
    if fi.get("op_type") != "sampling" or list(outputs) != ["samples"]:
        return None
    if not any(name in inputs for name in SAMPLING_INPUTS):
        return None
    if set(inputs) - {*SAMPLING_INPUTS, *SETTINGS, "indices", "temperature", "seed", "offset"}:
        return None  # inputs the judge does not know (speculative sampling's draft probabilities): an operator
    return dict(JUDGE)


def sampler_inputs(values: Mapping[str, Any]) -> dict[str, Any]:
    """A FlashInfer sampling workload's inputs (numpy arrays or numbers) as the sampling judge reads them:
    ``logits`` (one row per draw) and per-row ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed``."""
    if "logits" in values:
        logits = np.asarray(values["logits"], np.float64)
    else:
        with np.errstate(divide="ignore"):
            logits = np.log(np.clip(np.asarray(values["probs"], np.float64), 0.0, None))
    logits = logits.reshape(-1, logits.shape[-1])
    indices = values.get("indices")
    if indices is not None:
        logits = logits[np.asarray(indices, np.int64).reshape(-1)]
    n = logits.shape[0]
    found = {"logits": logits.astype(np.float32), "temperature": np.ones(n), "seed": np.full(n, -1, np.int64)}
    for name, off in SETTINGS.items():
        value = values.get(name)
        found[name] = np.broadcast_to(np.asarray(off if value is None else value).reshape(-1), (n,)).copy() \
            if np.asarray(off if value is None else value).size in (1, n) else np.asarray(value)
    return found


__all__ = ["JUDGE", "judge_of", "sampler_inputs"]
