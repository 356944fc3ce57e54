"""A small Hugging Face Hub stand-in for tests: just the endpoints ikdata's push and pull call.

It serves the real ``huggingface_hub`` client (pointed here with HF_ENDPOINT) on
loopback. Covered: repo create and info, tree listing (paginated with a Link
header, like the Hub), preupload (every file is "regular", never LFS), commit
(NDJSON with base64 files; ``parentCommit`` is checked and a stale one gets 412),
and resolve (GET and HEAD, with Range). Not covered: LFS and Xet uploads, PRs,
branches other than those created by commits, deletions of folders.
It also counts requests per endpoint (``HubServer.requests``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import quote

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response


@dataclass
class _Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    """Start with ``start()``; ``endpoint`` is the URL to put in HF_ENDPOINT."""

    def __init__(self, port: int = 0, *, page_size: int = 1000, token: str | None = None) -> None:
        self.page_size, self.token = page_size, token
        self.repos: dict[str, _Repo] = {}
        self.requests: Counter[str] = Counter()
        self.lock = threading.Lock()
        self._server = make_server("127.0.0.1", port, self._app, threaded=True)
        self.port = self._server.server_address[1]  # port 0: the kernel's pick, never taken by a parallel worker
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)

    # -- helpers for tests -------------------------------------------------------------------

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return repo.commits[self._resolve(repo, revision)]

    def commit_count(self, repo_id: str) -> int:
        return len(self.repos[repo_id].commits) - 1  # the initial empty commit is not counted

    def tamper(self, repo_id: str, path: str, data: bytes | None) -> None:
        """Change (or, with None, delete) a file in the head commit of main, as a broken remote would."""
        with self.lock:
            repo = self.repos[repo_id]
            files = dict(repo.commits[repo.branches["main"]])
            if data is None:
                files.pop(path, None)
            else:
                files[path] = data
            sha = uuid.uuid4().hex + "00000000"
            repo.commits[sha] = files
            repo.branches["main"] = sha

    # -- the WSGI app ------------------------------------------------------------------------

    def _app(self, environ, start_response):
        request = Request(environ)
        try:
            response = self._route(request)
        except _HubError as exc:
            response = Response(json.dumps({"error": exc.message}), status=exc.status,
                                headers={"X-Error-Code": exc.code, "X-Error-Message": exc.message},
                                content_type="application/json")
        return response(environ, start_response)

    def _route(self, request: Request) -> Response:
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            self.requests["unauthorized"] += 1
            raise _HubError(401, "", "Invalid credentials in Authorization header")
        parts = request.path.strip("/").split("/")
        if parts[:3] == ["api", "repos", "create"]:
            self.requests["create"] += 1
            return self._create(request)
        if parts[0] == "api" and len(parts) >= 4 and parts[1] in ("datasets", "models"):
            repo_id = "/".join(parts[2:4])
            rest = parts[4:]
            if not rest or rest[0] == "revision":
                self.requests["info"] += 1
                return self._info(repo_id, rest[1] if len(rest) > 1 else "main")
            if rest[0] == "tree":
                self.requests["tree"] += 1
                return self._tree(request, repo_id, rest[1], "/".join(rest[2:]))
            if rest[0] == "preupload":
                self.requests["preupload"] += 1
                return self._preupload(request, repo_id, rest[1])
            if rest[0] == "commit":
                self.requests["commit"] += 1
                return self._commit(request, repo_id, rest[1])
        if len(parts) >= 6 and parts[0] in ("datasets", "models") and parts[3] == "resolve":
            self.requests["resolve"] += 1
            return self._resolve_file(request, "/".join(parts[1:3]), parts[4], "/".join(parts[5:]))
        raise _HubError(404, "", f"no such endpoint in the test Hub: {request.method} {request.path}")

    def _repo(self, repo_id: str) -> _Repo:
        repo = self.repos.get(repo_id)
        if repo is None:
            raise _HubError(404, "RepoNotFound", f"Repository {repo_id} not found")
        return repo

    def _resolve(self, repo: _Repo, revision: str) -> str:
        if revision in repo.branches:
            return repo.branches[revision]
        matches = [sha for sha in repo.commits if sha.startswith(revision)] if len(revision) >= 7 else []
        if len(matches) != 1:
            raise _HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return matches[0]

    def _create(self, request: Request) -> Response:
        payload = request.get_json()
        repo_id = f"{payload['organization']}/{payload['name']}"
        kind = payload.get("type") or "model"
        prefix = f"{kind}s/" if kind != "model" else ""
        with self.lock:
            if repo_id in self.repos:  # like the Hub, a 409 still carries the repo's url
                return Response(json.dumps({"error": "You already created this repo",
                                            "url": f"{self.endpoint}/{prefix}{repo_id}"}), status=409,
                                content_type="application/json")
            sha = uuid.uuid4().hex + "00000000"
            self.repos[repo_id] = _Repo({sha: {}}, {"main": sha})
        return Response(json.dumps({"url": f"{self.endpoint}/{prefix}{repo_id}", "name": repo_id}),
                        content_type="application/json")

    def _info(self, repo_id: str, revision: str) -> Response:
        repo = self._repo(repo_id)
        sha = self._resolve(repo, revision)
        body = {"id": repo_id, "sha": sha, "private": False, "siblings": [{"rfilename": p} for p in repo.commits[sha]]}
        return Response(json.dumps(body), content_type="application/json")

    def _tree(self, request: Request, repo_id: str, revision: str, path: str) -> Response:
        repo = self._repo(repo_id)
        files = repo.commits[self._resolve(repo, revision)]
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        recursive = request.args.get("recursive", "false").lower() in ("true", "1")
        entries: dict[str, dict] = {}
        for name in sorted(files):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            if "/" in rest and not recursive:
                folder = prefix + rest.split("/", 1)[0]
                entries[folder] = {"type": "directory", "path": folder, "oid": "0" * 40}
                continue
            if recursive:
                pieces = rest.split("/")[:-1]
                for i in range(1, len(pieces) + 1):
                    folder = prefix + "/".join(pieces[:i])
                    entries.setdefault(folder, {"type": "directory", "path": folder, "oid": "0" * 40})
            entries[name] = {"type": "file", "path": name, "size": len(files[name]), "oid": _git_oid(files[name])}
        if prefix and not entries:
            raise _HubError(404, "EntryNotFound", f"{path} does not exist on {revision}")
        ordered = [entries[k] for k in sorted(entries)]
        start = int(request.args.get("cursor", "0"))
        page = ordered[start:start + self.page_size]
        headers = {}
        if start + self.page_size < len(ordered):
            args = dict(request.args)
            args["cursor"] = str(start + self.page_size)
            query = "&".join(f"{k}={quote(str(v))}" for k, v in args.items())
            headers["Link"] = f'<{self.endpoint}{request.path}?{query}>; rel="next"'
        return Response(json.dumps(page), headers=headers, content_type="application/json")

    def _preupload(self, request: Request, repo_id: str, revision: str) -> Response:
        repo = self._repo(repo_id)
        files = repo.commits[self._resolve(repo, revision)]
        answer = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                   "oid": _git_oid(files[f["path"]]) if f["path"] in files else None}
                  for f in request.get_json()["files"]]
        return Response(json.dumps({"files": answer, "commitOid": repo.branches.get("main")}),
                        content_type="application/json")

    def _commit(self, request: Request, repo_id: str, revision: str) -> Response:
        lines = [json.loads(line) for line in request.get_data().splitlines() if line.strip()]
        header = lines[0]["value"]
        with self.lock:
            repo = self._repo(repo_id)
            head = self._resolve(repo, revision)
            parent = header.get("parentCommit")
            if parent is not None and not head.startswith(parent):
                raise _HubError(412, "", f"A commit has happened since. Please refresh and try again "
                                f"(parent {parent}, head {head}).")
            files = dict(repo.commits[head])
            for item in lines[1:]:
                key, value = item["key"], item["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                else:
                    raise _HubError(400, "", f"the test Hub does not support {key!r} operations (no LFS/Xet)")
            sha = hashlib.sha1(f"{head}{uuid.uuid4()}".encode()).hexdigest()
            repo.commits[sha] = files
            repo.branches[revision if revision in repo.branches else "main"] = sha
        return Response(json.dumps({"commitUrl": f"{self.endpoint}/datasets/{repo_id}/commit/{sha}",
                                    "commitOid": sha, "pullRequestUrl": None}), content_type="application/json")

    def _resolve_file(self, request: Request, repo_id: str, revision: str, path: str) -> Response:
        repo = self._repo(repo_id)
        sha = self._resolve(repo, revision)
        files = repo.commits[sha]
        if path not in files:
            raise _HubError(404, "EntryNotFound", f"{path} does not exist on {revision}")
        data = files[path]
        headers = {"X-Repo-Commit": sha, "ETag": f'"{_git_oid(data)}"', "Accept-Ranges": "bytes"}
        status = 200
        spec = request.headers.get("Range")
        if spec and spec.startswith("bytes="):
            first, _, last = spec[6:].partition("-")
            start = int(first or 0)
            end = min(int(last), len(data) - 1) if last else len(data) - 1
            data, status = data[start:end + 1], 206
            headers["Content-Range"] = f"bytes {start}-{end}/{len(files[path])}"
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(data))
            return Response(b"", status=status, headers=headers)
        return Response(data, status=status, headers=headers, content_type="application/octet-stream")


class _HubError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
