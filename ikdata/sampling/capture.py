"""Capture at the sampler: the model's raw logits, the declared settings, the processors present, the draws.

Hugging Face ``generate`` (sampling and greedy): :func:`install` wraps
``GenerationMixin._sample`` (now, or when ``transformers.generation.utils`` is imported).
Inside each call the logits-processor list is wrapped so that, at every step, the raw
logits it receives (float32, full vocabulary, before every processor and warper) and the
input ids are kept; when the call returns, each step's draws are read from the returned
sequences and the step is recorded as one workload of the shipped template
``sampling_logits_f32_v{V}`` (``definitions/sampling/sampling_logits_f32.json``): the logits,
the context (input ids, left padding, tokens generated so far), every setting the
generation config declares (temperature, top-k, top-p, min-p, typical-p, epsilon, eta,
repetition penalty, no-repeat-ngram, bad words, min length, min new tokens, EOS ids) and
the seed (``torch.initial_seed()``, the seed of the generator HF draws from).

Settings come from the generation config (what was asked), never from the processors (what
the engine did): the judge builds the expected distribution from them. The processors really
present are listed in the receipt (``sampler``: the cut order ``hf``, each processor's name,
the digest of its ``__call__`` source, and whether the config declares it); one the config
does not imply (an extra processor, a standard one HF would not build, a second copy) is
``unknown`` and named in any failure. No processor stops capture. A sampling call that cannot
be captured (beam search, an error reading it) is a failure marked ``lost``: ``ikdata capture``
exits 1 and names it. Rows that finished (EOS) before a step are left out of it; steps HF
computed and then undid are left out too.

Engines' own samplers (SGLang's and vLLM's ``Sampler`` modules) are hooked by an adapter
module passed with ``--adapter`` (see docs/sampling.md) that records the same template with
``provenance={"sampler": {"order": "vllm", ...}}``.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
import sys
import threading
from typing import Any, Mapping, Sequence

from ikdata.capture.sources import declared_by
from ikdata.capture.spread import spread

TEMPLATE = "sampling_logits_f32"
OPERATION = "transformers.GenerationMixin._sample"
_WATCHED = "transformers.generation.utils"
# inside an assisted (speculative) call every _sample is the draft's: never recorded as the target's draws
_ASSISTED: contextvars.ContextVar[str | None] = contextvars.ContextVar("ikdata_sampling_assisted", default=None)
# what the judge models of HF's processors and warpers (ikdata/sampling/pipeline.py, distribution.py)
MODELLED = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper",
            "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper", "RepetitionPenaltyLogitsProcessor",
            "NoRepeatNGramLogitsProcessor", "NoBadWordsLogitsProcessor", "MinLengthLogitsProcessor",
            "MinNewTokensLengthLogitsProcessor"}


class _Recorder:
    """Wraps a LogitsProcessorList: keeps each step's input ids and raw logits, then applies the real processors.

    Processors the declared settings do not imply (``unknown``) are measured as they run: per row, the mass
    of the distribution before them that they removed (set to -inf) and the total variation they moved, so a
    verdict can name each one with what it did, passed or failed.
    """

    def __init__(self, inner: Any, config: Any, wanted: Any = None) -> None:
        self.inner = inner
        # per step: (input ids, raw logits), or None for a step selection leaves out (never copied)
        self.steps: list[tuple[Any, Any] | None] = []
        self.start: int | None = None  # the prompt's length: step i's ids are start + i long
        self.wanted = wanted if wanted is not None else (lambda index: True)
        self.error: Exception | None = None
        try:
            self.present = processors_of(inner, declared(config))
        except Exception as exc:  # noqa: BLE001  named as lost when the call ends; generate must run on
            self.present, self.error = [], exc
        self.effects: list[dict[int, tuple[Any, Any]]] = []  # per step: processor index -> (removed, tv) per row

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        if self.start is None:
            self.start = int(input_ids.shape[1])
        if not self.wanted(len(self.steps)):  # decided before any copy: a step left out costs nothing
            self.steps.append(None)
            self.effects.append({})
            return self.inner(input_ids, scores, **kwargs)
        self.steps.append((input_ids.detach().to("cpu", copy=True), scores.detach().to("cpu", copy=True)))
        unknown = [i for i, p in enumerate(self.present) if not p["declared"]]
        if not unknown or len(self.present) != len(self.inner):
            self.effects.append({})
            return self.inner(input_ids, scores, **kwargs)
        import torch

        effects: dict[int, tuple[Any, Any]] = {}
        for index, processor in enumerate(self.inner):  # LogitsProcessorList.__call__, one processor at a time
            before = scores
            if len(inspect.signature(processor.__call__).parameters) > 2:
                scores = processor(input_ids, scores, **kwargs)
            else:
                scores = processor(input_ids, scores)
            if index in unknown:
                with torch.no_grad():
                    p = torch.softmax(before.detach().float(), dim=-1)
                    removed = (p * (torch.isfinite(before) & torch.isneginf(scores)).float()).sum(dim=-1)
                    moved = 0.5 * (torch.softmax(scores.detach().float(), dim=-1) - p).abs().nansum(dim=-1)
                effects[index] = (removed.cpu(), moved.cpu())
        self.effects.append(effects)
        return scores

    def effects_of(self, step: int, rows: Any) -> list[dict[str, Any]]:
        """The processors present at one step, the unknown ones with the mass they removed and the TV they moved
        (mean and max over the recorded rows)."""
        found = self.effects[step] if step < len(self.effects) else {}
        out = []
        for index, proc in enumerate(self.present):
            entry = dict(proc)
            if index in found and len(rows):
                removed, moved = (v[rows].double() for v in found[index])
                entry["removed_mass"] = {"mean": round(float(removed.mean()), 6), "max": round(float(removed.max()), 6)}
                entry["moved_tv"] = {"mean": round(float(moved.mean()), 6), "max": round(float(moved.max()), 6)}
            out.append(entry)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __iter__(self):
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)


def _value(config: Any, name: str, default: Any) -> Any:
    value = getattr(config, name, None)
    return default if value is None else value


def declared(config: Any) -> dict[str, Any]:
    """The settings a generation config declares (off: 1 / 0 / 1 / 0 ...; temperature 0: greedy)."""
    sample = bool(getattr(config, "do_sample", False))
    eos = _value(config, "eos_token_id", [])
    eos = [int(e) for e in (eos.tolist() if hasattr(eos, "tolist") else eos if isinstance(eos, (list, tuple)) else [eos])]
    eps, eta = float(_value(config, "epsilon_cutoff", 0.0)), float(_value(config, "eta_cutoff", 0.0))
    return {"temperature": float(_value(config, "temperature", 1.0)) if sample else 0.0,
            "top_k": int(_value(config, "top_k", 0)) if sample else 0,
            "top_p": float(_value(config, "top_p", 1.0)) if sample else 1.0,
            "min_p": float(_value(config, "min_p", 0.0)) if sample else 0.0,
            "typical_p": float(_value(config, "typical_p", 1.0)) if sample else 1.0,
            "epsilon": eps if sample and 0 < eps < 1 else 0.0, "eta": eta if sample and 0 < eta < 1 else 0.0,
            "repetition_penalty": float(_value(config, "repetition_penalty", 1.0)),
            "no_repeat_ngram": int(_value(config, "no_repeat_ngram_size", 0)),
            "min_length": int(_value(config, "min_length", 0)) if eos else 0,
            "min_new_tokens": int(_value(config, "min_new_tokens", 0)) if eos else 0,
            "bad_words": [list(map(int, w)) for w in _value(config, "bad_words_ids", [])], "eos": eos,
            "sample": sample}


def expected_processors(found: dict[str, Any]) -> list[str]:
    """The processor classes HF builds for the declared settings that the judge models."""
    names = []
    if found["repetition_penalty"] != 1.0:
        names.append("RepetitionPenaltyLogitsProcessor")
    if found["no_repeat_ngram"] > 0:
        names.append("NoRepeatNGramLogitsProcessor")
    if found["bad_words"]:
        names.append("NoBadWordsLogitsProcessor")
    if found["min_length"] > 0:
        names.append("MinLengthLogitsProcessor")
    if found["min_new_tokens"] > 0:
        names.append("MinNewTokensLengthLogitsProcessor")
    if found["sample"]:
        names += [n for n, on in (("TemperatureLogitsWarper", found["temperature"] != 1.0),
                                  ("TopKLogitsWarper", found["top_k"] != 0), ("TopPLogitsWarper", found["top_p"] < 1),
                                  ("MinPLogitsWarper", found["min_p"] > 0), ("TypicalLogitsWarper", found["typical_p"] < 1),
                                  ("EpsilonLogitsWarper", found["epsilon"] > 0), ("EtaLogitsWarper", found["eta"] > 0)) if on]
    return names


def _source_digest(proc: Any) -> str:
    from ikdata.core.digest import bytes_digest

    call = getattr(type(proc), "__call__", None)
    try:
        text = inspect.getsource(call)
    except (OSError, TypeError):
        text = f"{type(proc).__module__}.{type(proc).__qualname__}"
    return bytes_digest(text.encode())


def processors_of(processors: Any, found: dict[str, Any]) -> list[dict[str, Any]]:
    """Each processor present: name, source digest, and whether the declared settings imply it (modelled)."""
    wanted = expected_processors(found)
    out = []
    for proc in processors:
        name = type(proc).__name__
        declared_here = name in wanted and name in MODELLED and getattr(proc, "min_tokens_to_keep", 1) <= 1
        if declared_here:
            wanted.remove(name)
        if name == "MinPLogitsWarper" and not declared_here and float(getattr(proc, "min_p", 1)) == 0.0:
            declared_here = True  # min_p 0 keeps every token
        out.append({"name": name, "digest": _source_digest(proc), "declared": declared_here})
    return out


def _record_call(cap: Any, recorder: _Recorder, sequences: Any, config: Any, attention_mask: Any,
                 variant: str | None = None) -> None:
    import torch

    from ikdata.capture.context import step as step_context

    if recorder.start is None or not cap.enabled:
        return
    if recorder.error is not None:
        raise recorder.error
    found = declared(config)
    unknown = [p["name"] for p in recorder.present if not p["declared"]]
    start = recorder.start
    eos = set(found["eos"])
    generated = sequences[:, start:].cpu()
    finished = torch.zeros(generated.shape[0], dtype=torch.bool)
    seed = int(torch.initial_seed()) if found["sample"] else -1
    pad = ((attention_mask != 0).int().argmax(dim=1).cpu().to(torch.int64) if attention_mask is not None
           else torch.zeros(generated.shape[0], dtype=torch.int64))
    flat_bad = [t for w in found["bad_words"] for t in (*w, -1)] or [-1]
    engine = _engine_facts(cap)
    for index, kept in enumerate(recorder.steps):
        position = index if kept is None else kept[0].shape[1] - start
        if position >= generated.shape[1]:
            break  # a step HF computed and then undid
        drawn = generated[:, position]
        rows = (~finished).nonzero().flatten()
        if kept is not None and len(rows):
            ids, logits = kept
            b = len(rows)

            def full(name: str, dtype: Any) -> Any:
                return torch.full((b,), found[name], dtype=dtype)

            inputs = {"logits": logits[rows].to(torch.float32).contiguous(),
                      "context": ids[rows].to(torch.int64).contiguous(), "pad": pad[rows].contiguous(),
                      "generated": torch.full((b,), position, dtype=torch.int64),
                      **{k: full(k, torch.float32) for k in ("temperature", "top_p", "min_p", "typical_p", "epsilon",
                                                              "eta", "repetition_penalty")},
                      "presence_penalty": torch.zeros(b), "frequency_penalty": torch.zeros(b),
                      **{k: full(k, torch.int64) for k in ("top_k", "no_repeat_ngram", "min_new_tokens",
                                                            "min_length")},
                      "eos": torch.tensor(sorted(eos) or [-1], dtype=torch.int64),
                      "bad_words": torch.tensor(flat_bad, dtype=torch.int64),
                      "seed": torch.full((b,), seed, dtype=torch.int64)}
            sampler = {"order": declared_by(__name__).order, "processors": recorder.effects_of(index, rows), "unknown": unknown}
            with step_context(index):
                cap.record(TEMPLATE, inputs, {"samples": drawn[rows].to(torch.int64).contiguous()},
                           operation=OPERATION, fills={"V": int(logits.shape[-1])},
                           provenance={"sampler": sampler, **engine}, variant=variant)
        if eos:
            finished |= torch.isin(drawn, torch.tensor(sorted(eos), dtype=drawn.dtype))


def _engine_facts(cap: Any) -> dict[str, Any]:
    """The engine of a generate() call's sampler rows: transformers, whose sampler drew them (the rows are recorded
    outside any module call, where capture would name plain torch), unless a serving engine runs the process or
    the user named the engine (``--engine``)."""
    from ikdata.capture import sources

    if "engine" in cap.config.provenance or sources.loaded() is not sources.TORCH:
        return {}
    me = declared_by(__name__)
    return {"engine": me.name, "engine_version": me.version()}


FULL_STEPS = 16  # by default each kept generate call records its first 16 steps, then every power of two
FULL_CALLS = 8  # and of the calls with the same settings and processors, the first 8, then every power of two


def selection_lines(counts: Mapping[str, int]) -> list[str]:
    """What capture's default kept of HF's sampler calls and how to ask for more (the source's ``selection``
    hook, for the capture summary); none when no sampler row was recorded."""
    if not any(name.startswith(TEMPLATE) for name in counts):
        return []
    return [f"selection (default), sampler: per generate() call its first {FULL_STEPS} steps, then every power of "
            f"two; of the calls with the same settings and processors the first {FULL_CALLS}, then every power of "
            "two. More: --per-step (every step of every call)"]


class _Selection:
    """Which of HF's sampler calls and steps a capturer records, decided before anything is copied.

    A call's key is what makes it differ to a judge: the vocabulary, every setting the generation config
    declares and the processors present (name and source digest), so a sampled ``generate()`` after a
    greedy one is never taken for a repeat. By default each key keeps a bounded spread over calls and,
    in each call, over steps (:data:`FULL_CALLS`, :data:`FULL_STEPS`); ``--steps`` (or a request's own
    steps) records those steps of every call, ``--per-step`` every step of every call.
    """

    def __init__(self, cap: Any) -> None:
        self.cap = cap
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}

    def call(self, config: Any, processors: Any) -> tuple[int, str]:
        """Number this call among the calls of its key in this process; returns (index, the workloads' variant)."""
        import orjson

        from ikdata.core.digest import bytes_digest

        present = [(p["name"], p["digest"]) for p in processors_of(processors, declared(config))]
        key = bytes_digest(orjson.dumps([declared(config), present], option=orjson.OPT_SORT_KEYS))[-12:]
        with self.lock:
            index = self.calls.get(key, 0)
            self.calls[key] = index + 1
        return index, f"settings-{key}.call{index}.pid{os.getpid()}"

    def asked_steps(self) -> Any:
        req = self.cap.tracker.current_request()
        return req.steps if req is not None and req.steps is not None else self.cap.config.steps

    def keeps_call(self, index: int) -> bool:
        return (self.cap.config.per_step or self.asked_steps() is not None) or spread(index, FULL_CALLS)

    def step_wanted(self) -> Any:
        """The test a call's recorder asks at each step, before copying its logits."""
        steps = self.asked_steps()
        if steps is not None:
            chosen = frozenset(steps)
            return chosen.__contains__
        if self.cap.config.per_step:
            return lambda index: True
        return lambda index: spread(index, FULL_STEPS)


def _selection_of(cap: Any) -> _Selection:
    found = getattr(cap, "_ikdata_sampler_selection", None)
    if found is None or found.cap is not cap:
        found = _Selection(cap)
        cap._ikdata_sampler_selection = found
    return found


def _patch(cap: Any, module: Any) -> None:
    """Wrap ``GenerationMixin._sample`` (and refuse what capture cannot judge) in ``transformers.generation.utils``."""
    mixin = getattr(module, "GenerationMixin", None)
    if mixin is None or getattr(mixin._sample, "__ikdata_original__", None) is not None:
        return
    original = mixin._sample
    _patch_beams(cap, mixin)
    _patch_assisted(cap, mixin)

    @functools.wraps(original)
    def _sample(self: Any, input_ids: Any, logits_processor: Any, stopping_criteria: Any, generation_config: Any,
                *args: Any, **kwargs: Any) -> Any:
        if not cap.enabled or cap.tracker.current_request() is None or _ASSISTED.get() is not None:
            return original(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)
        selection = _selection_of(cap)
        try:
            call, variant = selection.call(generation_config, logits_processor)
        except Exception:  # noqa: BLE001  the recorder names what it cannot read, as lost, when the call ends
            call, variant = 0, None
        if not selection.keeps_call(call):  # a call the spread leaves out: run as without capture, nothing copied
            return original(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)
        recorder = _Recorder(logits_processor, generation_config, wanted=selection.step_wanted())
        out = original(self, input_ids, recorder, stopping_criteria, generation_config, *args, **kwargs)
        sequences = out if hasattr(out, "shape") else getattr(out, "sequences", None)
        if sequences is not None:
            try:
                _record_call(cap, recorder, sequences, generation_config, kwargs.get("attention_mask"), variant)
            except Exception as exc:  # noqa: BLE001  a failing capture must not break generate
                cap._fail(TEMPLATE, RuntimeError(f"sampling not captured: {exc}"), lost=True)
        return out

    _sample.__ikdata_original__ = original  # type: ignore[attr-defined]
    mixin._sample = _sample
    cap._patches.append((mixin, "_sample", original))


def _patch_beams(cap: Any, mixin: Any) -> None:
    """Beam search draws through other code: a sampled beam search is named as lost, not silently missed."""
    original = getattr(mixin, "_beam_search", None)
    if original is None or getattr(original, "__ikdata_original__", None) is not None:
        return

    @functools.wraps(original)
    def _beam_search(self: Any, input_ids: Any, logits_processor: Any, stopping_criteria: Any,
                     generation_config: Any, *args: Any, **kwargs: Any) -> Any:
        if cap.enabled and cap.tracker.current_request() is not None and getattr(generation_config, "do_sample", False):
            cap._fail(TEMPLATE, RuntimeError(f"sampling not captured: beam search with sampling "
                                             f"(num_beams {generation_config.num_beams}) draws outside _sample"),
                      lost=True)
        return original(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)

    _beam_search.__ikdata_original__ = original  # type: ignore[attr-defined]
    mixin._beam_search = _beam_search
    cap._patches.append((mixin, "_beam_search", original))


def assisted_mode(generation_config: Any, kwargs: dict[str, Any]) -> str:
    """The name of an assisted (speculative) decoding mode, as a user would recognise it."""
    if kwargs.get("assistant_model") is not None:
        return f"assisted generation (assistant_model {type(kwargs['assistant_model']).__name__})"
    lookup = getattr(generation_config, "prompt_lookup_num_tokens", None)
    if lookup is not None:
        return f"prompt-lookup decoding (prompt_lookup_num_tokens {lookup})"
    return "assisted (speculative) decoding"


def _patch_assisted(cap: Any, mixin: Any) -> None:
    """Assisted generation and prompt-lookup decoding draw (or accept a draft) inside ``_assisted_decoding``,
    whose target distribution, draft proposals and accept/resample draws capture does not record. Such a
    call is refused by name (a failure marked lost: ``ikdata capture`` exits 1), and the draft model's own
    ``_sample`` calls inside it are never recorded as if they were the target's draws."""
    original = getattr(mixin, "_assisted_decoding", None)
    if original is None or getattr(original, "__ikdata_original__", None) is not None:
        return

    @functools.wraps(original)
    def _assisted_decoding(self: Any, input_ids: Any, logits_processor: Any, stopping_criteria: Any,
                           generation_config: Any, *args: Any, **kwargs: Any) -> Any:
        if not cap.enabled or cap.tracker.current_request() is None:
            return original(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)
        mode = assisted_mode(generation_config, kwargs)
        drawn = "sampling" if getattr(generation_config, "do_sample", False) else "greedy decoding"
        cap._fail(TEMPLATE, RuntimeError(f"sampling not captured: {mode} with {drawn} draws and accepts draft "
                                         "tokens outside _sample (the target's distribution, the draft's proposals "
                                         "and the accept/resample draws are not recorded); run without it to "
                                         "capture the sampler"), lost=True)
        token = _ASSISTED.set(mode)
        try:
            return original(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)
        finally:
            _ASSISTED.reset(token)

    _assisted_decoding.__ikdata_original__ = original  # type: ignore[attr-defined]
    mixin._assisted_decoding = _assisted_decoding
    cap._patches.append((mixin, "_assisted_decoding", original))


class _Calls:
    """Per capturer: each request's sampler calls seen and kept, per definition (what :func:`record_sampler`
    reports when capture ends)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[tuple[str, Any], int] = {}
        self.kept: dict[tuple[str, Any], int] = {}

    def next(self, key: tuple[str, Any]) -> int:
        with self.lock:
            index = self.seen.get(key, 0)
            self.seen[key] = index + 1
            return index

    def keep(self, key: tuple[str, Any]) -> None:
        with self.lock:
            self.kept[key] = self.kept.get(key, 0) + 1

    def dropped(self) -> list[str]:
        """One line per request whose calls were not all kept."""
        with self.lock:
            return [f"kept {self.kept.get(key, 0)} of {n} call(s) of {key[0]} in request {key[1]!r} (the rest "
                    "were not selected: --steps, a budget, a definition stopped, or the same step recorded "
                    "already; the census names the reason)" for key, n in sorted(self.seen.items(), key=str)
                    if self.kept.get(key, 0) < n]


_CALLS: dict[int, _Calls] = {}
_CALLS_LOCK = threading.Lock()


def _calls_of(cap: Any) -> _Calls:
    with _CALLS_LOCK:
        found = _CALLS.get(id(cap))
        if found is None or getattr(cap, "_ikdata_sampling_calls", None) is not found:
            found = _CALLS[id(cap)] = _Calls()
            cap._ikdata_sampling_calls = found

            def report() -> None:
                for line in found.dropped():
                    sys.stderr.write(f"ikdata capture [{os.getpid()}]: sampling: {line}\n")
                sys.stderr.flush()

            cap.on_shutdown.append(report)
        return found


def record_sampler(api: Any, inputs: Mapping[str, Any], samples: Any, *, operation: str, vocab: int,
                   order: str, request_ids: Sequence[Any] | None = None, decode_steps: Sequence[int] | None = None,
                   processors: Sequence[Mapping[str, Any]] = (), definition: str = TEMPLATE) -> bool:
    """Record one call of an engine's sampler from an ``--adapter`` (the template ``sampling_logits_f32``).

    Each call in a request is a step of its own: a per-request counter numbers them (0, 1, ...), unless every
    row names the same decode step, so a decode loop keeps every call instead of one per request. The rows
    carry their own request id and decode step (``request_ids``, ``decode_steps``: one per row, recorded in
    the receipt's ``rows``), so a batch that mixes requests stays traceable. Calls that are still not kept
    (not selected, over a budget) are counted and reported per request when capture ends.
    """
    from ikdata.capture.context import step as step_context

    req = api.tracker.current_request()
    request_id = req.request_id if req is not None else None
    calls = _calls_of(api)
    key = (definition, request_id)
    index = calls.next(key)
    steps = [int(s) for s in decode_steps] if decode_steps is not None else None
    if steps is not None and len(set(steps)) == 1:
        index = steps[0]
    provenance: dict[str, Any] = {"sampler": {"order": order, "processors": [dict(p) for p in processors],
                                              "unknown": [str(p.get("name")) for p in processors
                                                          if not p.get("declared")]}}
    if request_ids is not None or steps is not None:
        provenance["rows"] = {"request_id": [r if isinstance(r, (int, str)) else str(r) for r in request_ids]
                              if request_ids is not None else None, "decode_step": steps}
    with step_context(index):
        kept = api.record(definition, inputs, {"samples": samples}, operation=operation, fills={"V": int(vocab)},
                          provenance=provenance)
    if kept:
        calls.keep(key)
    return bool(kept)


def install(cap: Any) -> None:
    """Capture Hugging Face ``generate``'s sampler: patch now if transformers is loaded, else when it loads
    (for the capturer active then: :func:`ikdata.capture.running.when_imported`)."""
    from ikdata.capture.running import when_imported

    when_imported(_WATCHED, cap, _patch)


__all__ = ["MODELLED", "OPERATION", "TEMPLATE", "assisted_mode", "declared", "expected_processors", "install",
           "processors_of", "record_sampler"]
