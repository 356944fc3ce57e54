"""Round four, finding 6: a definition file's size is checked from the file before it is parsed.

A 20 MB definition used to cost 2.4 GB of memory (read, parsed, schema-checked) before the
256 KiB reference limit refused it. Now the file is refused by its size, named, and never read
whole: the memory a check allocates stays far below the file's size.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.core.definitions import MAX_DEFINITION_BYTES, parse_definition, read_folder
from ikdata.core.trust import DATASET


def _huge_definition(path: Path, size: int, *, in_reference: bool = True) -> Path:
    """A definition of about ``size`` bytes: by default its reference is a huge list literal (the campaign's
    file: 2.4 GB parsed before the reference limit refused it), else its description is long."""
    from foundation_helpers import gemm_definition_record

    record = gemm_definition_record()
    if in_reference:
        record["reference"] += "\nx = [" + "1," * (size // 2) + "]\n"
    else:
        record["description"] = "x" * size
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_a_20_mb_definition_is_refused_by_its_size_without_being_read(tmp_path):
    path = _huge_definition(tmp_path / "defs" / "gemm" / "big.json", 20 << 20)
    tracemalloc.start()
    try:
        definition, problems = parse_definition(path, origin=DATASET, display="definitions/gemm/big.json")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert definition is None
    [problem] = problems
    assert problem.path == "definitions/gemm/big.json" and problem.code == "too-large"
    assert str(MAX_DEFINITION_BYTES) in problem.message
    assert peak < 4 << 20, f"checking a 20 MB definition allocated {peak} bytes"


def test_a_definition_just_under_the_limit_is_still_read(tmp_path):
    path = _huge_definition(tmp_path / "defs" / "gemm" / "ok.json", MAX_DEFINITION_BYTES - 4096, in_reference=False)
    assert path.stat().st_size <= MAX_DEFINITION_BYTES
    definition, problems = parse_definition(path, origin=DATASET)
    assert definition is not None and problems == []


def test_validate_names_the_oversized_file_and_goes_on(make_ikdata_dataset):
    root = make_ikdata_dataset(2)
    [existing] = list((root / "definitions").rglob("*.json"))
    big = _huge_definition(existing.parent / "zz_big.json", 20 << 20)
    result = CliRunner().invoke(app, ["validate", str(root)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert any("zz_big.json" in line and "larger than" in line for line in result.output.splitlines()), result.output
    found, problems = read_folder(root / "definitions", origin=DATASET, display_root=root)
    assert len(found) == 1 and [p.path for p in problems] == [big.relative_to(root).as_posix()]
