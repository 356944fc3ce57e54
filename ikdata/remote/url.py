"""Remote URLs and their options: which backend a URL names, and how to reach it.

A URL is any fsspec URL ikdata can publish to: a local path, ``file://``,
``memory://``, ``s3://bucket/prefix`` (s3fs) or ``hf://datasets/org/name[@revision]``
(huggingface_hub). Options come from flags first, then the standard environment
variables (AWS_*, AWS_ENDPOINT_URL, AWS_PROFILE, HF_TOKEN, HF_ENDPOINT).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ikdata.core.errors import UsageError

_SCHEME_RE = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")
_HF_RE = re.compile(r"^(datasets|models)/([^/@]+/[^/@]+)(?:@([^/]+))?(?:/(.*))?$")


# A scheme without its two slashes ("s3:/bucket", "hf:datasets/x"): a typo, never a folder name.
_TYPO_RE = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):/?(?!/)(.*)$")
BUILT_IN = ("file", "local", "memory", "s3", "s3a", "hf")
_KNOWN = "a folder, file://, memory://, s3://BUCKET/PREFIX or hf://datasets/ORG/NAME"


def is_url(text: str | os.PathLike) -> bool:
    """Whether ``text`` names a remote (``scheme://...``) rather than a local folder.

    Example:
        >>> is_url("s3://bucket/team/gemm"), is_url("runs/gemm")
        (True, False)
    """
    return bool(_SCHEME_RE.match(str(text)))


def check_location(text: str | os.PathLike) -> str:
    """``text`` unchanged when it is a local path or a URL of a scheme ikdata can reach.

    Raises:
        UsageError: a scheme written without its ``//`` (``s3:/bucket``: a typo, which would otherwise
            become a local folder named ``s3:``), or a scheme neither ikdata nor fsspec knows.

    Example:
        >>> check_location("s3:/nobucket/y")
        Traceback (most recent call last):
        ikdata.core.errors.UsageError: s3:/nobucket/y: did you mean s3://nobucket/y? ...
    """
    text = os.fspath(text)
    typo = None if _SCHEME_RE.match(text) else _TYPO_RE.match(text)
    if typo and (typo.group(1).lower() in BUILT_IN or _fsspec_knows(typo.group(1).lower())):
        fixed = f"{typo.group(1)}://{typo.group(2)}"
        raise UsageError(f"{text}: did you mean {fixed}? A URL's scheme is followed by '://'; write ./{text} "
                         "for a local folder of that name")
    match = _SCHEME_RE.match(text)
    if match:
        protocol = match.group(1).lower()
        if protocol not in BUILT_IN and not _fsspec_knows(protocol):
            raise UsageError(f"{text}: unknown URL scheme {protocol}://; expected {_KNOWN} (or another "
                             "scheme fsspec knows)")
    return text


def _fsspec_knows(protocol: str) -> bool:
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:  # pragma: no cover - fsspec is a dependency
        return False
    return protocol in known_implementations or protocol in registry


@dataclass(frozen=True)
class RemoteOptions:
    """How to reach a remote; ``None`` means "from the environment, then the library default".

    Attributes:
        endpoint_url: S3 endpoint (``--endpoint-url``, AWS_ENDPOINT_URL) or Hub endpoint (HF_ENDPOINT).
        profile: AWS profile (``--profile``, AWS_PROFILE).
        revision: Hub branch or commit (``--revision``, or ``@rev`` in the URL).
        token: Hub token (HF_TOKEN).
    """

    endpoint_url: str | None = None
    profile: str | None = None
    revision: str | None = None
    token: str | None = None


@dataclass(frozen=True)
class RemoteURL:
    """A parsed remote URL.

    Attributes:
        url: the URL as the user gave it (used in every message).
        protocol: ``file``, ``memory``, ``s3``, ``hf``, or another fsspec protocol.
        path: the dataset root for fsspec (``bucket/prefix`` for S3, an absolute path for files);
            for ``hf``, the path inside the repo ("" for the repo root).
        repo_id: ``org/name`` (hf only).
        repo_type: ``dataset`` or ``model`` (hf only).
        revision: the ``@rev`` of an hf URL, if any.
    """

    url: str
    protocol: str
    path: str
    repo_id: str | None = None
    repo_type: str | None = None
    revision: str | None = None


def parse_url(url: str | os.PathLike) -> RemoteURL:
    """Parse a remote URL or a local path.

    Raises:
        UsageError: an ``hf://`` URL that does not name ``datasets/org/name``, or an empty path.

    Example:
        >>> parse_url("hf://datasets/acme/gemm@main").repo_id
        'acme/gemm'
    """
    text = check_location(url)
    match = _SCHEME_RE.match(text)
    if not match:
        if not text:
            raise UsageError("empty remote URL; expected a folder, s3://bucket/prefix or hf://datasets/org/name")
        return RemoteURL(text, "file", os.path.abspath(text))
    protocol, rest = match.group(1).lower(), match.group(2)
    if protocol in ("file", "local"):
        return RemoteURL(text, "file", os.path.abspath(rest))
    if protocol == "memory":
        return RemoteURL(text, "memory", "/" + rest.strip("/"))
    if protocol == "hf":
        hf = _HF_RE.match(rest.strip("/"))
        if not hf:
            raise UsageError(f"{text}: expected hf://datasets/ORG/NAME[@REVISION][/PATH]")
        kind, repo_id, revision, sub = hf.groups()
        return RemoteURL(text, "hf", (sub or "").strip("/"), repo_id=repo_id, repo_type=kind[:-1],
                         revision=revision)
    if protocol in ("s3", "s3a"):
        if not rest.strip("/"):
            raise UsageError(f"{text}: expected s3://BUCKET[/PREFIX]")
        return RemoteURL(text, "s3", rest.strip("/"))
    return RemoteURL(text, protocol, rest.rstrip("/"))


def resolve_options(options: RemoteOptions | None, remote: RemoteURL) -> RemoteOptions:
    """Fill unset options from the URL and the standard environment variables."""
    options = options or RemoteOptions()
    env = os.environ
    if remote.protocol == "hf":
        return RemoteOptions(endpoint_url=options.endpoint_url or env.get("HF_ENDPOINT"),
                             revision=options.revision or remote.revision,
                             token=options.token or env.get("HF_TOKEN"))
    if remote.protocol == "s3":
        return RemoteOptions(endpoint_url=options.endpoint_url or env.get("AWS_ENDPOINT_URL_S3")
                             or env.get("AWS_ENDPOINT_URL"),
                             profile=options.profile or env.get("AWS_PROFILE"))
    return options
