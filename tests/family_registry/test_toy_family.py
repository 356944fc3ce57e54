"""A toy judge family added in a test by declaration alone (issue 50): "toyk", with a record kind of its own and a
replay option, registered through the one door (``features.registered``) and known to every path while it is:
replay judges its cases with its ``execute`` and hands its ``finish`` the option's settings, import re-checks its
cases with its ``recheck``, validate checks its records, import and pull carry them, lineage asks it. Once it is
unregistered, no path knows it."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field

import pytest
from typer.testing import CliRunner

from ikdata.core import features
from ikdata.core.features import Family, Feature, Option, RecordKind
from ikdata.core.problems import Problem

HOOKS = "ikdata_test_toyk"
GEMM_NAME = "gemm_test_n4_k8"  # tests/foundation_helpers.py: the definition make_ikdata_dataset writes
NOTES = "toyk-notes"


@dataclass
class _Checked:
    problems: list = field(default_factory=list)
    uses: list = field(default_factory=list)
    counted: dict = field(default_factory=dict)


def _notes(root) -> list[dict]:
    folder = root / NOTES
    return [json.loads(line) for p in sorted(folder.glob("*.jsonl")) for line in p.read_text().splitlines()] \
        if folder.is_dir() else []


def _module(calls: dict) -> types.ModuleType:
    from ikdata.core.status import Status

    module = types.ModuleType(HOOKS)
    module.owns = lambda definition: definition.name == GEMM_NAME

    def execute(run, row, pending):
        from ikdata.replay import api

        definition = pending.definition
        inputs, input_digests = api.load_all(run, definition.inputs, row.inputs, f"{row.source}:{row.line}")
        expected, expected_digests = api.load_all(run, definition.outputs, pending.receipt.expected_output,
                                                  f"{pending.receipt.source}:{pending.receipt.line}")
        got = api.name_outputs(definition, pending.reference(*[inputs[n] for n in definition.inputs]))
        error = float((got["C"].float() - expected["C"].float()).abs().max())
        calls.setdefault("executed", []).append(row.uuid)
        return pending.case.with_(status=Status.PASSED if error <= 1e-4 else Status.FAILED,
                                  input_digests=input_digests, expected_digests=expected_digests,
                                  metrics={"C": {"toyk_error": error}},
                                  tolerance={"C": {"judge": "toyk", "bound": 1e-4}})  # judged its own way

    def recheck(case, report, definition):
        if case.definition != GEMM_NAME:
            return None
        calls.setdefault("rechecked", []).append(case.uuid)
        found = (case.metrics or {}).get("C", {}).get("toyk_error")
        return [] if str(case.status) == "passed" and found is not None and found <= 1e-4 else ["toyk: not within"]

    def validate(ds, uuids):
        checked = _Checked(counted={"toyk_notes": len(_notes(ds.root))})
        checked.problems += [Problem(f"{NOTES}/n.jsonl", f"toyk note names no workload {n['workload']}", code="toyk")
                             for n in _notes(ds.root) if n["workload"] not in uuids]
        return checked

    module.execute, module.recheck, module.validate = execute, recheck, validate
    module.settings = lambda options: {"bound": options["toyk_bound"]}
    module.finish = lambda run, shard=None, settings=None: calls.setdefault("settings", []).append(settings)
    module.lineage = lambda root: calls.setdefault("lineage", []).append(str(root))
    return module


TOYK = Feature("toyk", kinds=(RecordKind("toyk notes", NOTES, ".jsonl", None),),
               family=Family("toyk", **{h: f"{HOOKS}:{h}" for h in ("owns", "execute", "recheck", "validate",
                                                                   "settings", "finish", "lineage")},
                             options=(Option("--toyk-bound", "The toy bound.", type=float, default=0.25),)))


@pytest.fixture
def toyk(monkeypatch, tmp_path):
    """The toy family, registered for the test alone (its hooks in a module of their own)."""
    calls: dict = {}
    monkeypatch.setitem(sys.modules, HOOKS, _module(calls))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(tmp_path / "cache"))
    with features.registered(TOYK):
        yield calls


def _note(root, uuid: str) -> None:
    """A toy record naming ``uuid``, and the manifest that lists it (the feature's own writer would commit it)."""
    from ikdata.core import manifest

    (root / NOTES).mkdir(exist_ok=True)
    with open(root / NOTES / "n.jsonl", "a") as stream:
        stream.write(json.dumps({"workload": uuid}) + "\n")
    manifest.write(root)


def _cli(*args: str):
    from ikdata.cli import app

    return CliRunner().invoke(app, list(args))


def test_a_family_declared_alone_is_replayed_rechecked_validated_carried_and_asked_for_lineage(
        toyk, make_ikdata_dataset, tmp_path):
    import ikdata
    from ikdata.ops.lineage import trace
    from ikdata.remote.pull import pull
    from ikdata.remote.push import push

    src = make_ikdata_dataset(2)
    uuids = [w.uuid for w in ikdata.open(src).workloads()]
    _note(src, uuids[0])

    report = ikdata.validate(src)
    assert report.ok and report.to_dict()["toyk_notes"] == 1  # its validate hook counted its records

    digest = ikdata.open(src).definitions[GEMM_NAME].digest  # trusted: its reference is the toy's to run
    replayed = _cli("replay", str(src), "--no-reuse", "--trust", digest, "--toyk-bound", "0.5", "--json")
    assert replayed.exit_code == 0, replayed.output
    assert sorted(toyk["executed"]) == sorted(uuids) and toyk["settings"] == [{"bound": 0.5}]
    cases = json.loads((src / "reports" / "replay.json").read_text())["cases"]
    assert {c["uuid"]: c["metrics"]["C"]["toyk_error"] for c in cases}.keys() == set(uuids)

    dst = tmp_path / "dst"
    imported = ikdata.import_dataset(src, dst, rejudge_all=True, trust=[digest])
    assert sorted(imported.added) == sorted(uuids) and imported.refused == ()
    assert sorted(toyk["rechecked"]) == sorted(uuids)  # import asked the family about its own cases
    assert (dst / NOTES / "n.jsonl").read_text() == (src / NOTES / "n.jsonl").read_text()  # carried, by default
    assert ikdata.validate(dst).ok

    url = f"file://{tmp_path}/remote"
    push(src, url)
    other = make_ikdata_dataset(1, seed=7)
    pull(url, other, trust=[digest])
    assert set(uuids) <= {w.uuid for w in ikdata.open(other).workloads()}
    assert (other / NOTES / "n.jsonl").read_text() == (src / NOTES / "n.jsonl").read_text()  # pull carries it too

    trace(src, uuids[0])
    assert set(toyk["lineage"]) == {str(src)}  # lineage asked the family whose records the dataset holds


def test_validate_finds_a_toy_record_that_names_no_workload(toyk, make_ikdata_dataset):
    import ikdata

    root = make_ikdata_dataset(1)
    _note(root, "no-such-workload")
    assert [p.message for p in ikdata.validate(root).problems if p.code == "toyk"] == \
        ["toyk note names no workload no-such-workload"]


def test_unregistered_the_family_is_unknown_to_replay_and_its_records_are_not_carried(make_ikdata_dataset, tmp_path):
    import ikdata
    from ikdata.judging import families

    src = make_ikdata_dataset(1)
    with features.registered(TOYK):
        assert "--toyk-bound" in _cli("replay", "--help").output
        assert "toyk" in {f.name for f in families.FAMILIES}
    assert "--toyk-bound" not in _cli("replay", "--help").output
    assert "toyk" not in {f.name for f in families.FAMILIES} and NOTES not in features.kinds().__repr__()
    assert _cli("replay", str(src), "--toyk-bound", "0.5").exit_code == 2  # no such option now


def test_a_hook_that_cannot_take_its_call_is_named_with_its_feature_and_field(monkeypatch, make_ikdata_dataset):
    """A hook's signature is checked when it is first resolved: a located DefinitionError, not a TypeError."""
    import ikdata

    module = types.ModuleType("ikdata_test_badk")
    module.owns = lambda definition: definition.name == GEMM_NAME
    module.execute = lambda run, row: None  # every path calls execute(run, row, pending)
    monkeypatch.setitem(sys.modules, "ikdata_test_badk", module)
    root = make_ikdata_dataset(1)
    bad = Feature("badk", family=Family("badk", owns="ikdata_test_badk:owns", execute="ikdata_test_badk:execute"))
    with features.registered(bad):
        result = _cli("replay", str(root), "--no-reuse", "--trust", ikdata.open(root).definitions[GEMM_NAME].digest)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "feature 'badk': family 'badk''s execute hook ikdata_test_badk:execute takes (run, row)" in result.output


@pytest.mark.parametrize("declared, said", [
    (Feature("k1", kinds=(RecordKind("k1 rows", "k1", ".jsonl", None, imported="append"),)),
     "record kind 'k1 rows': an import appends to it"),
    (Feature("k2", family=Family("k2", finish="not a hook")), "family 'k2''s finish is 'not a hook'"),
    (Feature("k3", family=Family("k3", options=(Option("--attention", "again"),))),
     "option --attention: another family declares it"),
    (Feature("diffusion"), "a feature of that name is registered already"),
    (Feature("k4", kinds=(RecordKind("mine", "trajectories", ".jsonl", None),)), "trajectories is another feature's"),
])
def test_a_declaration_is_checked_when_it_is_registered(declared, said):
    from ikdata.core.errors import DefinitionError

    with pytest.raises(DefinitionError, match="feature '") as caught:
        features.register(declared)
    assert said in str(caught.value)
    assert declared not in features.features()


def test_a_source_hook_that_cannot_take_its_call_is_named_with_its_feature_and_field(monkeypatch, tmp_path):
    import ikdata
    from ikdata.core.errors import DefinitionError
    from ikdata.core.features import Source

    module = types.ModuleType("ikdata_test_badsource")
    module.importer = lambda src: None  # import calls importer(src, definitions)
    monkeypatch.setitem(sys.modules, "ikdata_test_badsource", module)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "calls.txt").write_text("not a dataset")
    bad = Feature("badsource", sources=(Source("badsource", "badsource_module",
                                               importer="ikdata_test_badsource:importer"),))
    with features.registered(bad), pytest.raises(DefinitionError) as caught:
        ikdata.import_dataset(tmp_path / "folder", tmp_path / "dst")
    assert "feature 'badsource': source 'badsource''s importer hook ikdata_test_badsource:importer takes (src)" \
        in str(caught.value)
