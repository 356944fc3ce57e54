"""Issue 39 finding 9: an import that adds nothing keeps the dataset id. The case a FlashInfer user met: the
flight recorder's ``.pt`` dumps imported, then the same calls imported again; the second import added nothing
yet changed DST's id (a new parent each time). Now DST is left as it was, and the command says so."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from cli_helpers import run_cli

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:
    pytest.skip("flashinfer-python is not installed (make setup installs it)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".ikdata-" not in p.as_posix()}


def test_importing_the_same_pt_calls_again_keeps_the_id(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import flashinfer_corpus

    from ikdata.core.manifest import current_id

    corpus = flashinfer_corpus.generate(tmp_path / "fi", "torch")["torch"]  # .pt dumps, FlashInfer's own code
    copy = tmp_path / "copy-of-the-dumps"
    shutil.copytree(corpus, copy)
    dst = tmp_path / "shared"
    import ikdata

    first = ikdata.import_dataset(corpus, dst, only_passed=True)
    dataset_id, files = current_id(dst), _tree(dst)
    assert first.added and first.dataset_id == dataset_id
    again = ikdata.import_dataset(corpus, dst, only_passed=True)  # the same folder
    assert (len(again.added), again.dataset_id) == (0, dataset_id) and _tree(dst) == files
    done = run_cli("import", str(copy), str(dst), "--only-passed")  # a copy of it elsewhere, by the command
    assert done.returncode == 0, done.stdout + done.stderr
    assert "added 0 workload(s)" in done.stdout
    assert f"{dst} is unchanged ({dataset_id[:12]}): {copy} holds nothing it lacks" in done.stdout
    assert current_id(dst) == dataset_id and _tree(dst) == files  # not a byte changed
