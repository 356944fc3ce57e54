"""The data paths honour declarations (issue 33): a feature declared with a record kind and a family's data hooks
is validated, counted, kept by gc, shown and compared with no code naming it; a record kind declared with a
schema and read by nothing else is validated record by record; a dataset without a family's records never
loads its hook module."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field

import numpy as np
import pytest

from ikdata.core import features
from ikdata.core.features import Family, Feature, RecordKind
from ikdata.core.problems import Problem

HOOKS = "ikdata_test_notes"


@dataclass
class _Checked:
    problems: list = field(default_factory=list)
    uses: list = field(default_factory=list)
    counted: dict = field(default_factory=dict)


@dataclass
class _Figures:
    counted: dict
    notes: int

    def lines(self) -> list[str]:
        return [f"notes {self.notes}"] if self.notes else []


@dataclass
class _Shown:
    document: dict

    def show(self, out) -> None:
        out.info(f"note {self.document['note']}")


@dataclass
class _Changes:
    added: tuple

    @property
    def is_empty(self) -> bool:
        return not self.added

    def to_dict(self) -> dict:
        return {"notes": list(self.added)}

    def lines(self) -> list[str]:
        return [f"note added: {n}" for n in self.added]


def _notes(root) -> list[dict]:
    folder = root / "notes"
    return [json.loads(line) for p in sorted(folder.glob("*.jsonl")) for line in p.read_text().splitlines()] \
        if folder.is_dir() else []


def _module() -> types.ModuleType:
    module = types.ModuleType(HOOKS)

    def validate(ds, uuids):
        found = _Checked(counted={"notes": len(_notes(ds.root))})
        for note in _notes(ds.root):
            if note["workload"] not in uuids:
                found.problems.append(Problem("notes/n.jsonl", f"note {note['id']} names no workload", code="note"))
        return found

    module.validate = validate
    module.references = lambda root: ([n["blob"] for n in _notes(root)], [])
    module.stats = lambda root: _Figures({"notes": {"notes": len(_notes(root))}}, len(_notes(root)))
    module.describe = lambda ds, key: next((_Shown({"note": n["id"]}) for n in _notes(ds.root) if n["id"] == key), None)
    module.diff = lambda left, right: _Changes(tuple(sorted({n["id"] for n in _notes(right.root)}
                                                            - {n["id"] for n in _notes(left.root)})))
    return module


@pytest.fixture
def notes_family(monkeypatch):
    """A 'notes' feature: a record kind under notes/ and a family whose data hooks read it."""
    monkeypatch.setitem(sys.modules, HOOKS, _module())
    family = Family("notes", **{h: f"{HOOKS}:{h}" for h in ("validate", "references", "stats", "describe", "diff")})
    with features.registered(Feature("notes", kinds=(RecordKind("notes", "notes", ".jsonl", None),), family=family)):
        yield family


def _note(root, **note) -> None:
    (root / "notes").mkdir(exist_ok=True)
    with open(root / "notes" / "n.jsonl", "a") as stream:
        stream.write(json.dumps(note) + "\n")


def _loose_blob(root) -> str:
    from ikdata.core.store import BlobStore

    return BlobStore(root).put(np.arange(6, dtype=np.float32)).ref.path  # named by no row or receipt


def test_a_declared_family_is_validated_counted_kept_shown_and_compared(notes_family, make_ikdata_dataset):
    import ikdata
    from ikdata.ops.diff import diff
    from ikdata.ops.gc import collect_garbage
    from ikdata.ops.stats import compute

    a, b = make_ikdata_dataset(2), make_ikdata_dataset(2)
    uuid = next(ikdata.open(b).workloads()).uuid
    kept = _loose_blob(b)
    _note(b, id="n1", workload=uuid, blob=kept)
    _note(b, id="n2", workload="no-such-uuid", blob=kept)

    report = ikdata.validate(b)
    assert report.notes == 2 and report.to_dict()["notes"] == 2
    assert [p.message for p in report.problems if p.code == "note"] == ["note n2 names no workload"]
    figures = compute(ikdata.open(b), use_index=False)
    assert figures.to_dict()["notes"] == {"notes": 2} and figures.lines()[-1] == "notes 2"
    assert kept not in collect_garbage(b, grace_minutes=0).deleted and (b / kept).is_file()
    changes = diff(a, b)
    assert changes.to_dict()["notes"] == ["n1", "n2"] and not changes.is_empty
    assert diff(a, a).to_dict()["notes"] == [] and diff(a, a).is_empty

    from typer.testing import CliRunner

    from ikdata.cli import app

    shown = CliRunner().invoke(app, ["show", str(b), "n1", "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout) == {"note": "n1"}


def test_without_the_family_declared_its_blob_is_garbage(make_ikdata_dataset):
    """The same dataset with no family declaring notes/: nothing keeps the blob (the test above is no accident)."""
    from ikdata.ops.gc import collect_garbage

    root = make_ikdata_dataset(1)
    loose = _loose_blob(root)
    _note(root, id="n1", workload="x", blob=loose)
    assert loose in collect_garbage(root, grace_minutes=0).deleted


def test_a_kind_with_a_schema_and_no_reader_is_validated_record_by_record(monkeypatch, make_ikdata_dataset):
    import ikdata
    from ikdata.ops import validate as validate_module

    monkeypatch.setattr(validate_module, "KINDS", (*validate_module.KINDS,
                                                  RecordKind("more census", "more-census", ".jsonl", "census")))
    root = make_ikdata_dataset(1)
    (root / "more-census").mkdir()
    (root / "more-census" / "r.jsonl").write_text(json.dumps({"run": "r"}) + "\n{torn")
    found = [p for p in ikdata.validate(root).problems if p.path == "more-census/r.jsonl"]
    assert {p.code for p in found} >= {"schema"} and any(p.line == 2 for p in found)


def test_a_dataset_without_a_familys_records_does_not_load_its_hooks(monkeypatch, make_ikdata_dataset):
    """The cheap paths (show, lineage, gc) resolve a family's hook only where the dataset holds its records: a hook
    module that cannot even be imported is never touched without them."""
    from ikdata.core.features import hooks as family_hooks

    from ikdata.core.errors import DefinitionError

    family = Family("absent", describe="ikdata_test_no_such_module:describe")
    with features.registered(Feature("absent", kinds=(RecordKind("absent", "absent", ".jsonl", None),),
                                     family=family)):
        root = make_ikdata_dataset(1)
        assert all(h.__module__ != "ikdata_test_no_such_module" for h in family_hooks("describe", root))
        (root / "absent").mkdir()
        with pytest.raises(DefinitionError, match="feature 'absent': family 'absent''s describe hook"):
            family_hooks("describe", root)
