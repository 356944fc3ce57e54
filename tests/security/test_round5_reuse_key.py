"""Issue 43, finding 1: a reused verdict is a verdict about the same computation.

The reuse key covered the reference's source digest but not the definition's ``entry`` (which function of
the source runs) nor the order of its outputs. Dataset H (entry ``add``) replayed first; dataset V (entry
``run`` = x - y, whose engine wrongly produced x + y) then replayed as "3 passed, 3 reused" and
``ikdata import V S`` re-judged its forged passes from the reuse cache: "all agree". Swapping two outputs'
order behaved the same.

The key now covers the whole definition record in its written order (less a short list of fields argued
out of it, :data:`ikdata.replay.reuse.NOT_COMPUTATION`), the rule each output is judged by with all its
settings, and the judging family's code. The contract test below enumerates the definition schema's fields,
so a field added to the schema later is in the key unless someone argues it out.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import ikdata
from ikdata.core import manifest
from ikdata.core.errors import ProblemsFound
from ikdata.replay.reuse import NOT_COMPUTATION, definition_identity, judging_code_digest, reuse_key
from ikdata.replay.runner import replay

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "definition.schema.json"
NAME = "pair_test_n4"
PAIR_REFERENCE = """import torch

def add(x, y):
    return x + y

def run(x, y):
    return x - y
"""
SPLIT_REFERENCE = """import torch

def run(x, y):
    return x + y, x - y
"""


# -- the contract: every field of the definition decides the key, or is argued out of it ------------------


def _full_definition() -> dict:
    """A definition record holding every field the schema defines (top level, axes and tensors)."""
    tensor = {"shape": ["M", "N"], "dtype": "float32", "description": "d", "optional": False, "param": "p"}
    return {
        "name": NAME, "op_type": "elementwise", "description": "prose", "tags": ["t:1"], "constraints": ["M > 0"],
        "axes": {"M": {"type": "var", "description": "rows"}, "N": {"type": "const", "value": 4, "description": "c"}},
        "inputs": {"x": dict(tensor), "y": dict(tensor)},
        "outputs": {"s": dict(tensor), "d": dict(tensor)},
        "reference": SPLIT_REFERENCE, "entry": "run",
        "tolerance": {"matched_ratio": 1.0, "float32": {"rtol": 1e-5, "atol": 1e-6}},
        "judge": {"name": "relative_error", "bounds": {"relative_rms": 0.01}, "reason": "why"},
        "check": "def check(): pass", "init": "def init(): pass", "template": "pair_test_n{N}",
        "capture": {"op": "aten::add", "inputs": {"x": "self", "y": "other"}, "outputs": {"s": "return"}},
    }


def _key(record: dict, **overrides) -> str:
    parts = dict(definition=record, input_digests={"x": "a" * 64, "y": "b" * 64}, scalars={},
                 expected_digests={"s": "c" * 64, "d": "d" * 64}, axes={"M": 2}, device_kind="cpu",
                 torch_version="2.0", judging={"outputs": {"s": {"rtol": 1e-5}}}, code="code")
    parts.update(overrides)
    return reuse_key(**parts)


def _changed(value):
    """Another value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_other"
    if isinstance(value, list):
        return [*value, value[0] if value else "x"]
    if isinstance(value, dict):
        return {**value, "extra_other": 1}
    return "changed"


def _schema_fields() -> list[tuple[str, ...]]:
    """Every field path the definition schema names, as paths into :func:`_full_definition`."""
    schema = json.loads(SCHEMA.read_text())
    found = [(name,) for name in schema["properties"]]
    for name in schema["$defs"]["tensor"]["properties"]:
        found += [("inputs", "x", name), ("outputs", "s", name)]
    for variant, axis in zip(schema["properties"]["axes"]["additionalProperties"]["oneOf"], ("N", "M")):
        found += [("axes", axis, name) for name in variant["properties"]]
    for section in ("tolerance", "judge", "capture"):
        found += [(section, name) for name in schema["properties"][section].get("properties", {})]
    return found


def test_the_full_definition_holds_every_field_the_schema_names():
    record = _full_definition()
    for path in _schema_fields():
        value = record
        for part in path:
            assert part in value, f"_full_definition lacks {'/'.join(path)}: add it so the contract covers it"
            value = value[part]


@pytest.mark.parametrize("path", _schema_fields(), ids=lambda p: "/".join(p))
def test_each_definition_field_changes_the_key_or_is_argued_out(path):
    record = _full_definition()
    before = _key(record)
    changed = copy.deepcopy(record)
    holder = changed
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = _changed(holder[path[-1]])
    if path[0] in NOT_COMPUTATION:
        assert _key(changed) == before
        assert len(NOT_COMPUTATION[path[0]]) > 20  # a reason, not a placeholder
    else:
        assert _key(changed) != before, f"changing /{'/'.join(path)} leaves the reuse key as it was"
    removed = copy.deepcopy(record)
    holder = removed
    for part in path[:-1]:
        holder = holder[part]
    del holder[path[-1]]
    assert (_key(removed) == before) == (path[0] in NOT_COMPUTATION)


def test_the_fields_argued_out_are_few_and_named_by_the_schema():
    schema = json.loads(SCHEMA.read_text())
    assert set(NOT_COMPUTATION) <= set(schema["properties"])
    for decisive in ("name", "reference", "entry", "inputs", "outputs", "axes", "tolerance", "judge", "tags"):
        assert decisive not in NOT_COMPUTATION


def test_a_field_the_schema_does_not_know_yet_is_in_the_key():
    record = _full_definition()
    assert _key({**record, "a_field_added_later": 1}) != _key(record)


@pytest.mark.parametrize("section", ["inputs", "outputs", "axes"])
def test_the_order_of_inputs_outputs_and_axes_is_in_the_key(section):
    record = _full_definition()
    swapped = {**record, section: dict(reversed(list(record[section].items())))}
    assert swapped[section] == record[section]  # equal as mappings: only the order differs
    assert definition_identity(swapped) != definition_identity(record)
    assert _key(swapped) != _key(record)


@pytest.mark.parametrize("part, value", [
    ("input_digests", {"x": "b" * 64, "y": "a" * 64}), ("expected_digests", {"s": "d" * 64, "d": "c" * 64}),
    ("scalars", {"alpha": 1.0}), ("axes", {"M": 3}), ("device_kind", "cuda"), ("torch_version", "2.1"),
    ("judging", {"outputs": {"s": {"rtol": 1e-4}}}), ("judging", {"outputs": {"s": {"rtol": 1e-5, "new": 1}}}),
    ("code", "other code")])
def test_every_other_part_changes_the_key(part, value):
    assert _key(_full_definition(), **{part: value}) != _key(_full_definition())


def test_the_key_follows_the_judging_family_code(tmp_path, monkeypatch):
    """A family's code is part of the key (issue 50 item 3): a changed module gives another digest."""
    from ikdata.core.features import Family

    package = tmp_path / "toy_family_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hooks.py").write_text("def owns(definition):\n    return False\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    family = Family("toy", owns="toy_family_pkg.hooks:owns")
    before = judging_code_digest(family)
    assert before != judging_code_digest(Family("operators"))
    (package / "helpers.py").write_text("THRESHOLD = 2\n")  # the package's code changed
    from ikdata.replay import reuse
    reuse._code_digest.cache_clear()
    assert judging_code_digest(family) != before


# -- the scenario: H (entry add) replayed, then V (entry run, engine produced x + y) -------------------


def _pair_record(**extra) -> dict:
    tensor = {"shape": ["M", "N"], "dtype": "float32"}
    return {"name": NAME, "op_type": "elementwise", "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 4}},
            "inputs": {"x": dict(tensor), "y": dict(tensor)}, "outputs": {"out": dict(tensor)},
            "reference": PAIR_REFERENCE, **extra}


def _dataset(root: Path, record: dict, outputs) -> tuple[Path, Path]:
    """(dataset, trusted definitions folder): 3 workloads whose engine produced ``outputs(x, y)``."""
    from foundation_helpers import write_definition

    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter

    definition = Definition.from_dict(record, origin=USER, source="test")
    writer = DatasetWriter(root)
    rng = np.random.default_rng(7)
    for i in range(3):
        x, y = (rng.standard_normal((i + 1, 4)).astype(np.float32) for _ in range(2))
        writer.add(definition, {"x": x, "y": y}, outputs(x, y), {"engine": "test", "request_id": f"r{i}", "step": i})
    writer.commit()
    folder = root.parent / f"{root.name}-definitions"
    write_definition(folder, record)
    return root, folder


def _replay(root: Path, folder: Path, **kwargs):
    return replay(ikdata.open(root, definitions=[folder]), **kwargs)


@pytest.fixture
def entry_pair(tmp_path):
    """H (entry add, honest x + y) replayed first; V (entry run = x - y, engine wrongly gave x + y)."""
    h = _dataset(tmp_path / "H", _pair_record(entry="add"), lambda x, y: {"out": x + y})
    v = _dataset(tmp_path / "V", _pair_record(), lambda x, y: {"out": x + y})
    assert ikdata.open(v[0]).definitions[NAME].reference_digest == ikdata.open(h[0]).definitions[NAME].reference_digest
    first = _replay(*h)
    assert first.exit_code == 0 and first.counts["passed"] == 3
    assert _replay(*h).counts["reused"] == 3  # the cache works: what follows is a real refusal
    return h, v


def test_another_entry_of_the_same_source_is_not_answered_by_the_cache(entry_pair):
    h, v = entry_pair
    honest = _replay(*v, reuse=False, report_path=v[0].parent / "honest.json")
    assert honest.counts["failed"] == 3
    result = _replay(*v)
    assert result.counts["reused"] == 0
    assert result.counts["failed"] == 3 and result.exit_code != 0


def test_import_re_judges_a_forged_pass_for_another_entry_failing(entry_pair, tmp_path):
    """V's report is H's (the same uuids, digests and reference source): a perfect forgery that only
    running V's entry can catch. Import must not take H's cached verdicts for V's cases."""
    h, v = entry_pair
    (v[0] / "reports").mkdir(exist_ok=True)
    shutil.copyfile(h[0] / "reports" / "replay.json", v[0] / "reports" / "replay.json")
    manifest.write(v[0])
    dst = tmp_path / "S"
    with pytest.raises(ProblemsFound) as caught:
        ikdata.import_dataset(v[0], dst, definitions=[v[1]])
    message = str(caught.value)
    assert "re-judged here, it fails" in message, message
    assert not (dst / "receipts.jsonl").exists()


def _split_record(outputs: tuple[str, str]) -> dict:
    tensor = {"shape": ["M", "N"], "dtype": "float32"}
    return {"name": NAME, "op_type": "elementwise", "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 4}},
            "inputs": {"x": dict(tensor), "y": dict(tensor)}, "outputs": {n: dict(tensor) for n in outputs},
            "reference": SPLIT_REFERENCE}


def test_swapped_output_order_is_not_answered_by_the_cache(tmp_path):
    """H lists (s, d): s = x + y, d = x - y. V lists (d, s), so its reference's first value (x + y) is d; its
    engine wrongly gave the same blobs as H (d = x - y, s = x + y) and must fail."""
    blobs = lambda x, y: {"s": x + y, "d": x - y}  # noqa: E731
    h = _dataset(tmp_path / "H", _split_record(("s", "d")), blobs)
    v = _dataset(tmp_path / "V", _split_record(("d", "s")), blobs)
    assert _replay(*h).counts["passed"] == 3
    assert _replay(*v, reuse=False, report_path=tmp_path / "honest.json").counts["failed"] == 3
    result = _replay(*v)
    assert result.counts["reused"] == 0 and result.counts["failed"] == 3 and result.exit_code != 0
    # and import refuses V carrying H's report as its own
    shutil.copyfile(h[0] / "reports" / "replay.json", v[0] / "reports" / "replay.json")
    manifest.write(v[0])
    with pytest.raises(ProblemsFound) as caught:
        ikdata.import_dataset(v[0], tmp_path / "S", definitions=[v[1]])
    assert "re-judged here, it fails" in str(caught.value)
