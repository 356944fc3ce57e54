"""A dataset ikdata writes loads unchanged in flashinfer-bench's TraceSet.from_path."""

from __future__ import annotations

import pytest

from foundation_helpers import GEMM_NAME, gemm_definition_record, tree_digest

flashinfer_data = pytest.importorskip("flashinfer_bench.data")


def test_ikdata_dataset_loads_in_traceset(ikdata_dataset):
    import torch

    import ikdata

    before = tree_digest(ikdata_dataset)
    trace_set = flashinfer_data.TraceSet.from_path(str(ikdata_dataset))
    assert tree_digest(ikdata_dataset) == before  # loading changed nothing
    assert list(trace_set.definitions) == [GEMM_NAME]
    definition = trace_set.definitions[GEMM_NAME]
    assert definition.op_type == "gemm" and definition.var_axes == ["M"]
    assert definition.const_axes == {"N": 4, "K": 8}
    traces = trace_set.workloads[GEMM_NAME]
    ds = ikdata.open(ikdata_dataset)
    rows = list(ds.workloads())
    assert [t.workload.uuid for t in traces] == [r.uuid for r in rows]
    for trace, row in zip(traces, rows):
        assert trace.is_workload_trace()
        assert trace.workload.axes == row.axes
        for name, spec in trace.workload.inputs.items():
            assert isinstance(spec, flashinfer_data.SafetensorsInput)
            tensors = trace_set.get_workload_blob_tensor(spec.path)
            assert torch.equal(tensors[spec.tensor_key], ds.load_inputs(row)[name])


def test_ikdata_only_fields_are_ignored_by_flashinfer(tmp_path):
    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    record = gemm_definition_record(dtype="bfloat16")
    record["tolerance"] = {"bfloat16": {"rtol": 0.02, "atol": 0.02}, "matched_ratio": 0.999}
    record["judge"] = {"name": "cosine", "bounds": {"min": 0.99}, "reason": "test"}
    definition = Definition.from_dict(record, origin=USER)
    import torch

    writer = DatasetWriter(tmp_path / "ds")
    a, w = torch.randn(2, 8).to(torch.bfloat16), torch.randn(4, 8).to(torch.bfloat16)
    writer.add(definition, {"A": a, "W": w}, {"C": (a @ w.T)}, {"request_id": "r", "step": 1})
    writer.add(definition, {"A": a[:1], "W": w}, {"C": (a[:1] @ w.T)}, {"request_id": "r", "step": 2})
    writer.commit()
    trace_set = flashinfer_data.TraceSet.from_path(str(tmp_path / "ds"))
    assert [t.workload.axes for t in trace_set.workloads[GEMM_NAME]] == [{"M": 2}, {"M": 1}]
    loaded = trace_set.get_workload_blob_tensor(trace_set.workloads[GEMM_NAME][0].workload.inputs["A"].path)
    assert torch.equal(loaded["tensor"], a)


def test_rows_ikdata_writes_parse_as_flashinfer_traces(ikdata_dataset):
    rows_file = ikdata_dataset / "workloads" / "gemm" / f"{GEMM_NAME}.jsonl"
    loaded = flashinfer_data.load_jsonl_file(flashinfer_data.Trace, rows_file)
    assert len(loaded) == 3 and all(t.solution is None and t.evaluation is None for t in loaded)
