"""Done-when: two captures from separate runs (different hosts), replayed by the real runner, merge into
one dataset that passes validate --deep, stores each distinct tensor once, and traces every workload."""

from __future__ import annotations

import pytest

from ikdata.importing.apply import import_dataset
from merge_helpers import capture, definitions_dir, read_jsonl, rows_by_uuid  # noqa: F401

torch = pytest.importorskip("torch")


def replay(root, definitions, cache):
    import ikdata
    from ikdata.replay.runner import replay as run

    result = run(ikdata.open(root, definitions=[definitions]), device="cpu", cache_path=cache, reuse=False)
    assert result.exit_code == 0, result.report["cases"]
    return result


def test_two_hosts_captured_replayed_merged_and_traced(tmp_path, definitions_dir):
    import ikdata
    from ikdata.ops.lineage import trace
    from ikdata.core.store import digest_from_path

    a = capture(tmp_path / "run-a", rows=3, seed=1, host="gpu-node-1")
    b = capture(tmp_path / "run-b", rows=3, seed=2, host="gpu-node-2")
    for root in (a, b):
        replay(root, definitions_dir, tmp_path / "cache.jsonl")
    dst = tmp_path / "shared"
    first = import_dataset(a, dst, definitions=[definitions_dir])
    second = import_dataset(b, dst, definitions=[definitions_dir])
    assert len(first.added) == len(second.added) == 3

    report = ikdata.validate(ikdata.open(dst), deep=True)
    assert report.ok, [str(p) for p in report.problems]
    # Each distinct tensor once: the blob count equals the number of distinct digests referenced.
    digests = {digest_from_path(d["path"]) for r in rows_by_uuid(dst).values()
               for d in r["workload"]["inputs"].values()}
    digests |= {digest_from_path(d["path"]) for r in read_jsonl(dst / "receipts.jsonl")
                for d in r["expected_output"].values()}
    stored = list((dst / "blob/sha256").rglob("*.safetensors"))
    assert len(stored) == len(digests) == 1 + 6 * 2

    hosts = {"gpu-node-1": first.parent_id, "gpu-node-2": second.parent_id}
    for uuid in rows_by_uuid(dst):
        [chain] = trace(dst, uuid)
        assert chain.capture["host"] in hosts
        assert [h["from"] for h in chain.imports] == [hosts[chain.capture["host"]]]
        [validation] = chain.validations
        assert validation["status"] == "passed" and validation["device"] == "cpu"
        assert validation["metrics"]["C"]["mismatched_fraction"] == 0.0
