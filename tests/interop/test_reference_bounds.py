"""Issue 9: validate parses a dataset's (untrusted) references within size and nesting limits.

Python's parser recurses per nesting level: 100,000 unary minus signs raise MemoryError,
a few thousand chained subscripts RecursionError. validate must report such a reference
with file, line and pointer, exit 1, and never show a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.core.definitions import MAX_CHAIN, MAX_NESTING, MAX_REFERENCE_CHARS, USER, Definition, parse_reference

runner = CliRunner()

HOSTILE = {
    "unary_minus": ("def run(A, W):\n    return " + "-" * 100_000 + "A\n",
                    f"reference line 2: more than {MAX_CHAIN} operators in one statement"),
    "nested_subscripts": ("def run(A, W):\n    return " + "A[" * 50_000 + "0" + "]" * 50_000 + "\n",
                          f"reference line 2: brackets nested more than {MAX_NESTING} deep"),
    "chained_subscripts": ("def run(A, W):\n    return A" + "[0]" * 50_000 + "\n",
                           f"reference line 2: more than {MAX_CHAIN} operators in one statement"),
    "binary_chain": ("def run(A, W):\n    return " + "A + " * 20_000 + "W\n",
                     f"reference line 2: more than {MAX_CHAIN} operators in one statement"),
    "not_chain": ("def run(A, W):\n    return " + "not " * 20_000 + "A\n",
                  f"reference line 2: more than {MAX_CHAIN} operators in one statement"),
    "oversized": ("def run(A, W):\n    return A\n" + "# padding\n" * 30_000,
                  f"reference is 300,028 characters; the limit is {MAX_REFERENCE_CHARS:,}"),
}


def _hostile_dataset(make_ikdata_dataset, reference: str) -> Path:
    from ikdata.core import manifest

    root = make_ikdata_dataset(2)
    [path] = (root / "definitions").rglob("*.json")
    record = json.loads(path.read_text())
    record["reference"] = reference
    path.write_text(json.dumps(record, indent=2) + "\n")
    manifest.write(root)
    return root


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_validate_reports_a_hostile_reference_without_a_traceback(make_ikdata_dataset, kind):
    reference, message = HOSTILE[kind]
    root = _hostile_dataset(make_ikdata_dataset, reference)
    result = runner.invoke(app, ["validate", str(root), "--json"])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    problems = json.loads(result.stdout)["problems"]
    [found] = [p for p in problems if p["pointer"] == "/reference"]
    assert found["path"].startswith("definitions/") and found["line"] >= 1 and found["code"] == "reference"
    assert found["message"].startswith(message)
    assert "Traceback" not in result.output


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_the_definition_check_is_bounded_too(kind):
    from foundation_helpers import gemm_definition_record

    reference, message = HOSTILE[kind]
    record = dict(gemm_definition_record(), reference=reference)
    assert Definition.from_dict(record, origin=USER).check() == [message + _rest(message)]


def _rest(message: str) -> str:
    if "operators" in message:
        return "; ikdata does not parse an expression nested this deeply"
    if "brackets" in message:
        return "; ikdata does not parse a reference nested this deeply"
    return " (a reference is the Python source of one operator)"


def test_references_within_the_limits_parse():
    source = "def run(A, W):\n    return " + "-" * (MAX_CHAIN - 10) + "A\n"
    tree, reason = parse_reference(source)
    assert reason is None and tree is not None
    nested = "def run(A, W):\n    return " + "(" * MAX_NESTING + "A" + ")" * MAX_NESTING + "\n"
    assert parse_reference(nested)[1] is None


def test_import_refuses_a_hostile_reference_with_a_message(make_ikdata_dataset, tmp_path):
    root = _hostile_dataset(make_ikdata_dataset, HOSTILE["unary_minus"][0])
    result = runner.invoke(app, ["import", str(root), str(tmp_path / "dst")])
    assert result.exit_code == 1 and "more than 1000 operators in one statement" in result.output
    assert "Traceback" not in result.output
