"""``ikdata capture`` records ``@flashinfer_api`` calls, with FlashInfer's own templates as the definitions.

:func:`install` replaces ``flashinfer.api_logging.flashinfer_api`` (now, or right after that
module is imported: FlashInfer's modules decorate their APIs at import, through it) with a
decorator that applies FlashInfer's and wraps the result: each call of an API decorated
with ``trace=TEMPLATE`` is rendered by the template (the definition FlashInfer would write),
converted (:mod:`.convert`), and handed to :meth:`Capturer.record` with the call's inputs and
outputs. FlashInfer's ``FLASHINFER_DUMP_INCLUDE`` / ``FLASHINFER_DUMP_EXCLUDE`` patterns select
the APIs (fnmatch on the function name, as the recorder does). Every tensor argument is copied
to the host before the call (an API may write into any of them); the output of an API that
writes it into an input (``residual``) is that tensor after the call. A call not recorded is
counted in the capture census with its reason. Under CUDA-graph capture nothing is read (see
docs/flashinfer.md).
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
import os
import sys
from typing import Any

WATCHED = "flashinfer.api_logging"
_ORIGINAL = "__ikdata_original__"


def selected(func_name: str) -> bool:
    """FlashInfer's include/exclude rule (``api_logging._should_dump_function``), read from the environment."""
    include = [p.strip() for p in os.environ.get("FLASHINFER_DUMP_INCLUDE", "").split(",") if p.strip()]
    exclude = [p.strip() for p in os.environ.get("FLASHINFER_DUMP_EXCLUDE", "").split(",") if p.strip()]
    if include and not any(fnmatch.fnmatch(func_name, p) for p in include):
        return False
    return not any(fnmatch.fnmatch(func_name, p) for p in exclude)


def install(cap: Any) -> None:
    """Capture FlashInfer's decorated APIs: patch now if its recorder is loaded, else when it loads (for the
    capturer active then: :func:`ikdata.capture.running.when_imported`)."""
    from ikdata.capture.running import when_imported
    from ikdata.flashinfer import loader

    if loader.available():
        when_imported(WATCHED, cap, _patch)


def uninstall() -> None:
    """Give FlashInfer back its own decorator (tests)."""
    module = sys.modules.get(WATCHED)
    original = getattr(getattr(module, "flashinfer_api", None), _ORIGINAL, None)
    if original is not None:
        module.flashinfer_api = original


def _patch(cap: Any, api_logging: Any) -> None:
    original = api_logging.flashinfer_api
    if getattr(original, _ORIGINAL, None) is not None:
        return

    def flashinfer_api(func: Any = None, *, trace: Any = None) -> Any:
        def decorator(f: Any) -> Any:
            wrapped = original(f, trace=trace)
            return wrapped if trace is None else _recording(cap, f, wrapped, trace)

        return decorator if func is None else decorator(func)

    setattr(flashinfer_api, _ORIGINAL, original)
    api_logging.flashinfer_api = flashinfer_api


def _recording(cap: Any, f: Any, wrapped: Any, trace: Any) -> Any:
    signature = inspect.signature(f)
    fi_api = f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', f.__name__)}"

    @functools.wraps(wrapped)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not (cap.enabled and selected(f.__name__)):
            return wrapped(*args, **kwargs)
        census = _census()
        census.seen(fi_api)
        if _graph_capturing():  # nothing may be read now (docs/flashinfer.md: the CUDA-graph design)
            census.skipped(fi_api, "flashinfer: under CUDA-graph capture nothing may be read")
            return wrapped(*args, **kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            template = trace if _is_template(trace) else trace(save_dir=None, name=None, **arguments)
            before = _copies(template, arguments)
        except Exception as exc:  # noqa: BLE001  a call capture cannot read still runs, counted with why
            census.skipped(fi_api, f"flashinfer: the call's arguments cannot be read ({type(exc).__name__}: {exc})")
            return wrapped(*args, **kwargs)
        result = wrapped(*args, **kwargs)
        try:
            _record(cap, template, fi_api, arguments, before, result)
        except Exception as exc:  # noqa: BLE001  counted as the capture's failure, never the program's
            cap._fail(getattr(template, "name_prefix", None) or fi_api, exc)
        return result

    return call


def _census() -> Any:
    import ikdata.capture.census as census  # the capture census: every call seen, and why one was not recorded

    return census


def _is_template(value: Any) -> bool:
    return type(value).__name__ == "TraceTemplate"


def _graph_capturing() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001
        return False


def _copies(template: Any, arguments: dict) -> dict:
    """Every tensor argument, copied to the host before the call: an API may write into any of them (a declared
    in-place output such as ``residual``, or state its template does not declare, such as
    ``selective_state_update``'s ``state``), and the workload's inputs are what the call was given."""
    import torch

    def copied(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().to("cpu", copy=True)
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            return type(value)(copied(v) for v in value)
        return value

    return {p: copied(v) for p, v in arguments.items() if copied(v) is not v}


def _record(cap: Any, template: Any, fi_api: str, arguments: dict, before: dict, result: Any) -> None:
    from ikdata.flashinfer import loader
    from ikdata.flashinfer.convert import Refused
    from pathlib import Path

    from ikdata.flashinfer.dumps import Call
    from ikdata.flashinfer.sampling_calls import as_declared
    from ikdata.flashinfer.staging import Match, _no_trace_dump, workload

    with _no_trace_dump():
        record = template.build_fi_trace_fn(fi_api)(**arguments)
    key = next((r.key for r in loader.templates() if r.template is template), None)
    results = list(result) if isinstance(result, tuple) else [result]
    if result is None or all(r is None for r in results):  # an in-place API: its outputs are the written inputs
        results = [arguments.get(d.param or name) for name, d in template.outputs.items()]  # or named as it
    inputs_now = {**arguments, **before}
    try:
        module, _, function = fi_api.rpartition(".")
        call = as_declared(Call(Path(fi_api), function, module, inputs_now, results), template)  # sampling APIs
        definition, inputs, outputs = workload(Match(template, key or "", record), record, call.arguments,
                                               call.results, source="flashinfer")
    except Refused as exc:  # not a cap: counted in the census with FlashInfer's reason
        _census().skipped(fi_api, f"flashinfer: {exc.reason}")
        return
    cap.user.setdefault(definition.name, definition)
    variant = "_".join("x".join(map(str, v.shape)) for v in inputs.values() if hasattr(v, "shape"))
    cap.record(definition.name, inputs, outputs, operation=fi_api, variant=variant or None)


__all__ = ["WATCHED", "install", "selected", "uninstall"]
