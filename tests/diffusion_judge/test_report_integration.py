"""Trajectory cases in the replay report: shards and replay-combine, resume, reuse, import's re-check, the
terminal table and exit codes; the denoiser workloads' cases follow from their trajectory."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys



def _run(root, report, **kwargs):
    import ikdata
    from ikdata.replay.runner import replay as run

    return run(ikdata.open(root), report_path=report, **kwargs).report


def _trajectory(report):
    return [c for c in report["cases"] if c["definition"].startswith("trajectory:")]


def _denoisers(report):
    return [c for c in report["cases"] if c["definition"].startswith("ltx2_av_transformer")]


def test_denoiser_workloads_take_their_steps_verdict(reference_capture, tmp_path):
    report = _run(reference_capture, tmp_path / "r.json", reuse=False)
    [trajectory] = _trajectory(report)
    steps = _denoisers(report)
    assert len(steps) == 5 and all(c["status"] == "passed" for c in steps)
    for case in steps:
        m = case["trajectory"]
        assert m["of"] == trajectory["uuid"] and {s["stream"] for s in m["steps"]} == {"video", "audio"}
        assert set(case["input_digests"]) >= {"hidden_states", "audio_hidden_states"}
        assert set(case["expected_digests"]) == {"out", "audio_out"}


def test_shards_combine_to_the_unsharded_verdicts(reference_capture, tmp_path):
    from ikdata.replay import report as report_mod

    whole = _run(reference_capture, tmp_path / "whole.json", reuse=False)
    shards = [_run(reference_capture, tmp_path / f"s{i}.json", reuse=False, shard=f"{i}/2") for i in (1, 2)]
    assert sum(len(_trajectory(s)) for s in shards) == 1
    combined = report_mod.combine(shards)
    assert [(c["uuid"], c["status"]) for c in combined["cases"]] == [(c["uuid"], c["status"]) for c in whole["cases"]]
    assert all(c["status"] == "passed" for c in _denoisers(combined))  # regrouped from the trajectory's shard


def test_resume_keeps_the_judged_trajectory_and_reuse_takes_it(reference_capture, tmp_path):
    first = _run(reference_capture, tmp_path / "r.json", reuse=False)
    resumed = _run(reference_capture, tmp_path / "r.json", reuse=False, resume=True)
    assert _trajectory(resumed) == _trajectory(first)
    cache = tmp_path / "cache.jsonl"
    judged = _run(reference_capture, tmp_path / "a.json", cache_path=cache)
    again = _run(reference_capture, tmp_path / "b.json", cache_path=cache)
    [a], [b] = _trajectory(judged), _trajectory(again)
    assert not a.get("reused") and b["reused"] is True
    assert b["trajectory"] == a["trajectory"] and b["status"] == a["status"] == "passed"
    other = _run(reference_capture, tmp_path / "c.json", cache_path=cache,
                 diffusion=__import__("ikdata.diffusion.settings", fromlist=["Settings"]).Settings(k=3.0))
    assert not _trajectory(other)[0].get("reused")  # other settings: judged again


def test_recheck_recomputes_the_verdict_and_refuses_loose_bounds(reference_capture, tmp_path):
    from ikdata.core.verdicts import recheck

    report = _run(reference_capture, tmp_path / "r.json", reuse=False)
    [case] = _trajectory(report)
    assert recheck(case, report) == []
    assert all(recheck(c, report) == [] for c in _denoisers(report))
    forged = copy.deepcopy(case)
    forged["trajectory"]["steps"][3]["e"] = 1e-2  # a failing step claimed as passed
    assert any("the recorded measurements fail" in r for r in recheck(forged, report))
    loose = copy.deepcopy(case)
    loose["trajectory"]["k"] = 1000.0
    assert any("looser than the default" in r for r in recheck(loose, report))


def test_import_admits_the_denoiser_steps_by_their_trajectory(reference_capture, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(reference_capture, root)
    _run(root, None, reuse=False)
    shared = tmp_path / "shared"
    cli = [sys.executable, "-m", "ikdata"]
    assert subprocess.run([*cli, "init", str(shared), "--name", "s"], capture_output=True).returncode == 0
    # a trajectory's verdict is re-judged by import (the trajectory replayed here): no --trust-reports needed
    result = subprocess.run([*cli, "import", str(root), str(shared), "--only-passed"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "re-judged 15 of 15 cases: all agree" in result.stdout, result.stdout  # 5 denoiser, 10 scheduler steps
    rows = (shared / "workloads" / "denoiser" / "ltx2_av_transformer_f32.jsonl").read_text().splitlines()
    assert len(rows) == 5
    receipts = [json.loads(line) for line in (shared / "receipts.jsonl").read_text().splitlines()]
    steps = [r for r in receipts if r["definition"] == "ltx2_av_transformer_f32"]
    assert all(r["validation"]["status"] == "passed" and "trajectory" in r["validation"] for r in steps)


def test_the_cli_prints_a_verdict_per_trajectory(reference_capture, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(reference_capture, root)
    result = subprocess.run([sys.executable, "-m", "ikdata", "replay", str(root), "--no-reuse"],
                            capture_output=True, text=True, env={**__import__("os").environ, "COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    record = json.loads(next((root / "trajectories").glob("*.jsonl")).read_text().splitlines()[0])
    line = next(l for l in result.stdout.splitlines() if record["trajectory"][:12] in l)
    assert "passed" in line and "10/10" in line
    assert "e and f against the float64 reference" in result.stdout and "pass when e <= 2*f + 0 + one rounding" \
        in result.stdout
    bad = subprocess.run([sys.executable, "-m", "ikdata", "replay", str(root), "--no-reuse", "--seed", "8"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "initial noise of stream 'video'" in bad.stdout + bad.stderr
