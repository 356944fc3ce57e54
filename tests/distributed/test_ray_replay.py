"""Replay on a real local Ray cluster: same verdicts as a local replay, straight from S3, surviving a
killed worker, a corrupted remote blob an error for its cases only, untrusted references never sent."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

import ikdata
from ikdata.replay.distributed import plan_tasks, replay_on_ray
from ikdata.replay.runner import replay

from replay.replay_helpers import gemm_record


def _verdicts(report: dict) -> dict[str, tuple]:
    return {c["uuid"]: (c["status"], tuple(sorted((c.get("input_digests") or {}).items())),
                        tuple(sorted((c.get("expected_digests") or {}).items()))) for c in report["cases"]}


def test_ray_gives_the_same_verdicts_and_digests_as_a_local_replay(ray_cluster, build, tmp_path):
    built = build(12, outputs=lambda i, given: {"C": given["A"] @ given["W"].T + (1.0 if i == 5 else 0.0)})
    local = replay(ikdata.open(built.root, definitions=[built.definitions]), report_path=tmp_path / "local.json",
                   reuse=False)
    result, info = replay_on_ray(built.root, definition_folders=[built.definitions], reuse=False,
                                 report_path=tmp_path / "ray.json", task_size=4)
    assert _verdicts(result.report) == _verdicts(local.report)
    assert result.counts["passed"] == 11 and result.counts["failed"] == 1
    assert info.tasks == 3 and info.worker_deaths == 0
    assert len(result.report["cases"]) == 12  # every case judged once


def test_an_untrusted_definition_is_refused_before_any_task_is_sent(ray_cluster, build, tmp_path):
    built = build(3)
    result, info = replay_on_ray(built.root, report_path=tmp_path / "r.json")  # no --definitions: not trusted
    assert info.tasks == 0
    assert result.report["cases"] == [] and [r["definition"] for r in result.report["refused"]] == ["gemm_n4_k8"]
    assert result.exit_code == 1


def test_reuse_works_as_it_does_locally(ray_cluster, build, tmp_path):
    built = build(4)
    replay_on_ray(built.root, definition_folders=[built.definitions], report_path=tmp_path / "a.json")
    again, info = replay_on_ray(built.root, definition_folders=[built.definitions], report_path=tmp_path / "b.json")
    assert info.tasks == 0 and again.counts["reused"] == 4 and again.counts["passed"] == 4


def _push(root, url, *, pack=True):
    from ikdata.core import manifest
    from ikdata.remote.push import push

    manifest.write(root)
    push(root, url, pack=pack)


def test_replay_straight_from_s3_fetches_only_the_blobs_the_cases_need(ray_cluster, build, tmp_path):
    built = build(6)
    url = "s3://ikdata-ray/straight"
    _push(built.root, url)
    result, info = replay_on_ray(url, definition_folders=[built.definitions], report_path=tmp_path / "s3.json",
                                 reuse=False, task_size=2)
    assert result.counts["passed"] == 6
    needed = set()
    for case in result.report["cases"]:
        needed |= set(case["input_digests"].values()) | set(case["expected_digests"].values())
    need_bytes = sum(p.stat().st_size for p in (built.root / "blob").rglob("*.safetensors")
                     if p.name.split(".")[0] in needed)
    # each of the 3 tasks may run on another worker, so a shared weight can be fetched up to once per worker;
    # packed blobs travel as ranges of their pack's tensor bytes, without their loose headers (issue 26)
    assert 0 < info.fetched_bytes <= need_bytes + 2 * (built.root / built.results[0].row.inputs["W"].path).stat().st_size


def test_a_corrupted_remote_blob_is_an_error_for_its_cases_only(ray_cluster, build, tmp_path):
    import boto3

    built = build(4)
    url = "s3://ikdata-ray/corrupt"
    _push(built.root, url, pack=False)  # a loose object to damage (a damaged packed member: tests/remote_packs)
    victim = built.results[2].receipt.expected_output["C"].path
    client = boto3.client("s3", endpoint_url=ray_cluster, region_name="us-east-1")
    key = f"corrupt/{victim}"
    data = bytearray(client.get_object(Bucket="ikdata-ray", Key=key)["Body"].read())
    data[-1] ^= 0xFF
    client.put_object(Bucket="ikdata-ray", Key=key, Body=bytes(data))
    result, _ = replay_on_ray(url, definition_folders=[built.definitions], report_path=tmp_path / "c.json",
                              reuse=False)
    by_uuid = {c["uuid"]: c for c in result.report["cases"]}
    assert by_uuid[built.uuids[2]]["status"] == "error"
    assert "failed verification" in by_uuid[built.uuids[2]]["reason"]
    assert [by_uuid[u]["status"] for i, u in enumerate(built.uuids) if i != 2] == ["passed"] * 3


SLOW_REFERENCE = """import os, time
import torch

def run(A, W):
    folder = os.environ.get("IKDATA_TEST_PID_DIR")
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}-{time.monotonic_ns()}"), "w"):
            pass
        time.sleep(0.5)
    return A @ W.T
"""


def test_a_worker_killed_mid_run_is_survived_and_every_case_judged_once(ray_cluster, build, tmp_path):
    """The test finds the pid of the worker running a case (the reference notes it), SIGKILLs that pid
    only, and the run completes: the killed task's cases run again elsewhere, each judged once."""
    built = build(6, record=gemm_record(reference=SLOW_REFERENCE))
    pids = tmp_path / "pids"
    pids.mkdir()
    os.environ["IKDATA_TEST_PID_DIR"] = str(pids)  # read by the reference in the workers (runtime env below)
    killed: list[int] = []
    finished = threading.Event()  # the killer watches until the run is over, however long a loaded machine takes

    def killer():
        while not finished.is_set() and not killed:
            found = sorted(pids.iterdir())
            if found:
                pid = int(found[0].name.split("-")[0])
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.05)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        import ray

        ray.shutdown()  # restart so the workers see IKDATA_TEST_PID_DIR
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        result, info = replay_on_ray(built.root, definition_folders=[built.definitions], reuse=False,
                                     report_path=tmp_path / "k.json", task_size=3)
    finally:
        finished.set()
        thread.join()
        del os.environ["IKDATA_TEST_PID_DIR"]
    assert killed and info.worker_deaths >= 1
    uuids = [c["uuid"] for c in result.report["cases"]]
    assert sorted(uuids) == sorted(built.uuids)  # every case once
    assert all(c["status"] == "passed" for c in result.report["cases"])


def test_a_case_that_kills_two_workers_is_an_error_and_the_rest_go_on(ray_cluster, build, tmp_path):
    killer_reference = """import os, signal
import torch

def run(A, W):
    if A.shape[0] == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return A @ W.T
"""
    built = build(6, record=gemm_record(reference=killer_reference))  # rows 1 and 4 have 2 rows in A
    result, info = replay_on_ray(built.root, definition_folders=[built.definitions], reuse=False,
                                 report_path=tmp_path / "two.json", task_size=6)
    by_uuid = {c["uuid"]: c for c in result.report["cases"]}
    assert sorted(by_uuid) == sorted(built.uuids)
    assert [by_uuid[built.uuids[i]]["status"] for i in (1, 4)] == ["error", "error"]
    assert "died 2 times" in by_uuid[built.uuids[1]]["reason"]
    assert all(by_uuid[built.uuids[i]]["status"] == "passed" for i in (0, 2, 3, 5))
    assert info.worker_deaths == 1 + 2 * 2  # the 6-case task, then each killer case twice alone


def test_driver_killed_then_resume_reruns_only_what_has_no_result(ray_cluster, build, tmp_path):
    built = build(6)
    report = tmp_path / "resume.json"
    first, _ = replay_on_ray(built.root, definition_folders=[built.definitions], reuse=False, report_path=report)
    # what a driver killed after 3 cases leaves: the report journal holds the first three
    done = json.loads(report.read_text())
    kept = done["cases"][:3]
    from ikdata.replay import report as report_mod

    report_mod.write(report, dict(done, cases=kept))
    second, info = replay_on_ray(built.root, definition_folders=[built.definitions], reuse=False,
                                 report_path=report, resume=True)
    assert second.resumed == 3 and info.tasks == 1
    assert sorted(c["uuid"] for c in second.report["cases"]) == sorted(built.uuids)


def test_tasks_group_cases_by_definition():
    class Row:
        def __init__(self, definition, uuid):
            self.definition, self.uuid = definition, uuid

    tasks = plan_tasks([Row("b", "1"), Row("a", "2"), Row("b", "3"), Row("b", "4")], 2)
    assert [(t.definition, t.uuids) for t in tasks] == [("a", ["2"]), ("b", ["1", "3"]), ("b", ["4"])]


def test_without_ray_the_error_says_what_to_install(monkeypatch, build, tmp_path):
    import builtins

    from ikdata.core.errors import UsageError

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(UsageError, match=r"ikdata\[ray\]"):
        replay_on_ray(tmp_path, report_path=tmp_path / "x.json")


def test_the_cli_replays_on_ray_and_its_report_imports_like_any_other(ray_cluster, build, tmp_path):
    from typer.testing import CliRunner

    from ikdata.cli import app
    from ikdata.importing.apply import import_dataset

    built = build(5)
    result = CliRunner().invoke(app, ["replay", str(built.root), "--ray", "local", "--definitions",
                                      str(built.definitions), "--no-reuse", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["counts"]["passed"] == 5 and summary["ray"]["tasks"] == 1
    from ikdata.core import manifest

    manifest.write(built.root)
    imported = import_dataset(built.root, tmp_path / "shared", only_passed=True, definitions=[built.definitions])
    assert len(imported.added) == 5


def test_a_url_without_ray_says_what_to_do(tmp_path):
    from typer.testing import CliRunner

    from ikdata.cli import app

    result = CliRunner().invoke(app, ["replay", "s3://bucket/ds"])
    assert result.exit_code == 2 and "--ray" in result.output
