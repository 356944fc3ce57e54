"""The families whose records a dataset holds, and their data hooks: how a data path reaches feature records.

A family's data hooks (validate, references, carried, lineage, diff, stats, describe: :class:`Family`) read
the records of the kinds its feature declares. A path that must stay cheap (show, lineage, gc) calls a
family's hook only when the dataset holds one of those kinds at its declared place, so a dataset without
trajectories never loads a diffusion module; the others ask every family and let its hook return at once.
A family is picked up by declaring it: nothing here names one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from ikdata.core import features
from ikdata.core.features import Family


def held(root: str | os.PathLike) -> tuple[Family, ...]:
    """The declared families whose feature's record kinds are present in the dataset at ``root``."""
    root = Path(root)
    return tuple(f.family for f in features.features()
                 if f.family is not None and any(os.path.lexists(root / kind.top) for kind in f.kinds))


def hooks(name: str, root: str | os.PathLike | None = None) -> list[Callable[..., Any]]:
    """The hook ``name`` of every declared family that has one, in declaration order; with ``root``, only of
    the families whose records that dataset holds (:func:`held`)."""
    families = held(root) if root is not None else features.families()
    return [hook for hook in (family.hook(name) for family in families) if hook is not None]


__all__ = ["held", "hooks"]
