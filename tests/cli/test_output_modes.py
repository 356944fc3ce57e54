"""The output modes every command shares (issue 10, issue 11 item 7): JSON alone on stdout,
problems on stderr, exit 1 whenever problems were found, --quiet, and the repair hint's path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli_helpers import run_cli, trusted_definitions, write_replayable
from foundation_helpers import GEMM_NAME
import ikdata
from ikdata.cli import app

runner = CliRunner()
ROWS = f"workloads/gemm/{GEMM_NAME}.jsonl"
TORN = b'{"definition": "gemm_test_n4_k8", "workload": {"uu'


def _torn(root: Path) -> Path:
    with open(root / ROWS, "ab") as stream:
        stream.write(TORN)
    return root


def _json(result) -> object:
    """stdout parsed as one JSON document: fails if anything else was printed there."""
    return json.loads(result.stdout)


# -- problems: stderr, exit 1, the real path in the repair hint ----------------------------------------------


def test_ls_json_with_a_torn_line_keeps_stdout_json_and_exits_1(ikdata_dataset):
    _torn(ikdata_dataset)
    result = runner.invoke(app, ["ls", str(ikdata_dataset), "--json"])
    assert result.exit_code == 1
    assert [r["axes"] for r in _json(result)] == [{"M": 1}, {"M": 2}, {"M": 3}]
    assert f"{ROWS}:4: torn last line" in result.stderr
    assert f"run 'ikdata repair {ikdata_dataset}' to set it aside" in result.stderr
    assert "DATASET" not in result.stderr


def test_ls_and_stats_human_exit_1_with_problems_on_stderr(ikdata_dataset):
    _torn(ikdata_dataset)
    for command in ("ls", "stats"):
        result = runner.invoke(app, [command, str(ikdata_dataset)])
        assert result.exit_code == 1, command
        assert "torn last line" in result.stderr and "torn last line" not in result.stdout, command
        assert f"ikdata repair {ikdata_dataset}'" in result.stderr


def test_clean_ls_and_stats_exit_0_with_nothing_on_stderr(ikdata_dataset):
    for command in ("ls", "stats"):
        result = runner.invoke(app, [command, str(ikdata_dataset), "--json"])
        assert result.exit_code == 0, command
        assert result.stderr == ""
        _json(result)


def test_validate_json_names_the_real_dataset_in_the_repair_hint(ikdata_dataset):
    _torn(ikdata_dataset)
    result = runner.invoke(app, ["validate", str(ikdata_dataset), "--json"])
    assert result.exit_code == 1
    torn = [p for p in _json(result)["problems"] if p["code"] == "torn-line"]
    assert torn and torn[0]["message"].endswith(f"run 'ikdata repair {ikdata_dataset}' to set it aside")


def test_repair_hint_quotes_a_path_with_spaces(make_ikdata_dataset):
    root = _torn(make_ikdata_dataset(2, name="my data"))
    result = runner.invoke(app, ["ls", str(root)])
    assert f"run \"ikdata repair '{root}'\" to set it aside" in " ".join(result.stderr.split())


def test_problems_in_a_real_process_go_to_stderr(ikdata_dataset):
    _torn(ikdata_dataset)
    done = run_cli("ls", str(ikdata_dataset), "--json")
    assert done.returncode == 1
    assert len(json.loads(done.stdout)) == 3
    assert f"{ROWS}:4: torn last line" in done.stderr and "Traceback" not in done.stderr


# -- --quiet ----------------------------------------------------------------------------------------------------


def test_quiet_prints_nothing_on_stdout_and_keeps_the_exit_code(ikdata_dataset):
    uuid = next(ikdata.open(ikdata_dataset).workloads()).uuid
    for args in (["validate", "--deep"], ["ls"], ["stats"], ["show", uuid], ["lineage", uuid]):
        args = [args[0], str(ikdata_dataset), *args[1:], "--quiet"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        assert result.stdout == "" and result.stderr == "", args
    _torn(ikdata_dataset)
    bad = runner.invoke(app, ["validate", str(ikdata_dataset), "-q"])
    assert bad.exit_code == 1
    assert bad.stdout == "" and f"{ROWS}:4: torn last line" in bad.stderr


def test_json_wins_over_quiet(ikdata_dataset):
    result = runner.invoke(app, ["stats", str(ikdata_dataset), "--json", "--quiet"])
    assert result.exit_code == 0
    assert _json(result)["workloads"] == 3


# -- --json on every command ------------------------------------------------------------------------------------


def _commands() -> dict:
    return typer.main.get_command(app).commands


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_has_json_and_quiet(name):
    options = {o for p in _commands()[name].params for o in getattr(p, "opts", [])}
    assert "--json" in options and "--quiet" in options, name


def test_json_of_every_command_parses(tmp_path, make_ikdata_dataset):
    """One run per command with --json; stdout must be exactly one JSON document."""
    src = make_ikdata_dataset(3, name="src")
    definitions = trusted_definitions(tmp_path / "defs")
    documents: dict[str, object] = {}

    def ok(name: str, *args: str, code: int = 0) -> object:
        args = (*args, "--json") if "--" not in args else \
            (*args[:args.index("--")], "--json", *args[args.index("--"):])  # before the program's own arguments
        result = runner.invoke(app, [name, *args])
        assert result.exit_code == code, (name, result.output)
        documents[name] = document = _json(result)
        return document

    assert ok("init", str(tmp_path / "new"))["id"]
    assert ok("validate", str(src), "--deep")["problems"] == []
    uuid = ok("ls", str(src))[0]["uuid"]
    assert ok("show", str(src), uuid[:10])["row"]["workload"]["uuid"] == uuid
    assert ok("stats", str(src))["workloads"] == 3
    assert ok("manifest", str(src))["id"]
    summary = ok("replay", str(src), "--definitions", str(definitions), "--no-reuse")
    assert summary["counts"]["passed"] == 3
    assert ok("import", str(src), str(tmp_path / "dst"), "--definitions", str(definitions))["added"]
    assert ok("lineage", str(tmp_path / "dst"), uuid[:8])[0]["uuid"] == uuid
    assert ok("lineage", str(tmp_path / "dst"))["root"]
    assert "workloads" in ok("diff", str(src), str(tmp_path / "dst"))
    assert "deleted" in ok("gc", str(src), "--dry-run")
    assert ok("push", str(tmp_path / "dst"), str(tmp_path / "remote"))["dataset_id"]
    assert ok("clone", str(tmp_path / "remote"), str(tmp_path / "cloned"))["dataset_id"]
    assert ok("pull", str(tmp_path / "remote"), str(tmp_path / "cloned"))["how"] == "up-to-date"
    _torn(src)
    repaired = ok("repair", str(src))
    assert repaired["changed"] and repaired["lines"][0]["removed_lines"] == [4]
    assert ok("repair", str(src))["changed"] is False
    shard = ok("replay", str(src), "--definitions", str(definitions), "--no-reuse", "--shard", "1/1")
    assert ok("replay-combine", str(tmp_path / "combined.json"), shard["report"])["exit_code"] == 0
    nothing = ok("capture", "--into", str(tmp_path / "cap"), "--", "true", code=1)  # nothing captured: exit 1
    assert nothing["returncode"] == 0 and nothing["why_nothing"]
    assert ok("index", str(src))["rows"] == 3
    assert ok("unpack", str(tmp_path / "cloned"))["written"] > 0  # a clone of a packed remote is packed
    assert ok("pack", str(tmp_path / "cloned"))["packed"] > 0
    assert ok("noise", "42", "--shape", "video=1,2")["digest"]
    assert ok("report", str(src), "--html", str(tmp_path / "report.html"))["cases"] == 3
    untested = set(_commands()) - set(documents)
    assert not untested, f"add a --json run of {sorted(untested)} to this test"


def test_capture_json_keeps_the_programs_output_off_stdout(tmp_path):
    done = run_cli("capture", "--into", str(tmp_path / "cap"), "--json", "--", "sh", "-c",
                   "echo from-the-program; echo to-stderr >&2")
    assert done.returncode == 1, done.stderr  # no torch ran, nothing was captured: exit 1 (issue 32)
    document = json.loads(done.stdout)
    assert document["into"] == str(tmp_path / "cap") and document["counts"] == {}
    assert "from-the-program" in done.stderr and "to-stderr" in done.stderr


def test_init_and_repair_human_output_unchanged(tmp_path, ikdata_dataset):
    created = runner.invoke(app, ["init", str(tmp_path / "new")])
    assert created.exit_code == 0 and f"initialised {tmp_path / 'new'} (id " in created.stdout
    nothing = runner.invoke(app, ["repair", str(ikdata_dataset)])
    assert nothing.exit_code == 0 and f"{ikdata_dataset}: nothing to repair" in nothing.stdout


def test_replay_json_refusal_goes_to_stderr(tmp_path):
    root = write_replayable(tmp_path / "ds")
    shutil.rmtree(tmp_path / "ds" / "reports", ignore_errors=True)
    result = runner.invoke(app, ["replay", str(root), "--json", "--no-reuse"])  # definitions not trusted
    assert result.exit_code == 1
    assert _json(result)["refused"]
    assert "refused:" in result.stderr


# -- lineage shows the request payload (issue 11 item 8) ------------------------------------------------------


def test_lineage_shows_the_request_payload_in_text_and_json(tmp_path):
    payload = {"model": "Qwen-Image", "prompt": "A red ceramic teapot", "size": "1024x1024", "n": 1,
               "messages": [{"role": "user", "content": "hi"}]}
    root = write_replayable(tmp_path / "ds", rows=2, request=payload)
    uuid = next(ikdata.open(root).workloads()).uuid
    text = runner.invoke(app, ["lineage", str(root), uuid[:8]])
    assert text.exit_code == 0, text.output
    shown = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    assert f"  request: {shown}" in text.stdout
    document = runner.invoke(app, ["lineage", str(root), uuid[:8], "--json"])
    assert _json(document)[0]["request"] == payload
    assert _json(document)[0]["capture"]["request_id"] == "r0"


def test_lineage_without_a_request_says_nothing_about_one(ikdata_dataset):
    uuid = next(ikdata.open(ikdata_dataset).workloads()).uuid
    text = runner.invoke(app, ["lineage", str(ikdata_dataset), uuid])
    assert text.exit_code == 0 and "request:" not in text.stdout
    assert _json(runner.invoke(app, ["lineage", str(ikdata_dataset), uuid, "--json"]))[0]["request"] is None
