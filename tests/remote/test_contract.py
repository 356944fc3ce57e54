"""One contract, every backend: folder, file://, memory://, s3:// (moto server), hf:// (Hub stand-in)."""

from __future__ import annotations

import numpy as np
import pytest
from remote_helpers import first_blob, flip_last_byte, tamper

from ikdata.core import manifest
from ikdata.core.errors import RemoteError
from ikdata.remote.connect import open_backend
from ikdata.remote.pull import clone
from ikdata.remote.push import push
from ikdata.ops.validate import validate


def test_push_then_clone_is_identical(remote_url, make_dataset, tmp_path):
    root = make_dataset("src")
    local_id = manifest.current_id(root)

    events = []
    result = push(root, remote_url, progress=events.append)
    assert result.published and result.dataset_id == local_id
    assert result.blobs_sent == len(list((root / "blob").rglob("*.safetensors"))) and result.blobs_present == 0
    last = events[-1]
    assert (last.phase, last.objects_done, last.objects_total) == ("upload", result.blobs_sent, result.blobs_sent)
    assert last.bytes_done == last.bytes_total == result.bytes_sent

    copy = clone(remote_url, tmp_path / "copy")
    assert copy.dataset_id == local_id == manifest.current_id(tmp_path / "copy")
    import ikdata

    report = validate(ikdata.open(tmp_path / "copy"), deep=True)
    assert report.ok, report.problems
    assert report.blobs_rehashed == copy.blobs_fetched > 0
    assert (tmp_path / "copy" / "receipts.jsonl").read_bytes() == (root / "receipts.jsonl").read_bytes()


def test_second_push_sends_nothing_and_new_rows_send_only_new_blobs(remote_url, make_dataset, gemm_record):
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    root = make_dataset("src", rows=2)
    push(root, remote_url)
    again = push(root, remote_url)
    assert (again.published, again.blobs_sent, again.files_sent) == (False, 0, 0)

    writer = DatasetWriter(root)
    definition = Definition.from_dict(gemm_record, origin=USER, source="test")
    a = np.full((7, 8), 3.0, dtype=np.float32)
    w = np.full((4, 8), 0.5, dtype=np.float32)
    writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, {"request_id": "new", "step": 9})
    new_id = writer.commit()

    grown = push(root, remote_url)
    assert grown.published and grown.dataset_id == new_id
    assert grown.blobs_sent == 3  # A, W and C of the new row; the old blobs stay where they are
    with open_backend(remote_url) as backend:
        assert manifest.dataset_id(__import__("orjson").loads(backend.read_manifest().data)) == new_id


def test_corrupted_remote_blob_is_refused_named_and_not_kept(remote_url, make_dataset, tmp_path, request):
    root = make_dataset("src")
    push(root, remote_url, pack=False)  # loose objects (packed ones: tests/remote_packs)
    victim = first_blob(root)
    tamper(remote_url, victim, flip_last_byte(root / victim), hub=_hub(request, remote_url))

    with pytest.raises(RemoteError) as caught:
        clone(remote_url, tmp_path / "copy")
    message = str(caught.value)
    assert victim in message and "do not match their digest and were refused" in message
    assert not (tmp_path / "copy").exists()
    kept = [p for p in tmp_path.glob(".ikdata-clone-copy-*/**/*") if p.name.startswith(victim.rsplit("/", 1)[1])
            or p.name.startswith(".tmp-")]
    assert kept == []


def test_deleted_remote_blob_is_reported_missing(remote_url, make_dataset, tmp_path, request):
    root = make_dataset("src")
    push(root, remote_url, pack=False)  # loose objects (packed ones: tests/remote_packs)
    victim = first_blob(root)
    tamper(remote_url, victim, None, hub=_hub(request, remote_url))

    with pytest.raises(RemoteError, match="blob\\(s\\) are missing on the remote: " + victim):
        clone(remote_url, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()

    from ikdata.remote.readonly import open_url

    with open_url(remote_url, blobs="headers") as ds:
        report = validate(ds)
    assert not report.ok
    assert any(victim in str(p) for p in report.problems)


def test_clone_of_an_empty_remote_says_so(remote_url, tmp_path):
    if remote_url.startswith("hf://"):
        pytest.skip("the Hub refuses to read a repository that does not exist; covered in test_errors")
    with pytest.raises(RemoteError, match="no ikdata dataset here"):
        clone(remote_url, tmp_path / "copy")


def _hub(request, url):
    return request.getfixturevalue("hub_server") if url.startswith("hf://") else None
