"""A dataset replayed again and pushed is published as it is: its new report judges every workload the remote's
judged, so nothing needs merging (issue 51: push said "merged remote dataset(s) ... first" when only a new report
was sent). A report that judges less still merges the remote first."""

from __future__ import annotations

import json
import subprocess
import sys

from remote_helpers import replay_and_commit

from ikdata.remote.push import _report_covers, push


def test_a_second_replay_is_pushed_without_merging_the_first(make_ikdata_dataset, gemm_record, tmp_path):
    dataset = make_ikdata_dataset(3, name="ds")
    first = replay_and_commit(dataset, tmp_path, gemm_record)
    remote = tmp_path / "remote"
    assert push(dataset, str(remote)).published
    second = replay_and_commit(dataset, tmp_path, gemm_record)
    assert second != first  # the report's timings changed, and so the id
    done = subprocess.run([sys.executable, "-m", "ikdata", "push", str(dataset), str(remote)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "merged" not in done.stdout + done.stderr
    assert f"published (id {second[:12]})" in done.stdout + done.stderr
    assert json.loads((remote / "ikdata.json").read_bytes())["files"] == \
        json.loads((dataset / "ikdata.json").read_bytes())["files"]


def test_a_report_judging_fewer_workloads_does_not_cover_the_remotes(make_ikdata_dataset, gemm_record, tmp_path):
    dataset = make_ikdata_dataset(3, name="ds")
    replay_and_commit(dataset, tmp_path, gemm_record)
    report = dataset / "reports" / "replay.json"
    theirs = report.read_bytes()
    assert _report_covers(report, theirs)
    data = json.loads(theirs)
    data["cases"] = data["cases"][:1]
    fewer = tmp_path / "fewer.json"
    fewer.write_text(json.dumps(data))
    assert not _report_covers(fewer, theirs)
    assert not _report_covers(report, b"not a report")
