"""Bad packs and indexes: clear errors naming the file, exit 1, nothing lost; repair rebuilds indexes;
a pack or unpack killed at any point leaves a valid dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from foundation_helpers import tree_digest
from pack_helpers import loose_blobs, pack_files, read_index, write_index
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.core import manifest
from ikdata.core.errors import BlobCorrupted, ProblemsFound
from ikdata.core.pack_writer import write_pack
from ikdata.core.packs import PACK_DIR, PackItem, load_packs
from ikdata.ops.gc import collect_garbage
from ikdata.ops.pack import pack_dataset

runner = CliRunner()
IKDATA = str(Path(sys.executable).with_name("ikdata"))


@pytest.fixture
def packed(make_ikdata_dataset) -> Path:
    root = make_ikdata_dataset(3)
    pack_dataset(root)
    return root


def _validate_cli(root: Path, *extra: str):
    return runner.invoke(app, ["validate", str(root), "--deep", *extra])


def _load_all(root: Path) -> None:
    """Replay's verified load of every stored blob, loose or packed."""
    from ikdata.core.records import TensorRef
    from ikdata.core.store import BLOB_KEY
    from ikdata.replay.blobs import load_verified

    ds = ikdata.open(root)
    for rel, _ in ds.store.iter_blobs():
        load_verified(ds.store, ds.resolve(rel), TensorRef(rel, BLOB_KEY))


def _assert_problem(result, name: str, words: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert any(name in line and words in line for line in result.output.splitlines()), result.output


@pytest.mark.parametrize("field, delta", [("offset", 4), ("length", -4)])
def test_index_with_a_wrong_offset_or_length(packed, field, delta):
    index = pack_files(packed)[1][0]
    document = read_index(index)
    digest = min(document["tensors"])
    document["tensors"][digest][field] += delta
    write_index(index, document)
    pack_bytes = pack_files(packed)[0][0].read_bytes()
    _assert_problem(_validate_cli(packed), index.name, f"places tensor {digest}")
    with pytest.raises(BlobCorrupted, match=index.name):
        _load_all(packed)
    assert pack_files(packed)[0][0].read_bytes() == pack_bytes  # nothing lost
    result = runner.invoke(app, ["repair", str(packed)])
    assert result.exit_code == 0, result.output
    assert f"rebuilt {PACK_DIR}/{index.name} from its pack" in result.output
    assert _validate_cli(packed).exit_code == 0
    _load_all(packed)


def test_pack_truncated_mid_tensor(packed):
    pack = pack_files(packed)[0][0]
    data = pack.read_bytes()
    pack.write_bytes(data[:-10])
    before = tree_digest(packed)
    _assert_problem(_validate_cli(packed), pack.name, "not a readable pack")
    with pytest.raises(BlobCorrupted, match=pack.name):
        _load_all(packed)
    runner.invoke(app, ["repair", str(packed)])
    with pytest.raises(ProblemsFound, match=pack.name):  # referenced: kept as it is, and named
        collect_garbage(packed, grace_minutes=0)
    after = tree_digest(packed)
    assert {k: v for k, v in after.items() if k != "ikdata.json"} == \
        {k: v for k, v in before.items() if k != "ikdata.json"}
    pack.write_bytes(data)  # restored from elsewhere: valid again
    assert _validate_cli(packed).exit_code == 0


def test_two_packs_claiming_one_digest_with_different_bytes(packed):
    blob = next(iter(load_packs(packed).blobs.values()))
    data = bytearray(blob.length)
    with open(packed / blob.pack, "rb") as stream:
        stream.seek(blob.offset)
        stream.readinto(data)
    data[0] ^= 0xFF
    bad_pack, _ = write_pack(packed, [PackItem(blob.digest, blob.dtype, blob.shape, bytes(data))])
    result = _validate_cli(packed)
    _assert_problem(result, Path(bad_pack).name, f"tensor {blob.digest} hashes to")
    assert blob.pack.rsplit("/", 1)[1] not in result.output  # the good pack is not blamed
    assert (packed / bad_pack).is_file() and (packed / blob.pack).is_file()  # nothing removed


def test_index_lists_a_digest_the_pack_lacks(packed):
    index = pack_files(packed)[1][0]
    document = read_index(index)
    document["tensors"]["f" * 64] = {"dtype": "torch.float32", "shape": [1], "offset": 8, "length": 4}
    write_index(index, document)
    _assert_problem(_validate_cli(packed), index.name, f"lists tensor {'f' * 64}, which pack")
    assert runner.invoke(app, ["repair", str(packed)]).exit_code == 0
    assert "f" * 64 not in index.read_text()
    assert _validate_cli(packed).exit_code == 0


@pytest.mark.parametrize("content", [b"not json {", b"[1, 2]", b'{"format": "ikdata-pack-index/1"}', b"\x00\xff" * 8])
def test_an_index_file_that_is_not_an_index(packed, content):
    index = pack_files(packed)[1][0]
    index.write_bytes(content)
    _assert_problem(_validate_cli(packed), index.name, "not a pack index")
    result = runner.invoke(app, ["pack", str(packed)])
    _assert_problem(result, index.name, "not a pack index")
    result = runner.invoke(app, ["gc", str(packed), "--grace", "0"])
    assert result.exit_code == 1 and index.name in result.output
    assert len(pack_files(packed)[0]) == 1  # nothing deleted
    assert runner.invoke(app, ["repair", str(packed)]).exit_code == 0
    assert _validate_cli(packed).exit_code == 0
    _load_all(packed)


def test_an_index_whose_pack_is_missing(packed):
    pack, index = pack_files(packed)[0][0], pack_files(packed)[1][0]
    pack.rename(packed / "elsewhere.bin")
    _assert_problem(_validate_cli(packed), index.name, "is missing")


def _run(*args: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if crash_at:
        env["IKDATA_TEST_CRASH_AT"] = crash_at
    return subprocess.run([IKDATA, *args], capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.mark.parametrize("crash_at", ["pack-written", "pack-published", "pack-loose-removed"])
def test_a_killed_pack_leaves_a_valid_dataset(make_ikdata_dataset, crash_at):
    root = make_ikdata_dataset(3)
    blob_set = manifest.blob_set(root)
    result = _run("pack", str(root), crash_at=crash_at)
    assert result.returncode == -9, result.stderr
    assert _validate_cli(root).exit_code == 0, _validate_cli(root).output
    assert manifest.blob_set(root) == blob_set
    _load_all(root)
    collect_garbage(root, grace_minutes=0)  # removes an unpublished pack; keeps every referenced tensor
    assert manifest.blob_set(root) == blob_set
    assert _run("pack", str(root)).returncode == 0
    assert loose_blobs(root) == [] and len(pack_files(root)[0]) == 1
    assert _validate_cli(root).exit_code == 0 and manifest.blob_set(root) == blob_set


@pytest.mark.parametrize("crash_at", ["unpack-loose-written", "unpack-index-removed"])
def test_a_killed_unpack_leaves_a_valid_dataset(packed, crash_at):
    blob_set = manifest.blob_set(packed)
    result = _run("unpack", str(packed), crash_at=crash_at)
    assert result.returncode == -9, result.stderr
    assert _validate_cli(packed).exit_code == 0
    assert manifest.blob_set(packed) == blob_set
    collect_garbage(packed, grace_minutes=0)
    assert _run("unpack", str(packed)).returncode == 0
    assert pack_files(packed) == ([], [])
    assert _validate_cli(packed).exit_code == 0 and manifest.blob_set(packed) == blob_set


def test_repair_publishes_an_unpublished_pack_holding_the_only_copy(packed):
    index = pack_files(packed)[1][0]
    index.unlink()  # the index lost by hand: the pack holds the only copies
    assert _validate_cli(packed).exit_code == 1  # rows name blobs nothing holds
    collect_garbage(packed, grace_minutes=0)  # gc keeps a pack that holds the only copy
    assert len(pack_files(packed)[0]) == 1
    result = runner.invoke(app, ["repair", str(packed), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pack_indexes"] == [f"{PACK_DIR}/{index.name}"]
    assert _validate_cli(packed).exit_code == 0


def test_packs_behind_links_are_not_read(packed, tmp_path):
    """DESIGN.md contract 3: a packs folder, a pack or an index that is a link is reported, never followed."""
    from ikdata.core.records import TensorRef
    from ikdata.core.store import BLOB_KEY, BlobStore, blob_path

    digest = next(iter(load_packs(packed).blobs))
    outside = tmp_path / "outside-packs"
    (packed / PACK_DIR).rename(outside)
    (packed / PACK_DIR).symlink_to(outside)
    _assert_problem(_validate_cli(packed), PACK_DIR, "is a link that leaves the dataset")
    assert not BlobStore(packed).has(digest)
    from ikdata.core.errors import BlobNotFound

    with pytest.raises(BlobNotFound):
        BlobStore(packed).get_numpy(TensorRef(blob_path(digest), BLOB_KEY))
    (packed / PACK_DIR).unlink()
    (packed / PACK_DIR).mkdir()
    for item in outside.iterdir():  # the files back in place, as links: still refused
        (packed / PACK_DIR / item.name).symlink_to(item)
    result = _validate_cli(packed)
    _assert_problem(result, PACK_DIR, "is a link")
    assert not BlobStore(packed).has(digest)
