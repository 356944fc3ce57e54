"""Issue 21, finding 5: push repairs what the remote damaged, even when the remote holds this very dataset.

A remote blob (or small file) flipped in place or deleted after a push used to leave ``push`` saying
"already up to date" (it stopped at the manifest, which names what was there when it was published)
while every clone failed. Every push now lists the remote, checks what it relies on (folder and
file:// remotes rehashed, memory:// compared, S3 through the listing's ETag or the stored sha256,
the Hub through its content ids), sends the damaged or missing objects again, and says how each was
checked. Every backend runs for real: S3 is moto's server and the Hub the stand-in, both on loopback.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.core import manifest
from ikdata.core.errors import RemoteError
from ikdata.ops.validate import validate
from ikdata.remote.backend import file_object
from ikdata.remote.pull import clone
from ikdata.remote.push import push
from remote_helpers import BACKENDS, first_blob, flip_last_byte, tamper, url_for

HOW = {"folder": "rehashed", "file": "rehashed", "memory": "compared", "s3": "etag-md5", "hf": "git-blob-id"}


def _hub(backend, request):
    return request.getfixturevalue("hub_server") if backend == "hf" else None


def _clones_clean(url, dest) -> bool:
    try:
        clone(url, dest)
    except RemoteError:
        return False
    return validate(ikdata.open(dest), deep=True).ok


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_blob_flipped_in_place_is_found_and_sent_again_by_a_push_with_nothing_new(
        backend, request, make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    url = url_for(backend, request, tmp_path)
    first = push(root, url, pack=False)  # loose objects to damage (packed ones: tests/remote_packs)
    rel = first_blob(root)
    tamper(url, rel, flip_last_byte(root / rel), hub=_hub(backend, request))
    assert not _clones_clean(url, tmp_path / "broken")  # the damage is real: clone refuses it

    again = push(root, url)
    assert not again.published and again.dataset_id == first.dataset_id
    assert again.repaired == (rel,) and again.blobs_sent == 1 and again.bytes_sent == (root / rel).stat().st_size
    blobs = len(list((root / "blob").rglob("*.safetensors")))
    files = len(manifest.read(root)["files"])
    methods = {"s3": {"etag-md5", "sha256-checksum"}}.get(backend, {HOW[backend]})
    assert set(again.checked) == methods and sum(again.checked.values()) == blobs + files
    assert again.trusted_by_size == ()
    assert _clones_clean(url, tmp_path / "copy")
    assert push(root, url).repaired == ()  # repaired for good: the next push finds nothing


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deleted_blob_is_sent_again(backend, request, make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    url = url_for(backend, request, tmp_path)
    push(root, url, pack=False)  # a loose object to delete
    rel = first_blob(root)
    tamper(url, rel, None, hub=_hub(backend, request))

    again = push(root, url)
    assert again.repaired == (rel,) and again.blobs_sent == 1
    assert _clones_clean(url, tmp_path / "copy")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_damaged_small_file_is_sent_again(backend, request, make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    url = url_for(backend, request, tmp_path)
    push(root, url)
    digest = manifest.read(root)["files"]["receipts.jsonl"]
    good = (root / "receipts.jsonl").read_bytes()
    tamper(url, file_object(digest), good[:-2] + b"X\n", hub=_hub(backend, request))  # same size, other bytes

    again = push(root, url)
    assert again.repaired == (file_object(digest),) and again.files_sent == 1 and again.blobs_sent == 0
    assert _clones_clean(url, tmp_path / "copy")


def test_s3_blob_replaced_behind_ikdatas_back_is_caught_by_its_missing_checksum(
        s3_env, make_ikdata_dataset, tmp_path, request):
    """An object put without ikdata's checksum whose ETag is not the local MD5: one HEAD, then sent again."""
    root = make_ikdata_dataset(1)
    url = url_for("s3", request, tmp_path)
    push(root, url, pack=False)  # a loose object to replace
    rel = first_blob(root)
    tamper(url, rel, flip_last_byte(root / rel))
    again = push(root, url)
    assert again.repaired == (rel,) and again.checked.get("sha256-checksum") == 1


def test_the_cli_says_what_it_checked_and_what_it_repaired(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    remote = tmp_path / "remote"
    runner = CliRunner()
    assert runner.invoke(app, ["push", str(root), str(remote), "--no-pack"]).exit_code == 0
    rel = first_blob(root)
    tamper(str(remote), rel, flip_last_byte(root / rel))

    done = runner.invoke(app, ["push", str(root), str(remote)])
    assert done.exit_code == 0, done.output
    assert "repaired" in done.output and rel in done.output
    assert "rehashed" in done.output and "0 trusted by size only" in done.output
    as_json = runner.invoke(app, ["push", str(root), str(remote), "--json"])
    document = json.loads(as_json.stdout)
    assert document["repaired"] == [] and document["trusted_by_size"] == []
    assert document["checked"] == {"rehashed": document["blobs_present"] + len(manifest.read(root)["files"])}
