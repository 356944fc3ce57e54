"""Definitions: axes, symbolic shapes, binding, the consistency checks, and the trust rule.
Nothing here may execute a reference except load_reference on a trusted definition."""

from __future__ import annotations

import json

import pytest

from foundation_helpers import GEMM_NAME, gemm_definition_record, write_definition
from ikdata.core.definitions import (DATASET, SHIPPED, USER, Definition, definition_relpath, load_reference,
                                parse_definition, read_folder, require_record, shipped_folder, workloads_relpath)
from ikdata.core.errors import DefinitionError, RecordError, UntrustedReference


def _definition(origin=USER, **changes) -> Definition:
    return Definition.from_dict(dict(gemm_definition_record(), **changes), origin=origin, source="test.json")


def test_axes_specs_and_paths():
    d = _definition()
    assert d.const_axes == {"N": 4, "K": 8}
    assert d.var_axes == ["M"]
    assert d.inputs["A"].shape == ("M", "K") and d.inputs["A"].torch_dtype == "torch.float32"
    assert d.shape_of("C", {"M": 5}) == (5, 4)
    assert d.shape_of("C", {}) is None  # unknown var axis
    assert definition_relpath(d) == f"definitions/gemm/{GEMM_NAME}.json"
    assert workloads_relpath(d.name, d.op_type) == f"workloads/gemm/{GEMM_NAME}.jsonl"
    assert d.check() == []


def test_bind_returns_var_axes():
    d = _definition()
    shapes = {"A": (3, 8), "W": (4, 8), "C": (3, 4)}
    dtypes = {"A": "torch.float32", "W": "torch.float32", "C": "torch.float32"}
    assert d.bind(shapes, dtypes, tensors=["A", "W", "C"]) == {"M": 3}
    assert d.bind({"A": (3, 8), "W": (4, 8)}, axes={"M": 3}) == {"M": 3}


@pytest.mark.parametrize("shapes, dtypes, axes, message", [
    ({"A": (3, 8)}, None, None, "missing tensors ['W']; the definition needs ['A', 'W']"),
    ({"A": (3, 9), "W": (4, 8)}, None, None, "'A' axis 'K' is 9, expected the constant 8"),
    ({"A": (3, 8), "W": (5, 8)}, None, None, "'W' axis 'N' is 5, expected the constant 4"),
    ({"A": (3, 8, 1), "W": (4, 8)}, None, None, "'A' has rank 3 (shape [3, 8, 1]), expected rank 2 ['M', 'K']"),
    ({"A": (3, 8), "W": (4, 8)}, {"A": "torch.float16"}, None, "'A' has dtype torch.float16, expected torch.float32"),
    ({"A": (3, 8), "W": (4, 8)}, None, {"M": 2}, "'A' axis 'M' is 3, but the workload's axes say 2"),
    ({"A": None, "W": (4, 8)}, None, None, "'A' must be a tensor of shape ['M', 'K'], got a scalar"),
])
def test_bind_refuses_what_does_not_fit(shapes, dtypes, axes, message):
    with pytest.raises(DefinitionError) as caught:
        _definition().bind(shapes, dtypes, axes=axes)
    assert str(caught.value) == f"{GEMM_NAME}: {message}"


def test_bind_var_consistency_across_tensors():
    d = _definition()
    with pytest.raises(DefinitionError, match="'C' axis 'M' is 2, but another tensor bound it to 3"):
        d.bind({"A": (3, 8), "W": (4, 8), "C": (2, 4)}, tensors=["A", "W", "C"])


def test_scalar_inputs():
    record = gemm_definition_record()
    record["inputs"]["alpha"] = {"shape": None, "dtype": "float32"}
    d = Definition.from_dict(record, origin=USER)
    assert d.bind({"A": (1, 8), "W": (4, 8), "alpha": None}) == {"M": 1}
    with pytest.raises(DefinitionError, match="'alpha' must be a Python scalar, got a tensor of shape \\[2\\]"):
        d.bind({"A": (1, 8), "W": (4, 8), "alpha": (2,)})


def test_check_finds_every_inconsistency_without_running_anything(tmp_path):
    marker = tmp_path / "ran"
    record = gemm_definition_record()
    record["inputs"]["A"]["shape"] = ["M", "Q"]  # Q is not declared
    record["outputs"]["W"] = {"shape": ["N", "K"], "dtype": "float32"}  # W is also an input
    record["reference"] = f"open({str(marker)!r}, 'w').write('x')\ndef not_run():\n    pass\n"
    d = Definition.from_dict(record, origin=USER)
    assert d.check() == ["tensor 'A' uses axis 'Q', which is not declared in 'axes'",
                         "'W' is both an input and an output; names must be disjoint",
                         "reference must define a top-level function 'run'"]
    write_definition(tmp_path / "defs", record)
    read_folder(tmp_path / "defs", origin=USER)
    assert not marker.exists()


def test_reference_that_does_not_parse():
    d = _definition(reference="def run(:\n")
    assert d.check() == ["reference does not parse: line 1: invalid syntax"]


def test_digests_identify_content():
    a, b = _definition(), _definition(description="other words")
    assert a.digest != b.digest
    assert a.reference_digest == b.reference_digest
    assert len(a.digest) == 64


def test_read_folder_reports_bad_files_and_conflicts(tmp_path):
    folder = tmp_path / "defs"
    write_definition(folder, gemm_definition_record())
    (folder / "gemm" / "broken.json").write_text("{not json")
    bad = gemm_definition_record("bad_one")
    del bad["outputs"]
    write_definition(folder, bad)
    twin = gemm_definition_record()
    twin["description"] = "a different definition with the same name"
    (folder / "other").mkdir()
    (folder / "other" / "twin.json").write_text(json.dumps(twin))
    found, problems = read_folder(folder, origin=USER, display_root=tmp_path)
    assert list(found) == [GEMM_NAME]
    messages = [str(p) for p in problems]
    assert any(m.startswith("defs/gemm/bad_one.json: / 'outputs' is a required property") for m in messages)
    assert any(m.startswith("defs/gemm/broken.json: cannot read definition") for m in messages)
    assert any(m.startswith(f"defs/other/twin.json: definition '{GEMM_NAME}' is also defined differently in "
                            "defs/gemm/") for m in messages)


def test_parse_definition_reports_check_problems(tmp_path):
    record = gemm_definition_record()
    record["reference"] = "x = 1\n"
    path = write_definition(tmp_path, record)
    definition, problems = parse_definition(path, origin=USER, display="d.json")
    assert definition is not None
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if '"reference"' in t)
    assert [str(p) for p in problems] == [f"d.json:{line}: /reference reference must define a top-level function 'run'"]


def test_require_record():
    assert require_record(gemm_definition_record(), path="x.json").name == GEMM_NAME
    with pytest.raises(RecordError, match="x.json: / 'reference' is a required property"):
        record = gemm_definition_record()
        del record["reference"]
        require_record(record, path="x.json")


# -- the trust rule ----------------------------------------------------------------------------


def test_untrusted_reference_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    d = _definition(origin=DATASET, reference=f"open({str(marker)!r}, 'w').write('x')\ndef run(A, W):\n    return A\n")
    with pytest.raises(UntrustedReference) as caught:
        load_reference(d)
    assert not marker.exists()
    assert caught.value.digest == d.digest
    assert f"--trust {d.digest}" in str(caught.value)
    assert "test.json" in str(caught.value)


def test_trusted_by_origin_digest_or_identical_twin():
    dataset_copy = _definition(origin=DATASET)
    assert callable(load_reference(_definition(origin=USER)))
    assert callable(load_reference(_definition(origin=SHIPPED)))
    assert callable(load_reference(dataset_copy, trusted_digests=[dataset_copy.digest]))
    assert callable(load_reference(dataset_copy, trusted_definitions={GEMM_NAME: _definition(origin=USER)}))
    changed = _definition(origin=DATASET, description="changed")
    with pytest.raises(UntrustedReference):
        load_reference(changed, trusted_definitions={GEMM_NAME: _definition(origin=USER)})


def test_reference_that_fails_to_load():
    with pytest.raises(DefinitionError, match="reference failed to load: ZeroDivisionError"):
        load_reference(_definition(reference="1 / 0\ndef run():\n    pass\n"))
    with pytest.raises(DefinitionError, match="reference does not define a callable 'run'"):
        load_reference(_definition(reference="run = 3\n"))


def test_shipped_folder_is_installed():
    assert shipped_folder().is_dir()
    found, problems = read_folder(shipped_folder(), origin=SHIPPED)
    assert problems == []
    assert all(d.origin == SHIPPED for d in found.values())
