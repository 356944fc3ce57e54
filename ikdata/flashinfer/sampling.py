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
as FlashInfer's kernels read them (``top_k_arr[row_idx]``: with ``indices``, the setting of the row drawn
from). :func:`per_row_settings` makes a sampling definition's settings ``[batch_size]`` tensors, so
one definition holds calls given a scalar or a per-row tensor alike. torch-free.
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
    if "top_k" in inputs and "top_p" in inputs:  # the call's filter_apply_order sets the cut order, per receipt
        return {**JUDGE, "order": "engine"}
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
    rows = np.arange(logits.shape[0])
    indices = values.get("indices")
    if indices is not None:
        rows = np.asarray(indices, np.int64).reshape(-1)
        logits = logits[rows]
    n = logits.shape[0]
    found = {"logits": logits.astype(np.float32), "temperature": np.ones(n), "seed": np.full(n, -1, np.int64)}
    for name, off in SETTINGS.items():
        value = np.asarray(off if values.get(name) is None else values[name]).reshape(-1)
        if value.size == 1:
            found[name] = np.full(n, value[0])
        elif value.size > int(rows.max(initial=-1)) and indices is not None:
            found[name] = value[rows]  # the kernel reads the setting of the row it draws from
        else:
            found[name] = value
    return found


def per_row_settings(record: dict) -> dict:
    """A sampling definition (converted record) whose settings declared as scalars (``min_p``, ``top_k``, ``top_p``)
    are ``[batch_size]`` tensors, the first axis of its ``probs`` or ``logits``: FlashInfer's APIs take each as a
    scalar or a per-row tensor, and the draws are judged per row. A definition without such a setting is returned
    as it is."""
    inputs = record.get("inputs") or {}
    source = next((inputs[n] for n in SAMPLING_INPUTS if n in inputs), None)
    shape = (source or {}).get("shape") or []
    if not shape:
        return record
    changed = {n: {**spec, "shape": [shape[0]]} for n, spec in inputs.items()
               if n in SETTINGS and spec.get("shape") is None}
    if not changed:
        return record
    return {**record, "inputs": {n: changed.get(n, spec) for n, spec in inputs.items()}}


__all__ = ["JUDGE", "judge_of", "per_row_settings", "sampler_inputs"]
