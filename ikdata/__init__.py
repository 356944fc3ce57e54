"""ikdata: content-addressed datasets of real operator workloads.

The face (each name loads its module on first use; ``__all__`` lists them all):

    open(path) -> Dataset          a dataset folder (ikdata, the seed capture layout, FlashInfer Trace)
    validate(path or Dataset)      every record, reference and blob: a ValidationReport
    import_dataset(src, dst)       merge the validated workloads of SRC into DST, all or nothing
    Dataset, WorkloadRow, Receipt, TensorRef, Scalar, Definition, BlobStore, Problem    the records
    IkdataError and its subclasses (UsageError, NotADataset, ProblemsFound, ...)        the errors

    >>> import tempfile, ikdata
    >>> from ikdata.core.layout import init_dataset
    >>> root = tempfile.mkdtemp() + "/shared"
    >>> _ = init_dataset(root)
    >>> ikdata.validate(root).ok
    True

Capture lives in :mod:`ikdata.capture`, replay in :mod:`ikdata.replay.runner` (both import torch),
sharing in :mod:`ikdata.remote`, the command line in :mod:`ikdata.cli`.
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
    "NotADataset": "ikdata.core.dataset",
}


def __getattr__(name: str) -> _Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'ikdata' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)  # not cached here, so help(ikdata) stays short


if _TYPE_CHECKING:  # for type checkers and editors: the same names, eagerly
    from ikdata.core.dataset import Dataset, NotADataset, open  # noqa: F401
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
    "IkdataError", "ImportResult", "MergeConflict", "NotADataset", "Problem", "ProblemsFound", "Receipt", "RecordError",
    "RemoteError", "Scalar", "StoreError", "TensorRef", "UntrustedReference", "UsageError",
    "ValidationReport", "WorkloadRow", "__version__", "import_dataset", "open", "validate",
]
