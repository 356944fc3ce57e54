"""A flashinfer-bench dataset in the layout it now writes (traces/<author>/<op_type>/<name>.jsonl) imports its
workloads and lists every solution trace as left out with its file, line, solution, status and why (issue 37
item 7); a traces file that links out of the dataset is refused, not read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from foundation_helpers import GEMM_NAME, gemm_definition_record

pytest.importorskip("safetensors")


def _bench_dataset(root: Path) -> None:
    from safetensors.numpy import save_file

    record = gemm_definition_record()
    (root / "definitions" / "gemm").mkdir(parents=True)
    (root / "definitions" / "gemm" / f"{GEMM_NAME}.json").write_text(json.dumps(record))
    rng = np.random.default_rng(0)
    rows, traces = [], []
    for i in range(2):
        uuid = f"fi-{i}"
        rel = f"blob/workloads/gemm/{GEMM_NAME}/{uuid}.safetensors"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        save_file({"A": rng.standard_normal((i + 2, 8)).astype(np.float32),
                   "W": rng.standard_normal((4, 8)).astype(np.float32)}, str(root / rel))
        workload = {"uuid": uuid, "axes": {"M": i + 2},
                    "inputs": {n: {"type": "safetensors", "path": rel, "tensor_key": n} for n in ("A", "W")}}
        rows.append({"definition": GEMM_NAME, "workload": workload})
        for solution, status in (("triton_v1", "PASSED"), ("cuda_v2", "INCORRECT_NUMERICAL")):
            traces.append({"definition": GEMM_NAME, "workload": workload, "solution": solution,
                           "evaluation": {"status": status, "timestamp": "2026-01-01T00:00:00"}})
    (root / "workloads" / "gemm").mkdir(parents=True)
    (root / "workloads" / "gemm" / f"{GEMM_NAME}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    folder = root / "traces" / "alice" / "gemm"
    folder.mkdir(parents=True)
    (folder / f"{GEMM_NAME}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))


def test_author_layout_traces_are_each_listed_as_left_out_and_the_workloads_import(tmp_path):
    from ikdata.importing.apply import import_dataset

    src = tmp_path / "bench"
    _bench_dataset(src)
    result = import_dataset(str(src), str(tmp_path / "dst"))
    assert sorted(result.added) == ["fi-0", "fi-1"]
    traces = [item for item in result.left_out if item.code == "trace"]
    assert len(traces) == 4
    where = f"traces/alice/gemm/{GEMM_NAME}.jsonl"
    first = traces[0]
    assert first.uuid == "fi-0" and first.definition == GEMM_NAME and first.where == f"{where}:1"
    assert first.reason == (f"{where}:1: the evaluation of solution 'triton_v1' by alice (PASSED) is a verdict on a "
                            "solution, not an engine's captured output; ikdata imports the workloads and judges "
                            "them itself (ikdata replay): not imported")
    assert "'cuda_v2' by alice (INCORRECT_NUMERICAL)" in traces[1].reason


def test_a_traces_file_linking_out_of_the_dataset_is_refused(tmp_path):
    from ikdata.core.errors import ProblemsFound
    from ikdata.importing.apply import import_dataset

    src = tmp_path / "bench"
    _bench_dataset(src)
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text('{"definition": "secret"}\n')
    (src / "traces" / "alice" / "gemm" / "linked.jsonl").symlink_to(outside)
    with pytest.raises(ProblemsFound) as caught:
        import_dataset(str(src), str(tmp_path / "dst"))
    assert "traces/alice/gemm/linked.jsonl" in str(caught.value.problems) and "leaves the dataset" in str(
        caught.value.problems)
    assert not (tmp_path / "dst").exists()
