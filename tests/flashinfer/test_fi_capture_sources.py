"""FlashInfer on CPU without its CUDA top level: ``ikdata capture`` records @flashinfer_api calls with FlashInfer's
templates and include/exclude patterns; a definitions folder imports (a bad file reported, the others kept); a
folder with nothing readable is an error naming the layouts; the result loads and runs in flashinfer-bench."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:
    pytest.skip("flashinfer-python is not installed (make setup installs it)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tools" / "flashinfer_corpus.py"


def _ikdata(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-m", "ikdata", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}, cwd=ROOT)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    into = tmp_path_factory.mktemp("cap") / "ds"
    out = _ikdata("capture", "--into", str(into), "--", sys.executable, "-W", "ignore", str(CORPUS), "--child",
                  str(into.parent / "scratch"), env={"FLASHINFER_DUMP_EXCLUDE": "silu*", "FLASHINFER_TRACE_DUMP": "1",
                                                     "FLASHINFER_TRACE_DUMP_DIR": str(into.parent / "traces")})
    assert out.returncode == 0, out.stdout + out.stderr
    return into


def test_cpu_submodules_load_without_the_cuda_top_level():
    from ikdata.flashinfer import loader

    api = loader.submodule("api_logging")
    trace = loader.submodule("trace")
    assert callable(api.flashinfer_api) and hasattr(trace, "TraceTemplate")
    assert len(loader.templates()) >= 400 and not loader.template_import_failures()
    assert "flashinfer.norm.rmsnorm" in loader.api_templates()


def test_capture_records_flashinfer_calls_with_its_templates(captured):
    names = {p.stem for p in (captured / "definitions").rglob("*.json")}
    assert {"rmsnorm_h64", "rmsnorm_h48", "gelu_tanh_and_mul_h32", "gemm_bf16_N16_K32", "softmax_v64"} <= names
    assert not any(n.startswith("silu_and_mul") for n in names)  # FLASHINFER_DUMP_EXCLUDE honoured
    rows = (captured / "workloads" / "rmsnorm" / "rmsnorm_h64.jsonl").read_text().splitlines()
    assert len(rows) == 3  # four calls, two identical
    record = json.loads((captured / "definitions" / "rmsnorm" / "rmsnorm_h64.json").read_text())
    assert record["tolerance"] == {"bfloat16": {"rtol": 0.001, "atol": 0.001}}  # FlashInfer's _norm_check
    assert any(t.startswith("ikdata:flashinfer=flashinfer.trace.templates.norm:") for t in record["tags"])
    assert _ikdata("validate", "--deep", str(captured)).returncode == 0
    replay = _ikdata("replay", str(captured))
    assert replay.returncode == 1, replay.stdout + replay.stderr  # trusted by source; the 1%-off engine fails
    report = json.loads((captured / "reports" / "replay.json").read_text())
    failed = {c["definition"] for c in report["cases"] if c["status"] == "failed"}
    assert failed == {"rmsnorm_h48"}


def test_definitions_folder_imports_and_a_bad_file_is_reported(captured, tmp_path):
    src = tmp_path / "definitions"
    shutil.copytree(captured.parent / "traces", src)  # what FLASHINFER_TRACE_DUMP=1 wrote during the capture
    (src / "zz_broken.json").write_text("not json")
    out = _ikdata("import", str(src), str(tmp_path / "ds"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "zz_broken.json" in out.stdout + out.stderr
    held = {p.stem for p in (tmp_path / "ds" / "definitions").rglob("*.json")}
    assert {"rmsnorm_h64", "silu_and_mul_h64", "softmax_v64"} <= held  # FlashInfer dumps it; capture excluded it
    assert _ikdata("validate", "--deep", str(tmp_path / "ds")).returncode == 0


def test_nothing_readable_is_an_error_naming_the_layouts(tmp_path):
    (tmp_path / "empty" / "call").mkdir(parents=True)
    (tmp_path / "empty" / "call" / "notes.txt").write_text("x")
    out = _ikdata("import", str(tmp_path / "empty"), str(tmp_path / "ds"))
    assert out.returncode == 1 and "FlashInfer" in out.stderr
    call = tmp_path / "dumps" / "20260101_000000_000_pid1_rmsnorm_call0001"
    call.mkdir(parents=True)
    (call / "metadata.jsonl").write_text(json.dumps({"function_name": "rmsnorm", "execution_status": "inputs_saved",
                                                     "tensor_format": "torch", "tensor_info": {}}) + "\n")
    out = _ikdata("import", str(tmp_path / "dumps"), str(tmp_path / "ds2"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "flight-recorder" in out.stderr and "trace definitions" in out.stderr and "inputs_saved" in out.stderr
    assert sorted(p.name for p in call.iterdir()) == ["metadata.jsonl"]  # nothing written into SRC


def test_flashinfer_bench_loads_the_capture_and_runs_its_references(captured):
    import torch

    data = pytest.importorskip("flashinfer_bench.data")
    trace_set = data.TraceSet.from_path(str(captured))
    assert "rmsnorm_h64" in trace_set.definitions
    for name in ("rmsnorm_h64", "softmax_v64", "gemm_bf16_N16_K32"):
        definition = trace_set.definitions[name]
        namespace: dict = {}
        exec(compile(definition.reference, name, "exec"), namespace)  # noqa: S102  trusted: FlashInfer's own
        for trace in trace_set.workloads[name]:
            args = []
            for input_name, spec in trace.workload.inputs.items():
                if isinstance(spec, data.SafetensorsInput):
                    args.append(trace_set.get_workload_blob_tensor(spec.path)[spec.tensor_key])
                else:
                    args.append(spec.value)
            out = namespace["run"](*args)  # flashinfer-bench's convention: inputs positionally, in order
            assert isinstance(out, torch.Tensor) and torch.isfinite(out.float()).all()


def test_flashinfer_definitions_validate_verbatim(captured):
    from ikdata.core.definitions import USER, Definition, load_reference, read_folder

    found, problems = read_folder(captured.parent / "traces", origin=USER)
    assert {"rmsnorm_h64", "softmax_v64", "gemm_bf16_N16_K32"} <= set(found), [str(p) for p in problems]
    assert found["rmsnorm_h64"].entry == "_rmsnorm_reference"
    assert callable(load_reference(found["rmsnorm_h64"]))
    record = dict(found["rmsnorm_h64"].record)
    record["reference"] = record["reference"].replace("torch.rsqrt", "_rsqrt_helper(torch)", 1)
    assert any("not standalone" in m and "_rsqrt_helper" in m for m in Definition.from_dict(record).check())
