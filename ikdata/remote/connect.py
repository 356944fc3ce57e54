"""Connect to a remote: the backend (folder and fsspec, S3, the Hub) that a URL names.

Kept apart from :mod:`ikdata.remote.backend` so that the interface never imports its
implementations: ``backend <- s3, hub <- connect``.
"""

from __future__ import annotations

import os

from ikdata.core.errors import RemoteError, UsageError
from ikdata.remote.backend import Backend, FsspecBackend
from ikdata.remote.url import RemoteOptions, parse_url, resolve_options


def open_backend(url: str | os.PathLike, options: RemoteOptions | None = None) -> Backend:
    """The backend for a URL, configured from ``options`` and the environment.

    Raises:
        RemoteError: the filesystem's package is missing or the remote cannot be configured.
        UsageError: a malformed URL.

    Example:
        >>> with open_backend("memory://share/gemm") as backend:
        ...     backend.read_manifest().data is None
        True
    """
    remote = parse_url(url)
    options = resolve_options(options, remote)
    if remote.protocol == "hf":
        from ikdata.remote.hub import HubBackend

        return HubBackend(remote, options)
    if remote.protocol == "s3":
        from ikdata.remote.s3 import S3Backend

        return S3Backend(remote, options)
    import fsspec

    try:
        if remote.protocol != "file":
            _needs_no_arguments(fsspec.get_filesystem_class(remote.protocol))
        fs = fsspec.filesystem(remote.protocol, skip_instance_cache=True) if remote.protocol != "file" \
            else fsspec.filesystem("file")
    except (ImportError, ValueError) as exc:
        raise RemoteError(f"no filesystem for {remote.protocol}:// ({exc}); install the fsspec package that "
                          "provides it", url=remote.url) from exc
    except TypeError as exc:  # a filesystem that needs connection arguments the URL alone does not give
        raise UsageError(f"{remote.url}: {remote.protocol}:// cannot be reached from a URL alone ({exc}); use a "
                         "folder, file://, memory://, s3://bucket/prefix or hf://datasets/org/name") from exc
    return FsspecBackend(remote, fs, remote.path)


def _needs_no_arguments(cls: type) -> None:
    """Refuse, before making one, a filesystem whose constructor requires arguments (ftp:// needs a host,
    github:// an org and repo): ikdata passes none, and a half-made instance complains when collected.

    Raises:
        TypeError: naming the arguments it requires.
    """
    import inspect

    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):  # no signature to read: let the constructor decide
        return
    required = [p.name for p in parameters if p.name != "self" and p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if required:
        raise TypeError(f"{cls.__name__} requires {', '.join(required)}")


__all__ = ["open_backend"]
