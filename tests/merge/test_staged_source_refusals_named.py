"""A source staged by its declared importer (FlashInfer's dumps) is refused naming the folder the user gave,
never the temporary staging copy: its stray receipts, its corrupt blobs and the summary line of each refusal
(issue 33; the plan's own refusals, beside the blob checks of test_source_importer_declared.py)."""

from __future__ import annotations

import json
import sys
import types

import pytest

from ikdata.core import features
from ikdata.core.dataset import RECEIPTS
from ikdata.core.features import Feature, Source
from merge_helpers import import_trusting_reports as import_dataset  # hand-written reports: --trust-reports
from merge_helpers import validated  # noqa: F401  (a fixture)

MODULE = "ikdata_test_staged_source"


@pytest.fixture
def staged_as(monkeypatch, tmp_path):
    """A folder in a declared source's own format, whose importer stages it as the given ikdata dataset."""
    from ikdata.importing.foreign import ForeignRead

    def make(staged):
        own = tmp_path / "own-format"
        own.mkdir()
        module = types.ModuleType(MODULE)
        name = f"importer_{id(own)}"  # a new name per test: "module:function" strings are resolved once
        setattr(module, name, lambda src, definitions: ForeignRead(staged, staged=True) if src == own else None)
        monkeypatch.setitem(sys.modules, MODULE, module)
        features.unregister("stagedsource")  # a test may declare it again
        features.register(Feature("stagedsource", sources=(Source("stagedsource", "ikdata_test_staged_lib",
                                                                  importer=f"{MODULE}:{name}"),)))
        return own

    yield make
    features.unregister("stagedsource")


def _refused(src, dst):
    from ikdata.core.errors import ProblemsFound

    with pytest.raises(ProblemsFound) as refused:
        import_dataset(src, dst)
    return refused.value


def test_a_stray_receipt_of_a_staged_source_names_the_users_folder(staged_as, validated, tmp_path):
    from ikdata.core.writer import DatasetWriter

    staged = validated("staged", rows=2)
    receipts = staged / RECEIPTS
    stray = json.loads(receipts.read_text().splitlines()[0])
    stray["uuid"] = "no-such-row"
    stray.pop("validation", None)
    receipts.write_text(receipts.read_text() + json.dumps(stray) + "\n")
    DatasetWriter(staged).commit()  # the manifest follows the edit: only the stray receipt is wrong
    own = staged_as(staged)
    found = _refused(own, tmp_path / "dst")
    assert str(found).startswith(f"{own}: cannot import") and str(staged) not in str(found)
    [problem] = [p for p in found.problems if "no-such-row" in p.message]
    assert problem.path == str(own)


def test_a_corrupt_blob_of_a_staged_source_names_the_users_folder(staged_as, validated, tmp_path):
    staged = validated("staged", rows=1)
    blob = next(p for p in (staged / "blob" / "sha256").rglob("*") if p.is_file())
    blob.write_bytes(blob.read_bytes()[:-1] + bytes([blob.read_bytes()[-1] ^ 1]))
    own = staged_as(staged)
    found = _refused(own, tmp_path / "dst")
    assert str(found).splitlines()[0].startswith(f"{own}: 1 corrupt blob(s)")
    assert str(staged) not in str(found).splitlines()[0]
