"""Make a template's reference standalone: the helpers it calls from its installed module, inlined after it.

FlashInfer renders a reference as the source of one function (``inspect.getsource``); some call
helpers of their module (``_rmsnorm_fp4quant_reference``, rope's ``_apply_rotary``, an fp4 table).
A definition must hold everything it runs (its digest covers its code), so each name the source
leaves unbound is looked up in the module that defines the reference: a function's source is
appended (and its own unbound names followed), a number, string or tuple of them becomes an
assignment, ``torch``/``math``/``numpy`` modules become imports. Anything else stays unbound, and
:func:`ikdata.flashinfer.convert.convert` refuses the definition naming it. The installed module is
read, never a dataset's: trust after import re-renders and inlines the same way (:mod:`.trust`).
"""

from __future__ import annotations

import inspect
import sys
import textwrap
import types
from typing import Any, Callable, Mapping

from ikdata.core.references import parse_reference, unbound_names

IMPORTABLE = ("torch", "math", "numpy", "functools", "itertools", "typing", "dataclasses", "enum")
_MAX_ROUNDS = 8
_MAX_CHARS = 200_000


def standalone(source: str, reference: Callable | None) -> str:
    """``source`` with the helpers it leaves unbound inlined from ``reference``'s module (unchanged when none)."""
    module = sys.modules.get(getattr(reference, "__module__", "") or "")
    if module is None:
        return source
    added: list[str] = []
    done: set[str] = set()
    for _ in range(_MAX_ROUNDS):
        tree, _reason = parse_reference(source + "".join(added))
        if tree is None:
            return source
        missing = [n for n in unbound_names(tree) if n not in done]
        if not missing:
            break
        for name in missing:
            done.add(name)
            text = _definition(name, vars(module).get(name, _MISSING), module.__name__)
            if text is not None:
                added.append("\n\n" + text)
    completed = source.rstrip("\n") + "\n" + "".join(added) + ("\n" if added else "")
    return completed if added and len(completed) <= _MAX_CHARS else source


_MISSING = object()


def input_params(template: Any) -> dict[str, str]:
    """The template's input mapping: input name -> the API's parameter name, where they differ; an input that is
    item i of a tuple parameter maps to ``<param>[i]`` (``k_cache`` -> ``paged_kv_cache[0]``)."""
    found = {}
    for n, d in template.inputs.items():
        param, index = getattr(d, "param", None), getattr(d, "tuple_idx", None)
        if param and index is not None:
            found[n] = f"{param}[{int(index)}]"
        elif param and param != n:
            found[n] = param
    return found


def reference_name(template: Any) -> str | None:
    """The name of the template's reference function (its entry), when it has one."""
    return getattr(getattr(template, "reference", None), "__name__", None)


def inlined(fi_record: Mapping[str, Any], template: Any) -> Mapping[str, Any]:
    """The record with the helpers its reference calls from the installed template module inlined."""
    reference = fi_record.get("reference")
    if not isinstance(reference, str):
        return fi_record
    completed = standalone(reference, getattr(template, "reference", None))
    return fi_record if completed == reference else {**fi_record, "reference": completed}


def _definition(name: str, value: Any, module: str) -> str | None:
    if value is _MISSING:  # a typing name in an annotation of a helper from another module (mono_moe's Tuple)
        import typing

        return f"from typing import {name}" if name in getattr(typing, "__all__", ()) else None
    if isinstance(value, types.ModuleType):
        root = value.__name__.split(".")[0]
        if root in IMPORTABLE:
            return f"import {value.__name__} as {name}" if value.__name__ != name else f"import {name}"
        return None
    if inspect.isfunction(value) and getattr(value, "__module__", "").split(".")[0] == module.split(".")[0]:
        try:
            text = textwrap.dedent(inspect.getsource(value))
        except (OSError, TypeError):
            return None
        if value.__name__ != name:
            text += f"\n{name} = {value.__name__}\n"
        return text
    if getattr(value, "__module__", None) == "typing" and name.isidentifier():  # Optional, Tuple in annotations
        return f"from typing import {name}" if getattr(value, "_name", name) == name else None
    if _literal(value):
        return f"{name} = {value!r}"
    return None


def _literal(value: Any, depth: int = 0) -> bool:
    if isinstance(value, (bool, int, float, str)) and len(repr(value)) < 10_000:
        return True
    if isinstance(value, (tuple, list, frozenset)) and depth < 3 and len(value) <= 4096:
        return all(_literal(v, depth + 1) for v in value)
    if isinstance(value, dict) and depth < 3 and len(value) <= 4096:
        return all(_literal(k, depth + 1) and _literal(v, depth + 1) for k, v in value.items())
    return False


__all__ = ["IMPORTABLE", "inlined", "input_params", "reference_name", "standalone"]
