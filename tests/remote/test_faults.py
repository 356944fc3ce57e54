"""Faults: a push killed at any moment, a pull interrupted, and remotes that cannot be used.

The kill tests run a real push in a subprocess and SIGKILL it at a named point
(between blob uploads, after the blobs, just before the manifest).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

import ikdata
from ikdata.core import manifest
from ikdata.cli import app
from ikdata.core.errors import RemoteError
from ikdata.remote.backend import FsspecBackend
from ikdata.remote.connect import open_backend
from ikdata.remote.pull import clone
from ikdata.remote.push import push
from ikdata.ops.validate import validate

from remote_helpers import url_for

KILLER = textwrap.dedent("""
    import os, signal, sys
    from ikdata.remote import push as push_mod
    from ikdata.remote.backend import FsspecBackend

    point, root, url = sys.argv[1:4]
    if point.startswith("after-uploads:"):
        limit, count = int(point.split(":")[1]), [0]
        original = FsspecBackend._upload_one

        def counted(self, item):
            original(self, item)
            count[0] += 1
            if count[0] >= limit:
                os.kill(os.getpid(), signal.SIGKILL)

        FsspecBackend._upload_one = counted
    else:
        os.environ["IKDATA_TEST_CRASH_AT"] = point  # ikdata.core.faults: SIGKILL at that checkpoint
    push_mod.push(root, url, jobs=1)
    print("push finished without being killed")
""")


def _killed_push(tmp_path, root, url, point):
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    done = subprocess.run([sys.executable, str(script), point, str(root), url], env=dict(os.environ),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr)


def _remote_id(url):
    with open_backend(url) as backend:
        data = backend.read_manifest().data
    return manifest.dataset_id(orjson.loads(data)) if data else None


@pytest.mark.parametrize("backend", ["folder", "s3", "hf"])
def test_killed_push_leaves_old_manifest_or_none_and_rerun_completes(backend, request, tmp_path, make_dataset,
                                                                      gemm_record):
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    url = url_for(backend, request, tmp_path)
    root = make_dataset("src", rows=3)
    first_point = "blobs-sent" if backend == "hf" else "after-uploads:2"
    _killed_push(tmp_path, root, url, first_point)
    assert _remote_id(url) is None  # blobs went up, the manifest did not: no dataset is visible
    assert push(root, url).published
    v1 = _remote_id(url)
    assert v1 == manifest.current_id(root)

    a = np.full((3, 8), 2.0, dtype=np.float32)
    w = np.full((4, 8), 1.0, dtype=np.float32)
    DatasetWriter(root).add(Definition.from_dict(gemm_record, origin=USER, source="t"), {"A": a, "W": w},
                            {"C": a @ w.T}, {"request_id": "late"})
    v2_local = DatasetWriter(root).commit()
    _killed_push(tmp_path, root, url, "before-manifest")
    assert _remote_id(url) == v1  # the old dataset, whole: clone it and validate deeply
    old = clone(url, tmp_path / "old")
    assert old.dataset_id == v1 and validate(ikdata.open(tmp_path / "old"), deep=True).ok

    rerun = push(root, url)
    assert rerun.published and rerun.blobs_sent == 0  # the killed push had sent every blob already
    assert _remote_id(url) == v2_local


def test_interrupted_clone_resumes_and_fetches_only_the_rest(tmp_path, make_dataset, monkeypatch):
    url = str(tmp_path / "remote")
    root = make_dataset("src", rows=4)
    push(root, url, pack=False)  # one fetch per blob, to interrupt
    original, calls = FsspecBackend.fetch, []

    def flaky(self, rel, dest):
        calls.append(rel)
        if len(calls) == 3:
            raise RemoteError("connection reset by peer", url=url)
        original(self, rel, dest)

    monkeypatch.setattr(FsspecBackend, "fetch", flaky)
    with pytest.raises(RemoteError, match="connection reset"):
        clone(url, tmp_path / "copy", jobs=1)
    assert not (tmp_path / "copy").exists()
    monkeypatch.setattr(FsspecBackend, "fetch", original)

    done = clone(url, tmp_path / "copy", jobs=1)
    assert done.blobs_present == 2 and done.blobs_fetched == len(list((root / "blob").rglob("*.safetensors"))) - 2
    assert done.dataset_id == manifest.current_id(root)
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok
    assert not list(tmp_path.glob(".ikdata-clone-*"))


def test_push_refuses_uncommitted_changes(tmp_path, make_dataset):
    root = make_dataset("src")
    with (root / "receipts.jsonl").open("a") as stream:
        stream.write('{"extra": 1}\n')
    result = CliRunner().invoke(app, ["push", str(root), str(tmp_path / "remote")])
    assert result.exit_code == 2
    assert "the manifest does not describe the files (receipts.jsonl changed)" in result.output
    assert not (tmp_path / "remote" / "ikdata.json").exists()


def test_push_refuses_a_corrupted_local_blob(tmp_path, make_dataset):
    root = make_dataset("src")
    victim = sorted((root / "blob").rglob("*.safetensors"))[0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["push", str(root), str(tmp_path / "remote"), "--json"])
    assert result.exit_code == 1
    assert "does not match its digest" in result.output and victim.name in result.output
    assert not (tmp_path / "remote" / "ikdata.json").exists()
