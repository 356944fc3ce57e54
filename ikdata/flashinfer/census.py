"""The closing-note figures: for every installed TraceTemplate, does it validate verbatim, convert, replay on CPU.

Per template the definition FlashInfer would write is rendered by ``fi_trace``: from the
arguments its ``init`` builds on CPU (each Var axis 2) when it has one, else from meta tensors
of its declared shapes (every axis 2; dtype the declared one, else int32 for index-like names,
else bfloat16). *verbatim*: that record passes ikdata's schema and definition checks unchanged;
*converted*: :func:`convert` accepts it and the result passes them; *replays on CPU*: the converted
``run`` returns on init's inputs. Each refusal is counted by its reason.
"""

from __future__ import annotations

import collections
import gc
import inspect
import os
import resource
import signal
from typing import Any, Callable

from ikdata.core import schema
from ikdata.core.definitions import USER, Definition, load_reference
from ikdata.flashinfer import loader
from ikdata.flashinfer.convert import Refused, convert

_INDEX_WORDS = ("indptr", "indices", "index", "ids", "lens", "len", "offsets", "mask", "table", "pos")


def census(memory_limit: int = 3 << 30, seconds: int = 8, progress: Callable[[str], None] | None = None) -> dict:
    """Count every installed template. The process's data size is capped at ``memory_limit`` bytes and each
    template gets ``seconds``: an init needing more (MoE at model sizes) counts as too large or too slow."""
    import torch

    counts: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    verbatim_not: collections.Counter = collections.Counter()

    def _slow(signum: int, frame: Any) -> None:
        raise TimeoutError

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (memory_limit, hard))
    previous = signal.signal(signal.SIGALRM, _slow)
    os.environ.pop("FLASHINFER_TRACE_DUMP_DIR", None)
    try:
        for ref in loader.templates():
            counts["templates"] += 1
            if progress is not None:
                progress(f"{counts['templates']} {ref.key}")
            gc.collect()
            signal.alarm(seconds)
            try:
                _one(ref, counts, reasons, verbatim_not, torch)
            except TimeoutError:
                reasons["init or reference too slow on this CPU"] += 1
            except MemoryError:
                reasons["init too large for the census's memory cap"] += 1
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    return {"counts": dict(counts), "not_verbatim_because": dict(verbatim_not.most_common()),
            "refused_or_not_replayed": dict(reasons.most_common())}


def _one(ref: Any, counts: Any, reasons: Any, verbatim_not: Any, torch: Any) -> None:
    t = ref.template
    if t.reference is None:
        reasons["no reference"] += 1
        return
    values = None
    if t.init is not None:
        try:
            params = inspect.signature(t.init).parameters
            var = {a: 2 for a, m in t.axes.items() if type(m).__name__ == "Var" and a in params}
            values = t.init(device="cpu", **var) if "device" in params else t.init(**var)
            if not isinstance(values, dict) or "run" in values:
                values = None
                reasons["replay: init builds a wrapper's plan/run, not one call"] += 1
        except (TimeoutError, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001  init needs CUDA or a GPU-only module
            text = str(exc)
            kind = "cannot allocate" if "allocate" in text else ("needs CUDA" if "cuda" in text.lower() else
                                                                  type(exc).__name__)
            reasons[f"replay: init fails on CPU ({kind})"] += 1
            values = None
    else:
        reasons["replay: no init (inputs unknown)"] += 1
    try:
        record = t.build_fi_trace_fn("census")(**(values if values is not None else _meta_arguments(t, torch)))
    except (TimeoutError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001
        reasons[f"not rendered ({type(exc).__name__})"] += 1
        return
    counts["rendered"] += 1
    problems = schema.check("definition", record, path="census")
    found = [] if problems else Definition.from_dict(record).findings()
    if not problems and not found:
        counts["verbatim"] += 1
    else:
        verbatim_not["schema: " + problems[0].message.split(";")[0][:60] if problems else found[0].code] += 1
    absent = [n for n, d in t.inputs.items() if getattr(d, "optional", False)
              and (values or {}).get(getattr(d, "param", None) or n) is None]
    try:
        converted = convert(record, absent=absent, template_key=ref.key)
        problems = schema.check("definition", converted.record, path="census")
        if problems:
            raise Refused(problems[0].message, "schema")
        definition = Definition.from_dict(converted.record, origin=USER)
        issues = definition.findings()
        if issues:
            raise Refused(issues[0].message, issues[0].code)
    except Refused as exc:
        reasons[f"refused: {exc.code}"] += 1
        return
    counts["converted"] += 1
    if values is None:
        return
    try:
        run = load_reference(definition)
        args = {}
        for name in definition.inputs:
            d = t.inputs[name]
            v = values.get(getattr(d, "param", None) or name)
            if getattr(d, "tuple_idx", None) is not None and isinstance(v, (list, tuple)):
                v = v[d.tuple_idx]
            args[name] = v.item() if definition.inputs[name].shape is None and isinstance(v, torch.Tensor) else v
        with torch.no_grad():
            run(**args)
        counts["replays_on_cpu"] += 1
    except (TimeoutError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001
        reasons[f"replay: reference fails on CPU ({type(exc).__name__})"] += 1


def _meta_arguments(t: Any, torch: Any) -> dict:
    """Arguments of the template's declared shapes as meta tensors (no data), for rendering only."""
    arguments: dict[str, Any] = {}
    for name, d in t.inputs.items():
        param = getattr(d, "param", None) or name
        if type(d).__name__ != "Tensor":
            continue
        dtype = getattr(d, "dtype", None)
        if dtype is None:
            dtype = "int32" if any(w in name.lower() for w in _INDEX_WORDS) else "bfloat16"
        tensor = torch.empty([2] * len(d.dim_names), dtype=getattr(torch, dtype, torch.bfloat16), device="meta")
        if d.tuple_idx is not None:
            held = list(arguments.get(param) or [])
            held += [None] * (d.tuple_idx + 1 - len(held))
            held[d.tuple_idx] = tensor
            arguments[param] = tuple(held)
        else:
            arguments[param] = tensor
    return arguments


__all__ = ["census"]
