"""Import a JSONL of OpenAI-compatible completions as sampling workloads (``ikdata import FILE.jsonl DST``).

What a user collects from any server: for one prompt position, the sampling settings, the
top-K raw log-probabilities (before temperature and cuts, as vLLM and SGLang return them),
and the token each of n seeded requests drew there. One line per prompt position::

    {"prompt": "The capital of France is", "model": "Qwen/Qwen3-8B", "position": 0,
     "settings": {"temperature": 0.7, "top_k": 20, "top_p": 0.9, "min_p": 0.0},
     "vocab_size": 151936,
     "top_logprobs": [{"token": " Paris", "logprob": -0.02}, {"token": " the", "logprob": -4.1}],
     "draws": [{"seed": 0, "token": " Paris"}, {"seed": 1, "token": " the"}]}

``top_logprobs`` may also be an object ``{token: logprob}`` (the legacy completions form).
A token is a string, or an id (an integer, or ``"token_id:N"`` as vLLM writes it with
``return_tokens_as_token_ids``); ids must lie below ``vocab_size`` when it is given.

Each line becomes one workload of the shipped definition ``sampling_top_logprobs``:
``samples[i]`` is the slot request i drew (its token's index in the list, or K for a token
not listed). Every problem of every line is reported (file and line) and nothing is
written unless the whole file is good.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ikdata.core.definitions import SHIPPED, read_folder, shipped_folder
from ikdata.core.errors import ProblemsFound
from ikdata.core.manifest import MANIFEST
from ikdata.core.problems import Problem
from ikdata.core.writer import DatasetWriter, NewWorkload

DEFINITION = "sampling_top_logprobs"
ORIGIN = "openai-completions"
# vLLM's and SGLang's sampling parameters that change the distribution (value when off)
UNMODELLED = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "min_tokens": 0,
              "min_new_tokens": 0, "logit_bias": None, "bad_words": None, "typical_p": 1.0, "no_repeat_ngram_size": 0,
              "allowed_token_ids": None, "regex": None, "json_schema": None, "ebnf": None}
MAX_VOCAB = 1 << 31  # larger than any tokenizer's vocabulary; token ids and top_k stay within int64
_INT64 = 1 << 63
_FLOAT32_MAX = float(np.finfo(np.float32).max)  # the settings are stored as float32 scalars


def definitions_by_engine() -> dict[str, str]:
    """Serving engine -> the definition a log it wrote is a workload of: ``sampling_top_logprobs_<order>``, judged
    in that engine's sampler cut order (``definitions/sampling/*_vllm.json``). Read from the declared serving
    engines (:mod:`ikdata.core.features`), so an engine declared with an order is accepted here."""
    from ikdata.core.features import sources

    return {s.name: f"{DEFINITION}_{s.order}" for s in sources() if s.engine and s.order}


@dataclass(frozen=True)
class Position:
    """One checked line: the listed tokens and log-probabilities, settings, and each request's draw."""

    line: int
    tokens: tuple[Any, ...]
    logprobs: tuple[float, ...]
    settings: dict[str, float]
    vocab_size: int
    seeds: tuple[int, ...]
    slots: tuple[int, ...]
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CompletionsResult:
    """What the import wrote (or, in a dry run, would write)."""

    src: str
    dst: str
    added: tuple[str, ...]
    draws: int
    dry_run: bool
    dataset_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "added": list(self.added), "draws": self.draws,
                "dry_run": self.dry_run, "dataset_id": self.dataset_id}

    def summary(self) -> str:
        verb = "would add" if self.dry_run else "added"
        return (f"{self.src} -> {self.dst}: {verb} {len(self.added)} sampling workload(s) ({self.draws} draws) of "
                f"{DEFINITION}; judge them with: ikdata replay {self.dst}")


def _token(value: Any) -> Any:
    """A token as a key: an int for an id (``7`` or ``"token_id:7"``), else the string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value.startswith("token_id:") and value[len("token_id:"):].lstrip("-").isdigit():
            return int(value[len("token_id:"):])
        return value
    return None


def _whole(value: float, low: int, high: int) -> bool:
    """Whether ``value`` is a whole number from ``low`` to ``high`` (NaN and infinity are not)."""
    return math.isfinite(value) and value == int(value) and low <= value <= high


def _number(record: Any, key: str, default: float) -> Any:
    value = record.get(key, default) if isinstance(record, dict) else default
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def parse_line(record: Any, *, path: str, line: int) -> tuple[Position | None, list[Problem]]:
    """Check one line; the position, or the problems (each naming file and line)."""
    problems: list[Problem] = []

    def bad(pointer: str, message: str) -> None:
        problems.append(Problem(path, message, line=line, pointer=pointer, code="completions"))

    if not isinstance(record, dict):
        bad("", "expected a JSON object with settings, top_logprobs and draws")
        return None, problems
    settings = record.get("settings") if isinstance(record.get("settings"), dict) else {}
    if not isinstance(record.get("settings"), dict):
        bad("/settings", "settings must be an object with temperature (and top_k, top_p, min_p)")
    temperature = _number(settings, "temperature", math.nan)
    top_k = _number(settings, "top_k", 0)
    top_p = _number(settings, "top_p", 1.0)
    min_p = _number(settings, "min_p", 0.0)
    if temperature is None or not math.isfinite(temperature) or not 0 <= temperature <= _FLOAT32_MAX:
        bad("/settings/temperature", f"temperature must be a number >= 0, got {settings.get('temperature')!r}")
    if top_k is None or not _whole(top_k, -1, MAX_VOCAB):
        bad("/settings/top_k", f"top_k must be an integer from 0 to {MAX_VOCAB} (0 or -1: off), got "
                               f"{settings.get('top_k')!r}")
        top_k = 0
    if top_p is None or not 0 < top_p <= 1:
        bad("/settings/top_p", f"top_p must be in (0, 1], got {settings.get('top_p')!r}")
    if min_p is None or not 0 <= min_p <= 1:
        bad("/settings/min_p", f"min_p must be in [0, 1], got {settings.get('min_p')!r}")
    for key, off in UNMODELLED.items():  # declared and not modelled from a top-K list: never judged as if absent
        value = settings.get(key, off)
        if value is not None and value != off and value not in ({}, [], ""):
            bad(f"/settings/{key}", f"{key} {value!r} is declared: it changes the distribution and cannot be judged "
                                    "from top-K log-probabilities; capture at the sampler instead "
                                    "(sampling_logits_f32, docs/sampling.md) or drop the setting")
    vocab = _number(record, "vocab_size", 0)
    if vocab is None or not _whole(vocab, 0, MAX_VOCAB):
        bad("/vocab_size", f"vocab_size must be a positive integer up to {MAX_VOCAB}, got "
                           f"{record.get('vocab_size')!r}")
        vocab = 0
    vocab = int(vocab)
    listed = record.get("top_logprobs")
    if isinstance(listed, dict):
        listed = [{"token": k, "logprob": v} for k, v in listed.items()]
    if not isinstance(listed, list) or not listed:
        bad("/top_logprobs", "top_logprobs must list at least one {token, logprob}; got "
                             f"{'an empty list' if listed == [] else type(listed).__name__}")
        listed = []
    tokens, logprobs = [], []
    seen: set[Any] = set()  # duplicates found in linear time (a list search was quadratic in one line's tokens)
    for i, entry in enumerate(listed):
        token = _token(entry.get("token")) if isinstance(entry, dict) else None
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if token is None:
            bad(f"/top_logprobs/{i}/token", f"a token must be a string or an id, got {entry!r}")
        elif isinstance(token, int) and (token < 0 or (vocab and token >= vocab)):
            bad(f"/top_logprobs/{i}/token", f"token id {token} is outside the vocabulary (0..{vocab - 1})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            bad(f"/top_logprobs/{i}/logprob", f"logprob must be a number, got {value!r}")
        elif value > 1e-6:
            bad(f"/top_logprobs/{i}/logprob", f"logprob {value} is positive; expected raw log-probabilities (<= 0)")
        if token is not None and token in seen:
            bad(f"/top_logprobs/{i}/token", f"token {token!r} is listed twice")
        seen.add(token)
        tokens.append(token)
        logprobs.append(value)
    draws = record.get("draws")
    if not isinstance(draws, list) or not draws:
        bad("/draws", "draws must list at least one {seed, token}")
        draws = []
    seeds, slots = [], []
    where = {t: i for i, t in enumerate(tokens)}
    for i, entry in enumerate(draws):
        token = _token(entry.get("token")) if isinstance(entry, dict) else None
        seed = entry.get("seed", -1) if isinstance(entry, dict) else None
        if token is None:
            bad(f"/draws/{i}/token", f"a drawn token must be a string or an id, got {entry!r}")
        elif isinstance(token, int) and (token < 0 or (vocab and token >= vocab)):
            bad(f"/draws/{i}/token", f"drawn token id {token} is outside the vocabulary (0..{vocab - 1})")
        if seed is None or isinstance(seed, bool) or not isinstance(seed, int) or not -_INT64 <= seed < _INT64:
            bad(f"/draws/{i}/seed", f"seed must be a 64-bit integer, got {seed!r}")
            seed = -1
        seeds.append(seed)
        slots.append(where.get(token, len(tokens)))
    if problems:
        return None, problems
    engine = record.get("engine")
    if engine is not None and (not isinstance(engine, str) or engine.strip().lower() not in definitions_by_engine()):
        bad("/engine", f"engine must be one of {', '.join(sorted(definitions_by_engine()))} (whose sampler's cut "
                       f"order judges the line), got {engine!r}")
        return None, problems
    provenance = {k: record[k] for k in ("prompt", "model", "position", "request_id") if k in record}
    if engine is not None:
        provenance["engine"] = engine.strip().lower()
    return Position(line, tuple(tokens), tuple(float(v) for v in logprobs),
                    {"temperature": float(temperature), "top_k": max(0, int(top_k)), "top_p": float(top_p),
                     "min_p": float(min_p)}, vocab, tuple(seeds), tuple(slots), provenance), []


def read_completions(path: str | os.PathLike) -> list[Position]:
    """Every line of the file, checked.

    Raises:
        ProblemsFound: every problem of every line (file:line: pointer: message).
    """
    path = Path(path)
    positions, problems = [], []
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                try:  # Python's json writes NaN and Infinity, which orjson refuses: read them to name them
                    record = json.loads(raw)
                except (ValueError, RecursionError):  # RecursionError: nested deeper than any record needs
                    problems.append(Problem(str(path), f"not JSON ({exc})", line=number, code="completions"))
                    continue
            found, bad = parse_line(record, path=str(path), line=number)
            problems += bad
            if found is not None:
                positions.append(found)
    if problems:
        raise ProblemsFound(problems, f"{path}: {len(problems)} problem(s); fix them and import again (nothing "
                                      "was written)")
    if not positions:
        raise ProblemsFound([Problem(str(path), "no completions in the file", code="completions")],
                            f"{path}: nothing to import")
    return positions


def import_completions(src: str | os.PathLike, dst: str | os.PathLike, *, dry_run: bool = False,
                       engine: str | None = None) -> CompletionsResult:
    """Write each line of a completions JSONL as a ``sampling_top_logprobs`` workload into DST (created if missing).

    A line that says ``"engine": "vllm"`` (or ``"sglang"``), or every line when ``engine`` is given, is a
    workload of ``sampling_top_logprobs_<engine>``, judged in that engine's cut order; others are judged
    under every order (positions where the orders differ are excluded).

    Raises:
        ProblemsFound: the file has bad lines (all of them listed); nothing is written.

    Example:
        >>> import_completions("server-draws.jsonl", "runs/server").added
    """
    by_engine = definitions_by_engine()
    if engine is not None and engine.strip().lower() not in by_engine:
        from ikdata.core.errors import UsageError

        raise UsageError(f"--engine {engine!r}: expected one of {', '.join(sorted(by_engine))}")
    positions = read_completions(src)
    found, _ = read_folder(shipped_folder(), origin=SHIPPED)
    items = []
    for p in positions:
        named = p.provenance.get("engine") or (engine.strip().lower() if engine else None)
        definition = found[by_engine[named] if named else DEFINITION]
        inputs = {"logprobs": np.asarray(p.logprobs, np.float32), "temperature": p.settings["temperature"],
                  "top_k": p.settings["top_k"], "top_p": p.settings["top_p"], "min_p": p.settings["min_p"],
                  "vocab_size": p.vocab_size, "seeds": np.asarray(p.seeds, np.int64)}
        provenance = {**p.provenance, **({"engine": named} if named else {}), "origin": ORIGIN,
                      "operation": "completions",
                      "variant": f"{Path(src).name}:{p.line}", "listed_tokens": [str(t) for t in p.tokens]}
        items.append(NewWorkload(definition, inputs, {"samples": np.asarray(p.slots, np.int64)}, provenance))
    draws = sum(len(p.slots) for p in positions)
    if dry_run:
        return CompletionsResult(str(src), str(dst), (), draws, True, None)
    root = Path(dst)
    if not (root / MANIFEST).exists():
        from ikdata.core.layout import init_dataset

        init_dataset(root)
    writer = DatasetWriter(root)
    results = writer.add_many(items)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]
    return CompletionsResult(str(src), str(dst), tuple(r.row.uuid for r in results), draws, False, writer.commit())


__all__ = ["CompletionsResult", "DEFINITION", "Position", "definitions_by_engine", "import_completions", "parse_line",
           "read_completions"]
