"""Finding 3 of issue 9: replay's reuse never vouches for bytes it did not check.

After a first replay fills the reuse cache, a flipped byte in an input blob, a row pointing at
an absolute path, a '../' path, or a blob replaced by a link out of the dataset (with the right
bytes, even) must not give "passed, reused": the path rule comes first, then the file must match
the evidence recorded when it was verified, or be rehashed.
"""

from __future__ import annotations

import os
import shutil

import pytest

import ikdata
from ikdata.core import manifest
from ikdata.replay.runner import replay
from security_helpers import rewrite_rows, rows, trusted_folder


@pytest.fixture
def replayed(make_ikdata_dataset, tmp_path):
    root = make_ikdata_dataset(2)
    folder = trusted_folder(tmp_path)
    first = replay(ikdata.open(root, definitions=[folder]))
    assert first.exit_code == 0 and first.counts["passed"] == 2
    again = replay(ikdata.open(root, definitions=[folder]))
    assert again.counts["reused"] == 2  # the cache works, so the cases below are real refusals
    return root, folder


def _replay_cases(root, folder):
    result = replay(ikdata.open(root, definitions=[folder]))
    return result, {case["uuid"]: case for case in result.report["cases"]}


def _input_a(root) -> str:
    return rows(root)[0]["workload"]["inputs"]["A"]["path"]


def test_a_flipped_byte_is_not_reused(replayed):
    root, folder = replayed
    path = root / _input_a(root)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    result, cases = _replay_cases(root, folder)
    case = cases[rows(root)[0]["workload"]["uuid"]]
    assert not case.get("reused") and case["status"] == "error"
    assert "corrupt" in case["reason"]
    assert result.exit_code != 0


def test_a_flipped_byte_with_its_mtime_put_back_is_not_reused(replayed):
    """The evidence includes ctime, which no user can set back."""
    root, folder = replayed
    path = root / _input_a(root)
    before = os.stat(path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    _, cases = _replay_cases(root, folder)
    assert cases[rows(root)[0]["workload"]["uuid"]]["status"] == "error"


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_a_path_that_leaves_the_rule_is_not_reused(how, replayed):
    root, folder = replayed
    first = rows(root)[0]["workload"]["uuid"]

    def point_away(row):
        if row["workload"]["uuid"] == first:
            a = row["workload"]["inputs"]["A"]
            a["path"] = str(root / a["path"]) if how == "absolute" else f"../{root.name}/{a['path']}"
        return row

    rewrite_rows(root, point_away)
    manifest.write(root)
    result, cases = _replay_cases(root, folder)
    case = cases[first]
    assert not case.get("reused") and case["status"] == "error"
    assert ("is absolute" if how == "absolute" else "contains '..'") in case["reason"]
    assert result.exit_code != 0


def test_a_blob_that_became_a_link_out_of_the_dataset_is_not_reused(replayed, tmp_path):
    root, folder = replayed
    rel = _input_a(root)
    outside = tmp_path / "outside.safetensors"
    shutil.copyfile(root / rel, outside)  # the right bytes, but not the dataset's
    (root / rel).unlink()
    (root / rel).symlink_to(outside)
    _, cases = _replay_cases(root, folder)
    case = cases[rows(root)[0]["workload"]["uuid"]]
    assert not case.get("reused") and case["status"] == "error"
    assert "is a link that leaves the dataset" in case["reason"]


def test_untouched_blobs_are_reused_without_being_read_again(replayed, monkeypatch):
    """Evidence recorded at verification time: a file that did not change is not rehashed."""
    root, folder = replayed
    from ikdata.replay import reuse

    def no_rehash(path):
        raise AssertionError(f"rehashed {path}")

    monkeypatch.setattr(reuse, "rehash_file", no_rehash)
    result, _ = _replay_cases(root, folder)
    assert result.counts["reused"] == 2
