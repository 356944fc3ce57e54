"""S3 through s3fs: the manifest is written with a conditional put (If-None-Match / If-Match on the ETag).

Objects up to 5 GiB are uploaded in one PUT with ``ChecksumAlgorithm=SHA256``: S3 checks
the bytes on arrival and keeps their sha256. Before a push relies on a blob the remote
already holds, it compares the listing's ETag (the MD5 of a one-PUT object, computed by
S3 from the bytes it holds) with the local file; when the ETag is not an MD5 (multipart,
SSE-KMS) it asks for the stored sha256 with one HEAD. A blob that fails either check, or
has no checksum to ask for, is sent again. The small files are checked the same way.

Errors that users meet (a bucket that does not exist, refused credentials, an
endpoint that cannot be reached) become :class:`RemoteError` with what to check.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import threading
from typing import Any, Sequence

from fsspec.asyn import sync

from ikdata.core.errors import RemoteError
from ikdata.remote.backend import (MANIFEST, FsspecBackend, LocalBytes, ManifestState, PublishConflict, Relied,
                                   RemoteCheck, local_chunks)
from ikdata.remote.transfer import DEFAULT_JOBS, Upload
from ikdata.remote.url import RemoteOptions, RemoteURL

# Loading botocore's service models takes ~0.3 s per session; sessions are shared per profile and
# credentials (the key includes them because a session caches the credentials it resolved).
_SESSIONS: dict[tuple, Any] = {}
_SESSIONS_LOCK = threading.Lock()


def _session(profile: str | None) -> Any:
    from aiobotocore.session import AioSession

    env = os.environ
    key = (profile, env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY"), env.get("AWS_SESSION_TOKEN"))
    with _SESSIONS_LOCK:
        if key not in _SESSIONS:
            _SESSIONS[key] = AioSession(profile=profile) if profile else AioSession()
        return _SESSIONS[key]


SINGLE_PUT_BYTES = 5 << 30  # S3's limit for one PUT; larger objects go multipart, without a whole-object sha256

_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken",
                     "InvalidToken", "AllAccessDisabled", "403"}


class S3Backend(FsspecBackend):
    """An ``s3://bucket/prefix`` remote."""

    def __init__(self, remote: RemoteURL, options: RemoteOptions) -> None:
        try:
            import s3fs
        except ImportError as exc:
            raise RemoteError("s3:// needs s3fs; install it with: pip install 'ikdata[s3]'", url=remote.url) from exc
        kwargs: dict[str, Any] = {"skip_instance_cache": True, "use_listings_cache": False,
                                  "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"},
                                                    "connect_timeout": 10}}
        if options.endpoint_url:
            kwargs["endpoint_url"] = options.endpoint_url
        try:
            kwargs["session"] = _session(options.profile)
            fs = s3fs.S3FileSystem(**kwargs)
        except Exception as exc:  # botocore: ProfileNotFound and friends
            raise RemoteError(f"cannot configure S3: {exc}; check --profile and the AWS_* variables",
                              url=remote.url) from exc
        fs.retries = 3
        super().__init__(remote, fs, remote.path)
        self.endpoint = options.endpoint_url or "the default AWS endpoint"
        self.bucket, _, self.prefix = remote.path.partition("/")

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    @property
    def identity(self) -> str:
        return f"s3:{self.endpoint}:{self.bucket}/{self.prefix}"

    def translate(self, exc: Exception, what: str) -> RemoteError:
        code, text = _error_code(exc), str(exc)
        if code == "NoSuchBucket" or (isinstance(exc, FileNotFoundError) and "bucket" in text.lower()):
            return self.fail(f"bucket {self.bucket!r} does not exist at {self.endpoint}; create it "
                             f"(aws s3 mb s3://{self.bucket}) or check the URL")
        if code in _CREDENTIAL_CODES or isinstance(exc, PermissionError):
            return self.fail(f"cannot {what}: the credentials were refused ({code or text}); check "
                             "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or --profile")
        if _is_connection_error(exc):
            return self.fail(f"cannot reach the endpoint {self.endpoint} to {what} ({type(_root(exc)).__name__}); "
                             "check --endpoint-url / AWS_ENDPOINT_URL and the network")
        if "NoCredentials" in type(_root(exc)).__name__ or "Unable to locate credentials" in text:
            return self.fail("no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                             "or pass --profile")
        return super().translate(exc, what)

    def _put(self, item: Upload) -> None:
        if item.size > SINGLE_PUT_BYTES:
            super()._put(item)
            return

        async def put() -> None:
            s3 = await self.fs.get_s3(self.bucket)
            if isinstance(item.source, bytes):
                await s3.put_object(Bucket=self.bucket, Key=self._key(item.rel), Body=item.source,
                                    ChecksumAlgorithm="SHA256")
                return
            with open(item.source, "rb") as stream:
                await s3.put_object(Bucket=self.bucket, Key=self._key(item.rel), Body=stream,
                                    ChecksumAlgorithm="SHA256")

        sync(self.fs.loop, self.fs.set_session)
        sync(self.fs.loop, put)

    def check_remote(self, objects: Sequence[Relied], *, jobs: int = DEFAULT_JOBS) -> RemoteCheck:
        """Compare each listed ETag with the MD5 of the local bytes; where they differ (or the ETag is not
        an MD5), ask for the sha256 stored at upload with one HEAD; an object without one is damaged
        (sent again, this time with its checksum). A multipart object (over 5 GiB) whose ETag is not
        an MD5 has no whole-object checksum to ask for: trusted by size (see the module doc)."""
        check = RemoteCheck()
        ask = []
        for item in objects:
            if item.local is None or (item.md5 and not item.blob):  # named by its sha256; md5 from the cache
                md5, size = item.md5 or "", 0
                sha256 = base64.b64encode(bytes.fromhex(item.content_sha256)).decode()
            else:
                md5, sha256, size = _local_digests(item.local)
            etag = self.etags.get(item.rel, "")
            if etag == md5:
                check.note(item.rel, "etag-md5", True)
            elif size > SINGLE_PUT_BYTES and "-" in etag:
                check.note(item.rel, "size", True)
            else:
                ask.append((item.rel, sha256))
        if not ask:
            return check

        async def checksum(rel: str, gate: asyncio.Semaphore) -> str | None:
            async with gate:
                s3 = await self.fs.get_s3(self.bucket)
                response = await s3.head_object(Bucket=self.bucket, Key=self._key(rel), ChecksumMode="ENABLED")
                return response.get("ChecksumSHA256")

        async def all_checksums() -> list[str | None]:
            gate = asyncio.Semaphore(max(1, jobs))
            return list(await asyncio.gather(*(checksum(rel, gate) for rel, _ in ask)))

        with self._errors("check remote objects"):
            sync(self.fs.loop, self.fs.set_session)
            found = sync(self.fs.loop, all_checksums)
        for (rel, sha256), remote in zip(ask, found):
            check.note(rel, "sha256-checksum", remote == sha256)
        return check

    def list_objects(self, prefix: str) -> dict[str, int]:
        """One ListObjectsV2 per 1,000 keys (s3fs's ``find`` also probes an empty prefix with a HEAD and a
        second listing); the ETags are kept for :meth:`check_remote`."""
        base = self._key(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        strip = f"{self.prefix}/" if self.prefix else ""

        async def pages() -> list[dict]:
            s3 = await self.fs.get_s3(self.bucket)
            found, token = [], None
            while True:
                extra = {"ContinuationToken": token} if token else {}
                response = await s3.list_objects_v2(Bucket=self.bucket, Prefix=base, **extra)
                found += response.get("Contents", [])
                if not response.get("IsTruncated"):
                    return found
                token = response["NextContinuationToken"]

        with self._errors(f"list {prefix or 'the remote'}"):
            sync(self.fs.loop, self.fs.set_session)
            entries = sync(self.fs.loop, pages)
        listed = {}
        for entry in entries:
            rel = entry["Key"][len(strip):]
            if not rel or rel.endswith("/") or os.path.basename(rel).startswith(".tmp-"):
                continue
            listed[rel] = int(entry.get("Size") or 0)
            if entry.get("ETag"):
                self.etags[rel] = str(entry["ETag"]).strip('"')
        return listed

    def read(self, rel: str, *, start: int | None = None, end: int | None = None) -> bytes:
        """One GET (ranged when ``start``/``end`` are given: ``Range: bytes=start-(end-1)``)."""
        async def get() -> bytes:
            s3 = await self.fs.get_s3(self.bucket)
            extra = {}
            if start is not None or end is not None:
                extra["Range"] = f"bytes={start or 0}-{'' if end is None else end - 1}"
            response = await s3.get_object(Bucket=self.bucket, Key=self._key(rel), **extra)
            async with response["Body"] as body:
                return await body.read()

        if start is not None and end is not None and end <= start:
            return b""
        with self._errors(f"read {rel}"):
            sync(self.fs.loop, self.fs.set_session)
            try:
                return sync(self.fs.loop, get)
            except Exception as exc:
                if _error_code(exc) in ("NoSuchKey", "404"):
                    raise FileNotFoundError(f"{rel} does not exist on the remote") from exc
                raise

    def read_manifest(self) -> ManifestState:
        async def get() -> ManifestState:
            s3 = await self.fs.get_s3(self.bucket)
            try:
                response = await s3.get_object(Bucket=self.bucket, Key=self._key(MANIFEST))
            except Exception as exc:
                if _error_code(exc) in ("NoSuchKey", "404"):
                    return ManifestState(None, None)
                raise
            async with response["Body"] as body:
                data = await body.read()
            return ManifestState(data, response["ETag"])

        with self._errors("read the manifest"):
            sync(self.fs.loop, self.fs.set_session)
            return sync(self.fs.loop, get)

    def publish_manifest(self, data: bytes, base: ManifestState) -> None:
        condition = {"IfNoneMatch": "*"} if base.token is None else {"IfMatch": base.token}

        async def put() -> None:
            s3 = await self.fs.get_s3(self.bucket)
            await s3.put_object(Bucket=self.bucket, Key=self._key(MANIFEST), Body=data, **condition)

        with self._errors("write the manifest"):
            sync(self.fs.loop, self.fs.set_session)
            try:
                sync(self.fs.loop, put)
            except Exception as exc:
                if _error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise PublishConflict("the remote manifest changed while pushing", url=self.url) from exc
                raise

    def prepare_push(self) -> None:
        """Nothing to prepare: the manifest read that follows names a missing bucket (one request fewer)."""


def _local_digests(local: LocalBytes) -> tuple[str, str, int]:
    """MD5 (hex, as an ETag), sha256 (base64, as S3's ChecksumSHA256) and size of local bytes: transport
    checksums compared with what S3 computed, not content digests."""
    md5, sha256, size = hashlib.md5(usedforsecurity=False), hashlib.sha256(), 0
    for chunk in local_chunks(local):
        md5.update(chunk)
        sha256.update(chunk)
        size += len(chunk)
    return md5.hexdigest(), base64.b64encode(sha256.digest()).decode(), size


def _root(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None and exc.__cause__ is not exc:
        exc = exc.__cause__
    return exc


def _error_code(exc: BaseException) -> str | None:
    for candidate in (exc, _root(exc), exc.__context__):
        response = getattr(candidate, "response", None)
        if isinstance(response, dict):
            error = response.get("Error", {})
            return str(error.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode") or "")
    return None


def _is_connection_error(exc: BaseException) -> bool:
    names = {type(c).__name__ for c in (exc, _root(exc), exc.__context__) if c is not None}
    return bool(names & {"EndpointConnectionError", "ConnectTimeoutError", "ConnectionError",
                         "ClientConnectorError", "ConnectionRefusedError", "ReadTimeoutError"})
