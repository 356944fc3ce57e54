"""Packs: small blobs in safetensors packs keyed by digest; every reader reads them as loose blobs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from foundation_helpers import GEMM_NAME, tree_digest
from pack_helpers import loose_blobs, pack_files
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.core import manifest
from ikdata.core.packs import PACK_DIR, load_packs
from ikdata.core.records import TensorRef
from ikdata.core.store import BLOB_KEY, BlobStore, blob_path
from ikdata.ops.gc import collect_garbage
from ikdata.ops.pack import pack_dataset, unpack_dataset
from ikdata.ops.validate import validate

runner = CliRunner()


def test_pack_moves_small_blobs_and_keeps_the_blob_set(make_ikdata_dataset):
    root = make_ikdata_dataset(4)
    before_set, before_loose = manifest.blob_set(root), loose_blobs(root)
    manifest_bytes = (root / "ikdata.json").read_bytes()
    inputs = {r.uuid: {k: v.numpy().copy() for k, v in ikdata.open(root).load_inputs(r).items()}
              for r in ikdata.open(root).workloads()}
    result = pack_dataset(root)
    assert result.packed == len(before_loose) and len(result.packs) == 1
    assert loose_blobs(root) == []
    packs, indexes = pack_files(root)
    assert len(packs) == 1 and len(indexes) == 1
    assert manifest.blob_set(root) == before_set  # listed under loose paths, with loose sizes
    assert (root / "ikdata.json").read_bytes() == manifest_bytes
    report = validate(ikdata.open(root), deep=True)
    assert report.ok, [str(p) for p in report.problems]
    assert report.blobs_rehashed == len(before_loose)
    ds = ikdata.open(root)
    for row in ds.workloads():
        for name, value in ds.load_inputs(row).items():
            np.testing.assert_array_equal(value.numpy(), inputs[row.uuid][name])


def test_a_pack_is_a_safetensors_file_keyed_by_digest(make_ikdata_dataset):
    from safetensors import safe_open

    from ikdata.core.digest import tensor_digest

    root = make_ikdata_dataset(2)
    pack_dataset(root)
    packs, indexes = pack_files(root)
    index = json.loads(indexes[0].read_text())
    assert index["pack"] == packs[0].name and index["bytes"] == packs[0].stat().st_size
    with safe_open(str(packs[0]), framework="pt") as handle:
        keys = list(handle.keys())
        assert sorted(keys) == sorted(index["tensors"])
        for key in keys:
            tensor = handle.get_tensor(key)
            assert tensor_digest(str(tensor.dtype), tuple(tensor.shape), tensor.contiguous().numpy().tobytes()) == key


def test_threshold_leaves_bigger_blobs_loose(make_ikdata_dataset):
    root = make_ikdata_dataset(3)
    sizes = dict(BlobStore(root).iter_blobs())
    cut = sorted(sizes.values())[len(sizes) // 2]
    result = pack_dataset(root, threshold=cut)
    assert result.packed == sum(1 for s in sizes.values() if s < cut)
    assert set(loose_blobs(root)) == {r for r, s in sizes.items() if s >= cut}
    assert validate(ikdata.open(root), deep=True).ok


def test_pack_bytes_splits_into_several_packs(make_ikdata_dataset):
    root = make_ikdata_dataset(4)
    result = pack_dataset(root, pack_bytes=64)
    assert len(result.packs) > 1
    assert len(load_packs(root).listed) == len(result.packs)
    assert validate(ikdata.open(root), deep=True).ok


def test_store_has_get_and_numpy_read_packed_blobs(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    store = BlobStore(root)
    digest = next(iter(load_packs(root).blobs), None) or loose_blobs(root)[0].rsplit("/", 1)[1].split(".")[0]
    ref = TensorRef(blob_path(digest), BLOB_KEY)
    expected = store.get_numpy(ref)
    pack_dataset(root)
    assert not (root / blob_path(digest)).exists()
    assert store.has(digest) and not store.has("0" * 64)
    np.testing.assert_array_equal(store.get_numpy(ref), expected)
    np.testing.assert_array_equal(store.get(ref).numpy(), expected)


def test_replay_loads_packed_blobs_verified(make_ikdata_dataset):
    from ikdata.replay.blobs import load_verified

    root = make_ikdata_dataset(2)
    pack_dataset(root)
    ds = ikdata.open(root)
    row = next(iter(ds.workloads()))
    for name, descriptor in row.inputs.items():
        tensor, digest = load_verified(ds.store, ds.resolve(descriptor.path), descriptor)
        assert digest == descriptor.path.rsplit("/", 1)[1].split(".")[0]
        assert tensor.shape == ds.load_inputs(row)[name].shape


def test_unpack_restores_the_loose_tree_byte_for_byte(make_ikdata_dataset):
    root = make_ikdata_dataset(3)
    before = tree_digest(root)
    pack_dataset(root)
    assert tree_digest(root) != before
    result = unpack_dataset(root)
    assert result.written > 0 and len(result.packs_removed) == 1
    assert not any((root / PACK_DIR).iterdir())
    after = tree_digest(root)
    assert {k: v for k, v in after.items() if not k.startswith(PACK_DIR)} == before


def test_pack_twice_and_new_blobs_go_to_a_new_pack(make_ikdata_dataset, tmp_path):
    from foundation_helpers import gemm_definition_record

    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    root = make_ikdata_dataset(2)
    pack_dataset(root)
    assert pack_dataset(root).packed == 0  # nothing left loose
    writer = DatasetWriter(root)
    definition = Definition.from_dict(gemm_definition_record(), origin=USER, source="test")
    a, w = np.full((5, 8), 3, np.float32), np.full((4, 8), 2, np.float32)
    writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, {"request_id": "new", "step": 9})
    writer.commit()
    assert len(loose_blobs(root)) == 3
    assert pack_dataset(root).packed == 3
    assert len(pack_files(root)[0]) == 2
    assert validate(ikdata.open(root), deep=True).ok


def test_gc_rewrites_a_pack_holding_garbage_and_drops_a_dead_pack(make_ikdata_dataset):
    root = make_ikdata_dataset(3)
    rows = root / f"workloads/gemm/{GEMM_NAME}.jsonl"
    pack_dataset(root)
    count = manifest.blob_set(root)["count"]
    # drop the last row and its receipt: its A and C become garbage, the shared W stays
    lines = rows.read_text().splitlines(keepends=True)
    dropped = json.loads(lines[-1])["workload"]["uuid"]
    rows.write_text("".join(lines[:-1]))
    receipts = root / "receipts.jsonl"
    receipts.write_text("".join(l for l in receipts.read_text().splitlines(keepends=True)
                                if json.loads(l)["uuid"] != dropped))
    result = collect_garbage(root, grace_minutes=0)
    assert result.bytes_freed > 0
    assert manifest.blob_set(root)["count"] == count - 2
    assert len(pack_files(root)[0]) == 1 and len(pack_files(root)[1]) == 1
    assert validate(ikdata.open(root), deep=True).ok
    # no rows at all: the pack goes whole
    rows.write_text("")
    receipts.write_text("")
    collect_garbage(root, grace_minutes=0)
    assert pack_files(root) == ([], [])
    assert manifest.blob_set(root)["count"] == 0


def test_gc_dry_run_deletes_nothing_and_spares_young_packs(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    pack_dataset(root)
    (root / f"workloads/gemm/{GEMM_NAME}.jsonl").write_text("")
    (root / "receipts.jsonl").write_text("")
    before = tree_digest(root)
    dry = collect_garbage(root, dry_run=True, grace_minutes=0)
    assert dry.deleted and tree_digest(root) == before
    young = collect_garbage(root, grace_minutes=60)
    assert young.spared_young and len(pack_files(root)[0]) == 1


def test_cli_pack_unpack_and_json(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    result = runner.invoke(app, ["pack", str(root), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["packed"] == 5 and len(document["packs"]) == 1
    assert runner.invoke(app, ["validate", str(root), "--deep"]).exit_code == 0
    result = runner.invoke(app, ["unpack", str(root)])
    assert result.exit_code == 0, result.output
    assert "wrote 5 loose blob(s)" in result.output
    result = runner.invoke(app, ["pack", str(root), "--threshold", "0"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_flashinfer_reads_a_packed_dataset_only_after_unpack(make_ikdata_dataset):
    """flashinfer-bench 0.1.2 opens the file a descriptor names; rows keep naming loose paths, so a
    packed dataset must be unpacked (docs/packs.md says so)."""
    flashinfer_data = pytest.importorskip("flashinfer_bench.data")
    import torch

    root = make_ikdata_dataset(2)
    pack_dataset(root)
    trace_set = flashinfer_data.TraceSet.from_path(str(root))  # definitions and rows load
    spec = trace_set.workloads[GEMM_NAME][0].workload.inputs["A"]
    with pytest.raises(ValueError, match="File not found"):
        trace_set.get_workload_blob_tensor(spec.path)
    unpack_dataset(root)
    trace_set = flashinfer_data.TraceSet.from_path(str(root))
    ds = ikdata.open(root)
    for trace, row in zip(trace_set.workloads[GEMM_NAME], ds.workloads()):
        for name, spec in trace.workload.inputs.items():
            loaded = trace_set.get_workload_blob_tensor(spec.path)[spec.tensor_key]
            assert torch.equal(loaded, ds.load_inputs(row)[name])


def test_the_fast_pack_header_reader_agrees_with_the_strict_parser(make_ikdata_dataset):
    """ikdata's own pack headers take a fast path; any other header (reordered, spaced) takes the
    strict parser, and both give the same entries."""
    import struct

    from ikdata.core.packs import _fast_pack_header, _pack_entries
    from ikdata.core.safetensors_format import parse_header

    root = make_ikdata_dataset(3)
    pack_dataset(root)
    pack = pack_files(root)[0][0]
    data = pack.read_bytes()
    length = int.from_bytes(data[:8], "little")
    head, size = data[:8 + length], len(data)
    assert _fast_pack_header(head, size) == parse_header(head, size)
    from ikdata.core.packs import _header_matches

    listed = next(iter(load_packs(root).listed.values()))
    assert _header_matches(pack, list(listed))  # the usual case: the header is the one the index implies
    assert not _header_matches(pack, list(listed)[1:])
    header = json.loads(data[8:8 + length])
    reordered = json.dumps(dict(reversed(list(header.items()))), indent=1).encode()
    reordered += b" " * (-len(reordered) % 8)
    other = struct.pack("<Q", len(reordered)) + reordered + data[8 + length:]
    assert _fast_pack_header(other[:8 + len(reordered)], len(other)) is None
    path = root / "other.safetensors"
    path.write_bytes(other)
    shifted = 8 + len(reordered) - (8 + length)
    assert [(e.key, e.start - shifted) for e in _pack_entries(path)] == \
        [(e.key, e.start) for e in parse_header(head, size)]


def test_show_and_validate_count_packed_blobs(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    pack_dataset(root)
    report = validate(ikdata.open(root))
    assert report.ok and report.blobs_checked == 5
    uuid = next(iter(ikdata.open(root).workloads())).uuid
    result = runner.invoke(app, ["show", str(root), uuid, "--json"])
    assert result.exit_code == 0, result.output
    inputs = json.loads(result.stdout)["inputs"]
    assert inputs["A"]["dtype"] == "torch.float32" and inputs["A"]["shape"] == [1, 8]
    assert "error" not in inputs["W"]
