"""Packs on remotes, one contract over every backend (folder, file://, memory://, S3 on loopback, the Hub
stand-in): a packed dataset travels as packs, clones stay packed, a pull of a few members reads byte
ranges, a damaged remote pack is refused and named, and a killed push never publishes a manifest
naming a pack that is not there."""

from __future__ import annotations

import pytest

import ikdata
from ikdata.core import faults, manifest
from ikdata.core.errors import RemoteError
from ikdata.core.packs import PACK_DIR, load_packs
from ikdata.ops.pack import pack_dataset
from ikdata.ops.validate import validate
from ikdata.remote.connect import open_backend
from ikdata.remote.pull import clone, fetch_blobs
from ikdata.remote.push import push
from remote_helpers import tamper


def _hub(request, url):
    return request.getfixturevalue("hub_server") if url.startswith("hf://") else None


def _listing(url: str) -> dict[str, int]:
    with open_backend(url) as backend:
        return backend.list_objects("")


def _packs_on(url: str) -> tuple[list[str], list[str]]:
    listed = _listing(url)
    return (sorted(r for r in listed if r.startswith(PACK_DIR) and r.endswith(".safetensors")),
            sorted(r for r in listed if r.startswith("blob/sha256/")))


def test_a_packed_dataset_travels_as_packs_and_clones_stay_packed(remote_url, make_dataset, tmp_path):
    root = make_dataset("src", rows=4)
    pack_dataset(root)
    blobs = manifest.read(root)["blobs"]["count"]
    result = push(root, remote_url)
    assert result.published and result.packs_sent == 1 and result.blobs_sent == blobs
    packs, loose = _packs_on(remote_url)
    assert len(packs) == 1 and loose == []  # the pack and its index, never its members one by one
    assert packs[0] in {b.pack for b in load_packs(root).blobs.values()}  # the very pack

    copy = clone(remote_url, tmp_path / "copy")
    assert copy.dataset_id == manifest.current_id(root) and copy.blobs_fetched == blobs
    assert not list((tmp_path / "copy" / "blob").rglob("sha256/**/*.safetensors"))  # kept packed
    assert len(load_packs(tmp_path / "copy").blobs) == blobs
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok


def test_small_loose_blobs_are_packed_on_push_unless_told_not_to(remote_url, make_dataset, tmp_path):
    root = make_dataset("src", rows=3)
    blobs = manifest.read(root)["blobs"]["count"]
    assert push(root, remote_url).packs_sent == 1
    packs, loose = _packs_on(remote_url)
    assert len(packs) == 1 and loose == []
    assert not push(root, remote_url).published  # the next push knows the pack: nothing sent
    copy = clone(remote_url, tmp_path / "copy")
    assert copy.dataset_id == manifest.current_id(root) and len(load_packs(tmp_path / "copy").blobs) == blobs

    other = make_dataset("other", rows=2, seed=4)
    url = remote_url + "-loose"
    result = push(other, url, pack=False)
    assert result.packs_sent == 0 and len(_packs_on(url)[1]) == manifest.read(other)["blobs"]["count"]


def test_a_pull_of_a_few_missing_members_reads_byte_ranges(remote_url, make_dataset, tmp_path, monkeypatch):
    from ikdata.remote import packs as remote_packs

    big = make_dataset("big", rows=16)  # the first rows of a smaller dataset of the same seed are its rows
    push(big, remote_url)
    small = make_dataset("small", rows=14)
    have = {r for r in (small / "blob").rglob("*.safetensors")}
    reads: list[tuple[str, int | None, int | None]] = []
    whole: list[str] = []
    kind = type(open_backend(remote_url))
    reader = next(c for c in kind.__mro__ if "read" in vars(c))
    fetcher = next(c for c in kind.__mro__ if "fetch" in vars(c))
    original_read, original_fetch = reader.read, fetcher.fetch

    def read(self, rel, *, start=None, end=None):
        reads.append((rel, start, end))
        return original_read(self, rel, start=start, end=end)

    def fetch(self, rel, dest):
        whole.append(rel)
        return original_fetch(self, rel, dest)

    monkeypatch.setattr(reader, "read", read)
    monkeypatch.setattr(fetcher, "fetch", fetch)
    monkeypatch.setattr(remote_packs, "RANGE_GAP", 0)  # a tiny pack: no joining across other members
    wanted = {b.relative_to(big).as_posix() for b in (big / "blob").rglob("*.safetensors")}
    target = tmp_path / "staging"
    with open_backend(remote_url) as backend:
        fetched, nbytes, present = fetch_blobs(backend, wanted, target, have=small)
    assert fetched == len(wanted) - len(have) == 4 and present == len(have)
    pack_reads = [r for r in reads if r[0].startswith(PACK_DIR) and r[0].endswith(".safetensors")]
    assert whole == [] and 1 <= len(pack_reads) <= 4  # ranges of the pack (adjacent members joined)
    assert all(start is not None and end is not None for _, start, end in pack_reads)
    assert nbytes < 0.5 * sum(_listing(remote_url)[r[0]] for r in pack_reads[:1])
    assert len(load_packs(target).blobs) == 4  # the members landed packed, each verified


def _member_offset(root, url) -> tuple[str, str, int]:
    """(pack path, the blob path of its first member, an offset inside that member's data)."""
    found = load_packs(root)
    blob = min(found.blobs.values(), key=lambda b: b.offset)
    return blob.pack, f"blob/sha256/{blob.digest[:2]}/{blob.digest}.safetensors", blob.offset + blob.length // 2


def test_a_corrupted_member_inside_a_remote_pack_is_refused_and_named(remote_url, make_dataset, tmp_path, request):
    root = make_dataset("src", rows=3)
    pack_dataset(root)
    push(root, remote_url)
    pack, victim, offset = _member_offset(root, remote_url)
    data = bytearray((root / pack).read_bytes())
    data[offset] ^= 0xFF
    tamper(remote_url, pack, bytes(data), hub=_hub(request, remote_url))

    with pytest.raises(RemoteError) as caught:
        clone(remote_url, tmp_path / "copy")
    message = str(caught.value)
    assert victim in message and pack in message and "do not match their digest and were refused" in message
    assert not (tmp_path / "copy").exists()
    digest = victim.rsplit("/", 1)[1].split(".")[0]
    staged = list(tmp_path.glob(".ikdata-clone-copy-*"))
    for folder in staged:  # the damaged member landed nowhere, nor did the damaged pack
        assert not list(folder.rglob(f"{digest}*")) and not list(folder.rglob(pack.rsplit("/", 1)[1]))
        assert digest not in load_packs(folder).blobs


def test_a_pack_truncated_on_the_remote_is_named_and_the_next_push_repairs_it(remote_url, make_dataset, tmp_path,
                                                                              request):
    root = make_dataset("src", rows=3)
    pack_dataset(root)
    push(root, remote_url)
    pack = next(iter(load_packs(root).blobs.values())).pack
    data = (root / pack).read_bytes()
    tamper(remote_url, pack, data[:len(data) // 2], hub=_hub(request, remote_url))

    with pytest.raises(RemoteError) as caught:
        clone(remote_url, tmp_path / "copy")
    assert pack in str(caught.value) and "truncated" in str(caught.value)
    again = push(root, remote_url)
    assert not again.published and again.repaired and again.packs_sent == 1
    assert clone(remote_url, tmp_path / "copy").dataset_id == manifest.current_id(root)


class _Killed(BaseException):
    """The pushing process dies here: nothing after the checkpoint runs."""


@pytest.mark.parametrize("at", ["packs-sent", "blobs-sent"])
def test_a_push_killed_while_sending_packs_publishes_no_manifest_naming_them(remote_url, make_dataset, tmp_path, at):
    first = make_dataset("v1", rows=3)
    push(first, remote_url)
    second = make_dataset("v2", rows=6)  # the same first rows, and more, in a new pack

    def die(name: str) -> None:
        if name == at:
            raise _Killed(name)

    with faults.observe(die), pytest.raises(_Killed):
        push(second, remote_url)
    copy = clone(remote_url, tmp_path / "copy")  # the remote still holds v1 whole, whatever was left beside it
    assert copy.dataset_id == manifest.current_id(first)
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok
    assert push(second, remote_url).published
    assert clone(remote_url, tmp_path / "copy2").dataset_id == manifest.current_id(second)
