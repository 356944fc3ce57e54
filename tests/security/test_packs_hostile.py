"""Damaged and forged packs never cost a good copy (issue 21, finding 4).

Each test damages a packed dataset the way the adversarial campaign did, runs the command that
used to lose data (pack, unpack, gc, repair, validate), and asserts that every tensor a row
names still loads and verifies afterwards; the damage is named, never followed out of the dataset.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.core.digest import bytes_digest
from ikdata.core.pack_writer import write_pack
from ikdata.core.packs import PACK_DIR, PackItem, load_packs, read_packed
from ikdata.core.store import BLOB_KEY, blob_path

runner = CliRunner()


@pytest.fixture
def packed(make_ikdata_dataset) -> Path:
    """A dataset of 4 GEMM rows (9 tensors), every blob in one pack."""
    from ikdata.ops.pack import pack_dataset

    root = make_ikdata_dataset(4)
    pack_dataset(root)
    assert not list((root / "blob" / "sha256").rglob("*.safetensors"))
    return root


def _cli(*args: str):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def _referenced(root: Path) -> list[str]:
    from ikdata.ops.gc import referenced_blobs

    return sorted(referenced_blobs(root))


def _assert_every_row_tensor_verifies(root: Path) -> None:
    """Replay's verified load of every blob a row or receipt names: present, and hashing to its name."""
    from ikdata.core.records import TensorRef
    from ikdata.replay.blobs import load_verified

    ds = ikdata.open(root)
    for rel in _referenced(root):
        _, digest = load_verified(ds.store, ds.resolve(rel), TensorRef(rel, BLOB_KEY))
        assert rel.endswith(f"/{digest}.safetensors")


def _pack_and_index(root: Path) -> tuple[Path, Path]:
    [(index, blobs)] = load_packs(root).listed.items()
    return root / blobs[0].pack, root / index


def _write_loose_copy(root: Path, digest: str) -> Path:
    """Put the good canonical loose copy of a packed tensor back beside its pack."""
    from ikdata.core.store import write_atomic

    blob = load_packs(root).blobs[digest]
    target = root / blob_path(digest)
    write_atomic(target, blob.loose_bytes(read_packed(root, blob)))
    return target


def _flip_packed_byte(root: Path, digest: str) -> None:
    """Damage a packed tensor's bytes in place (its pack no longer hashes to its name either)."""
    blob = load_packs(root).blobs[digest]
    with open(root / blob.pack, "r+b") as stream:
        stream.seek(blob.offset)
        byte = stream.read(1)
        stream.seek(blob.offset)
        stream.write(bytes([byte[0] ^ 0xFF]))


def test_pack_keeps_the_loose_copy_when_the_packed_copy_is_damaged(packed):
    digest = _referenced(packed)[0].rsplit("/", 1)[1].split(".")[0]
    loose = _write_loose_copy(packed, digest)
    _flip_packed_byte(packed, digest)
    result = _cli("pack", str(packed))
    assert loose.is_file(), "pack deleted the only good copy"
    assert result.exit_code == 1 and digest in result.output, result.output
    _assert_every_row_tensor_verifies(packed)


def test_unpack_replaces_a_damaged_loose_copy_before_removing_the_pack(packed):
    digest = _referenced(packed)[0].rsplit("/", 1)[1].split(".")[0]
    loose = _write_loose_copy(packed, digest)
    data = bytearray(loose.read_bytes())
    data[-1] ^= 0xFF
    loose.write_bytes(bytes(data))  # a damaged loose copy beside the good packed one
    result = _cli("unpack", str(packed))
    assert result.exit_code == 0, result.output
    assert not list((packed / PACK_DIR).glob("*.safetensors"))
    _assert_every_row_tensor_verifies(packed)


def test_gc_with_an_index_listing_a_digest_the_pack_lacks(packed):
    pack, index = _pack_and_index(packed)
    document = json.loads(index.read_text())
    document["tensors"]["f" * 64] = {"dtype": "torch.float32", "shape": [1], "offset": 8, "length": 4}
    index.write_text(json.dumps(document))
    result = _cli("gc", str(packed), "--grace", "0")
    assert pack.is_file(), "gc deleted the pack"
    _assert_every_row_tensor_verifies(packed)
    assert result.exit_code == 1 and index.name in result.output, result.output
    assert _cli("repair", str(packed)).exit_code == 0  # the index is rebuilt from its pack
    assert _cli("gc", str(packed), "--grace", "0").exit_code == 0
    assert _cli("validate", str(packed), "--deep").exit_code == 0
    _assert_every_row_tensor_verifies(packed)


def test_gc_with_one_hex_digit_of_an_index_key_flipped(packed):
    pack, index = _pack_and_index(packed)
    document = json.loads(index.read_text())
    key = sorted(document["tensors"])[1]
    forged = key[:-1] + ("0" if key[-1] != "0" else "1")
    document["tensors"][forged] = document["tensors"].pop(key)
    index.write_text(json.dumps(document))
    result = _cli("gc", str(packed), "--grace", "0")
    assert pack.is_file(), "gc deleted the pack"
    assert result.exit_code == 1 and index.name in result.output, result.output
    assert _cli("repair", str(packed)).exit_code == 0  # the index is rebuilt from its pack: the key comes back
    _assert_every_row_tensor_verifies(packed)
    assert _cli("validate", str(packed), "--deep").exit_code == 0


def test_gc_keeps_the_good_copy_when_a_second_pack_holds_a_corrupt_one(packed):
    good_pack, _ = _pack_and_index(packed)
    blobs = load_packs(packed).blobs
    digest = _referenced(packed)[0].rsplit("/", 1)[1].split(".")[0]
    blob = blobs[digest]
    data = bytearray(read_packed(packed, blob))
    for position in range(len(data)):  # a corrupt copy whose pack sorts first, so readers and gc meet it first
        data[position] ^= 0xFF
        bad_pack, bad_index = write_pack(packed, [PackItem(digest, blob.dtype, blob.shape, bytes(data))])
        if os.path.basename(bad_pack) < good_pack.name:
            break
        (packed / bad_index).unlink()
        (packed / bad_pack).unlink()
        data[position] ^= 0xFF
    assert load_packs(packed).blobs[digest].pack == bad_pack
    result = _cli("gc", str(packed), "--grace", "0")
    assert good_pack.is_file(), "gc dropped the good copy"
    assert result.exit_code == 0, result.output
    assert not (packed / bad_pack).exists()  # the corrupt duplicate is the garbage
    _assert_every_row_tensor_verifies(packed)
    assert _cli("validate", str(packed), "--deep").exit_code == 0


def _misname(root: Path) -> tuple[Path, str]:
    """Rename the pack (and its index) to a name that is not the sha256 of its bytes."""
    pack, index = _pack_and_index(root)
    true_name = pack.name
    fake = bytes_digest(b"not this pack")
    document = json.loads(index.read_text())
    document["pack"] = f"{fake}.safetensors"
    pack.rename(pack.with_name(f"{fake}.safetensors"))
    index.unlink()
    (root / PACK_DIR / f"{fake}.index.json").write_text(json.dumps(document))
    return root / PACK_DIR / f"{fake}.safetensors", true_name


def test_validate_deep_names_a_pack_whose_name_is_not_its_digest(packed):
    pack, true_name = _misname(packed)
    result = _cli("validate", str(packed), "--deep")
    assert result.exit_code == 1, result.output
    assert any(pack.name in line and true_name.split(".")[0] in line for line in result.output.splitlines()), \
        result.output
    _assert_every_row_tensor_verifies(packed)
    assert _cli("unpack", str(packed)).exit_code == 0  # the remedy the message names: rewritten from its tensors
    assert _cli("pack", str(packed)).exit_code == 0
    assert (packed / PACK_DIR / true_name).is_file() and not pack.exists()
    assert _cli("validate", str(packed), "--deep").exit_code == 0
    _assert_every_row_tensor_verifies(packed)


def test_pack_does_not_rely_on_a_misnamed_pack(packed):
    digest = _referenced(packed)[0].rsplit("/", 1)[1].split(".")[0]
    loose = _write_loose_copy(packed, digest)
    _misname(packed)
    result = _cli("pack", str(packed))
    assert result.exit_code == 1 and loose.is_file(), result.output
    _assert_every_row_tensor_verifies(packed)


def test_gc_does_not_delete_an_unpublished_pack_for_a_damaged_loose_copy(packed):
    pack, index = _pack_and_index(packed)
    digest = _referenced(packed)[0].rsplit("/", 1)[1].split(".")[0]
    loose = _write_loose_copy(packed, digest)
    index.unlink()  # unpublished: gc removes it when its tensors are stored elsewhere
    for rel in _referenced(packed):
        if rel != blob_path(digest):
            _write_loose_copy_from(packed, pack, rel)
    data = bytearray(loose.read_bytes())
    data[-1] ^= 0xFF
    loose.write_bytes(bytes(data))
    _cli("gc", str(packed), "--grace", "0")
    assert pack.is_file(), "gc deleted the only good copy"
    loose.unlink()  # the damaged copy removed by hand: repair publishes the pack again
    assert _cli("repair", str(packed)).exit_code == 0
    _assert_every_row_tensor_verifies(packed)


def _write_loose_copy_from(root: Path, pack: Path, rel: str) -> None:
    from ikdata.core.packs import PackedBlob, index_from_pack
    from ikdata.core.store import write_atomic

    digest = rel.rsplit("/", 1)[1].split(".")[0]
    t = index_from_pack(pack)["tensors"][digest]
    blob = PackedBlob(digest, pack.relative_to(root).as_posix(), "", t["dtype"], tuple(t["shape"]), t["offset"],
                      t["length"])
    write_atomic(root / rel, blob.loose_bytes(read_packed(root, blob)))


@pytest.mark.parametrize("what", ["pack", "folder"])
def test_repair_does_not_follow_a_pack_link_out_of_the_dataset(packed, tmp_path, what):
    pack, index = _pack_and_index(packed)
    outside = tmp_path / "outside"
    outside.mkdir()
    if what == "pack":  # the pack replaced by a link to a file elsewhere, its index damaged
        target = outside / pack.name
        pack.rename(target)
        pack.symlink_to(target)
        index.write_text("not json {")
        watched = [index]
    else:  # the whole packs folder is a link to a folder elsewhere, an index there damaged
        folder = packed / PACK_DIR
        folder.rename(outside / "packs")
        folder.symlink_to(outside / "packs")
        (outside / "packs" / index.name).write_text("not json {")
        watched = [outside / "packs" / index.name]
    before = {p: p.read_bytes() for p in watched}
    listing = sorted(os.listdir(outside if what == "pack" else outside / "packs"))
    result = _cli("repair", str(packed))
    assert "Traceback" not in result.output
    assert {p: p.read_bytes() for p in watched} == before  # nothing rebuilt from a file outside
    assert sorted(os.listdir(outside if what == "pack" else outside / "packs")) == listing
    validated = _cli("validate", str(packed))
    assert validated.exit_code == 1 and "link" in validated.output, validated.output
    # The link replaced by the file itself: repair rebuilds what it refused to touch, nothing was lost.
    if what == "pack":
        pack.unlink()
        target.rename(pack)
    else:
        folder.unlink()
        (outside / "packs").rename(folder)
    assert _cli("repair", str(packed)).exit_code == 0
    _assert_every_row_tensor_verifies(packed)
    assert _cli("validate", str(packed), "--deep").exit_code == 0
