"""Argument and option aliases shared by every command, and opening the dataset (or remote URL) they name.

Paths arrive as text and are checked before they become a :class:`~pathlib.Path` (which would turn
``s3://b/x`` into ``s3:/b/x``): a URL where a local folder is needed, a scheme typo (``s3:/b``) or an
unknown scheme is a usage error that says what to do (:func:`ikdata.remote.url.check_location`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    from ikdata.core.dataset import Dataset


def _check(value: str) -> str:
    from ikdata.remote.url import check_location

    return check_location(value)


def local_folder(value: Optional[str], what: str = "this command") -> Optional[Path]:
    """``value`` as a local folder; a URL is refused with the advice to clone it first."""
    if value is None:
        return None
    from ikdata.core.errors import UsageError
    from ikdata.remote.url import is_url

    text = _check(value)
    if is_url(text):
        raise UsageError(f"{text}: {what} works on a local dataset folder, not a URL; clone it first: "
                         f"ikdata clone {text} DIR")
    return Path(text)


def _local_callback(ctx: typer.Context, value: Optional[str]) -> Optional[Path]:
    return local_folder(value, f"ikdata {ctx.info_name}" if ctx is not None and ctx.info_name else "this command")


def _location_callback(value: Optional[str]) -> Optional[str]:
    return None if value is None else _check(value)


DatasetArg = Annotated[str, typer.Argument(help="Dataset folder.", show_default=False, metavar="DIR",
                                           callback=_local_callback)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout (problems and progress "
                                                       "go to stderr).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print no result and no progress; the exit code "
                                                                "says it (problems still go to stderr); with --json, "
                                                                "the JSON document is printed (--json wins over "
                                                                "--quiet).")]
DefinitionsOpt = Annotated[Optional[list[Path]], typer.Option(
    "--definitions", metavar="DIR", help="Extra folder of definitions (repeatable); definitions you name are "
    "trusted.")]
DatasetOrUrlArg = Annotated[str, typer.Argument(
    help="Dataset folder, or a remote URL (s3://, hf://, file://, memory://) read without pulling it.",
    show_default=False, metavar="DIR|URL", callback=_location_callback)]
EndpointOpt = Annotated[Optional[str], typer.Option(
    "--endpoint-url", metavar="URL",
    help="S3 endpoint (default: AWS_ENDPOINT_URL) or Hub endpoint (default: HF_ENDPOINT).")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", metavar="NAME",
                                                   help="AWS profile (default: AWS_PROFILE).")]


def remote_options(endpoint_url: str | None = None, profile: str | None = None, revision: str | None = None):
    """The :class:`~ikdata.remote.url.RemoteOptions` of the command's flags (None: from the environment)."""
    from ikdata.remote.url import RemoteOptions

    return RemoteOptions(endpoint_url=endpoint_url, profile=profile, revision=revision)


def open_dataset(path: Path | str, definitions: list[Path] | None, *, ctx: typer.Context | None = None,
                 blobs: str = "none", endpoint_url: str | None = None, profile: str | None = None) -> Dataset:
    """A local dataset, or (given the command's ``ctx``) a remote one read through a temporary verified
    copy that is removed when the command ends. A folder that holds no dataset is refused
    (:class:`~ikdata.core.dataset.NotADataset`, exit 1), and so is a URL given without ``ctx``."""
    from ikdata.core.dataset import Dataset
    from ikdata.remote.url import is_url

    text = _check(str(path))
    if ctx is not None and not is_url(text) and _is_folder_remote(Path(text)):
        text = Path(text).resolve().as_uri()  # a folder a push wrote: read it as the remote it is
    if is_url(text):
        if ctx is None:
            local_folder(text)  # raises: this command reads local folders only
        from ikdata.remote.readonly import open_url

        options = remote_options(endpoint_url, profile)
        return ctx.with_resource(open_url(text, options=options, blobs=blobs, definitions=definitions or ()))
    if _is_folder_remote(Path(text)):
        from ikdata.core.locking import refuse_remote

        refuse_remote(text)  # says: a remote, clone it first
    return Dataset.open(Path(text), definitions=definitions or ())


def _is_folder_remote(path: Path) -> bool:
    """A folder ``ikdata push`` wrote (its marker, or files stored by digest under ``files/sha256/``), not a
    dataset (:func:`ikdata.core.locking.remote_folder`, the rule every writer refuses by)."""
    from ikdata.core.locking import remote_folder

    return remote_folder(path) is not None
