"""ikdata: content-addressed datasets of real operator workloads.

    >>> import ikdata
    >>> ds = ikdata.open("captures/minilm")
    >>> report = ikdata.validate(ds, deep=True)
    >>> ikdata.import_dataset("captures/minilm", "shared/")   # validated workloads only

Capture lives in :mod:`ikdata.capture`, replay in :mod:`ikdata.replay.runner` (both import
torch), sharing in :mod:`ikdata.remote`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING, Any as _Any

from ikdata._version import __version__

# The face is lazy (PEP 562): ``import ikdata.core.digest`` loads the core module alone, not every
# engine, and ``ikdata.open`` still works as before. Each name below comes from the module it names.
_FACE = {
    "Dataset": "ikdata.core.dataset", "open": "ikdata.core.dataset", "Definition": "ikdata.core.definitions",
    "BlobCorrupted": "ikdata.core.errors", "BlobNotFound": "ikdata.core.errors", "DefinitionError": "ikdata.core.errors",
    "FileSystemError": "ikdata.core.errors", "IkdataError": "ikdata.core.errors", "MergeConflict": "ikdata.core.errors",
    "ProblemsFound": "ikdata.core.errors", "RecordError": "ikdata.core.errors", "RemoteError": "ikdata.core.errors",
    "StoreError": "ikdata.core.errors", "UntrustedReference": "ikdata.core.errors", "UsageError": "ikdata.core.errors",
    "ImportResult": "ikdata.importing.apply", "import_dataset": "ikdata.importing.apply",
    "Problem": "ikdata.core.problems", "Receipt": "ikdata.core.records", "Scalar": "ikdata.core.records",
    "TensorRef": "ikdata.core.records", "WorkloadRow": "ikdata.core.records", "BlobStore": "ikdata.core.store",
    "ValidationReport": "ikdata.ops.validate", "validate": "ikdata.ops.validate",
}


def __getattr__(name: str) -> _Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'ikdata' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FACE))


if _TYPE_CHECKING:  # for type checkers and editors: the same names, eagerly
    from ikdata.core.dataset import Dataset, open  # noqa: F401
    from ikdata.core.definitions import Definition  # noqa: F401
    from ikdata.core.errors import (BlobCorrupted, BlobNotFound, DefinitionError, FileSystemError,  # noqa: F401
                                    IkdataError, MergeConflict, ProblemsFound, RecordError, RemoteError, StoreError,
                                    UntrustedReference, UsageError)
    from ikdata.core.problems import Problem  # noqa: F401
    from ikdata.core.records import Receipt, Scalar, TensorRef, WorkloadRow  # noqa: F401
    from ikdata.core.store import BlobStore  # noqa: F401
    from ikdata.importing.apply import ImportResult, import_dataset  # noqa: F401
    from ikdata.ops.validate import ValidationReport, validate  # noqa: F401

__all__ = [
    "BlobCorrupted", "BlobNotFound", "BlobStore", "Dataset", "Definition", "DefinitionError", "FileSystemError",
    "IkdataError", "ImportResult", "MergeConflict", "Problem", "ProblemsFound", "Receipt", "RecordError",
    "RemoteError", "Scalar", "StoreError", "TensorRef", "UntrustedReference", "UsageError",
    "ValidationReport", "WorkloadRow", "__version__", "import_dataset", "open", "validate",
]
