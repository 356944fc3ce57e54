"""A packed dataset round-trips through push, clone, pull, import and replay."""

from __future__ import annotations

import json
import uuid

import pytest
from foundation_helpers import gemm_definition_record
from pack_helpers import loose_blobs, pack_files

import ikdata
from ikdata.core import manifest
from ikdata.importing.apply import import_dataset
from ikdata.ops.pack import pack_dataset
from ikdata.ops.validate import validate
from ikdata.remote.pull import clone, pull
from ikdata.remote.push import push


def _replay(root, tmp_path):
    from ikdata.replay.runner import replay

    folder = tmp_path / "trusted"
    record = gemm_definition_record()
    path = folder / record["op_type"] / f"{record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return replay(ikdata.open(root, definitions=[folder]), reuse=False)


def _validated(root, tmp_path):
    """Replay a packed dataset and commit its report, so import accepts its rows."""
    from ikdata.core.writer import DatasetWriter

    assert _replay(root, tmp_path).exit_code == 0
    DatasetWriter(root).commit()
    return root


def test_replay_of_a_packed_dataset(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(3)
    pack_dataset(root)
    result = _replay(root, tmp_path)
    assert result.exit_code == 0, result.summary()
    assert loose_blobs(root) == []


def test_replay_refuses_a_corrupt_packed_tensor(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    pack_dataset(root)
    pack = pack_files(root)[0][0]
    data = bytearray(pack.read_bytes())
    data[-1] ^= 0xFF  # the last tensor's last byte: same size, header intact
    pack.write_bytes(bytes(data))
    result = _replay(root, tmp_path)
    assert result.exit_code != 0
    assert pack.name in str(result)  # the case failed, naming the pack


def test_import_copies_packed_source_blobs_out_loose(make_ikdata_dataset, tmp_path):
    src = make_ikdata_dataset(3)
    expected = manifest.blob_set(src)
    pack_dataset(src)
    _validated(src, tmp_path)
    dst = tmp_path / "dst"
    import_dataset(src, dst, definitions=[tmp_path / "trusted"])  # its reference re-judges the report
    assert manifest.blob_set(dst) == expected
    assert not (dst / "blob" / "packs").exists() and len(loose_blobs(dst)) == expected["count"]
    assert validate(ikdata.open(dst), deep=True).ok


def test_import_into_a_packed_dataset(make_ikdata_dataset, tmp_path):
    dst = make_ikdata_dataset(2, seed=1)
    pack_dataset(dst)
    src = _validated(make_ikdata_dataset(3, seed=1), tmp_path)  # dst's rows and blobs, and one more row
    result = import_dataset(src, dst, definitions=[tmp_path / "trusted"])
    assert validate(ikdata.open(dst), deep=True).ok
    assert len(loose_blobs(dst)) == 2  # only the new row's A and C came in; the shared W stayed packed
    assert result is not None


@pytest.mark.parametrize("backend", ["folder", "s3"])
def test_push_clone_pull_of_a_packed_dataset(make_ikdata_dataset, tmp_path, backend, request):
    root = make_ikdata_dataset(3)
    expected = manifest.blob_set(root)
    pack_dataset(root)
    _validated(root, tmp_path)  # pull merges by import's rules: validated rows only
    if backend == "s3":
        request.getfixturevalue("s3_env")
        url = f"s3://ikdata-test/packed-{uuid.uuid4().hex[:8]}"
    else:
        url = str(tmp_path / "remote")
    pushed = push(root, url)
    assert pushed.published and pushed.blobs_sent == expected["count"]
    copy = clone(url, tmp_path / "copy")
    assert copy.dataset_id == manifest.current_id(root)
    assert manifest.blob_set(tmp_path / "copy") == expected
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok
    again = push(root, url)
    assert not again.published and again.blobs_sent == 0
    # pull into a packed dataset with other rows: merged by import's rules
    other = make_ikdata_dataset(2, seed=7)
    pack_dataset(other)
    pull(url, other, definitions=[tmp_path / "trusted"])  # the remote's report is re-judged
    assert validate(ikdata.open(other), deep=True).ok
    assert sum(1 for _ in ikdata.open(other).workloads()) == 5


def test_noop_push_of_a_packed_dataset_to_s3_reads_the_manifest_and_stops(make_ikdata_dataset, s3_requests):
    root = make_ikdata_dataset(3)
    pack_dataset(root)
    url = f"s3://ikdata-test/noop-{uuid.uuid4().hex[:8]}"
    push(root, url)
    s3_requests.clear()
    again = push(root, url)
    assert not again.published
    assert not [r for r in s3_requests if r.startswith(("PUT", "POST"))]
    # the manifest read and one listing, whose ETags check the pack and the files (issue 21, finding 5;
    # issue 26: the pack travels as a pack, no bucket check, one listing)
    assert len(s3_requests) == 2, s3_requests
    assert set(again.checked) == {"etag-md5"} and not again.trusted_by_size


def test_pull_takes_blobs_the_local_dataset_holds_packed_from_its_packs(make_ikdata_dataset, tmp_path, s3_requests):
    root = _validated(make_ikdata_dataset(3), tmp_path)
    url = f"s3://ikdata-test/have-{uuid.uuid4().hex[:8]}"
    push(root, url)
    local = tmp_path / "local"
    import_dataset(root, local, definitions=[tmp_path / "trusted"])  # the same rows and blobs, then packed
    pack_dataset(local)
    other = make_ikdata_dataset(1, seed=9)  # one more validated row, pushed on top
    _validated(other, tmp_path)
    pull(url, other, definitions=[tmp_path / "trusted"])  # the remote's report is re-judged
    push(other, url)
    s3_requests.clear()
    pull(url, local, definitions=[tmp_path / "trusted"])
    blob_gets = [r for r in s3_requests if r.startswith("GET") and "/blob/" in r]
    assert len(blob_gets) == 1  # only the new row's A, W and C, in the pack push made; the rest from local packs
    assert validate(ikdata.open(local), deep=True).ok


def test_import_refuses_a_corrupt_packed_source_naming_the_pack(make_ikdata_dataset, tmp_path):
    from ikdata.core.errors import ProblemsFound

    src = _validated(make_ikdata_dataset(2), tmp_path)
    pack_dataset(src)
    pack = pack_files(src)[0][0]
    data = bytearray(pack.read_bytes())
    data[-1] ^= 0xFF
    pack.write_bytes(bytes(data))
    with pytest.raises(ProblemsFound, match=pack.name):
        import_dataset(src, tmp_path / "dst", definitions=[tmp_path / "trusted"])
    assert not (tmp_path / "dst" / "receipts.jsonl").exists()  # nothing imported
