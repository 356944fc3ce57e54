"""ikdata: content-addressed datasets of real operator workloads.

    >>> import ikdata
    >>> ds = ikdata.open("captures/minilm")
    >>> report = ikdata.validate(ds, deep=True)
"""

from __future__ import annotations

from ikdata.dataset import Dataset, open
from ikdata.definitions import Definition
from ikdata.errors import (BlobCorrupted, BlobNotFound, DefinitionError, IkdataError, MergeConflict,
                           ProblemsFound, RecordError, RemoteError, StoreError, UntrustedReference,
                           UsageError)
from ikdata.problems import Problem
from ikdata.records import Receipt, Scalar, TensorRef, WorkloadRow
from ikdata.store import BlobStore
from ikdata.validate import ValidationReport, validate

__version__ = "0.1.0"

__all__ = [
    "BlobCorrupted", "BlobNotFound", "BlobStore", "Dataset", "Definition", "DefinitionError",
    "IkdataError", "MergeConflict", "Problem", "ProblemsFound", "Receipt", "RecordError",
    "RemoteError", "Scalar", "StoreError", "TensorRef", "UntrustedReference", "UsageError",
    "ValidationReport", "WorkloadRow", "__version__", "open", "validate",
]
