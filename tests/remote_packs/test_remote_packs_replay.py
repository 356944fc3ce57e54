"""Replay's side of packs: reuse vouches for packed blobs (evidence: the pack file and the offset), and a
replay reading from a URL (Ray workers, the driver's families) takes packed blobs as byte ranges of their
packs through the bounded, verifying cache."""

from __future__ import annotations

import json
import uuid

import ikdata
from ikdata.core.packs import load_packs
from ikdata.ops.pack import pack_dataset
from ikdata.remote.blob_cache import BlobCache, BlobRefused
from ikdata.remote.connect import open_backend
from ikdata.remote.push import push
from remote_helpers import tamper


def _trusted(tmp_path, record) -> object:
    folder = tmp_path / "trusted"
    path = folder / record["op_type"] / f"{record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return folder


def test_reuse_vouches_for_packed_blobs_and_not_for_a_damaged_pack(make_dataset, tmp_path, gemm_record):
    from ikdata.replay.runner import replay

    root = make_dataset("src", rows=3)
    pack_dataset(root)
    ds = ikdata.open(root, definitions=[_trusted(tmp_path, gemm_record)])
    first = replay(ds).report["cases"]
    assert not any(c.get("reused") for c in first) and all(c["status"] == "passed" for c in first)
    second = replay(ds).report["cases"]
    assert all(c.get("reused") for c in second)  # on packed blobs, too (it reran them before)
    evidence = [json.loads(line) for line in (tmp_path / "user-cache" / "replay-verified.jsonl").read_text().splitlines()]
    assert any("offset" in e for e in evidence)  # the pack file and where the tensor lies in it
    assert all(c.get("reused") for c in replay(ds).report["cases"])  # now by that evidence

    blob = next(iter(load_packs(root).blobs.values()))
    with open(root / blob.pack, "r+b") as stream:  # a damaged pack: its ctime moves, the slice is rehashed
        stream.seek(blob.offset)
        byte = stream.read(1)
        stream.seek(blob.offset)
        stream.write(bytes([byte[0] ^ 0xFF]))
    third = replay(ds)
    assert not all(c.get("reused") for c in third.report["cases"]) and third.exit_code != 0


def test_a_replay_cache_reads_packed_blobs_by_range_and_refuses_a_damaged_member(make_dataset, s3_env, tmp_path,
                                                                                  s3_requests):
    root = make_dataset("src", rows=12)
    pack_dataset(root)
    url = f"s3://ikdata-test/cache-{uuid.uuid4().hex[:8]}"
    push(root, url)
    found = load_packs(root)
    members = sorted(found.blobs.values(), key=lambda b: b.offset)
    wanted = [f"blob/sha256/{m.digest[:2]}/{m.digest}.safetensors" for m in (members[0], members[1])]
    pack_size = (root / members[0].pack).stat().st_size
    s3_requests.clear()
    with open_backend(url) as backend:
        cache = BlobCache(backend, tmp_path / "worker", max_bytes=1 << 30)
        assert cache.prefetch(wanted) == {}
    assert cache.range_requests == 1 and cache.fetched_bytes < pack_size / 4  # two neighbours, one range
    assert all((tmp_path / "worker" / rel).is_file() for rel in wanted)
    pack_gets = [r for r in s3_requests if r.startswith("GET") and members[0].pack in r]
    assert len(pack_gets) == 1, s3_requests  # the listing of blob/packs/ and this one ranged GET

    victim = members[-1]
    data = bytearray((root / victim.pack).read_bytes())
    data[victim.offset] ^= 0xFF
    tamper(url, victim.pack, bytes(data))
    rel = f"blob/sha256/{victim.digest[:2]}/{victim.digest}.safetensors"
    with open_backend(url) as backend:
        failures = BlobCache(backend, tmp_path / "worker2", max_bytes=1 << 30).prefetch([rel])
    assert isinstance(failures[rel], BlobRefused) and victim.pack in str(failures[rel])
    assert not (tmp_path / "worker2" / rel).exists()
