"""ikdata lineage, diff and gc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.core.errors import ProblemsFound
from ikdata.ops.gc import collect_garbage
from ikdata.ops.lineage import graph, trace
from merge_helpers import import_trusting_reports as import_dataset  # hand-written reports: --trust-reports
from merge_helpers import GEMM_NAME, capture, read_jsonl, rows_by_uuid, validated  # noqa: F401

runner = CliRunner()


@pytest.fixture
def merged(validated, tmp_path):
    a = validated("host-a", rows=2, seed=1, host="host-a")
    b = validated("host-b", rows=2, seed=2, host="host-b")
    dst = tmp_path / "shared"
    ra, rb = import_dataset(a, dst), import_dataset(b, dst)
    return dst, a, b, ra, rb


def test_lineage_traces_a_workload_to_its_capture_import_and_validation(merged):
    dst, a, _, ra, _ = merged
    uuid = sorted(rows_by_uuid(a))[0]
    [chain] = trace(dst, uuid[:8])
    assert chain.uuid == uuid and chain.definition == GEMM_NAME
    assert chain.capture["host"] == "host-a" and chain.capture["engine"] == "test-engine"
    assert chain.capture["request_id"].startswith("host-a-r") and chain.capture["module_path"] == "layers.0.proj"
    assert isinstance(chain.capture["process_id"], int) and chain.capture["captured_at"] > 0
    assert [h["from"] for h in chain.imports] == [ra.parent_id]
    assert chain.validations[0]["status"] == "passed" and chain.validations[0]["device"] == "cpu"
    result = runner.invoke(app, ["lineage", str(dst), uuid])
    assert result.exit_code == 0, result.output
    assert f"workload {uuid} ({GEMM_NAME})" in result.output
    assert "host: host-a" in result.output  # one fact a line (issue 27 finding 7)
    assert f"imported: from {ra.parent_id[:12]} ({a}) by import" in result.output
    assert "validated: passed on cpu (torch 2.13.0+cpu; receipt (attached by import))" in result.output


def test_lineage_of_a_blob_finds_every_workload_using_it(merged):
    dst = merged[0]
    row = next(iter(rows_by_uuid(dst).values()))
    w_digest = Path(row["workload"]["inputs"]["W"]["path"]).stem
    chains = trace(dst, w_digest)
    assert len(chains) == 4 and {c.uses for c in chains} == {("inputs/W",)}
    assert {c.capture["host"] for c in chains} == {"host-a", "host-b"}
    result = runner.invoke(app, ["lineage", str(dst), w_digest, "--json"])
    assert result.exit_code == 0 and len(json.loads(result.output)) == 4


def test_lineage_unknown_uuid_is_a_usage_error(merged):
    result = runner.invoke(app, ["lineage", str(merged[0]), "nope"])
    assert result.exit_code == 2
    assert "no workload has uuid 'nope'; list them with 'ikdata ls" in result.output


def test_parent_graph_and_dot(merged, tmp_path):
    dst, a, b, ra, rb = merged
    top = tmp_path / "top"
    rt = import_dataset(dst, top)
    found = graph(top)
    assert set(found.nodes) == {found.root, rt.parent_id, ra.parent_id, rb.parent_id}
    assert [p["id"] for p in found.nodes[rt.parent_id].parents] == [ra.parent_id, rb.parent_id]
    dot = runner.invoke(app, ["lineage", str(top), "--dot"]).output
    assert dot.startswith("digraph lineage {")
    assert f'"{found.root[:12]}" -> "{rt.parent_id[:12]}"' in dot
    assert f'"{rt.parent_id[:12]}" -> "{ra.parent_id[:12]}"' in dot


def test_diff_shows_added_removed_changed(merged, validated, tmp_path):
    dst, a, b, *_ = merged
    changes = runner.invoke(app, ["diff", str(a), str(dst), "--json"])
    assert changes.exit_code == 0
    document = json.loads(changes.output)
    assert sorted(document["workloads"][GEMM_NAME]["added"]) == sorted(rows_by_uuid(b))
    assert document["workloads"][GEMM_NAME]["removed"] == [] and document["workloads"][GEMM_NAME]["changed"] == []
    # Change one row's axes in a copy of A.
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    rows_path = copy / f"workloads/gemm/{GEMM_NAME}.jsonl"
    lines = read_jsonl(rows_path)
    lines[0]["workload"]["axes"]["M"] = 99
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    from ikdata.ops.diff import diff

    result = diff(a, copy)
    assert result.workloads[GEMM_NAME].changed == (lines[0]["workload"]["uuid"],)
    assert runner.invoke(app, ["diff", str(a), str(a)]).output.strip().endswith("hold the same workloads, definitions, trajectories and models")


def test_gc_deletes_only_unreferenced_blobs_and_updates_manifest(merged):
    dst = merged[0]
    from ikdata.core.store import BlobStore

    orphan = BlobStore(dst).put(np.arange(6, dtype=np.float32)).ref.path
    os.utime(dst / orphan, (time.time() - 3600, time.time() - 3600))
    young = BlobStore(dst).put(np.arange(7, dtype=np.float32)).ref.path
    dry = collect_garbage(dst, dry_run=True)
    assert dry.deleted == (orphan,) and (dst / orphan).exists()
    result = runner.invoke(app, ["gc", str(dst), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["deleted"] == [orphan] and document["spared_young"] == [young]
    assert document["bytes_freed"] == (dst / young).stat().st_size - 4  # same header, one float fewer
    assert not (dst / orphan).exists()
    from ikdata import open as open_ds
    from ikdata import validate

    assert validate(open_ds(dst), deep=True).ok
    assert collect_garbage(dst, grace_minutes=0).deleted == (young,)


def test_gc_refuses_a_dataset_with_unreadable_rows(merged):
    dst = merged[0]
    with open(dst / f"workloads/gemm/{GEMM_NAME}.jsonl", "a") as stream:
        stream.write('{"definition": "torn')
    with pytest.raises(ProblemsFound, match="gc refused: 1 unreadable line"):
        collect_garbage(dst, grace_minutes=0)


WRITER = """
import sys, numpy as np
from ikdata.core.definitions import USER, Definition
from ikdata.core.writer import DatasetWriter
sys.path.insert(0, sys.argv[2])
from merge_helpers import gemm_definition_record
definition = Definition.from_dict(gemm_definition_record(), origin=USER, source="test")
writer = DatasetWriter(sys.argv[1])
rng = np.random.default_rng(123)
w = rng.standard_normal((4, 8)).astype(np.float32)
for i in range(int(sys.argv[3])):
    a = rng.standard_normal((1, 8)).astype(np.float32)
    writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T}, {"engine": "concurrent", "request_id": f"c{i}", "step": i})
print("done", flush=True)
"""


def test_gc_while_a_capture_writes_never_loses_a_referenced_blob(merged, tmp_path):
    dst = merged[0]
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(dst), str(Path(__file__).parent), "40"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rounds = 0
    while writer.poll() is None or rounds == 0:
        collect_garbage(dst, grace_minutes=0)  # no grace: only the lock protects the writer
        rounds += 1
        time.sleep(0.02)  # let the writer take the shared lock between rounds
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0 and "done" in out, err
    collect_garbage(dst, grace_minutes=0)
    assert rounds > 1
    from ikdata import open as open_ds
    from ikdata import validate

    report = validate(open_ds(dst), deep=True)
    assert report.ok, [str(p) for p in report.problems]
    assert report.workloads == 4 + 40
