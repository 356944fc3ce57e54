"""A capture source's own format reaches ``ikdata import`` and replay's trust through its declaration
(issue 33): a Source declaring an ``importer`` is asked for SRC before anything else reads it, and one
declaring ``trusts`` decides which dataset definitions it vouches for; nothing in import or core names it."""

from __future__ import annotations

import sys
import types

import pytest

from ikdata.core import features
from merge_helpers import import_trusting_reports as import_dataset  # hand-written reports: --trust-reports
from merge_helpers import validated  # noqa: F401  (a fixture)
from ikdata.core.features import Feature, Source

MODULE = "ikdata_test_source"


@pytest.fixture
def declare(monkeypatch):
    """Declare a source with the given hooks (functions), each reached by its "module:function" string."""
    def make(**hooks):
        module = types.ModuleType(MODULE)
        for name, function in hooks.items():
            setattr(module, f"{name}_{id(function)}", function)
        monkeypatch.setitem(sys.modules, MODULE, module)
        source = Source("testsource", "ikdata_test_source_lib",
                        **{name: f"{MODULE}:{name}_{id(f)}" for name, f in hooks.items()})
        features.unregister("testsource")  # a test may declare it again
        features.register(Feature("testsource", sources=(source,)))
    yield make
    features.unregister("testsource")


def test_a_declared_importer_stages_its_own_format_and_its_calls_left_out_are_listed(declare, validated, tmp_path):
    from ikdata.importing.foreign import ForeignRead, LeftOut

    staged = validated("staged", rows=2)  # as a source's staging leaves it: rows, receipts, a replay report
    own = tmp_path / "own-format"
    own.mkdir()
    (own / "calls.own").write_text("two calls, one unreadable\n")
    asked = []

    def importer(src, definitions):
        asked.append(src)
        if not (src / "calls.own").is_file():
            return None
        return ForeignRead(staged, staged=True,
                           left_out=(LeftOut("call-3", "calls.own", "unreadable call", where=str(src / "calls.own")),))

    declare(importer=importer)
    result = import_dataset(own, tmp_path / "dst")
    assert len(result.added) == 2 and [x.uuid for x in result.left_out] == ["call-3"]
    assert asked[0] == own
    plain = validated("plain", rows=1)  # not its format: read as it is
    assert len(import_dataset(plain, tmp_path / "dst2").added) == 1 and asked[-1] == plain


def test_a_declared_trust_hook_decides_which_dataset_definitions_it_vouches_for(declare, make_ikdata_dataset):
    import ikdata
    from ikdata.core.templates import trusted_instances

    definitions = ikdata.open(make_ikdata_dataset(1)).definitions
    assert trusted_instances(definitions) == {}
    declare(trusts=lambda found: {name: d for name, d in found.items()})  # vouches for every one it is shown
    assert set(trusted_instances(definitions)) == set(definitions)


def test_a_refusal_names_the_folder_the_user_gave_not_the_staging_copy(declare, validated, tmp_path):
    """A staged row disagreeing with its blobs is refused naming SRC as the user named it."""
    import json

    from ikdata.core.errors import ProblemsFound
    from ikdata.importing.foreign import ForeignRead

    staged = validated("staged", rows=2)
    [rows] = list((staged / "workloads").rglob("*.jsonl"))
    lines = rows.read_text().splitlines()
    first = json.loads(lines[0])
    first["workload"]["axes"] = {k: v + 5 for k, v in first["workload"]["axes"].items()}
    rows.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    from ikdata.core.writer import DatasetWriter

    DatasetWriter(staged).commit()  # the manifest follows the edit: only the blobs disagree
    own = tmp_path / "own-format"
    own.mkdir()
    declare(importer=lambda src, definitions: ForeignRead(staged, staged=True) if src == own else None)
    with pytest.raises(ProblemsFound) as refused:
        import_dataset(own, tmp_path / "dst")
    assert str(refused.value).startswith(f"{own}:") and str(staged) not in str(refused.value).splitlines()[0]


def test_a_declared_recognises_hook_names_its_folder_format_where_a_dataset_was_expected(declare, tmp_path):
    """A folder of a source's own format given as a dataset is named, with the import that reads it."""
    import ikdata
    from ikdata.core.dataset import NotADataset

    own = tmp_path / "own-format"
    own.mkdir()
    (own / "calls.own").write_text("calls\n")
    declare(recognises=lambda root: "a test source's call log" if (root / "calls.own").is_file() else None)
    with pytest.raises(NotADataset, match=r"own-format: a test source's call log, not a dataset: import it first"):
        ikdata.open(own)
    other = tmp_path / "empty"
    other.mkdir()
    with pytest.raises(NotADataset, match="not a dataset: looked for"):
        ikdata.open(other)
