"""The capture running in this process, as features and adapters reach it: capture's public interface.

A feature's capture hooks (HF's sampler, FlashInfer, vLLM, Diffusers) are handed the Capturer by
:func:`ikdata.capture.boot.install`; what they need later goes through here, never through the boot:
the Capturer active now (:func:`current`), writing what is queued (:func:`flush`), and patching a
library's module for the capturer active when the program imports it (:func:`when_imported`). The
boot itself is reached only by the interpreter (the ``.pth`` line) and by capture.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

Patch = Callable[[Any, Any], None]  # patch(capturer, module)

_ACTIVE: Any = None
_WAITING: dict[tuple[str, Patch], Callable[[], None]] = {}  # one callback per (module, patch): watched once


def current() -> Any:
    """The Capturer of this process (also while it installs its hooks), or None when capture is off."""
    return _ACTIVE


def flush() -> None:
    """Write everything captured so far in this process (no-op when capture is off)."""
    if _ACTIVE is not None:
        _ACTIVE.flush()


def when_imported(name: str, capturer: Any, patch: Patch) -> None:
    """Call ``patch(capturer, module)`` for the module ``name``: now if it is imported, else right after
    the program imports it, for the capturer active then (none: nothing; a capturer uninstalled before the
    import is never the one patched in). Watching the same module with the same patch twice watches once."""
    module = sys.modules.get(name)
    if module is not None:
        patch(capturer, module)
        return
    key = (name, patch)
    callback = _WAITING.get(key)
    if callback is None:
        callback = _WAITING[key] = functools.partial(_patch_active, name, patch)
    import ikdata_boot

    ikdata_boot.watch(callback, name)  # the one import watcher (standard library only)


def _patch_active(name: str, patch: Patch) -> None:
    capturer, module = _ACTIVE, sys.modules.get(name)
    if capturer is not None and module is not None:
        patch(capturer, module)


def activate(capturer: Any) -> None:
    """Make ``capturer`` (or None: capture off) the one :func:`current` returns. Called by the boot only."""
    global _ACTIVE
    _ACTIVE = capturer


__all__ = ["current", "flush", "when_imported"]
