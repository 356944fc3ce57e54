"""Issue 21, findings 7 and 9 (first half): a report from elsewhere is a claim, not a verdict.

7. After a definition's reference changed, the old report's verdicts were admitted, and the receipts
   named a reference digest that is not the definition's.
9a. A wrong engine output (twice the right one, a proper blob) with a hand-written case of all-zero
   metrics and the new output's digest was admitted as validated; a real replay fails it.

Import now checks a case's reference digest against the definition's, re-runs the trusted reference
on the workloads it admits (all, or a sample sized for a stated confidence, said in the output), and
takes a report on its word only with --trust-reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merge_helpers import GEMM_NAME, REPORT, capture, read_jsonl, replay_by_hand, tree_digest
from security_helpers import trusted_folder

import ikdata
from ikdata.cli import app
from ikdata.core import manifest
from ikdata.core.errors import ProblemsFound
from ikdata.core.records import TensorRef
from ikdata.core.store import BlobStore, digest_from_path
from ikdata.core.writer import DatasetWriter
from ikdata.importing.apply import import_dataset

DEFINITION = f"definitions/gemm/{GEMM_NAME}.json"


def _cli(*args) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def _validated(root: Path, rows: int = 3, **kwargs) -> Path:
    """Captured, with a hand-written passing report (all-zero metrics), committed."""
    capture(root, rows=rows, **kwargs)
    replay_by_hand(root)
    DatasetWriter(root).commit()
    return root


def _replayed(root: Path, folder: Path, rows: int = 2) -> Path:
    """Captured and really replayed with the test GEMM trusted, committed."""
    from ikdata.replay.runner import replay

    capture(root, rows=rows)
    assert replay(ikdata.open(root, definitions=[folder]), reuse=False).exit_code == 0
    DatasetWriter(root).commit()
    return root


def _forge_double_output(root: Path, count: int = 1) -> list[str]:
    """Replace the first ``count`` receipts' expected C by twice itself (a proper blob) and claim a
    perfect pass for each in the report: all-zero metrics and the new blob's digest. Returns the uuids."""
    receipts = read_jsonl(root / "receipts.jsonl")
    report = json.loads((root / REPORT).read_text())
    store = BlobStore(root)
    for receipt in receipts[:count]:
        expected = receipt["expected_output"]["C"]
        right = np.asarray(store.get_numpy(TensorRef(expected["path"], expected["tensor_key"])))
        wrong = store.put(np.ascontiguousarray(2 * right)).ref
        receipt["expected_output"]["C"] = {"type": "safetensors", "path": wrong.path, "tensor_key": wrong.tensor_key}
        case = next(c for c in report["cases"] if c["uuid"] == receipt["uuid"])
        case["expected_digests"] = {"C": digest_from_path(wrong.path)}
    (root / "receipts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receipts))
    (root / REPORT).write_text(json.dumps(report))
    manifest.write(root)
    return [r["uuid"] for r in receipts[:count]]


# -- finding 7: a report judged by another reference ---------------------------------------------------


def test_a_report_judged_by_another_reference_is_refused_naming_both_digests(tmp_path):
    folder = trusted_folder(tmp_path)
    src = _replayed(tmp_path / "src", folder)
    old = ikdata.open(src).definitions[GEMM_NAME].reference_digest
    case = json.loads((src / REPORT).read_text())["cases"][0]
    assert case["reference_digest"] == old
    record = json.loads((src / DEFINITION).read_text())  # the reference changes after the replay
    record["reference"] = record["reference"].replace("torch.matmul(A, W.T)", "2 * torch.matmul(A, W.T)")
    (src / DEFINITION).write_text(json.dumps(record))
    manifest.write(src)
    new = ikdata.open(src).definitions[GEMM_NAME].reference_digest
    assert new != old

    dst = tmp_path / "dst"
    with pytest.raises(ProblemsFound) as caught:
        import_dataset(src, dst)
    message = str(caught.value)
    assert REPORT in message and case["uuid"] in message and old in message and new in message, message
    assert any(p.path == REPORT and p.pointer and p.pointer.startswith("/cases/") for p in caught.value.problems)
    assert not (dst / "receipts.jsonl").exists()

    # trusting the reports does not make a verdict about another reference one about this one
    code, output = _cli("import", src, dst, "--trust-reports")
    assert code == 1 and old in output and new in output, output


# -- finding 9a: a hand-written pass for a wrong output -------------------------------------------------


def test_a_forged_pass_for_a_doubled_output_is_refused_when_re_judged(tmp_path):
    from ikdata.replay.runner import replay

    folder = trusted_folder(tmp_path)
    src = _validated(tmp_path / "src", rows=3)
    [forged] = _forge_double_output(src)
    assert ikdata.validate(ikdata.open(src)).ok  # nothing a record check sees: the claim is all it has
    dst = _validated(tmp_path / "dst", rows=1, seed=11, w_seed=11)
    before = tree_digest(dst)

    with pytest.raises(ProblemsFound) as caught:
        import_dataset(src, dst, definitions=[folder])
    assert forged in str(caught.value) and "re-judged here" in str(caught.value), str(caught.value)
    assert tree_digest(dst) == before
    # all or nothing: a source caught lying is not believed for its other workloads either
    with pytest.raises(ProblemsFound):
        import_dataset(src, dst, definitions=[folder], only_passed=True)
    assert tree_digest(dst) == before

    code, output = _cli("import", src, dst, "--definitions", folder)
    assert code == 1 and forged in output and "1 disagree" in output, output
    code, output = _cli("import", src, dst, "--definitions", folder, "--dry-run")
    assert code == 1 and f"refused {forged}" in output and "1 disagree" in output, output
    assert tree_digest(dst) == before
    # the forgery is real: a replay of SRC itself fails that workload
    cases = replay(ikdata.open(src, definitions=[folder]), reuse=False,
                   report_path=tmp_path / "check.json").report["cases"]
    assert {c["uuid"]: c["status"] for c in cases}[forged] == "failed"


def test_an_untrusted_reference_cannot_re_judge_so_nothing_is_admitted_on_the_report(tmp_path):
    src = _validated(tmp_path / "src", rows=2)
    digest = ikdata.open(src).definitions[GEMM_NAME].digest
    dst = tmp_path / "dst"

    code, output = _cli("import", src, dst)
    assert code == 1 and "cannot be re-judged" in output, output
    for advice in ("--definitions", f"--trust {digest}", "--trust-reports"):
        assert advice in output, output
    assert not (dst / "receipts.jsonl").exists()

    code, output = _cli("import", src, dst, "--trust", digest)  # trusted by digest: its reference re-judges
    assert code == 0 and "re-judged 2 of 2 cases: all agree" in output, output


# -- the sample and its statement ------------------------------------------------------------------------


def test_sample_size_is_stated_for_its_confidence():
    from ikdata.importing.rejudge import sample_size

    assert sample_size(1200) == 90  # ceil(ln 0.01 / ln 0.95)
    assert sample_size(40) == 40
    assert sample_size(1200, confidence=0.95, forged=0.01) == 299


def test_a_large_import_re_judges_a_stated_sample(tmp_path):
    folder = trusted_folder(tmp_path)
    src = _validated(tmp_path / "src", rows=95)
    code, output = _cli("import", src, tmp_path / "dst", "--definitions", folder, "--dry-run")
    assert code == 0, output
    assert "re-judged 90 of 95 cases (sample for 99% confidence of catching \u22655% forged): all agree" in output, output

    code, output = _cli("import", src, tmp_path / "dst", "--definitions", folder, "--rejudge-all", "--json")
    assert code == 0, output
    found = json.loads(output)["rejudged"]
    assert found["judged"] == found["claimed"] == 95 and not found["sampled"] and found["agree"]
    assert len(read_jsonl(tmp_path / "dst" / "receipts.jsonl")) == 95


def test_a_sample_catches_five_percent_forged(tmp_path):
    folder = trusted_folder(tmp_path)
    src = _validated(tmp_path / "src", rows=100)
    forged = _forge_double_output(src, count=5)  # a sample of 90 misses all 5 with probability 3e-6
    code, output = _cli("import", src, tmp_path / "dst", "--definitions", folder)
    assert code == 1, output
    assert "re-judged 90 of 100 cases (sample for 99% confidence of catching \u22655% forged):" in output, output
    assert any(uuid in output for uuid in forged) and not (tmp_path / "dst" / "receipts.jsonl").exists()


def test_what_this_machine_replayed_is_re_judged_from_its_own_reuse_cache(tmp_path):
    from ikdata.replay.runner import replay

    folder = trusted_folder(tmp_path)
    src = capture(tmp_path / "src", rows=3)
    assert replay(ikdata.open(src, definitions=[folder])).exit_code == 0  # fills this machine's cache
    DatasetWriter(src).commit()
    code, output = _cli("import", src, tmp_path / "dst", "--definitions", folder)
    assert code == 0 and "re-judged 3 of 3 cases, 3 from this machine's reuse cache: all agree" in output, output


# -- --trust-reports: the user vouches for SRC's reports ------------------------------------------------


def test_trust_reports_takes_the_reports_on_their_word_and_says_so(tmp_path):
    src = _validated(tmp_path / "src", rows=2)
    code, output = _cli("import", src, tmp_path / "dst", "--trust-reports")
    assert code == 0, output
    assert "reports trusted (--trust-reports): 2 case(s) admitted on SRC's report, none re-judged" in output
    result = import_dataset(src, tmp_path / "again", trust_reports=True)
    assert result.rejudged.trusted and result.rejudged.judged == 0 and len(result.added) == 2
    code, output = _cli("import", src, tmp_path / "x", "--trust", "short")
    assert code == 2 and "64 lowercase hex" in output, output


def test_a_pull_re_judges_the_remote_reports_too(tmp_path):
    folder = trusted_folder(tmp_path)
    local = _validated(tmp_path / "local", rows=1, seed=11, w_seed=11)
    remote = tmp_path / "remote"
    src = _validated(tmp_path / "src", rows=2)
    assert _cli("push", src, remote)[0] == 0
    before = tree_digest(local)

    code, output = _cli("pull", remote, local)
    assert code == 1 and "cannot be re-judged" in output and "--trust-reports" in output, output
    assert tree_digest(local) == before
    code, output = _cli("pull", remote, local, "--definitions", folder)
    assert code == 0 and "2 workloads merged" in output, output
    assert "re-judged 2 of 2 cases: all agree" in output, output
