"""Sharing datasets: push, pull and clone through fsspec (folders, file://, memory://, s3://, hf://).

Modules: :mod:`~ikdata.remote.url` (parse URLs; options from flags and the
environment), :mod:`~ikdata.remote.backend` (the remote layout and interface;
fsspec remotes), :mod:`~ikdata.remote.s3`, :mod:`~ikdata.remote.hub`,
:mod:`~ikdata.remote.transfer` (parallel transfers, progress),
:mod:`~ikdata.remote.push`, :mod:`~ikdata.remote.pull` (verified downloads,
clone, merge), :mod:`~ikdata.remote.readonly` (read a remote without pulling it).
The functions live in their modules (``ikdata.remote.push`` is the module, so it
is not shadowed by a function of the same name here).

Example:
    >>> from ikdata.remote.push import push
    >>> from ikdata.remote.pull import clone, pull
    >>> push("runs/gemm", "s3://team-bucket/gemm").dataset_id
    >>> clone("s3://team-bucket/gemm", "gemm-copy").dataset_id
"""

_LAZY = {"PullResult": "pull", "PushResult": "push", "open_url": "readonly", "Progress": "transfer",
         "RemoteOptions": "url", "is_url": "url", "parse_url": "url"}


def __getattr__(name: str):
    """The names below, loaded on first use: ``ikdata.remote.url`` alone must not load push and pull
    (every command parses a URL; issue 26, start-up)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'ikdata.remote' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"ikdata.remote.{_LAZY[name]}"), name)

__all__ = ["open_url", "PushResult", "PullResult", "Progress", "RemoteOptions", "is_url", "parse_url"]
