"""ikdata replay end to end: verdicts, the report, trust, bad input, and exit codes."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.replay import recheck
from ikdata.replay import report as report_mod
from ikdata.replay.runner import replay
from ikdata.core.store import rehash_file
from .replay_helpers import gemm_record

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def load_report(built) -> dict:
    return json.loads((built.root / "reports" / "replay.json").read_text())


def cases_by_uuid(report) -> dict:
    return {c["uuid"]: c for c in report["cases"]}


class TestDoneWhen:
    def test_correct_outputs_replay_with_exit_0(self, build):
        built = build(4)
        result = cli("replay", built.root, "--definitions", built.definitions)
        assert result.exit_code == 0, result.output
        assert "4 passed — report:" in result.output
        report = load_report(built)
        assert report_mod.load(built.root / "reports" / "replay.json") == report  # schema-valid
        assert report["format"] == "ikdata-replay/1"
        assert report["device"] == "cpu" and report["torch"] == str(torch.__version__)
        assert report["ikdata_version"] == ikdata.__version__
        assert report["tolerances"]["float32"] == {"rtol": 1e-4, "atol": 2e-5}
        assert report["finished_at"] >= report["started_at"]
        assert not (built.root / "reports" / "replay.json.journal").exists()  # every case is in the report
        assert sorted(c["uuid"] for c in report["cases"]) == sorted(built.uuids)
        for case in report["cases"]:
            assert case["status"] == "passed" and case["seconds"] >= 0
            assert recheck(case, report) == []
            assert case["tolerance"]["C"] == {"dtype": "float32", "rtol": 1e-4, "atol": 2e-5, "matched_ratio": 1.0}

    def test_case_digests_are_the_digests_of_the_judged_blobs(self, build):
        built = build(2)
        replay(ikdata.open(built.root, definitions=[built.definitions]))
        cases = cases_by_uuid(load_report(built))
        for i, uuid in enumerate(built.uuids):
            assert cases[uuid]["input_digests"] == {
                "A": rehash_file(built.input_path(i, "A")).digests[0],
                "W": rehash_file(built.input_path(i, "W")).digests[0]}
            assert cases[uuid]["expected_digests"] == {"C": rehash_file(built.expected_path(i)).digests[0]}

    def test_one_output_perturbed_beyond_tolerance_exits_1_and_is_named(self, build):
        def outputs(i, given):
            c = given["A"] @ given["W"].T
            return {"C": c + 0.5 if i == 2 else c}

        built = build(4, outputs=outputs)
        result = cli("replay", built.root, "--definitions", built.definitions, "--json")
        assert result.exit_code == 1
        summary = json.loads(result.stdout)
        assert summary["counts"]["passed"] == 3 and summary["counts"]["failed"] == 1
        assert [c["uuid"] for c in summary["not_passed"]] == [built.uuids[2]]
        case = cases_by_uuid(load_report(built))[built.uuids[2]]
        assert case["status"] == "failed"
        assert case["metrics"]["C"]["max_abs_error"] == pytest.approx(0.5, rel=1e-5)
        assert case["metrics"]["C"]["mismatched_fraction"] == 1.0
        assert case["tolerance"]["C"] == {"dtype": "float32", "rtol": 1e-4, "atol": 2e-5, "matched_ratio": 1.0}
        assert "fail |a - e| <= 2e-05 + 0.0001 * |e| (float32)" in case["reason"]

    def test_table_names_the_definition_and_the_failing_workload(self, build):
        built = build(2, outputs=lambda i, g: {"C": g["A"] @ g["W"].T + i})
        result = cli("replay", built.root, "--definitions", built.definitions)
        assert result.exit_code == 1
        assert "gemm_n4_k8" in result.stdout
        assert built.uuids[1][:8] in result.stdout
        assert "1 passed, 1 failed" in result.stdout


class TestTrust:
    def test_untrusted_definition_is_refused_with_its_digest_and_source(self, build):
        built = build(2)
        digest = ikdata.open(built.root).definitions["gemm_n4_k8"].digest
        result = cli("replay", built.root)
        assert result.exit_code == 1
        assert (f"refused: definition 'gemm_n4_k8' from definitions/gemm/gemm_n4_k8.json is not trusted, so its "
                f"reference will not run. Read it, then pass --trust {digest} (or name its folder with "
                f"--definitions). (2 workloads not replayed)") in " ".join(result.stderr.split())
        report = load_report(built)
        assert report["cases"] == []
        assert report["refused"] == [{"definition": "gemm_n4_k8", "digest": digest,
                                      "source": "definitions/gemm/gemm_n4_k8.json", "workloads": 2}]

    def test_trust_by_digest_runs_it(self, build):
        built = build(2)
        digest = ikdata.open(built.root).definitions["gemm_n4_k8"].digest
        result = cli("replay", built.root, "--trust", digest)
        assert result.exit_code == 0, result.output

    def test_a_changed_definition_is_not_trusted_by_the_old_digest(self, build):
        built = build(1)
        digest = ikdata.open(built.root).definitions["gemm_n4_k8"].digest
        path = built.root / "definitions" / "gemm" / "gemm_n4_k8.json"
        record = json.loads(path.read_text())
        record["reference"] = record["reference"] + "\nimport os  # sneaky\n"
        path.write_text(json.dumps(record))
        result = cli("replay", built.root, "--trust", digest)
        assert result.exit_code == 1
        assert "is not trusted" in result.stderr

    def test_other_definitions_still_replay(self, build, tmp_path):
        trusted = build(2, name="mixed")
        other = gemm_record("gemm_other")
        from ikdata.core.definitions import DATASET, Definition
        from ikdata.core.writer import DatasetWriter

        writer = DatasetWriter(trusted.root)
        a, w = torch.randn(2, 8), torch.randn(4, 8)
        writer.add(Definition.from_dict(other, origin=DATASET), {"A": a, "W": w}, {"C": a @ w.T})
        result = replay(ikdata.open(trusted.root, definitions=[trusted.definitions]))
        assert result.counts["passed"] == 2
        assert [r.definition for r in result.refused] == ["gemm_other"]
        assert result.exit_code == 1

    def test_instance_of_a_shipped_template_is_trusted(self, tmp_path):
        templates = pytest.importorskip("ikdata.core.templates")
        from ikdata.core.definitions import DATASET, Definition
        from ikdata.core.writer import DatasetWriter

        template = templates.load_templates()["dense_gemm_bf16_nt"]
        instance = templates.instantiate(template, {"N": 4, "K": 8})
        definition = Definition.from_dict(dict(instance.record), origin=DATASET)
        writer = DatasetWriter(tmp_path / "ds")
        a, w = torch.randn(3, 8).bfloat16(), torch.randn(4, 8).bfloat16()
        writer.add(definition, {"A": a, "W": w}, {"C": (a.float() @ w.float().T).bfloat16()})
        result = replay(ikdata.open(tmp_path / "ds"))
        assert result.refused == () and result.counts["passed"] == 1


class TestBadReferences:
    def reference(self, body: str) -> dict:
        return gemm_record(reference="import torch\n\ndef run(A, W):\n" + body)

    def test_reference_that_raises_is_an_error_with_traceback_and_replay_goes_on(self, build):
        record = self.reference("    if A.shape[0] == 2:\n        raise RuntimeError('kernel exploded')\n"
                                "    return A @ W.T\n")
        built = build(3, record=record)  # rows have M = 1, 2, 3
        result = replay(ikdata.open(built.root, definitions=[built.definitions]))
        assert result.counts == {"passed": 2, "failed": 0, "error": 1, "skipped": 0, "reused": 0}
        assert result.exit_code == 1
        case = cases_by_uuid(result.report)[built.uuids[1]]
        assert case["status"] == "error"
        assert case["reason"] == "RuntimeError: kernel exploded"
        assert "Traceback (most recent call last)" in case["error"]
        assert "raise RuntimeError('kernel exploded')" in case["error"]

    def test_wrong_number_of_outputs_is_an_error(self, build):
        built = build(1, record=self.reference("    return A @ W.T, A\n"))
        case = replay(ikdata.open(built.root, definitions=[built.definitions])).report["cases"][0]
        assert case["status"] == "error"
        assert case["reason"] == "gemm_n4_k8: the reference returned 2 outputs, the definition declares 1 (C)"

    def test_output_of_wrong_dtype_fails(self, build):
        built = build(1, record=self.reference("    return (A @ W.T).double()\n"))
        case = replay(ikdata.open(built.root, definitions=[built.definitions])).report["cases"][0]
        assert case["status"] == "failed"
        assert case["reason"] == "output 'C' has dtype torch.float64, the captured output has torch.float32"

    def test_output_of_wrong_shape_fails(self, build):
        built = build(1, record=self.reference("    return (A @ W.T).T\n"))
        case = replay(ikdata.open(built.root, definitions=[built.definitions])).report["cases"][0]
        assert case["status"] == "failed"
        assert case["reason"] == "output 'C' has shape [4, 1], the captured output has [1, 4]"

    def test_nan_in_a_float_output_fails(self, build):
        built = build(1, record=self.reference("    C = A @ W.T\n    C[0, 0] = float('nan')\n    return C\n"))
        case = replay(ikdata.open(built.root, definitions=[built.definitions])).report["cases"][0]
        assert case["status"] == "failed"
        assert case["metrics"]["C"]["max_abs_error"] == "nan"
        assert case["metrics"]["C"]["mismatched_fraction"] == 0.25

    def test_inf_against_finite_expected_fails(self, build):
        built = build(1, record=self.reference("    C = A @ W.T\n    C[0, 1] = float('inf')\n    return C\n"))
        case = replay(ikdata.open(built.root, definitions=[built.definitions])).report["cases"][0]
        assert case["status"] == "failed"
        assert case["metrics"]["C"]["max_abs_error"] == "inf"
        assert recheck(case, {}) == ["status is 'failed', not 'passed'"]


class TestBadBlobs:
    def run(self, built):
        return replay(ikdata.open(built.root, definitions=[built.definitions]), reuse=False)

    def test_missing_blob_is_an_error_and_replay_goes_on(self, build):
        built = build(3)
        path = built.expected_path(1)
        path.unlink()
        result = self.run(built)
        case = cases_by_uuid(result.report)[built.uuids[1]]
        assert case["status"] == "error"
        assert case["reason"] == f"{path.relative_to(built.root).as_posix()}: blob not found"
        assert result.counts["passed"] == 2 and result.exit_code == 1

    def test_truncated_blob_is_an_error(self, build):
        built = build(2)
        path = built.input_path(0, "A")
        path.write_bytes(path.read_bytes()[:-3])
        case = cases_by_uuid(self.run(built).report)[built.uuids[0]]
        assert case["status"] == "error"
        assert case["reason"].startswith(path.relative_to(built.root).as_posix())
        assert cases_by_uuid(self.run(built).report)[built.uuids[1]]["status"] == "passed"

    def test_blob_whose_digest_does_not_match_is_an_error_not_a_verdict(self, build):
        built = build(2)
        path = built.expected_path(0)
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01  # same size, valid header: only the digest can tell
        path.write_bytes(bytes(data))
        case = cases_by_uuid(self.run(built).report)[built.uuids[0]]
        assert case["status"] == "error"
        rel = path.relative_to(built.root).as_posix()
        named = path.name.split(".")[0]
        assert case["reason"] == (f"{rel}: the content's digest is {rehash_file(path).digests[0]}, but the blob is "
                                  f"named {named}: the file is corrupt; restore it from where the dataset came "
                                  "from (ikdata validate --deep lists every such blob)")

    def test_large_blobs_are_verified_through_mmap_too(self, build, monkeypatch):
        from ikdata.replay import blobs

        monkeypatch.setattr(blobs, "READ_WHOLE_UP_TO", 0)  # every blob takes the large-file path
        built = build(2)
        path = built.input_path(1, "A")
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))
        cases = cases_by_uuid(self.run(built).report)
        assert cases[built.uuids[0]]["status"] == "passed"
        assert cases[built.uuids[1]]["status"] == "error"
        assert "the content's digest is" in cases[built.uuids[1]]["reason"]
        path.write_bytes(bytes(data[:-2]))
        assert "restore it from where the dataset came from" in cases_by_uuid(self.run(built).report)[
            built.uuids[1]]["reason"]

    def test_a_path_leaving_the_dataset_is_refused(self, build, tmp_path):
        built = build(1)
        path = built.expected_path(0)
        outside = tmp_path / "outside.safetensors"
        outside.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(outside)
        case = self.run(built).report["cases"][0]
        assert case["status"] == "error"
        assert "is a link that leaves the dataset" in case["reason"]

    def test_workload_without_expected_output_is_skipped_with_the_reason(self, build):
        built = build(2)
        receipts = built.root / "receipts.jsonl"
        lines = receipts.read_text().splitlines()
        receipts.write_text("\n".join(line for line in lines if built.uuids[0] not in line) + "\n")
        result = self.run(built)
        case = cases_by_uuid(result.report)[built.uuids[0]]
        assert case["status"] == "skipped"
        assert case["reason"] == "no expected outputs to judge against (no receipt; e.g. an imported workload)"
        assert result.exit_code == 0


class TestDefinitionRules:
    def test_definition_tolerance_override_and_matched_ratio(self, build):
        record = gemm_record(tolerance={"float32": {"rtol": 0.0, "atol": 0.3}, "matched_ratio": 0.75})

        def outputs(i, given):
            c = given["A"] @ given["W"].T
            c[0, 0] += 0.2  # within atol 0.3
            c[0, 1] += 5.0  # one of 4 elements (M = 1) beyond: allowed by matched_ratio 0.75
            return {"C": c}

        built = build(1, record=record, outputs=outputs)
        result = replay(ikdata.open(built.root, definitions=[built.definitions]))
        case = result.report["cases"][0]
        assert case["status"] == "passed", case.get("reason")
        assert case["tolerance"]["C"] == {"dtype": "float32", "rtol": 0.0, "atol": 0.3, "matched_ratio": 0.75}
        definition = ikdata.open(built.root, definitions=[built.definitions]).definitions["gemm_n4_k8"]
        assert recheck(case, result.report, definition=definition) == []
        assert recheck(case, result.report) != []  # looser than the built-in table without the definition

    def test_gdn_chunk_state_judge_end_to_end(self, build):
        record = gemm_record(judge={"name": "gdn_chunk_state"})
        built = build(2, record=record, outputs=lambda i, g: {"C": (g["A"] @ g["W"].T) * (1.002 if i == 0 else 1.05)})
        report = replay(ikdata.open(built.root, definitions=[built.definitions])).report
        cases = cases_by_uuid(report)
        assert cases[built.uuids[0]]["status"] == "passed"
        assert cases[built.uuids[0]]["tolerance"]["C"]["judge"] == "gdn_chunk_state"
        failed = cases[built.uuids[1]]
        assert failed["status"] == "failed"
        assert "judge 'gdn_chunk_state': max_head_relative_rms = 0.047" in failed["reason"]
        assert failed["metrics"]["C"]["relative_rms"] == pytest.approx(0.05 / 1.05, rel=1e-3)

    def test_unknown_judge_is_an_error(self, build):
        built = build(1, record=gemm_record(judge={"name": "vibes"}))
        case = replay(ikdata.open(built.root, definitions=[built.definitions])).report["cases"][0]
        assert case["status"] == "error"
        assert case["reason"] == ("gemm_n4_k8: judge 'vibes' is unknown; known judges: "
                                  "['gdn_chunk_state', 'relative_error', 'sampling']")

    def test_integer_outputs_are_exact(self, build):
        record = gemm_record(dtype="int32")
        built = build(2, record=record,
                      inputs=lambda i, g: {"A": torch.randint(-5, 5, (2, 8), generator=g, dtype=torch.int32),
                                           "W": torch.randint(-5, 5, (4, 8), generator=g, dtype=torch.int32)},
                      outputs=lambda i, g: {"C": g["A"] @ g["W"].T + i})
        cases = cases_by_uuid(replay(ikdata.open(built.root, definitions=[built.definitions])).report)
        assert cases[built.uuids[0]]["status"] == "passed"
        assert cases[built.uuids[1]]["status"] == "failed"
        assert cases[built.uuids[0]]["tolerance"]["C"] == {"dtype": "int32", "rtol": 0.0, "atol": 0.0,
                                                           "matched_ratio": 1.0}


class TestSeedLayout:
    def test_seed_capture_replays_with_its_definitions(self, seed_dataset):
        root, definitions = seed_dataset
        result = cli("replay", root, "--definitions", definitions, "--json")
        assert result.exit_code == 0, result.output
        report = json.loads((root / "results" / "ikdata-replay.json").read_text())  # beside the seed's own report
        assert [c["status"] for c in report["cases"]] == ["passed"] * 3
        assert report["cases"][0]["tolerance"]["C"]["dtype"] == "bfloat16"

    def test_seed_report_is_readable_but_not_trusted(self, tmp_path):
        seed_report = {"torch": "2.9.0", "device": "cuda", "comparison": "all output elements",
                       "tolerances": {"bfloat16": {"rtol": 0.016, "atol": 0.005}, "integer": "exact"},
                       "cases": [{"definition": "g", "uuid": "u", "axes": {"M": 1}, "status": "passed",
                                  "max_absolute_errors": [0.001], "seconds": 0.1}]}
        path = tmp_path / "replay.json"
        path.write_text(json.dumps(seed_report))
        report = report_mod.load(path)
        assert recheck(report["cases"][0], report) == ["no metrics recorded; replay it with this version of ikdata"]


class TestUsage:
    @pytest.mark.parametrize("args, message", [
        (["--shard", "0/2"], "--shard '0/2': I must be between 1 and N (shards are numbered 1 to N)"),
        (["--shard", "two"], "--shard 'two': expected I/N, e.g. 1/4 (shards are numbered 1 to N)"),
        (["--definition", "nope"], "--definition nope: no such definition in"),
        (["--device", "cuda:0"] if not torch.cuda.is_available() else ["--device", "tpu"], "--device"),
    ])
    def test_usage_errors_exit_2(self, build, args, message):
        built = build(1)
        result = cli("replay", built.root, "--definitions", built.definitions, *args)
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.stderr.split())

    def test_missing_dataset_exits_2(self, tmp_path):
        result = cli("replay", tmp_path / "nope")
        assert result.exit_code == 2
        assert "no such dataset folder" in result.stderr

    def test_definition_filter(self, build):
        built = build(2)
        result = replay(ikdata.open(built.root, definitions=[built.definitions]), definitions=["gemm_n4_k8"])
        assert result.counts["passed"] == 2


class TestProgressAndCli:
    def test_progress_events_count_every_case(self, build):
        built = build(3)
        events = []
        replay(ikdata.open(built.root, definitions=[built.definitions]), progress=events.append)
        assert [(e.done, e.total) for e in events] == [(0, 3), (1, 3), (2, 3), (3, 3)]
        assert events[0].case is None and {e.case["uuid"] for e in events[1:]} == set(built.uuids)

    def test_json_output_is_one_document_on_stdout(self, build):
        built = build(2)
        result = cli("replay", built.root, "--definitions", built.definitions, "--json")
        summary = json.loads(result.stdout)
        assert summary["exit_code"] == 0 and summary["report"].endswith("reports/replay.json")

    def test_help_does_not_import_torch(self):
        import subprocess
        import sys

        code = ("import sys; from typer.testing import CliRunner; from ikdata.cli import app; "
                "r = CliRunner().invoke(app, ['replay', '--help']); assert r.exit_code == 0, r.output; "
                "assert '--shard' in r.output and '--no-reuse' in r.output; "
                "r = CliRunner().invoke(app, ['replay-combine', '--help']); assert r.exit_code == 0; "
                "assert 'torch' not in sys.modules")
        subprocess.run([sys.executable, "-c", code], check=True)

    def test_report_option_writes_elsewhere(self, build, tmp_path):
        built = build(1)
        target = tmp_path / "out" / "mine.json"
        result = cli("replay", built.root, "--definitions", built.definitions, "--report", target)
        assert result.exit_code == 0
        assert report_mod.load(target)["cases"][0]["status"] == "passed"
        assert not (built.root / "reports" / "replay.json").exists()


class TestUnreadableRecords:
    def test_a_malformed_row_is_reported_and_fails_the_run(self, build):
        built = build(2)
        rows = built.root / "workloads" / "gemm" / "gemm_n4_k8.jsonl"
        with rows.open("a") as stream:
            stream.write('{"definition": "gemm_n4_k8", "workload": {"uuid": 7}}\n')
        result = cli("replay", built.root, "--definitions", built.definitions, "--json")
        assert result.exit_code == 1
        summary = json.loads(result.stdout)
        assert summary["counts"]["passed"] == 2
        assert summary["problems"]
        assert all(p.startswith("workloads/gemm/gemm_n4_k8.jsonl:3") for p in summary["problems"])
        assert "not replayed: workloads/gemm/gemm_n4_k8.jsonl:3" in result.stderr


class TestScalarOutputs:
    def test_scalar_outputs_are_judged(self, build):
        record = gemm_record(reference="import torch\n\ndef run(A, W):\n    return A @ W.T, int(A.shape[0])\n")
        record["outputs"]["rows"] = {"shape": None, "dtype": "int64"}
        built = build(2, record=record, outputs=lambda i, g: {"C": g["A"] @ g["W"].T, "rows": 1 if i == 0 else 99})
        cases = cases_by_uuid(replay(ikdata.open(built.root, definitions=[built.definitions])).report)
        assert cases[built.uuids[0]]["status"] == "passed"
        assert cases[built.uuids[1]]["status"] == "failed"
        assert cases[built.uuids[1]]["reason"].startswith("output 'rows': 1 of 1 elements")
