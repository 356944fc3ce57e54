"""ikdata: content-addressed datasets of real operator workloads.

    >>> import ikdata
    >>> ds = ikdata.open("captures/minilm")
    >>> report = ikdata.validate(ds, deep=True)
    >>> ikdata.import_dataset("captures/minilm", "shared/")   # validated workloads only

Capture lives in :mod:`ikdata.capture`, replay in :mod:`ikdata.replay.runner` (both import
torch), sharing in :mod:`ikdata.remote`.
"""

from __future__ import annotations

from ikdata.core.dataset import Dataset, open
from ikdata.core.definitions import Definition
from ikdata.core.errors import (BlobCorrupted, BlobNotFound, DefinitionError, FileSystemError, IkdataError,
                           MergeConflict, ProblemsFound, RecordError, RemoteError, StoreError, UntrustedReference,
                           UsageError)
from ikdata.importing.apply import ImportResult, import_dataset
from ikdata.core.problems import Problem
from ikdata.core.records import Receipt, Scalar, TensorRef, WorkloadRow
from ikdata.core.store import BlobStore
from ikdata.ops.validate import ValidationReport, validate

__version__ = "0.1.0"

__all__ = [
    "BlobCorrupted", "BlobNotFound", "BlobStore", "Dataset", "Definition", "DefinitionError", "FileSystemError",
    "IkdataError", "ImportResult", "MergeConflict", "Problem", "ProblemsFound", "Receipt", "RecordError",
    "RemoteError", "Scalar", "StoreError", "TensorRef", "UntrustedReference", "UsageError",
    "ValidationReport", "WorkloadRow", "__version__", "import_dataset", "open", "validate",
]
