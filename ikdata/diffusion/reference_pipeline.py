"""The reference pipeline of the decode check: code the user names (``--pipeline``), so it runs only when named."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from ikdata.core.errors import UsageError


def load_pipeline(spec: str) -> Any:
    """Call ``FILE.py:FUNC`` or ``module:FUNC`` (no arguments) and return the pipeline it builds.

    Raises:
        UsageError: a malformed spec, a missing file, module or function.
    """
    target, _, func = spec.rpartition(":")
    if not target or not func:
        raise UsageError(f"--pipeline {spec!r}: expected FILE.py:FUNCTION or module:FUNCTION")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UsageError(f"--pipeline {spec!r}: no such file {path}")
        module_spec = importlib.util.spec_from_file_location(f"ikdata_pipeline_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise UsageError(f"--pipeline {spec!r}: cannot import {target} ({exc})") from None
    builder = getattr(module, func, None)
    if not callable(builder):
        raise UsageError(f"--pipeline {spec!r}: {target} has no function {func}")
    return builder()


__all__ = ["load_pipeline"]
