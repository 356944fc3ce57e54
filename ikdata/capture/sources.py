"""Which engine a captured call ran in, read from the declared capture sources (:mod:`ikdata.core.features`).

A receipt's engine is, in this order: the serving engine loaded in the process (a source declared with
``engine=True``); else the source whose models the call's top-level module is one of (a source's
``models``); else plain torch. Capture names none of them: a source added by declaration is detected.

Plain torch is declared here, as :data:`TORCH`, rather than by a feature: it is capture's own substrate
(every hook patches it), not a feature a package brings, and it must not be among the sources whose hooks
capture installs or whose module means a serving engine runs. It is the fallback, and nothing else.
"""

from __future__ import annotations

import functools

from ikdata.core import features
from ikdata.core.features import Source

TORCH = Source("torch", "torch")
"""The engine of a call when no declared source claims it."""


def loaded() -> Source:
    """The serving engine loaded in this process, else :data:`TORCH`."""
    return features.loaded_engine() or TORCH


def of_model(model_class: type) -> Source | None:
    """The declared source whose models ``model_class`` is one of (by the module defining it), or None."""
    module = getattr(model_class, "__module__", None) or ""
    return next((s for s in features.sources()
                 if any(module == m or module.startswith(m + ".") for m in s.models)), None)


@functools.cache
def declared_by(hooks: str) -> Source:
    """The declared source whose ``hooks`` module is ``hooks``: a hook module's own declaration, read at run time
    (its declaration names it, so importing the declaration from it would be a cycle).

    Raises:
        LookupError: no declared source installs that module (a bug in the declarations).
    """
    found = next((s for s in features.sources() if s.hooks == hooks), None)
    if found is None:
        raise LookupError(f"no declared capture source has the hooks {hooks!r}")
    return found


@functools.lru_cache(maxsize=64)
def version_of(engine: str | None) -> str | None:
    """The version of an engine a user named (``--engine SGLang``): a declared source's own, else that of the
    package the name stands for (``typer``: its module's ``__version__``, else its distribution's), else None.
    Never torch's for another name."""
    if not isinstance(engine, str) or not engine.strip():
        return None
    declared = features.source(engine)
    if declared is not None:
        return declared.version()
    name = engine.strip()
    return Source(name.lower(), name.lower().replace("-", "_")).version()


__all__ = ["TORCH", "declared_by", "loaded", "of_model", "version_of"]
