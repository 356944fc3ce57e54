"""Findings 1 and 2 of issue 9: a remote is untrusted input.

1. A remote manifest's ``files`` may name only record files: a journal (``.ikdata-import/journal.json``)
   or any path that is absolute, has '..' or a backslash, is not normalised or names a folder
   is refused before anything is fetched, so nothing can later be rolled forward outside the dataset.
2. Every blob that lands by clone is rehashed, whichever way it arrived.
"""

from __future__ import annotations

import json

import pytest

from ikdata.core.errors import IkdataError, RemoteError
from ikdata.core.layout import repair_dataset
from ikdata.core.store import rehash_file
from ikdata.remote.pull import clone, pull
from ikdata.remote.push import push
from remote_helpers import first_blob, flip_last_byte
from security_helpers import BACKENDS, add_remote_files, read_remote_manifest, remote_url

HOSTILE_PATHS = [".ikdata-import/journal.json", "/tmp/ikdata-evil.json", "../evil.jsonl", "workloads\\evil.jsonl",
                 ".", "workloads/", "workloads/./evil.jsonl", "workloads//evil.jsonl", ".ikdata.lock",
                 "blob/sha256/00/evil.safetensors", "notes.txt", "reports/.tmp-x.json"]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_clone_refuses_a_manifest_listing_anything_but_record_files(path, make_ikdata_dataset, tmp_path):
    url = remote_url("folder", None, tmp_path)
    push(make_ikdata_dataset(2), url)
    add_remote_files(url, {path: b"{}\n"})
    dest = tmp_path / "clone"
    with pytest.raises(RemoteError, match="not record files of a dataset, so nothing was fetched") as caught:
        clone(url, dest)
    assert repr(path)[1:-1] in str(caught.value)
    assert not dest.exists()
    assert not (tmp_path / "ikdata-evil.json").exists() and not (tmp_path / "evil.jsonl").exists()


def test_a_listed_path_that_is_also_a_folder_is_refused(make_ikdata_dataset, tmp_path):
    url = remote_url("folder", None, tmp_path)
    push(make_ikdata_dataset(2), url)
    add_remote_files(url, {"workloads/a.jsonl": b"", "workloads/a.jsonl/b.jsonl": b""})
    with pytest.raises(RemoteError, match="'workloads/a.jsonl' is also the folder of other listed files"):
        clone(url, tmp_path / "clone")


def _hostile_journal(target: str, kind: str) -> dict[str, bytes]:
    """A committed import journal and its staged file, as a remote would list them."""
    step = {"kind": kind, "staged": ".ikdata-import/definition-0.part", "target": target}
    if kind == "append":
        step.update(base_size=0, base_digest="e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    journal = {"format": "ikdata-import-journal/1", "parent": {"id": "0" * 64, "at": 0.0, "how": "import"},
               "steps": [step]}
    return {".ikdata-import/journal.json": json.dumps(journal).encode(),
            ".ikdata-import/definition-0.part": b"written by a hostile remote\n"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["create", "append", "blob"])
def test_a_journal_from_a_remote_never_writes_outside_the_dataset(backend, kind, request, make_ikdata_dataset,
                                                                   tmp_path):
    url = remote_url(backend, request, tmp_path)
    push(make_ikdata_dataset(2), url)
    outside = tmp_path / "outside" / "evil.json"
    outside.parent.mkdir()
    add_remote_files(url, _hostile_journal(str(outside) if kind != "append" else "../outside/evil.json", kind))
    dest = tmp_path / "clone"
    with pytest.raises(RemoteError, match="names ikdata's own state"):
        clone(url, dest)
    if dest.exists():  # what the previous main did: the next repair rolled the journal forward
        try:
            repair_dataset(dest)
        except IkdataError:
            pass
    assert not outside.exists()
    assert not (dest / ".ikdata-import").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pull_into_existing_data_refuses_a_journal_too(backend, request, make_ikdata_dataset, tmp_path):
    url = remote_url(backend, request, tmp_path)
    push(make_ikdata_dataset(2, name="a"), url)
    add_remote_files(url, _hostile_journal("../evil.json", "create"))
    local = make_ikdata_dataset(1, name="b", seed=5)
    with pytest.raises(RemoteError, match="names ikdata's own state"):
        pull(url, local)
    assert not (local / ".ikdata-import").exists() and not (tmp_path / "evil.json").exists()


def test_clone_refuses_a_corrupt_blob_listed_as_a_file(make_ikdata_dataset, tmp_path):
    """Finding 2: the corrupt bytes came through ``files`` under a blob path; before, clone said verified."""
    root = make_ikdata_dataset(2)
    url = remote_url("folder", None, tmp_path)
    push(root, url)
    rel = first_blob(root)
    add_remote_files(url, {rel: flip_last_byte(root / rel)})
    dest = tmp_path / "clone"
    with pytest.raises(RemoteError, match="is not a record file"):
        clone(url, dest)
    assert not dest.exists()


def test_a_blob_left_in_the_staging_folder_is_rehashed_before_it_lands(make_ikdata_dataset, tmp_path):
    """Every landing blob is rehashed: one an interrupted clone left behind (here: corrupt) is fetched again."""
    root = make_ikdata_dataset(2)
    url = remote_url("folder", None, tmp_path)
    push(root, url, pack=False)  # loose objects: the clone lands loose blobs
    from ikdata.core.manifest import dataset_id

    remote_id = dataset_id(read_remote_manifest(url))
    dest = tmp_path / "clone"
    rel = first_blob(root)
    staged = tmp_path / f".ikdata-clone-{dest.name}-{remote_id[:16]}" / rel
    staged.parent.mkdir(parents=True)
    staged.write_bytes(flip_last_byte(root / rel))
    result = clone(url, dest)
    assert result.blobs_fetched >= 1
    check = rehash_file(dest / rel)
    assert check.error is None and list(check.digests) == [rel.rsplit("/", 1)[1].split(".")[0]]
