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
from ikdata.core import features as _features


def _declared() -> tuple:
    from ikdata._features import FEATURES

    return FEATURES


_features.provide(_declared)  # before anything reads a declaration: the feature packages, named once

# The face is lazy (PEP 562): ``import ikdata.core.digest`` loads the core module alone, not every
# engine. The three functions are defined below with their real signatures (so ``help(ikdata)`` shows
# them; tests/ux/test_ux_face.py keeps each equal to the function it calls); the classes and errors
# come, on first use, from the module each names.
_FACE = {
    "Dataset": "ikdata.core.dataset", "Definition": "ikdata.core.definitions",
    "BlobCorrupted": "ikdata.core.errors", "BlobNotFound": "ikdata.core.errors", "DefinitionError": "ikdata.core.errors",
    "FileSystemError": "ikdata.core.errors", "IkdataError": "ikdata.core.errors", "MergeConflict": "ikdata.core.errors",
    "ProblemsFound": "ikdata.core.errors", "RecordError": "ikdata.core.errors", "RemoteError": "ikdata.core.errors",
    "StoreError": "ikdata.core.errors", "UntrustedReference": "ikdata.core.errors", "UsageError": "ikdata.core.errors",
    "ImportResult": "ikdata.importing.apply",
    "Problem": "ikdata.core.problems", "Receipt": "ikdata.core.records", "Scalar": "ikdata.core.records",
    "TensorRef": "ikdata.core.records", "WorkloadRow": "ikdata.core.records", "BlobStore": "ikdata.core.store",
    "ValidationReport": "ikdata.ops.validate",
    "NotADataset": "ikdata.core.dataset",
}


def __getattr__(name: str) -> _Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'ikdata' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)  # not cached here, so help(ikdata) stays short


if _TYPE_CHECKING:  # for type checkers and editors: the same names, eagerly
    import os
    from typing import Iterable, Sequence

    from ikdata.core.dataset import Dataset, NotADataset  # noqa: F401
    from ikdata.core.definitions import Definition  # noqa: F401
    from ikdata.core.errors import (BlobCorrupted, BlobNotFound, DefinitionError, FileSystemError,  # noqa: F401
                                    IkdataError, MergeConflict, ProblemsFound, RecordError, RemoteError, StoreError,
                                    UntrustedReference, UsageError)
    from ikdata.core.problems import Problem  # noqa: F401
    from ikdata.core.records import Receipt, Scalar, TensorRef, WorkloadRow  # noqa: F401
    from ikdata.core.store import BlobStore  # noqa: F401
    from ikdata.core.progress import ProgressCallback  # noqa: F401
    from ikdata.importing.apply import ImportResult  # noqa: F401
    from ikdata.ops.validate import ValidationReport  # noqa: F401


def open(path: str | os.PathLike, *, definitions: Iterable[str | os.PathLike] = ()) -> Dataset:  # noqa: A001
    """Open a dataset folder in any layout ikdata reads (ikdata, the seed capture layout, FlashInfer Trace).

    ``definitions`` names extra folders of definitions, trusted because you named them. A Dataset is
    returned as it is. Raises UsageError (no such folder) or NotADataset. In full:
    :func:`ikdata.core.dataset.open`.

    Example:
        >>> import tempfile, ikdata
        >>> from ikdata.core.layout import init_dataset
        >>> root = tempfile.mkdtemp() + "/ds"
        >>> _ = init_dataset(root)
        >>> ikdata.open(root).layout
        'ikdata'
    """
    from ikdata.core.dataset import open as open_dataset

    return open_dataset(path, definitions=definitions)


def validate(ds: Dataset | str | os.PathLike, *, deep: bool = False, jobs: int | None = None,
             progress: ProgressCallback | None = None) -> ValidationReport:
    """Check every record, reference and blob of a dataset (a folder or a Dataset); return every problem.

    ``deep`` also rehashes every blob. The report's ``ok`` is True when nothing was found; ``problems``
    lists each with its file, line and field. In full: :func:`ikdata.ops.validate.validate`.

    Example:
        >>> import tempfile, ikdata
        >>> from ikdata.core.layout import init_dataset
        >>> root = tempfile.mkdtemp() + "/gemm"
        >>> _ = init_dataset(root)
        >>> report = ikdata.validate(root, deep=True)
        >>> report.ok, report.workloads
        (True, 0)
    """
    from ikdata.ops.validate import validate as validate_dataset

    return validate_dataset(ds, deep=deep, jobs=jobs, progress=progress)


def import_dataset(src: str | os.PathLike, dst: str | os.PathLike, *, only_passed: bool = False,
                   dry_run: bool = False, how: str = "import", source: str | None = None,
                   definitions: Sequence[str | os.PathLike] = (), keep_random: bool = False,
                   progress: ProgressCallback | None = None, trust_reports: bool = False,
                   trust: Sequence[str] = (), rejudge_all: bool = False, device: str = "cpu") -> ImportResult:
    """Merge the validated workloads of SRC into DST (created if missing), all or nothing.

    Each tensor is stored once; SRC's verdicts are re-judged (a sample, or all with ``rejudge_all``)
    unless ``trust_reports``. Raises MergeConflict or ProblemsFound and then writes nothing. In full:
    :func:`ikdata.importing.apply.import_dataset`.

    Example:
        >>> import tempfile, ikdata
        >>> from ikdata.core.layout import init_dataset
        >>> work = tempfile.mkdtemp()
        >>> _ = init_dataset(work + "/host-a")
        >>> result = ikdata.import_dataset(work + "/host-a", work + "/shared")
        >>> len(result.added), ikdata.open(work + "/shared").layout
        (0, 'ikdata')
    """
    from ikdata.importing.apply import import_dataset as run_import

    return run_import(src, dst, only_passed=only_passed, dry_run=dry_run, how=how, source=source,
                      definitions=definitions, keep_random=keep_random, progress=progress,
                      trust_reports=trust_reports, trust=trust, rejudge_all=rejudge_all, device=device)


__all__ = [
    "BlobCorrupted", "BlobNotFound", "BlobStore", "Dataset", "Definition", "DefinitionError", "FileSystemError",
    "IkdataError", "ImportResult", "MergeConflict", "NotADataset", "Problem", "ProblemsFound", "Receipt", "RecordError",
    "RemoteError", "Scalar", "StoreError", "TensorRef", "UntrustedReference", "UsageError",
    "ValidationReport", "WorkloadRow", "__version__", "import_dataset", "open", "validate",
]
