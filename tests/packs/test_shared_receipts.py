"""Receipts without repetition (issue 15 item 5): what every validation of a report shares is stored
once, in reports/shared/<digest>.json, and named by digest; old receipts stay readable."""

from __future__ import annotations

import json

import pytest
from foundation_helpers import gemm_definition_record

import ikdata
from ikdata.core.verdicts import SHARED_KEYS, expand_validation
from ikdata.importing.apply import import_dataset as _import_dataset
from ikdata.ops.validate import validate


def _validated(root, tmp_path):
    from ikdata.core.writer import DatasetWriter
    from ikdata.replay.runner import replay

    folder = tmp_path / "trusted"
    record = gemm_definition_record()
    path = folder / record["op_type"] / f"{record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    assert replay(ikdata.open(root, definitions=[folder]), reuse=False).exit_code == 0
    DatasetWriter(root).commit()
    return root


def import_dataset(src, dst):
    """Import with the folder :func:`_validated` trusted (``tmp_path/trusted``) named, so the reference
    that judged SRC's report re-judges it."""
    return _import_dataset(src, dst, definitions=[src.parent / "trusted"])


def _receipts(root):
    return [json.loads(line) for line in (root / "receipts.jsonl").read_text().splitlines()]


def test_import_stores_the_shared_context_once(make_ikdata_dataset, tmp_path):
    src = _validated(make_ikdata_dataset(4), tmp_path)
    dst = tmp_path / "dst"
    import_dataset(src, dst)
    receipts = _receipts(dst)
    digests = {r["validation"]["shared"] for r in receipts}
    assert len(digests) == 1  # one context for the whole report
    shared = dst / "reports" / "shared" / f"{digests.pop()}.json"
    context = json.loads(shared.read_text())
    assert "tolerances" in context and "device" in context and "torch" in context
    for receipt in receipts:
        assert not set(SHARED_KEYS) & set(receipt["validation"])  # nothing repeated per receipt
        full = expand_validation(dst, receipt["validation"])
        assert full["tolerances"] == context["tolerances"] and "shared" not in full
    assert validate(ikdata.open(dst)).ok  # the context file is tracked by the manifest


def test_a_shared_validation_is_rechecked_on_the_next_import(make_ikdata_dataset, tmp_path):
    src = _validated(make_ikdata_dataset(3), tmp_path)
    middle, last = tmp_path / "middle", tmp_path / "last"
    import_dataset(src, middle)
    result = import_dataset(middle, last)  # no report in middle: the receipts' validations are rechecked
    assert len(result.added) == 3
    assert {r["validation"]["shared"] for r in _receipts(last)} == {r["validation"]["shared"] for r in _receipts(middle)}
    assert validate(ikdata.open(last)).ok


def test_a_missing_or_altered_shared_context_refuses_the_import(make_ikdata_dataset, tmp_path):
    from ikdata.core.errors import ProblemsFound

    src = _validated(make_ikdata_dataset(2), tmp_path)
    middle = tmp_path / "middle"
    import_dataset(src, middle)
    shared = next((middle / "reports" / "shared").iterdir())
    context = json.loads(shared.read_text())
    context["tolerances"]["float32"] = {"rtol": 1.0, "atol": 1.0}  # a looser table slipped in
    shared.write_text(json.dumps(context))
    with pytest.raises(ProblemsFound, match="altered"):
        import_dataset(middle, tmp_path / "last")
    shared.unlink()
    with pytest.raises(ProblemsFound, match="missing"):
        import_dataset(middle, tmp_path / "last2")


def test_old_receipts_with_inline_context_stay_readable(make_ikdata_dataset, tmp_path):
    src = _validated(make_ikdata_dataset(2), tmp_path)
    middle = tmp_path / "middle"
    import_dataset(src, middle)
    # rewrite middle's receipts as an older ikdata wrote them: the context inline, no shared file
    lines = []
    for receipt in _receipts(middle):
        receipt["validation"] = expand_validation(middle, receipt["validation"])
        lines.append(json.dumps(receipt, sort_keys=True))
    (middle / "receipts.jsonl").write_text("\n".join(lines) + "\n")
    import shutil

    shutil.rmtree(middle / "reports" / "shared")
    from ikdata.core import manifest

    manifest.write(middle)
    assert expand_validation(middle, _receipts(middle)[0]["validation"]) == _receipts(middle)[0]["validation"]
    result = import_dataset(middle, tmp_path / "last")
    assert len(result.added) == 2
    assert all("shared" in r["validation"] for r in _receipts(tmp_path / "last"))


def test_lineage_shows_the_shared_context(make_ikdata_dataset, tmp_path):
    from ikdata.ops.lineage import trace

    src = _validated(make_ikdata_dataset(1), tmp_path)
    dst = tmp_path / "dst"
    import_dataset(src, dst)
    uuid = _receipts(dst)[0]["uuid"]
    chain = trace(dst, uuid)[0]
    attached = [v for v in chain.validations if v["from"].startswith("receipt")]
    assert attached and attached[0]["device"] and attached[0]["torch"]


def test_validate_reports_a_missing_or_altered_shared_context(make_ikdata_dataset, tmp_path):
    src = _validated(make_ikdata_dataset(2), tmp_path)
    dst = tmp_path / "dst"
    import_dataset(src, dst)
    shared = next((dst / "reports" / "shared").iterdir())
    shared.write_text(shared.read_text().replace("cpu", "cuda"))
    report = validate(ikdata.open(dst))
    assert any(p.code == "shared-context" and "altered" in p.message and shared.name in p.message
               for p in report.problems), [str(p) for p in report.problems]
    shared.unlink()
    report = validate(ikdata.open(dst))
    assert any(p.code == "shared-context" and "missing" in p.message for p in report.problems)
