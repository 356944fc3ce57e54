"""The closing-note figures: for every installed TraceTemplate, does it validate verbatim, convert, replay on CPU.

Per template: ``init`` (device="cpu", each Var axis 2) gives the API's arguments, ``fi_trace``
renders the definition FlashInfer would write for them; *verbatim* is that record passing
ikdata's schema and definition checks unchanged; *converted* is :func:`convert` accepting it;
*replays on CPU* is the converted ``run`` returning on those inputs. Refusals are counted by reason.
"""

from __future__ import annotations

import collections
import inspect
from typing import Any

from ikdata.core import schema
from ikdata.core.definitions import USER, Definition
from ikdata.flashinfer import loader
from ikdata.flashinfer.convert import Refused, convert


def census(memory_limit: int = 3 << 30, seconds: int = 8, progress: Any = None) -> dict[str, Any]:
    """Count every installed template; the process's data size is capped at ``memory_limit`` bytes, so a
    template whose init needs more (MoE with hundreds of experts at model sizes) counts as too large, and one
    whose init and reference take over ``seconds`` on this CPU counts as too slow."""
    import signal

    import gc
    import resource

    import torch

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (memory_limit, hard))

    counts: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    def _slow(signum: int, frame: Any) -> None:
        raise TimeoutError

    signal.signal(signal.SIGALRM, _slow)
    for ref in loader.templates():
        signal.alarm(0)
        counts["templates"] += 1
        t = ref.template
        if progress is not None:
            progress(f"{counts['templates']} {ref.key}")
        signal.alarm(seconds)
        try:
            if t.init is None or t.reference is None:
                raise Refused("no init or no reference", "no-init" if t.init is None else "no-reference")
            params = inspect.signature(t.init).parameters
            gc.collect()
            var = {a: 2 for a, m in t.axes.items() if type(m).__name__ == "Var" and a in params}
            values = t.init(device="cpu", **var) if "device" in params else t.init(**var)
            if not isinstance(values, dict) or "run" in values:
                raise Refused("init builds a wrapper's plan/run, not one call", "wrapper")
            import os
            os.environ.pop("FLASHINFER_TRACE_DUMP_DIR", None)
            record = t.build_fi_trace_fn("census")(**values)
        except Refused as exc:
            reasons[exc.code] += 1
            continue
        except MemoryError:
            reasons["init too large for the census's memory cap"] += 1
            continue
        except TimeoutError:
            reasons["init too slow on this CPU"] += 1
            continue
        except Exception as exc:  # noqa: BLE001  init needs CUDA or a GPU-only module
            text = str(exc)
            kind = "memory" if "allocate" in text else ("CUDA" if "cuda" in text.lower() or "CUDA" in text else
                                                        type(exc).__name__)
            reasons[f"init fails on CPU ({kind})"] += 1
            continue
        counts["rendered"] += 1
        if not schema.check("definition", record, path="census") and not Definition.from_dict(record).check():
            counts["verbatim"] += 1
        absent = [n for n, d in t.inputs.items() if getattr(d, "optional", False)
                  and values.get(getattr(d, "param", None) or n) is None]
        try:
            converted = convert(record, absent=absent, template_key=ref.key)
            if schema.check("definition", converted.record, path="census"):
                raise Refused("schema", "schema")
            definition = Definition.from_dict(converted.record, origin=USER)
            issues = definition.check()
            if issues:
                raise Refused(issues[0], "definition-check")
        except Refused as exc:
            reasons[exc.code] += 1
            continue
        counts["converted"] += 1
        try:
            from ikdata.core.definitions import load_reference

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
        except TimeoutError:
            reasons["reference too slow on this CPU"] += 1
        except Exception as exc:  # noqa: BLE001
            reasons[f"reference fails on CPU ({type(exc).__name__})"] += 1
    signal.alarm(0)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    return {"counts": dict(counts), "refused_or_not_replayed": dict(reasons.most_common())}
