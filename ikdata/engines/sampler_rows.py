"""One sampled row of a serving engine as a workload of the shipped template ``sampling_logits_f32``.

Engines batch requests; each row of a sampler call belongs to one request at one decode step, with its
own settings. :func:`record_row` records a row as its own workload (B = 1), so the receipt carries the
request id and the decode step and lineage follows each request. Settings come from the request (what
was asked), never from the sampler's internal tensors (what the engine did): the sampling judge builds
the expected distribution from them, in the engine's cut order (``provenance.sampler.order``). Shared by
every engine's sampler hook (vLLM's in :mod:`ikdata.engines.vllm`; an SGLang adapter records the same).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

TEMPLATE = "sampling_logits_f32"


@dataclass(frozen=True)
class RowSettings:
    """What a request asked of the sampler (off: temperature 1 / top-k 0 / top-p 1 / min-p 0 / penalties
    neutral; temperature 0: greedy). ``stops``: the ids min-tokens bans; ``seed``: -1 when none."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0
    stops: tuple[int, ...] = ()
    bad_words: tuple[tuple[int, ...], ...] = ()
    seed: int = -1


@dataclass(frozen=True)
class SampledRow:
    """One row of a sampler call: the request, its decode step (tokens it generated before this one), the
    prompt and output ids so far, its settings, and what its seed fixes (its generator's state: rows
    sharing a state draw the same noise, :mod:`ikdata.sampling.seeded`)."""

    request_id: str
    step: int
    prompt: Sequence[int]
    output: Sequence[int]
    settings: RowSettings = field(default_factory=RowSettings)
    generator: dict[str, Any] | None = None  # what the request's seed fixes (ikdata.sampling.seeded); None: no seed


def row_inputs(logits: Any, row: SampledRow) -> dict[str, Any]:
    """The template's inputs for one row: ``logits`` [V] float32 (copied before the sampler ran)."""
    import torch

    s = row.settings
    context = [int(t) for t in (*row.prompt, *row.output)] or [-1]
    bad = [t for w in s.bad_words for t in (*w, -1)] or [-1]

    def one(value: Any, dtype: Any) -> Any:
        return torch.tensor([value], dtype=dtype)

    return {"logits": logits.reshape(1, -1).to(torch.float32), "context": torch.tensor([context], dtype=torch.int64),
            "pad": one(0 if row.prompt or row.output else 1, torch.int64),
            "generated": one(len(row.output), torch.int64),
            "temperature": one(s.temperature, torch.float32), "top_k": one(s.top_k, torch.int64),
            "top_p": one(s.top_p, torch.float32), "min_p": one(s.min_p, torch.float32),
            "typical_p": one(1.0, torch.float32), "epsilon": one(0.0, torch.float32), "eta": one(0.0, torch.float32),
            "repetition_penalty": one(s.repetition_penalty, torch.float32),
            "presence_penalty": one(s.presence_penalty, torch.float32),
            "frequency_penalty": one(s.frequency_penalty, torch.float32),
            "no_repeat_ngram": one(0, torch.int64), "min_new_tokens": one(s.min_tokens, torch.int64),
            "min_length": one(0, torch.int64),
            "eos": torch.tensor(sorted(set(s.stops)) or [-1], dtype=torch.int64),
            "bad_words": torch.tensor(bad, dtype=torch.int64), "seed": one(s.seed, torch.int64)}


def record_row(cap: Any, logits: Any, row: SampledRow, drawn: int, *, operation: str, order: str,
               provenance: dict[str, Any] | None = None) -> bool:
    """Record one row under its own request id and decode step. Returns True when it was queued."""
    import torch

    from ikdata.capture.context import request, step

    sampler: dict[str, Any] = {"order": order, "processors": [], "unknown": []}
    if row.generator is not None:
        sampler["generator"] = dict(row.generator)
    with request(row.request_id), step(row.step):
        return cap.record(TEMPLATE, row_inputs(logits, row), {"samples": torch.tensor([int(drawn)], dtype=torch.int64)},
                          operation=operation, fills={"V": int(logits.shape[-1])},
                          provenance={"sampler": sampler, **(provenance or {})})


__all__ = ["RowSettings", "SampledRow", "TEMPLATE", "record_row", "row_inputs"]
