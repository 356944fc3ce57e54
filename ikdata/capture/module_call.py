"""torch's own shortcut in ``nn.Module._call_impl``, which capture's module hook takes itself where it is safe.

A module with no hooks, called while nothing traces (TorchScript), runs as ``module.forward(*args, **kwargs)``:
that is all ``_call_impl`` does then. Capture's module hook runs on every module call of a captured program;
taking the same shortcut itself, instead of calling ``_call_impl`` below it, keeps a module call that capture
records nothing of at what it cost without capture (one Python frame, not two).

It does so only when this torch's ``_call_impl`` reads, before its first return, exactly the names the shortcut
tests (:func:`inlinable`): a torch whose shortcut tests anything more keeps the plain call.
"""

from __future__ import annotations

import dis
from typing import Any, Callable

SHORTCUT_NAMES = frozenset({
    "torch", "_C", "_get_tracing_state", "_slow_forward", "forward",
    "_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks",
    "_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_hooks", "_global_forward_pre_hooks",
})
"""What ``_call_impl`` reads before ``return forward_call(*args, **kwargs)`` (torch 2.x): the tracing state, the
module's four hook registries and the four global ones."""

_LOADS = ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "LOAD_NAME")


def inlinable(call_impl: Callable[..., Any]) -> bool:
    """Whether ``call_impl`` is a ``_call_impl`` whose shortcut reads exactly :data:`SHORTCUT_NAMES`."""
    try:
        instructions = list(dis.get_instructions(call_impl))
    except TypeError:  # not Python code
        return False
    names = set()
    for instruction in instructions:
        if instruction.opname.startswith("RETURN"):
            return names == SHORTCUT_NAMES
        if instruction.opname in _LOADS:
            names.add(instruction.argval)
    return False


def global_hooks(call_impl: Callable[..., Any]) -> tuple[Any, Any, Any, Any]:
    """The four global hook registries ``call_impl`` reads (dicts torch fills and empties, never replaces)."""
    found = call_impl.__globals__
    return (found["_global_backward_pre_hooks"], found["_global_backward_hooks"], found["_global_forward_hooks"],
            found["_global_forward_pre_hooks"])


__all__ = ["SHORTCUT_NAMES", "global_hooks", "inlinable"]
