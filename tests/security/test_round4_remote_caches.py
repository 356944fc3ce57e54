"""Round four, finding 1: a cache of remote state is a hint, never evidence.

The campaign: ``clone`` of a hostile remote A that serves, under the name of a pack an honest remote B
holds, an index listing blobs B does not have; the per-user cache of pack indexes (keyed by the pack's
name only) then answered for B, so ``push L B`` said "already there" for them and B's manifest named
blobs B lacked (every later ``clone B`` failed, and nothing pointed at the cache).

The contract, on every backend (folder, file://, memory://, S3 on loopback, the Hub stand-in): push of
the same dataset to the same remote decides the same with an empty cache and with a cache filled from a
hostile remote A; B's clone is whole and verifies.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

import ikdata
from ikdata.core import manifest
from ikdata.core.packs import PACK_DIR
from ikdata.ops.validate import validate
from ikdata.remote.connect import open_backend
from ikdata.remote.pull import clone
from ikdata.remote.push import push
from remote_helpers import tamper, url_for

BACKENDS = ["folder", "file", "memory", "s3", "hf"]


def _hub(request, url):
    return request.getfixturevalue("hub_server") if url.startswith("hf://") else None


def _index_of(url: str) -> tuple[str, dict]:
    with open_backend(url) as backend:
        [rel] = [r for r in backend.list_objects(PACK_DIR + "/") if r.endswith(".index.json")]
        return rel, orjson.loads(backend.read(rel))


def _new_digests(small: Path, large: Path) -> list[str]:
    def blobs(root: Path) -> set[str]:
        return {p.name.split(".")[0] for p in (root / "blob").rglob("*.safetensors")}

    return sorted(blobs(large) - blobs(small))


def _poison(url: str, hub, extra: list[str]) -> None:
    """Make remote A's index of its (honest) pack also list ``extra`` digests, as a hostile remote would."""
    rel, document = _index_of(url)
    template = next(iter(document["tensors"].values()))
    for digest in extra:
        document["tensors"][digest] = dict(template)
    tamper(url, rel, json.dumps(document).encode(), hub=hub)


def _decision(result) -> dict:
    left_out = ("url", "checked", "trusted_by_size", "cache_ignored")
    return {k: v for k, v in result.to_dict().items() if k not in left_out}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cache_filled_from_remote_a_never_changes_a_decision_about_remote_b(backend, request, tmp_path,
                                                                            make_ikdata_dataset, monkeypatch):
    small = make_ikdata_dataset(3, name="small")
    large = make_ikdata_dataset(6, name="large")  # the same first rows, and 6 blobs more
    extra = _new_digests(small, large)
    assert len(extra) == 6
    twin = tmp_path / "large-twin"  # a push may merge the remote into the local dataset: one copy per push
    shutil.copytree(large, twin)
    hostile, honest, control = (url_for(backend, request, tmp_path) for _ in range(3))
    for url in (hostile, honest, control):
        assert push(small, url).packs_sent == 1  # the same pack, by the same name, on all three
    _poison(hostile, _hub(request, hostile), extra)

    # The control: B's twin pushed with an empty cache.
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(tmp_path / "empty-cache"))
    expected = push(twin, control)
    assert expected.blobs_sent == len(extra)

    # The attack: the user's cache is filled from A, then the user pushes to B.
    poisoned = tmp_path / "poisoned-cache"
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(poisoned))
    clone(hostile, tmp_path / "copy-of-a")
    result = push(large, honest)
    assert _decision(result) | {"dataset_id": None} == _decision(expected) | {"dataset_id": None}
    assert result.blobs_sent == len(extra), f"push said {result.blobs_present} blobs were already there"

    copy = clone(honest, tmp_path / "copy-of-b")
    assert copy.dataset_id == manifest.current_id(large)
    assert validate(ikdata.open(tmp_path / "copy-of-b"), deep=True).ok


def test_a_remote_that_lacks_what_its_manifest_names_is_repaired_by_the_next_push(request, tmp_path,
                                                                                   make_ikdata_dataset, monkeypatch):
    """The state the attack left behind (B's manifest naming blobs B lacks) is repaired by the next push."""
    small = make_ikdata_dataset(3, name="small")
    large = make_ikdata_dataset(6, name="large")
    honest = url_for("folder", request, tmp_path)
    push(small, honest)
    before = set(_listing(honest))
    push(large, honest)
    gone = [r for r in _listing(honest) if r.startswith(PACK_DIR) and r not in before]
    assert gone, "the second push sent a pack of its own"
    for index in gone:  # B loses the pack of the new blobs (its index and all): its manifest names them still
        tamper(honest, index, None)
    again = push(large, honest)
    assert not again.published and again.blobs_sent == len(_new_digests(small, large))
    assert again.repaired
    copy = clone(honest, tmp_path / "copy")
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok


def _listing(url: str) -> dict[str, int]:
    with open_backend(url) as backend:
        return backend.list_objects("")


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "pack-indexes").glob("*/*.index.json"))


def test_damaged_and_foreign_cache_entries_are_named_and_ignored(request, tmp_path, make_ikdata_dataset, monkeypatch):
    from typer.testing import CliRunner

    from ikdata.cli import app

    small = make_ikdata_dataset(3, name="small")
    large = make_ikdata_dataset(6, name="large")
    a, b = url_for("s3", request, tmp_path), url_for("s3", request, tmp_path)
    cache = tmp_path / "cache"
    push(small, a)
    [entry_a] = _entries(cache)
    push(small, b)
    [entry_b] = [e for e in _entries(cache) if e != entry_a]
    assert entry_a.name == entry_b.name  # the same pack on both: one entry per remote

    record = json.loads(entry_b.read_text())
    record["data"] = record["data"].replace('"tensors"', '"tensors" ', 1)  # bytes that no longer hash to it
    entry_b.write_text(json.dumps(record))
    twin = tmp_path / "large-twin"
    shutil.copytree(large, twin)
    result = CliRunner().invoke(app, ["push", str(twin), b])
    assert result.exit_code == 0, result.output
    assert any(str(entry_b) in line and "damaged cache entry, ignored" in line
               for line in result.output.splitlines()), result.output
    assert "sent 6 blobs" in result.output, result.output

    shutil.copyfile(entry_a, entry_b)  # A's entry where B's belongs
    c = url_for("s3", request, tmp_path)
    before = set(_entries(cache))
    push(small, c)
    [entry_c] = [e for e in _entries(cache) if e not in before]
    shutil.copyfile(entry_a, entry_c)
    again = push(large, c)
    assert again.blobs_sent == 6
    assert any(str(entry_c) in line and "foreign cache entry, ignored" in line for line in again.cache_ignored), \
        again.cache_ignored
    clone(c, tmp_path / "copy-c")
    assert validate(ikdata.open(tmp_path / "copy-c"), deep=True).ok


def test_clone_names_a_damaged_cache_entry_and_reads_the_index_instead(request, tmp_path, make_ikdata_dataset):
    from typer.testing import CliRunner

    from ikdata.cli import app

    small = make_ikdata_dataset(3, name="small")
    url = url_for("s3", request, tmp_path)
    push(small, url)
    [entry] = _entries(tmp_path / "cache")
    entry.write_bytes(b"{not json")
    result = CliRunner().invoke(app, ["clone", url, str(tmp_path / "copy")])
    assert result.exit_code == 0, result.output
    assert any(str(entry) in line and "damaged cache entry, ignored" in line for line in result.output.splitlines()), \
        result.output
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok
    assert json.loads(entry.read_text())["index"].endswith(".index.json")  # rewritten from what the remote served
