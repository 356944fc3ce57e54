"""Finding 12 of issue 21: each traceback is a message with the right exit code, and the smaller
disagreements between commands are gone.

Tracebacks: ``lineage`` on a row without uuid or with an integer uuid; a completions JSONL with
``top_k`` Infinity or NaN, ``vocab_size`` 1e21, a prompt nested 100,000 deep; ``push DS ftp://...``;
``validate --jobs -3``; ``index`` on a full disk. Smaller: replay judged a row whose axes disagree
with its blobs and passed one of two rows sharing a uuid, where validate refuses both; ``repair``
said it "brought ikdata.json up to date with what writers added" when it committed a hand-corrupted
blob set; a read-only file system gave exit 2 in capture, index and init (1 is documented); ``gc
--dry-run`` refused a read-only dataset; ``--trust short`` was accepted silently.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fault_helpers import ROWS, make_validated, read_jsonl, recommit, tree_digest

import ikdata
from ikdata.cli import app

runner = CliRunner()
_IKDATA = [sys.executable, "-c", "from ikdata.cli import main; main()"]


def invoke(*args) -> object:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output, result.output
    return result


def run_cli(*args, limit: int | None = None) -> subprocess.CompletedProcess:
    """The CLI in a child process, optionally under a file-size limit (writes past it fail with EFBIG, as
    on a full disk)."""
    def setup() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("IKDATA_DEBUG", None)
    done = subprocess.run(_IKDATA + [str(a) for a in args], capture_output=True, text=True, timeout=300,
                          preexec_fn=setup, env=env)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done


def one_error(done: subprocess.CompletedProcess, code: int, *words: str) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Replay's reuse cache under tmp_path, never the user's ~/.cache."""
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_validated(tmp_path / "src", rows=3)


def _edit_row(root: Path, line: int, edit) -> list[dict]:
    rows = read_jsonl(root / ROWS)
    rows[line - 1] = edit(rows[line - 1])
    (root / ROWS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


# -- lineage -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("uuid", ["missing", 12345], ids=["row-without-uuid", "integer-uuid"])
def test_lineage_of_a_row_without_a_string_uuid_is_a_message(src, uuid):
    rows = read_jsonl(src / ROWS)
    broken, kept = rows[0]["workload"]["uuid"], rows[1]["workload"]["uuid"]

    def edit(row):
        if uuid == "missing":
            row["workload"].pop("uuid")
        else:
            row["workload"]["uuid"] = uuid
        return row

    _edit_row(src, 1, edit)
    for key in (kept, broken, kept[:8]):
        result = invoke("lineage", src, key)
        assert result.exit_code in (0, 1), result.output
    assert kept in invoke("lineage", src, kept).output  # the other rows are still traced
    assert "(no row)" in invoke("lineage", src, broken).output  # its receipt is, without the broken row


# -- completions ---------------------------------------------------------------------------------------


def _completions(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "draws.jsonl"
    path.write_text(text + "\n")
    return path


_LINE = ('{"prompt": "x", "position": 0, "settings": {"temperature": 0.7, "top_k": TOPK}, "vocab_size": VOCAB, '
         '"top_logprobs": [{"token": " Paris", "logprob": -0.02}, {"token": " the", "logprob": -4.1}], '
         '"draws": [{"seed": 0, "token": " Paris"}]}')
COMPLETIONS = {
    "top_k-Infinity": (_LINE.replace("TOPK", "Infinity").replace("VOCAB", "100"), "/settings/top_k"),
    "top_k-NaN": (_LINE.replace("TOPK", "NaN").replace("VOCAB", "100"), "/settings/top_k"),
    "vocab_size-1e21": (_LINE.replace("TOPK", "20").replace("VOCAB", "1e21"), "/vocab_size"),
    "seed-2**70": (_LINE.replace("TOPK", "20").replace("VOCAB", "100").replace('"seed": 0', f'"seed": {2 ** 70}'),
                   "/draws/0/seed"),
    "prompt-nested-100000-deep": (_LINE.replace('"x"', "[" * 100_000 + "]" * 100_000).replace("TOPK", "2")
                                  .replace("VOCAB", "100"), "not JSON"),
}


@pytest.mark.parametrize("case", sorted(COMPLETIONS))
def test_completions_with_values_out_of_range_are_named_by_line(tmp_path, case):
    text, where = COMPLETIONS[case]
    path = _completions(tmp_path, text)
    result = invoke("import", path, tmp_path / "dst")
    assert result.exit_code == 1, result.output
    assert f"{path}:1" in result.output and where in result.output, result.output
    assert not (tmp_path / "dst").exists()  # nothing written


# -- push, validate --jobs ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["push", "clone"])
def test_an_ftp_url_is_a_usage_error(src, tmp_path, command):
    url = "ftp://127.0.0.1:9/x"  # refused before anything connects (loopback anyway)
    args = [src, url] if command == "push" else [url, tmp_path / "clone"]
    one_error(run_cli(command, *args), 2, "ftp://", "cannot be reached from a URL alone")


@pytest.mark.parametrize("jobs", ["-3", "0"])
def test_validate_jobs_below_one_is_a_usage_error(src, jobs):
    result = invoke("validate", "--jobs", jobs, "--deep", src)
    assert result.exit_code == 2, result.output
    assert "--jobs" in result.output


def test_validate_library_refuses_jobs_below_one(src):
    from ikdata.core.errors import UsageError
    from ikdata.ops.validate import validate

    with pytest.raises(UsageError, match="--jobs -3"):
        validate(ikdata.open(src), deep=True, jobs=-3)


# -- index on a full disk ------------------------------------------------------------------------------


def test_index_on_a_full_disk_is_one_line_exit_1(src):
    for leftover in src.glob(".ikdata-index*"):
        leftover.unlink()
    before = tree_digest(src)
    one_error(run_cli("index", src, limit=4096), 1, "cannot write the index")
    assert tree_digest(src) == before
    assert not [p for p in src.iterdir() if p.name.startswith(".tmp-")]


# -- replay agrees with validate -----------------------------------------------------------------------


def _trusted(tmp_path: Path) -> Path:
    from merge_helpers import gemm_definition_record, write_definition

    folder = tmp_path / "trusted"
    write_definition(folder, gemm_definition_record())
    return folder


def _replay(root: Path, tmp_path: Path):
    from ikdata.replay.runner import replay

    return replay(ikdata.open(root, definitions=[_trusted(tmp_path)]))


def test_replay_does_not_judge_a_row_whose_axes_disagree_with_its_blobs(src, tmp_path):
    first = _replay(src, tmp_path)  # judged once as it is: the reuse cache knows these cases
    assert first.exit_code == 0, first.summary()
    uuid = _edit_row(src, 1, lambda r: {**r, "workload": {**r["workload"], "axes": {"M": 2}}})[0]["workload"]["uuid"]
    recommit(src)
    assert any(p.code == "shape-mismatch" for p in ikdata.validate(ikdata.open(src)).problems)
    result = _replay(src, tmp_path)
    case = next(c for c in result.report["cases"] if c["uuid"] == uuid)
    assert case["status"] not in ("passed",) and not case.get("reused"), case
    assert f"{ROWS}:1" in case["reason"] and "/workload/inputs/A" in case["reason"], case["reason"]
    assert "shape [1, 8]" in case["reason"] and "[2, 8]" in case["reason"], case["reason"]
    assert result.exit_code == 1


def test_replay_fails_both_of_two_rows_sharing_a_uuid(src, tmp_path):
    rows = read_jsonl(src / ROWS)
    twin = json.loads(json.dumps(rows[1]))
    twin["workload"]["uuid"] = rows[0]["workload"]["uuid"]
    (src / ROWS).write_text("".join(json.dumps(r) + "\n" for r in rows + [twin]))
    recommit(src)
    assert any(p.code == "duplicate-uuid" for p in ikdata.validate(ikdata.open(src)).problems)
    result = _replay(src, tmp_path)
    case = next(c for c in result.report["cases"] if c["uuid"] == twin["workload"]["uuid"])
    assert case["status"] == "failed" and "two different rows share uuid" in case["reason"], case
    assert f"{ROWS}:1" in case["reason"] and f"{ROWS}:4" in case["reason"]
    found = [p for p in result.problems if p.code == "duplicate-uuid"]
    assert found and found[0].path == ROWS and found[0].line == 4 and found[0].pointer == "/workload/uuid"
    assert result.exit_code == 1


def test_replay_keeps_judging_a_row_repeated_with_the_same_content(src, tmp_path):
    rows = read_jsonl(src / ROWS)
    (src / ROWS).write_text("".join(json.dumps(r) + "\n" for r in rows + [rows[0]]))
    recommit(src)
    result = _replay(src, tmp_path)
    assert result.exit_code == 0, result.summary()


# -- repair and a hand-corrupted blob set --------------------------------------------------------------


def _blob(root: Path) -> Path:
    return root / read_jsonl(root / ROWS)[0]["workload"]["inputs"]["A"]["path"]


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_repair_does_not_commit_a_hand_corrupted_blob_set(src, damage):
    blob = _blob(src)
    blob.chmod(0o644)
    if damage == "truncated":
        blob.write_bytes(blob.read_bytes()[:-4])
    else:
        blob.unlink()
    manifest = (src / "ikdata.json").read_bytes()
    result = invoke("repair", src)
    assert "brought ikdata.json up to date" not in result.output, result.output
    assert "left ikdata.json as it is" in result.output and "blob set changed" in result.output, result.output
    assert result.exit_code == 1
    assert (src / "ikdata.json").read_bytes() == manifest
    assert any(p.code == "manifest" for p in ikdata.validate(ikdata.open(src)).problems)


def test_repair_still_rolls_forward_what_a_capture_added(src):
    from merge_helpers import capture

    capture(src, rows=2, seed=5, commit=False, start=10)  # a capture that never committed
    result = invoke("repair", src)
    assert result.exit_code == 0, result.output
    assert "brought ikdata.json up to date" in result.output
    assert ikdata.validate(ikdata.open(src)).ok


# -- read-only file systems ----------------------------------------------------------------------------


@pytest.fixture
def read_only(tmp_path: Path, src: Path):
    """A 4 MiB tmpfs holding a copy of ``src``, remounted read-only (skipped where mounting is not allowed)."""
    import shutil

    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    point = tmp_path / "ro"
    point.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        shutil.copytree(src, point / "ds")
        for leftover in (point / "ds").glob(".ikdata-index*"):
            leftover.unlink()
        (point / "empty").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_init_on_a_read_only_file_system_exits_1(read_only):
    one_error(run_cli("init", read_only / "new"), 1, "read-only (EROFS)")
    one_error(run_cli("init", read_only / "empty"), 1, "read-only (EROFS)")


def test_index_on_a_read_only_file_system_exits_1(read_only):
    one_error(run_cli("index", read_only / "ds"), 1, "read-only (EROFS)", ".ikdata-index.sqlite")


def test_capture_into_a_read_only_file_system_exits_1(read_only, tmp_path):
    marker = tmp_path / "started"
    done = run_cli("capture", "--into", read_only / "new", "--", sys.executable, "-c",
                   f"open({str(marker)!r}, 'w').close()")
    one_error(done, 1, "read-only (EROFS)", "--into")
    assert not marker.exists()


def test_gc_dry_run_reads_a_read_only_dataset(read_only):
    done = run_cli("gc", "--dry-run", read_only / "ds")
    assert done.returncode == 0, done.stderr
    assert "would delete 0 unreferenced blob(s)" in done.stdout + done.stderr


# -- --trust -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["short", "g" * 64, "ab" * 31])
def test_a_trust_value_that_is_not_a_digest_is_a_usage_error(src, value):
    report = (src / "reports" / "replay.json").read_bytes()
    result = invoke("replay", src, "--trust", value)
    assert result.exit_code == 2, result.output
    assert f"--trust {value!r}" in result.output and "64 hex digits" in result.output
    assert (src / "reports" / "replay.json").read_bytes() == report  # refused before anything ran


def test_a_full_digest_in_capitals_is_accepted():
    from ikdata.core.trust import check_digests

    assert check_digests(["AB" * 32]) == ("ab" * 32,)
