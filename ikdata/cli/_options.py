"""Argument and option aliases shared by every command, and opening the dataset (or remote URL) they name."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ikdata.core.dataset import Dataset

DatasetArg = Annotated[Path, typer.Argument(help="Dataset folder.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout (problems and progress "
                                                       "go to stderr).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print no result and no progress; the exit code "
                                                                "says it (problems still go to stderr).")]
DefinitionsOpt = Annotated[Optional[list[Path]], typer.Option(
    "--definitions", help="Extra folder of definitions (repeatable); definitions you name are trusted.")]
DatasetOrUrlArg = Annotated[str, typer.Argument(
    help="Dataset folder, or a remote URL (s3://, hf://, file://, memory://) read without pulling it.",
    show_default=False)]


def open_dataset(path: Path | str, definitions: list[Path] | None, *, ctx: typer.Context | None = None,
                 blobs: str = "none") -> Dataset:
    """A local dataset, or (given the command's ``ctx``) a remote one read through a temporary verified
    copy that is removed when the command ends."""
    from ikdata.remote.url import is_url

    if ctx is not None and not is_url(str(path)) and _is_folder_remote(Path(path)):
        path = Path(path).resolve().as_uri()  # a folder a push wrote: read it as the remote it is
    if ctx is not None and is_url(str(path)):
        from ikdata.remote.readonly import open_url

        return ctx.with_resource(open_url(str(path), blobs=blobs, definitions=definitions or ()))
    return Dataset.open(Path(path), definitions=definitions or ())


def _is_folder_remote(path: Path) -> bool:
    """A folder ``ikdata push`` wrote (its marker, or files stored by digest under ``files/sha256/``), not a
    dataset (:func:`ikdata.core.locking.remote_folder`, the rule every writer refuses by)."""
    from ikdata.core.locking import remote_folder

    return remote_folder(path) is not None
