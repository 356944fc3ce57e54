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

from ikdata.remote.pull import PullResult
from ikdata.remote.push import PushResult
from ikdata.remote.readonly import open_url
from ikdata.remote.transfer import Progress
from ikdata.remote.url import RemoteOptions, is_url, parse_url

__all__ = ["open_url", "PushResult", "PullResult", "Progress", "RemoteOptions", "is_url", "parse_url"]
