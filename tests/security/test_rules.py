"""The rules each have one home (issue 10): the path rule in ``core/paths``, the trust rule in
``core/trust``, the blob-reference scan in ``core/dataset``. Unit tests of each, and guards that
no second copy creeps back into the library."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ikdata
from ikdata.core.dataset import blob_paths
from ikdata.core.definitions import DATASET, SHIPPED, USER, Definition
from ikdata.core.paths import PathResolver, UnsafePath, record_path_refusal, text_refusal
from ikdata.core.trust import is_trusted
from foundation_helpers import gemm_definition_record

LIBRARY = Path(ikdata.__file__).parent


@pytest.mark.parametrize("path, reason", [
    ("/etc/passwd", "is absolute"), ("C:/x", "is absolute"), ("\\x", "is absolute"), ("a\\b", "backslashes"),
    ("blob/../x", "contains '..'"), ("blob/./x", "not normalised"), ("blob//x", "not normalised"),
    ("blob/", "not normalised"), (".", "not normalised"), ("", "empty"), (None, "not a string")])
def test_text_refusals_say_what_is_wrong(path, reason):
    refusal = text_refusal(path)
    assert isinstance(refusal, UnsafePath) and reason in refusal.reason


def test_clean_paths_pass():
    assert text_refusal("blob/sha256/ab/abc.safetensors") is None
    assert record_path_refusal("workloads/gemm/x.jsonl") is None
    assert record_path_refusal("receipts.jsonl") is None
    assert record_path_refusal("reports/replay.json") is None


@pytest.mark.parametrize("path", [".ikdata-import/journal.json", "workloads/.ikdata-x.jsonl", "blob/sha256/a.json",
                                  "ikdata.json", "workloads/x.txt", "definitions", "reports/.tmp-1.json"])
def test_record_paths_are_record_files_only(path):
    assert record_path_refusal(path) is not None


def test_the_resolver_follows_links_and_locates_its_refusals(tmp_path):
    root = tmp_path / "ds"
    (root / "blob").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (root / "blob" / "in.safetensors").write_bytes(b"x")
    (root / "blob" / "alias.safetensors").symlink_to(root / "blob" / "in.safetensors")
    (root / "blob" / "away").symlink_to(tmp_path / "out")
    paths = PathResolver(root)
    assert paths.resolve("blob/alias.safetensors") == root / "blob/alias.safetensors"
    with pytest.raises(UnsafePath) as caught:
        paths.resolve("blob/away/x.safetensors", where="workloads/a.jsonl", line=3, pointer="/workload/inputs/A")
    assert str(caught.value).startswith("workloads/a.jsonl:3: /workload/inputs/A: path 'blob/away/x.safetensors' "
                                        "is a link that leaves the dataset")
    problem = caught.value.problem("workloads/a.jsonl", 3)
    assert problem.code == "unsafe-path" and problem.line == 3


def _definition(origin: str, **changes) -> Definition:
    return Definition.from_dict({**gemm_definition_record(), **changes}, origin=origin, source="t")


def test_the_trust_rule():
    shipped, user, dataset = _definition(SHIPPED), _definition(USER), _definition(DATASET)
    assert is_trusted(shipped) and is_trusted(user) and not is_trusted(dataset)
    assert is_trusted(dataset, digests={dataset.digest})
    assert is_trusted(dataset, trusted={dataset.name: user})
    changed = _definition(DATASET, description="changed")
    assert not is_trusted(changed, trusted={changed.name: user})


def test_blob_paths_reads_both_receipt_forms_and_skips_junk():
    d = {"type": "safetensors", "path": "blob/a.safetensors", "tensor_key": "tensor"}
    assert blob_paths({"workload": {"inputs": {"A": d, "s": {"type": "scalar", "value": 1}}}}) == [d["path"]]
    assert blob_paths({"expected_output": d}) == [d["path"]]  # the seed script's bare descriptor
    assert blob_paths({"expected_output": {"C": d, "D": d}}) == [d["path"]] * 2
    assert blob_paths([d]) == [] and blob_paths({"workload": {"inputs": {"A": {"type": "safetensors"}}}}) == []


def test_blob_references_counts_every_use(make_ikdata_dataset):
    ds = ikdata.open(make_ikdata_dataset(3))
    references = ds.blob_references()
    assert sum(references.uses.values()) == 3 * 2 + 3 and not references.problems
    assert references.paths == {p for p, _ in ds.store.iter_blobs()}


def _library_lines(pattern: str) -> list[str]:
    found = []
    for path in LIBRARY.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line):
                found.append(f"{path.relative_to(LIBRARY)}:{number}")
    return found


def test_one_path_rule_in_the_library():
    assert _library_lines(r"os\.path\.realpath|os\.path\.commonpath") == \
        [line for line in _library_lines(r"os\.path\.realpath|os\.path\.commonpath") if line.startswith("core/paths.py")]
    assert not _library_lines(r"\bcheck_relative\b")


def test_one_trust_decision_in_the_library():
    decisions = _library_lines(r"origin in \(SHIPPED, USER\)|origin in TRUSTED_ORIGINS|twin\.digest ==")
    assert decisions and all(line.startswith("core/trust.py") for line in decisions), decisions
