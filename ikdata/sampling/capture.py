"""Capture at the sampler: what a sampler drew, and from which raw logits and settings.

Hugging Face ``generate`` (sampling and greedy): :func:`install` wraps
``GenerationMixin._sample`` (now, or when ``transformers.generation.utils`` is imported).
Inside each call the logits-processor list is wrapped so that, at every step, the raw
logits it receives (float32, full vocabulary, before temperature, cuts and processors)
are kept; when the call returns, each step's draws are read from the returned sequences
and the step is recorded as one workload of the shipped template ``sampling_f32_v{V}``:

    inputs  logits [B, V] float32, temperature / top_k / top_p / min_p [B] (0 / 0 / 1 / 0: off;
            temperature 0 for greedy), seed [B] int64 (``torch.initial_seed()``, the seed of
            the generator HF draws from)
    outputs samples [B] int64, the drawn token ids

Settings are read from the warpers HF really applies (Temperature, TopK, TopP, MinP), not
from the request. A call with any other logits processor (a repetition penalty, a
grammar) is not captured: its distribution is not the one those settings imply, and the
message says so once. Rows that finished (EOS) before a step are left out of it; steps
HF computed and then undid are left out too.

Engines' own samplers (SGLang's and vLLM's ``Sampler`` modules) are hooked the same way
by an adapter module passed with ``--adapter`` (see docs/sampling.md): record the logits
handed to the sampler's forward and the token ids it returns, with the batch's settings.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

TEMPLATE = "sampling_f32"
OPERATION = "transformers.GenerationMixin._sample"
_MODELED = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper"}
_WATCHED = "transformers.generation.utils"


class _Recorder:
    """Wraps a LogitsProcessorList: keeps each step's raw logits, then applies the real processors."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.steps: list[tuple[int, Any]] = []  # (sequence length when called, raw logits)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        self.steps.append((int(input_ids.shape[1]), scores.detach().to("cpu", copy=True)))
        return self.inner(input_ids, scores, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __iter__(self):
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)


def settings_of(processors: Any, do_sample: bool) -> tuple[dict[str, float], list[str]]:
    """The sampling settings the warpers in ``processors`` apply, and the names of processors not modeled."""
    found = {"temperature": 1.0 if do_sample else 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    other = []
    for proc in processors:
        name = type(proc).__name__
        if name not in _MODELED or getattr(proc, "min_tokens_to_keep", 1) > 1:
            other.append(name)
        elif name == "TemperatureLogitsWarper":
            found["temperature"] = float(proc.temperature)
        elif name == "TopKLogitsWarper":
            found["top_k"] = int(proc.top_k)
        elif name == "TopPLogitsWarper":
            found["top_p"] = float(proc.top_p)
        elif name == "MinPLogitsWarper":
            found["min_p"] = float(proc.min_p)
    return found, other


def _eos_ids(config: Any) -> set[int]:
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


def _record_call(cap: Any, recorder: _Recorder, sequences: Any, config: Any, warned: set[str]) -> None:
    import torch

    from ikdata.capture.context import step as step_context

    if not recorder.steps or not cap.enabled:
        return
    do_sample = bool(getattr(config, "do_sample", False))
    settings, other = settings_of(recorder.inner, do_sample)
    if other:
        key = ",".join(other)
        if key not in warned:
            warned.add(key)
            cap._fail(TEMPLATE, RuntimeError(f"not captured: logits processors {other} change the distribution "
                                             "beyond temperature/top-k/top-p/min-p"))
        return
    start = recorder.steps[0][0]
    eos = _eos_ids(config)
    generated = sequences[:, start:].cpu()
    finished = torch.zeros(generated.shape[0], dtype=torch.bool)
    seed = int(torch.initial_seed()) if do_sample else -1
    for index, (length, logits) in enumerate(recorder.steps):
        position = length - start
        if position >= generated.shape[1]:
            break  # a step HF computed and then undid
        drawn = generated[:, position]
        rows = (~finished).nonzero().flatten()
        if len(rows):
            b = len(rows)
            inputs = {"logits": logits[rows].to(torch.float32).contiguous(),
                      "temperature": torch.full((b,), settings["temperature"], dtype=torch.float32),
                      "top_k": torch.full((b,), settings["top_k"], dtype=torch.int64),
                      "top_p": torch.full((b,), settings["top_p"], dtype=torch.float32),
                      "min_p": torch.full((b,), settings["min_p"], dtype=torch.float32),
                      "seed": torch.full((b,), seed, dtype=torch.int64)}
            with step_context(index):
                cap.record(TEMPLATE, inputs, {"samples": drawn[rows].to(torch.int64).contiguous()},
                           operation=OPERATION, fills={"V": int(logits.shape[-1])})
        if eos:
            finished |= torch.isin(drawn, torch.tensor(sorted(eos), dtype=drawn.dtype))


def _patch(cap: Any) -> None:
    module = sys.modules.get(_WATCHED)
    mixin = getattr(module, "GenerationMixin", None)
    if mixin is None or getattr(mixin._sample, "__ikdata_original__", None) is not None:
        return
    original = mixin._sample
    warned: set[str] = set()

    @functools.wraps(original)
    def _sample(self: Any, input_ids: Any, logits_processor: Any, stopping_criteria: Any, generation_config: Any,
                *args: Any, **kwargs: Any) -> Any:
        if not cap.enabled or cap.tracker.current_request() is None:
            return original(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)
        recorder = _Recorder(logits_processor)
        out = original(self, input_ids, recorder, stopping_criteria, generation_config, *args, **kwargs)
        sequences = out if hasattr(out, "shape") else getattr(out, "sequences", None)
        if sequences is not None:
            try:
                _record_call(cap, recorder, sequences, generation_config, warned)
            except Exception as exc:  # noqa: BLE001  a failing capture must not break generate
                cap._fail(TEMPLATE, exc)
        return out

    _sample.__ikdata_original__ = original  # type: ignore[attr-defined]
    mixin._sample = _sample
    cap._patches.append((mixin, "_sample", original))


def install(cap: Any) -> None:
    """Capture Hugging Face ``generate``'s sampler: patch now if transformers is loaded, else when it loads."""
    if _WATCHED in sys.modules:
        _patch(cap)
        return
    import ikdata_boot

    ikdata_boot.watch(_patch_installed, _WATCHED)


def _patch_installed() -> None:
    """When transformers loads: patch for the capturer installed then, if any. A capturer uninstalled
    before that import (a test, a process that turned capture off) must not be the one patched in."""
    from ikdata.capture import boot

    cap = boot.current()
    if cap is not None:
        _patch(cap)


__all__ = ["OPERATION", "TEMPLATE", "install", "settings_of"]
