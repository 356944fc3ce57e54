"""The judge registry: which metric judges exist, where their code comes from, and when it may run.

A definition may name a metric judge (``"judge": {"name": ...}``) instead of the
elementwise tolerance. Judges come from three places, all of them code the user
chose to run, never code a dataset brings (a definition only names a judge):

- **shipped** with ikdata (``gdn_chunk_state``, ``relative_error``);
- **entry points** of the group ``ikdata.judges`` in installed distributions: their
  names are listed from package metadata without importing anything, and the module
  is imported only when a definition that names the judge is judged;
- **modules the user names**: ``IKDATA_JUDGES`` (module names or ``.py`` paths,
  separated by ``,`` or the OS path separator) or :func:`register_module`.

A plugin module exposes ``IKDATA_JUDGES``: a list of :class:`Judge`. An entry point
names one :class:`Judge` (``name = "pkg.module:MY_JUDGE"``). torch-free: a judge's
``metrics`` receives torch tensors, but this module never imports torch.

Example (a module ``my_judges.py`` named with ``IKDATA_JUDGES=my_judges.py``):
    >>> from ikdata.core.judge_registry import Judge
    >>> def worst_row(actual, expected):
    ...     return {"worst_row_rms": float(((actual - expected).norm(dim=-1) / expected.norm(dim=-1)).max())}
    >>> IKDATA_JUDGES = [Judge("worst_row", worst_row, {"worst_row_rms": 0.01}, "rows are independent")]
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ikdata.core.errors import UsageError
from ikdata.core.tolerances import JUDGE_BOUNDS, JUDGE_REASONS

ENTRY_POINT_GROUP = "ikdata.judges"
ENV = "IKDATA_JUDGES"
SHIPPED = "shipped"


@dataclass(frozen=True)
class Judge:
    """A metric judge: a name, the metrics it computes and the bounds they must stay within.

    Attributes:
        name: what a definition's ``"judge": {"name": ...}`` refers to.
        metrics: ``metrics(actual, expected) -> {metric: float}``; both float64 tensors of one
            shape on one device (shape and dtype were checked before). None for shipped judges,
            whose code lives in :mod:`ikdata.replay.judges`.
        bounds: default upper bound of each metric (a definition may override them).
        reason: why this judge exists, recorded in reports.
        origin: ``"shipped"``, ``"entry point <value>"`` or ``"module <name or path>"``.
    """

    name: str
    metrics: Callable[[Any, Any], Mapping[str, float]] | None
    bounds: Mapping[str, float] = field(default_factory=dict)
    reason: str = ""
    origin: str = ""


_registered: dict[str, Judge] = {}   # from modules named through register_module
_named_modules: set[str] = set()


def _shipped() -> dict[str, Judge]:
    return {n: Judge(n, None, dict(b), JUDGE_REASONS.get(n, ""), SHIPPED) for n, b in JUDGE_BOUNDS.items()}


def entry_point_names() -> dict[str, str]:
    """Judge name -> ``module:attr`` of every ``ikdata.judges`` entry point (metadata only, nothing imported)."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_module(spec: str) -> Any:
    """Import a module named by dotted name or by a ``.py`` path."""
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise UsageError(f"{ENV}: judge module {spec!r} is not a file; name a .py file or an importable module")
        name = "ikdata_judges_" + re.sub(r"\W", "_", str(path.resolve()))
        if name in sys.modules:
            return sys.modules[name]
        loader_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise UsageError(f"{path}: judge module failed to load: {type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(spec)
    except Exception as exc:
        raise UsageError(f"{ENV}: cannot import judge module {spec!r}: {type(exc).__name__}: {exc}") from exc


def _judges_of(module: Any, spec: str) -> list[Judge]:
    found = getattr(module, "IKDATA_JUDGES", None)
    if isinstance(found, Judge):
        found = [found]
    if not isinstance(found, (list, tuple)) or not all(isinstance(j, Judge) for j in found):
        raise UsageError(f"judge module {spec!r} must define IKDATA_JUDGES, a list of "
                         "ikdata.core.judge_registry.Judge")
    return [Judge(j.name, j.metrics, dict(j.bounds), j.reason, f"module {spec}") for j in found]


def register_module(spec: str) -> list[str]:
    """Trust the judges of a module the user names (dotted name or ``.py`` path); return their names.

    Raises:
        UsageError: the module cannot be imported, defines no ``IKDATA_JUDGES``, or reuses a shipped name.
    """
    judges = _judges_of(_load_module(spec), spec)
    shipped = _shipped()
    for judge in judges:
        if judge.name in shipped:
            raise UsageError(f"judge module {spec!r} redefines the shipped judge {judge.name!r}; choose another name")
        _registered[judge.name] = judge
    _named_modules.add(spec)
    return [j.name for j in judges]


def _env_modules() -> list[str]:
    raw = os.environ.get(ENV, "")
    return [part.strip() for part in re.split(rf"[,{re.escape(os.pathsep)}]", raw) if part.strip()]


def _sync_env() -> None:
    for spec in _env_modules():
        if spec not in _named_modules:
            register_module(spec)


def known_names() -> list[str]:
    """Every judge name a definition may use: shipped, entry points, and named modules (sorted)."""
    _sync_env()
    return sorted({*_shipped(), *statistical(), *entry_point_names(), *_registered})


def statistical() -> tuple[str, ...]:
    """The judges of groups of workloads the families declare (sampling's), not of one output."""
    from ikdata.core import features

    return tuple(name for family in features.families() for name in family.judges)


def get(name: str) -> Judge | None:
    """The judge called ``name``, its code loaded when it comes from an entry point; None if unknown.

    Raises:
        UsageError: an entry point that cannot be loaded or does not name a Judge.
    """
    shipped = _shipped()
    if name in shipped:
        return shipped[name]
    _sync_env()
    if name in _registered:
        return _registered[name]
    value = entry_point_names().get(name)
    if value is None:
        return None
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == name][:1] or [None]
    try:
        loaded = ep.load()
    except Exception as exc:
        raise UsageError(f"judge {name!r}: entry point {value!r} failed to load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(loaded, Judge):
        raise UsageError(f"judge {name!r}: entry point {value!r} is a {type(loaded).__name__}, expected "
                         "an ikdata.core.judge_registry.Judge")
    judge = Judge(name, loaded.metrics, dict(loaded.bounds), loaded.reason, f"entry point {value}")
    _registered[name] = judge
    return judge


def forget_registered() -> None:
    """Drop the judges of named modules (for tests; the environment is read again on next use)."""
    _registered.clear()
    _named_modules.clear()


__all__ = ["ENTRY_POINT_GROUP", "ENV", "Judge", "entry_point_names", "forget_registered", "get",
           "known_names", "register_module", "statistical"]
