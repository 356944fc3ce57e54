"""The sharing commands end to end: push, clone, replay and validate; read a remote without pulling it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ikdata.core import manifest
from ikdata.cli import app


def _run(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


@pytest.mark.parametrize("backend", ["s3", "hf"])
def test_push_clone_replay_validate(backend, request, tmp_path, make_dataset, gemm_record):
    """Done when: pushed to S3 / the Hub stand-in and cloned back, the dataset is identical and replays."""
    from remote_helpers import replay_and_commit, url_for

    url = url_for(backend, request, tmp_path)
    root = make_dataset("src", rows=3)
    local_id = replay_and_commit(root, tmp_path, gemm_record)

    pushed = _run("push", str(root), url, "--json", "--jobs", "4")
    assert pushed.exit_code == 0, pushed.output
    assert json.loads(pushed.output)["dataset_id"] == local_id

    copy = tmp_path / "copy"
    cloned = _run("clone", url, str(copy), "--json")
    assert cloned.exit_code == 0, cloned.output
    assert json.loads(cloned.output)["dataset_id"] == local_id == manifest.current_id(copy)

    deep = _run("validate", str(copy), "--deep", "--json")
    assert deep.exit_code == 0 and json.loads(deep.output)["ok"], deep.output

    definitions = tmp_path / "trusted-definitions"
    replayed = _run("replay", str(copy), "--definitions", str(definitions), "--no-reuse", "--json",
                    "--report", str(tmp_path / "replay-of-copy.json"))
    assert replayed.exit_code == 0, replayed.output

    remote_check = _run("validate", url, "--json")
    assert remote_check.exit_code == 0 and json.loads(remote_check.output)["ok"], remote_check.output
    remote_deep = _run("validate", url, "--deep", "--json")
    assert json.loads(remote_deep.output)["blobs_rehashed"] > 0 and remote_deep.exit_code == 0


def test_ls_stats_validate_read_a_remote_without_pulling(tmp_path, make_dataset):
    root = make_dataset("src", rows=3)
    url = f"file://{tmp_path}/remote"
    assert _run("push", str(root), url).exit_code == 0

    listed = _run("ls", url, "--json")
    assert listed.exit_code == 0
    local = _run("ls", str(root), "--json")
    assert [r["uuid"] for r in json.loads(listed.output)] == [r["uuid"] for r in json.loads(local.output)]

    remote_stats = json.loads(_run("stats", url, "--json").output)
    local_stats = json.loads(_run("stats", str(root), "--json").output)
    assert remote_stats == local_stats

    checked = _run("validate", url)
    assert checked.exit_code == 0 and f"{url}: clean" in checked.output
    assert not (tmp_path / "remote" / "workloads").exists()  # nothing was unpacked on the remote


def test_validate_url_catches_a_corrupted_blob_with_deep(tmp_path, make_dataset):
    from remote_helpers import first_blob, flip_last_byte, tamper

    root = make_dataset("src")
    url = str(tmp_path / "remote")
    _run("push", str(root), url, "--no-pack")  # a loose object to tamper with
    victim = first_blob(root)
    tamper(f"file://{url}", victim, flip_last_byte(root / victim))
    assert _run("validate", f"file://{url}").exit_code == 0  # header and size are intact
    deep = _run("validate", f"file://{url}", "--deep")
    assert deep.exit_code == 1 and victim.rsplit("/", 1)[1][:12] in deep.output


def test_pull_merges_into_a_dataset_with_data(tmp_path, make_dataset, gemm_record):
    from remote_helpers import replay_and_commit

    a = make_dataset("a", rows=2, seed=1)
    b = make_dataset("b", rows=2, seed=2)
    replay_and_commit(a, tmp_path, gemm_record)
    replay_and_commit(b, tmp_path, gemm_record)
    url = f"memory://ikdata-tests/pull-merge-{tmp_path.name}"
    assert _run("push", str(a), url).exit_code == 0

    trusted = str(tmp_path / "trusted-definitions")  # the remote's report is re-judged by this reference
    pulled = _run("pull", url, str(b), "--json", "--definitions", trusted)
    assert pulled.exit_code == 0, pulled.output
    document = json.loads(pulled.output)
    assert document["how"] == "pull" and document["added"] == 2
    assert document["remote_id"] in [p["id"] for p in manifest.read(b)["parents"]]
    again = json.loads(_run("pull", url, str(b), "--json", "--definitions", trusted).output)
    assert again["blobs_fetched"] == 0  # everything is already there

    deep = _run("validate", str(b), "--deep", "--json")
    assert deep.exit_code == 0, deep.output


def test_commands_have_help():
    for command in ("push", "pull", "clone"):
        result = _run(command, "--help")
        assert result.exit_code == 0 and "Examples:" in result.output and "--endpoint-url" in result.output


def test_lineage_reads_a_remote_without_pulling(tmp_path, make_dataset):
    root = make_dataset("src", rows=2)
    url = f"file://{tmp_path}/remote"
    assert _run("push", str(root), url).exit_code == 0
    uuid = json.loads(_run("ls", str(root), "--json").output)[0]["uuid"]

    remote = _run("lineage", url, uuid, "--json")
    local = _run("lineage", str(root), uuid, "--json")
    assert remote.exit_code == 0 == local.exit_code, remote.output
    chain = json.loads(remote.output)
    assert [c["uuid"] for c in chain] == [uuid]
    assert chain[0]["capture"] == json.loads(local.output)[0]["capture"]
    assert not (tmp_path / "remote-pulled").exists()
