"""Every bad-input case of issue 2: a clear message naming file and line (and pointer), exit 1,
no traceback, and the dataset left byte-for-byte as it was."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from typer.testing import CliRunner

from foundation_helpers import GEMM_NAME, tree_digest
from ikdata.cli import app

ROWS = f"workloads/gemm/{GEMM_NAME}.jsonl"
runner = CliRunner()


def _rows(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / ROWS).read_text().splitlines()]


def _write_rows(root: Path, rows: list[dict]) -> None:
    (root / ROWS).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def _edit_row(root: Path, index: int, edit: Callable[[dict], None]) -> None:
    rows = _rows(root)
    edit(rows[index])
    _write_rows(root, rows)


def _blob_of(root: Path, line: int = 1, name: str = "A") -> str:
    return _rows(root)[line - 1]["workload"]["inputs"][name]["path"]


def _replace_blob(root: Path, rel: str, value: np.ndarray) -> None:
    """Overwrite a blob file with a different (valid) one-tensor safetensors file."""
    from ikdata.core.store import raw_tensor
    from ikdata.core.safetensors_format import encode_header

    raw = raw_tensor(value)
    path = root / rel
    os.chmod(path, 0o644)
    path.write_bytes(encode_header(raw.dtype, raw.shape, raw.data.nbytes) + bytes(raw.data))


# -- the cases: (mutate the dataset) -> (substrings the report must contain) -----------------


def malformed_json(root):
    lines = (root / ROWS).read_text().splitlines(keepends=True)
    lines[1] = '{"definition": "gemm_test_n4_k8", "workload": \n'
    (root / ROWS).write_text("".join(lines))
    return [f"{ROWS}:2:", "malformed JSON"]


def missing_field(root):
    _edit_row(root, 0, lambda r: r["workload"].pop("uuid"))
    return [f"{ROWS}:1: /workload", "'uuid' is a required property", "workload.schema.json"]


def wrong_type(root):
    _edit_row(root, 0, lambda r: r["workload"]["axes"].update(M="three"))
    return [f"{ROWS}:1: /workload/axes/M", "'three' is not of type 'integer'"]


def unknown_definition(root):
    _edit_row(root, 0, lambda r: r.update(definition="no_such_op"))
    return [f"{ROWS}:1: /definition", "unknown definition 'no_such_op'"]


def absolute_path(root):
    _edit_row(root, 0, lambda r: r["workload"]["inputs"]["A"].update(path="/etc/passwd"))
    return [f"{ROWS}:1: /workload/inputs/A/path", "'/etc/passwd' is absolute"]


def dotdot_path(root):
    _edit_row(root, 0, lambda r: r["workload"]["inputs"]["A"].update(path="blob/../../outside.safetensors"))
    return [f"{ROWS}:1: /workload/inputs/A/path", "contains '..'"]


def symlink_leaving(root):
    outside = root.parent / "outside.safetensors"
    rel = _blob_of(root)
    outside.write_bytes((root / rel).read_bytes())
    link = root / "blob" / "escape.safetensors"
    link.symlink_to(outside)
    _edit_row(root, 0, lambda r: r["workload"]["inputs"]["A"].update(path="blob/escape.safetensors"))
    return [f"{ROWS}:1: /workload/inputs/A/path", "'blob/escape.safetensors' is a link that leaves the dataset"]


def missing_blob(root):
    rel = _blob_of(root)
    (root / rel).unlink()
    return [f"{ROWS}:1: /workload/inputs/A/path", f"blob {rel} does not exist"]


def wrong_dtype(root):
    rel = _blob_of(root)
    _replace_blob(root, rel, np.zeros((1, 8), dtype=np.float16))
    return [f"{ROWS}:1: /workload/inputs/A", f"blob {rel} holds torch.float16, expected torch.float32"]


def wrong_shape(root):
    rel = _blob_of(root)
    _replace_blob(root, rel, np.zeros((2, 8), dtype=np.float32))
    return [f"{ROWS}:1: /workload/inputs/A", f"blob {rel} has shape [2, 8], expected [1, 8]"]


def truncated_blob(root):
    rel = _blob_of(root)
    data = (root / rel).read_bytes()
    (root / rel).write_bytes(data[:-5])
    return [f"{rel}: unreadable safetensors file", "truncated", f"{ROWS}:1: /workload/inputs/A/path"]


def header_too_long(root):
    rel = _blob_of(root)
    data = (root / rel).read_bytes()
    (root / rel).write_bytes(struct.pack("<Q", len(data) + 100) + data[8:])
    return [f"{rel}: unreadable safetensors file", "header claims", "bytes but the file holds"]


def absurd_header(root):
    rel = _blob_of(root)
    data = (root / rel).read_bytes()
    (root / rel).write_bytes(struct.pack("<Q", 1 << 60) + data[8:])
    return [f"{rel}: unreadable safetensors file", f"header length {1 << 60} is absurd"]


def torn_last_line(root):
    with open(root / ROWS, "ab") as stream:
        stream.write(b'{"definition": "gemm_test_n4_k8", "wor')
    return [f"{ROWS}:4:", "torn last line", "ikdata repair"]


def duplicate_uuid(root):
    rows = _rows(root)
    twin = json.loads(json.dumps(rows[0]))
    twin["workload"]["axes"]["M"] = 7
    _write_rows(root, rows + [twin])
    return [f"{ROWS}:4: /workload/uuid", f"uuid {rows[0]['workload']['uuid']} is also used by a different row "
            f"at {ROWS}:1"]


def random_input(root):
    _edit_row(root, 0, lambda r: r["workload"]["inputs"].update(A={"type": "random"}))
    return [f"{ROWS}:1: /workload/inputs/A", "a 'random' input in a captured dataset"]


def receipt_unknown_workload(root):
    lines = (root / "receipts.jsonl").read_text().splitlines()
    receipt = json.loads(lines[1])
    receipt["uuid"] = "00000000-0000-0000-0000-000000000000"
    lines[1] = json.dumps(receipt)
    (root / "receipts.jsonl").write_text("\n".join(lines) + "\n")
    return ["receipts.jsonl:2: /uuid", "receipt names workload 00000000-0000-0000-0000-000000000000, which no "
            "workload row holds"]


def receipt_unknown_blob(root):
    lines = (root / "receipts.jsonl").read_text().splitlines()
    receipt = json.loads(lines[0])
    missing = "blob/sha256/ab/" + "ab" * 32 + ".safetensors"
    receipt["expected_output"]["C"]["path"] = missing
    lines[0] = json.dumps(receipt)
    (root / "receipts.jsonl").write_text("\n".join(lines) + "\n")
    return ["receipts.jsonl:1: /expected_output/C/path", f"blob {missing} does not exist"]


def manifest_disagrees(root):
    from ikdata.core.store import BlobStore

    BlobStore(root).put(np.arange(5, dtype=np.int64))  # a blob the manifest does not know
    return ["ikdata.json: /blobs", "blob set is", "manifest says"]


CASES = [malformed_json, missing_field, wrong_type, unknown_definition, absolute_path, dotdot_path,
         symlink_leaving, missing_blob, wrong_dtype, wrong_shape, truncated_blob, header_too_long, absurd_header,
         torn_last_line, duplicate_uuid, random_input, receipt_unknown_workload, receipt_unknown_blob,
         manifest_disagrees]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("deep", [False, True], ids=["shallow", "deep"])
def test_bad_input_is_reported_with_location_exit_1_and_nothing_changes(ikdata_dataset, case, deep):
    root = ikdata_dataset
    expected = case(root)
    before = tree_digest(root)
    result = runner.invoke(app, ["validate", str(root)] + (["--deep"] if deep else []))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    for text in expected:
        assert text in result.output, f"{text!r} not in:\n{result.output}"
    assert "problem(s)" in result.output
    assert tree_digest(root) == before


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_json_output_holds_the_same_findings(ikdata_dataset, case):
    root = ikdata_dataset
    case(root)
    human = runner.invoke(app, ["validate", str(root)])
    result = runner.invoke(app, ["validate", str(root), "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert document["deep"] is False
    from ikdata.core.problems import Problem

    problems = [Problem(**p) for p in document["problems"]]
    assert problems and all(p.path for p in problems)
    for problem in problems:
        assert str(problem) in human.output


def test_flipped_byte_is_caught_only_by_deep_and_names_the_blob(ikdata_dataset):
    root = ikdata_dataset
    rel = _blob_of(root)
    path = root / rel
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    before = tree_digest(root)
    shallow = runner.invoke(app, ["validate", str(root)])
    assert shallow.exit_code == 0, shallow.output
    deep = runner.invoke(app, ["validate", str(root), "--deep"])
    assert deep.exit_code == 1
    assert f"{rel}: content digest is" in deep.output
    assert "the blob is corrupt" in deep.output
    assert tree_digest(root) == before


def test_every_problem_is_reported_not_just_the_first(ikdata_dataset):
    root = ikdata_dataset
    expected = unknown_definition(root) + receipt_unknown_workload(root)
    rel = _blob_of(root, line=2)
    (root / rel).unlink()
    expected += [f"{ROWS}:2: /workload/inputs/A/path blob {rel} does not exist"]
    result = runner.invoke(app, ["validate", str(root), "--json"])
    assert result.exit_code == 1
    text = "\n".join(str(p) for p in _problems(result.stdout))
    for piece in expected:
        assert piece in text, text


def _problems(stdout: str):
    from ikdata.core.problems import Problem

    return [Problem(**p) for p in json.loads(stdout)["problems"]]


def test_clean_dataset_exit_0_and_json_document(ikdata_dataset):
    result = runner.invoke(app, ["validate", str(ikdata_dataset), "--deep", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document == {"ok": True, "deep": True, "definitions": 1, "workloads": 3, "receipts": 3,
                        "trajectories": 0, "blobs_checked": 7, "blobs_rehashed": 7, "problems": []}


def test_usage_errors_exit_2(tmp_path, ikdata_dataset):
    missing = runner.invoke(app, ["validate", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert f"{tmp_path / 'nope'}: no such dataset folder" in missing.output
    assert "Traceback" not in missing.output
    bad_defs = runner.invoke(app, ["validate", str(ikdata_dataset), "--definitions", str(tmp_path / "nodefs")])
    assert bad_defs.exit_code == 2
    assert "--definitions must name a folder" in bad_defs.output
    unknown_option = runner.invoke(app, ["validate", str(ikdata_dataset), "--deeep"])
    assert unknown_option.exit_code == 2


def test_library_validate_never_modifies_and_counts(ikdata_dataset):
    import ikdata

    before = tree_digest(ikdata_dataset)
    report = ikdata.validate(ikdata.open(ikdata_dataset), deep=True, jobs=1)
    assert report.ok and report.blobs_rehashed == 7 and report.workloads == 3
    assert tree_digest(ikdata_dataset) == before


def _all_blobs(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / "blob").rglob("*.safetensors"))


@pytest.mark.parametrize("index", range(7))
def test_flipping_one_byte_in_any_blob_fails_deep_and_names_it(ikdata_dataset, index):
    root = ikdata_dataset
    blobs = _all_blobs(root)
    assert len(blobs) == 7  # 3 activations, 1 shared weight, 3 outputs
    path = root / blobs[index]
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + 40 if len(data) > 100 else -1] ^= 0x04
    path.write_bytes(bytes(data))
    result = runner.invoke(app, ["validate", str(root), "--deep"])
    assert result.exit_code == 1
    assert f"✗ {blobs[index]}:" in result.output


def test_every_single_byte_flip_of_a_blob_is_caught_by_deep(ikdata_dataset):
    """Header, padding or data: whichever byte of the file changes, --deep fails and names the blob."""
    import ikdata

    root = ikdata_dataset
    rel = _blob_of(root, line=2)
    path = root / rel
    original = path.read_bytes()
    for position in range(len(original)):
        damaged = bytearray(original)
        damaged[position] ^= 0x01
        path.write_bytes(bytes(damaged))
        report = ikdata.validate(ikdata.open(root), deep=True, jobs=1)
        assert not report.ok, position
        assert any(rel in (p.path + p.message) for p in report.problems), (position, report.problems)
    path.write_bytes(original)
    assert ikdata.validate(ikdata.open(root), deep=True).ok


def test_deep_never_reads_a_stray_link_that_leaves_the_dataset(ikdata_dataset, tmp_path):
    root = ikdata_dataset
    outside = tmp_path / "secret.safetensors"
    outside.write_bytes(b"not even safetensors")
    (root / "blob" / "sha256" / "zz").mkdir()
    (root / "blob" / "sha256" / "zz" / "stray.safetensors").symlink_to(outside)
    result = runner.invoke(app, ["validate", str(root), "--deep", "--json"])
    assert result.exit_code == 1
    problems = _problems(result.stdout)
    stray = [p for p in problems if p.path == "blob/sha256/zz/stray.safetensors"]
    assert [p.code for p in stray] == ["unsafe-path"]
    assert "is a link that leaves the dataset" in stray[0].message and "not rehashed" in stray[0].message
    assert json.loads(result.stdout)["blobs_rehashed"] == 7


def test_a_blob_folder_that_is_a_link_out_of_the_dataset_is_refused(ikdata_dataset, tmp_path):
    root = ikdata_dataset
    moved = tmp_path / "elsewhere"
    (root / "blob").rename(moved)
    (root / "blob").symlink_to(moved)
    result = runner.invoke(app, ["validate", str(root), "--deep", "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    unsafe = [p for p in _problems(result.stdout) if p.code == "unsafe-path"]
    assert len(unsafe) == 3 * 2 + 3  # every use: 2 inputs per row, 1 output per receipt
    assert document["blobs_rehashed"] == 0


def test_resolve_all_agrees_with_resolve(ikdata_dataset, tmp_path):
    import ikdata
    from ikdata.core.errors import RecordError

    root = ikdata_dataset
    rel = _blob_of(root)
    outside = tmp_path / "out"
    outside.mkdir()
    (outside / "x.safetensors").write_bytes(b"x")
    (root / "blob" / "inside-link.safetensors").symlink_to(root / rel)
    (root / "blob" / "outside-link.safetensors").symlink_to(outside / "x.safetensors")
    (root / "blob" / "outdir").symlink_to(outside)
    (root / "blob" / "relative-up.safetensors").symlink_to("../../out/x.safetensors")
    paths = [rel, "blob/inside-link.safetensors", "blob/outside-link.safetensors", "blob/outdir/x.safetensors",
             "blob/relative-up.safetensors", "/etc/passwd", "blob/../x", "blob/missing/none.safetensors", "blob/.",
             "a\\b", "", "blob//double.safetensors"]
    ds = ikdata.open(root)
    together = ds.resolve_all(paths)
    for path in paths:
        try:
            alone = ds.resolve(path)
        except RecordError as exc:
            assert isinstance(together[path], RecordError), path
            assert str(together[path]).lstrip(": ") == str(exc).lstrip(": "), path
        else:
            assert together[path] == alone, path
    assert isinstance(together["blob/outdir/x.safetensors"], RecordError)
    assert not isinstance(together["blob/inside-link.safetensors"], RecordError)
