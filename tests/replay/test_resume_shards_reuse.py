"""Resume after a kill, shards that combine to the unsharded report, and reuse of identical cases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app
from ikdata.core.errors import UsageError
from ikdata.replay import report as report_mod
from ikdata.replay.runner import Progress, Shard, replay
from .replay_helpers import gemm_record, without_timings

runner = CliRunner()

HANGING_REFERENCE = """import os
import time
import torch

def run(A, W):
    hang = os.environ.get("REPLAY_TEST_HANG_AFTER")
    if hang:
        counter = os.environ["REPLAY_TEST_COUNTER"]
        calls = int(open(counter).read()) if os.path.exists(counter) else 0
        with open(counter, "w") as stream:
            stream.write(str(calls + 1))
        if calls >= int(hang):
            time.sleep(600)  # the test kills us here
    return torch.matmul(A, W.T)
"""


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


class TestSharding:
    def test_shards_are_disjoint_and_cover_everything(self):
        uuids = [f"workload-{i}" for i in range(500)]
        shards = [Shard(i, 3) for i in (1, 2, 3)]
        parts = [{u for u in uuids if s.contains(u)} for s in shards]
        assert set().union(*parts) == set(uuids)
        assert sum(len(p) for p in parts) == len(uuids)
        assert all(len(p) > 100 for p in parts)  # a hash spreads them
        assert parts == [{u for u in uuids if Shard(i, 3).contains(u)} for i in (1, 2, 3)]  # deterministic

    def test_combined_shard_reports_equal_the_unsharded_report(self, build, tmp_path):
        def outputs(i, given):  # a mix of verdicts, so the comparison covers failures too
            c = given["A"] @ given["W"].T
            return {"C": c + 1 if i % 4 == 3 else c}

        built = build(12, outputs=outputs)
        whole = replay(ikdata.open(built.root, definitions=[built.definitions]), reuse=False,
                       report_path=tmp_path / "whole.json").report
        paths = []
        for i in (1, 2, 3):
            result = cli("replay", built.root, "--definitions", built.definitions, "--shard", f"{i}/3",
                         "--no-reuse", "--json")
            assert result.exit_code == 1 or result.exit_code == 0
            paths.append(Path(json.loads(result.stdout)["report"]))
        assert [p.name for p in paths] == [f"replay-shard-{i}-of-3.json" for i in (1, 2, 3)]
        sizes = [len(report_mod.load(p)["cases"]) for p in paths]
        assert sum(sizes) == 12 and all(sizes)
        result = cli("replay-combine", tmp_path / "combined.json", *reversed(paths), "--json")
        assert result.exit_code == 1  # some cases failed
        assert json.loads(result.stdout)["counts"] == {"passed": 9, "failed": 3, "error": 0, "skipped": 0,
                                                       "reused": 0}
        combined = report_mod.load(tmp_path / "combined.json")
        assert combined["shards"] == ["1/3", "2/3", "3/3"]
        assert without_timings(combined) == without_timings(whole)

    def test_combine_refuses_missing_duplicate_or_foreign_shards(self, build, tmp_path):
        built = build(6)
        reports = []
        for i in (1, 2):
            reports.append(replay(ikdata.open(built.root, definitions=[built.definitions]), shard=f"{i}/2",
                                  reuse=False).report)
        with pytest.raises(UsageError, match=r"shards missing \['2/2'\], given twice \[\]"):
            report_mod.combine(reports[:1])
        with pytest.raises(UsageError, match=r"given twice \['1/2'\]"):
            report_mod.combine([reports[0], reports[0], reports[1]])
        other = dict(reports[1], torch="0.0.1")
        with pytest.raises(UsageError, match="report 2: torch is '0.0.1'"):
            report_mod.combine([reports[0], other])
        overlapping = dict(reports[1], cases=reports[1]["cases"] + reports[0]["cases"][:1])
        with pytest.raises(UsageError, match="the shards overlap"):
            report_mod.combine([reports[0], overlapping])


class TestResume:
    def test_killed_replay_resumed_equals_an_uninterrupted_one(self, build, tmp_path):
        built = build(6, record=gemm_record(reference=HANGING_REFERENCE))
        report_path = built.root / "reports" / "replay.json"
        counter = tmp_path / "calls"
        env = dict(os.environ, REPLAY_TEST_HANG_AFTER="3", REPLAY_TEST_COUNTER=str(counter))
        command = [sys.executable, "-c", "from ikdata.cli import main; main()", "replay", str(built.root),
                   "--definitions", str(built.definitions), "--json"]
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            while not (counter.exists() and counter.read_text() == "4"):  # the 4th call is hanging
                assert process.poll() is None, process.communicate()  # (a replay that never gets there: timeout)
                time.sleep(0.05)
            process.send_signal(signal.SIGKILL)
        finally:
            process.kill()
            process.wait()
        partial = report_mod.load_partial(report_path)  # the report and its journal
        assert len(partial["cases"]) == 3 and partial["finished_at"] is None
        result = cli("replay", built.root, "--definitions", built.definitions, "--resume", "--json")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["resumed"] == 3 and summary["counts"]["passed"] == 6
        resumed = report_mod.load(report_path)
        whole = replay(ikdata.open(built.root, definitions=[built.definitions]), reuse=False,
                       report_path=tmp_path / "uninterrupted.json").report
        assert without_timings(resumed) == without_timings(whole)

    def test_resume_refuses_a_report_from_elsewhere(self, build):
        built = build(2)
        replay(ikdata.open(built.root, definitions=[built.definitions]))
        path = built.root / "reports" / "replay.json"
        report = json.loads(path.read_text())
        report["torch"] = "1.0.0"
        path.write_text(json.dumps(report))
        result = cli("replay", built.root, "--definitions", built.definitions, "--resume")
        assert result.exit_code == 2
        assert ("cannot resume: the report has torch = '1.0.0', this run "
                f"'{torch.__version__}'. Rerun without --resume") in " ".join(result.stderr.split())

    def test_resume_without_a_report_starts_fresh(self, build):
        built = build(2)
        result = replay(ikdata.open(built.root, definitions=[built.definitions]), resume=True)
        assert result.resumed == 0 and result.counts["passed"] == 2

    def test_resume_keeps_recorded_cases(self, build):
        built = build(3)
        ds = ikdata.open(built.root, definitions=[built.definitions])
        first = replay(ds, reuse=False).report
        events = []
        again = replay(ds, reuse=False, resume=True, progress=events.append)
        assert again.resumed == 3 and events == [Progress(3, 3)]
        assert without_timings(again.report) == without_timings(first)


class TestReuse:
    def test_second_run_reuses_every_case_and_no_reuse_disables_it(self, build, tmp_path):
        built = build(4)
        ds = ikdata.open(built.root, definitions=[built.definitions])
        first = replay(ds).report
        assert not any(c.get("reused") for c in first["cases"])
        second = replay(ds).report
        assert all(c["reused"] for c in second["cases"])
        strip = [{k: v for k, v in c.items() if k not in ("seconds", "reused")} for c in second["cases"]]
        assert strip == [{k: v for k, v in c.items() if k != "seconds"} for c in first["cases"]]
        assert (tmp_path / "cache" / "replay-reuse.jsonl").is_file()
        third = replay(ds, reuse=False).report
        assert not any(c.get("reused") for c in third["cases"])

    def test_identical_content_in_one_run_is_judged_once(self, build):
        # Same inputs and outputs under different provenance: different uuids, one reuse key.
        fixed = {"A": torch.ones(2, 8), "W": torch.ones(4, 8)}
        built = build(3, inputs=lambda i, g: fixed)
        report = replay(ikdata.open(built.root, definitions=[built.definitions])).report
        assert len({c["uuid"] for c in report["cases"]}) == 3
        assert sorted(bool(c.get("reused")) for c in report["cases"]) == [False, True, True]

    def test_a_changed_reference_or_tolerance_is_not_reused(self, build, tmp_path):
        built = build(2)
        ds = ikdata.open(built.root, definitions=[built.definitions])
        replay(ds)
        path = built.definitions / "gemm" / "gemm_n4_k8.json"
        record = json.loads(path.read_text())
        record["tolerance"] = {"float32": {"rtol": 1e-5, "atol": 1e-6}}
        path.write_text(json.dumps(record))
        report = replay(ikdata.open(built.root, definitions=[built.definitions])).report
        assert not any(c.get("reused") for c in report["cases"])

    def test_a_dataset_report_is_never_a_source_of_reuse(self, build):
        built = build(2, outputs=lambda i, g: {"C": g["A"] @ g["W"].T + 1})  # every case fails
        ds = ikdata.open(built.root, definitions=[built.definitions])
        forged = replay(ds, reuse=False).report
        for case in forged["cases"]:
            case.update(status="passed", reason=None)
            case.pop("reason")
        report_mod.write(built.root / "reports" / "replay.json", forged)
        (Path(os.environ["IKDATA_CACHE_DIR"]) / "replay-reuse.jsonl").unlink(missing_ok=True)
        result = replay(ds)
        assert result.counts["failed"] == 2 and result.counts["reused"] == 0

    def test_reuse_needs_the_blobs_to_still_be_there(self, build):
        built = build(2)
        ds = ikdata.open(built.root, definitions=[built.definitions])
        replay(ds)
        built.expected_path(0).unlink()
        cases = {c["uuid"]: c for c in replay(ds).report["cases"]}
        assert cases[built.uuids[0]]["status"] == "error"
        assert cases[built.uuids[1]]["reused"] is True


class TestJournal:
    def test_cases_live_in_the_journal_until_the_report_is_rewritten(self, tmp_path, monkeypatch):
        monkeypatch.setattr(report_mod.ReportFile, "REWRITE_EVERY", 3600.0)
        path = tmp_path / "replay.json"
        fresh = report_mod.header(device="cpu", device_name=None, torch_version="t", tolerances={}, shard=None)
        out = report_mod.ReportFile.start(path, fresh)
        for uuid in ("b", "a"):
            out.add({"definition": "d", "uuid": uuid, "status": "skipped", "reason": "r", "seconds": 0.0})
        with report_mod.journal_path(path).open("ab") as stream:
            stream.write(b'{"definition": "d", "uuid": "c", "sta')  # a kill in the middle of a write
        assert report_mod.load(path)["cases"] == []
        assert [c["uuid"] for c in report_mod.load_partial(path)["cases"]] == ["b", "a"]
        resumed = report_mod.ReportFile.resume(path, dict(fresh, started_at=0.0))
        assert [c["uuid"] for c in report_mod.load(path)["cases"]] == ["b", "a"]
        assert report_mod.journal_path(path).read_bytes() == b""
        finished = resumed.finish()
        assert [c["uuid"] for c in finished["cases"]] == ["a", "b"]
        assert not report_mod.journal_path(path).exists()
