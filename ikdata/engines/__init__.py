"""Serving engines as capture sources (declared in :mod:`ikdata.engines.feature`): vLLM's hooks in
:mod:`ikdata.engines.vllm`, the per-row sampler records both vLLM and SGLang write in
:mod:`ikdata.engines.sampler_rows`.

Capture installs each engine's hooks in every captured process (:mod:`ikdata.capture.adapters`); they wait
for the engine's own modules to be imported, so an engine that never loads costs nothing.
"""

from __future__ import annotations

from ikdata.core.features import loaded_engine, source


def detect() -> tuple[str, str | None] | None:
    """(name, version) of the engine loaded in this process, or None when none is."""
    found = loaded_engine()
    return (found.name, found.version()) if found is not None else None


def order_of(engine: str | None) -> str | None:
    """The sampler cut order of a source name (``vllm`` -> ``vllm``), or None for an unknown one."""
    found = source(engine)
    return found.order if found is not None and found.engine else None


__all__ = ["detect", "order_of"]
