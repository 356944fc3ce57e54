"""Schemas: the files in schemas/ are the single source of truth, located error messages, and the
compiled fast path agrees with jsonschema on every record (valid or not)."""

from __future__ import annotations

import copy
import json
import random
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from foundation_helpers import gemm_definition_record
from ikdata.core import schema

REPO = Path(__file__).resolve().parents[1]


def test_every_kind_has_a_valid_2020_12_schema_file():
    files = sorted(p.name for p in (REPO / "schemas").glob("*.schema.json"))
    assert files == sorted(f"{k}.schema.json" for k in schema.KINDS)
    for kind in schema.KINDS:
        document = schema.load_schema(kind)
        Draft202012Validator.check_schema(document)
        assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert document["$id"] == f"urn:ikdata:{kind}"


def test_the_code_reads_the_schema_files_themselves():
    for kind in schema.KINDS:
        installed = resources.files("ikdata.schemas").joinpath(f"{kind}.schema.json").read_text()
        assert json.loads(installed) == json.loads((REPO / "schemas" / f"{kind}.schema.json").read_text())


def test_located_problems_name_file_line_pointer_and_schema():
    row = {"definition": "g", "workload": {"uuid": "u", "axes": {"M": -1}, "inputs": {"A": {"type": "safetensors"}}}}
    problems = schema.check("workload", row, path="workloads/g.jsonl", line=7)
    assert [p.pointer for p in problems] == ["/workload/axes/M", "/workload/inputs/A"]
    assert all(p.path == "workloads/g.jsonl" and p.line == 7 and p.code == "schema" for p in problems)
    assert str(problems[0]) == ("workloads/g.jsonl:7: /workload/axes/M -1 is less than the minimum of 0 "
                                "(workload.schema.json)")
    assert "(workload.schema.json)" in problems[1].message


def test_missing_required_field_is_reported_at_its_parent():
    problems = schema.check("receipt", {"uuid": "u", "definition": "d"}, path="receipts.jsonl", line=2)
    assert [str(p) for p in problems] == [
        "receipts.jsonl:2: / 'expected_output' is a required property (receipt.schema.json)"]


def test_long_messages_are_cut():
    problems = schema.check("workload", {"definition": "x" * 500, "workload": 1}, path="f")
    assert all(len(p.message) < 260 for p in problems)


# -- the fast path must agree with jsonschema -----------------------------------------------------

DESCRIPTOR = {"type": "safetensors", "path": "blob/sha256/ab/x.safetensors", "tensor_key": "tensor"}
VALID = {
    "descriptor": [DESCRIPTOR, {"type": "scalar", "value": 1.5}, {"type": "random"}],
    "workload": [{"definition": "g", "workload": {"uuid": "u", "axes": {"M": 3},
                                                  "inputs": {"A": DESCRIPTOR, "s": {"type": "scalar", "value": 2}}}}],
    "receipt": [
        {"uuid": "u", "definition": "g", "axes": {"M": 3}, "expected_output": {"C": DESCRIPTOR},
         "engine": "sglang", "request_id": 4, "step": 0, "captured_at": 1.5,
         "validation": {"status": "passed", "metrics": {"C": {}}},
         "imports": [{"from": "abc", "at": 1.0, "how": "import"}]},
        {"uuid": "u", "definition": "g", "expected_output": DESCRIPTOR, "process_id": 3},
    ],
    "definition": [gemm_definition_record(),
                   dict(gemm_definition_record(), tolerance={"matched_ratio": 0.99, "bfloat16": {"rtol": 0.01,
                                                                                                 "atol": 0.02}},
                        judge={"name": "cosine", "bounds": {"min": 0.9}}, tags=["a"])],
    "manifest": [{"format": "ikdata/1", "name": "n", "counts": {"definitions": 1, "workloads": 2, "receipts": 2,
                                                               "blobs": 3},
                  "files": {"receipts.jsonl": "a" * 64}, "blobs": {"count": 3, "bytes": 10, "digest": "b" * 64},
                  "parents": [{"id": "c" * 64, "at": 1.0, "how": "import"}]}],
    "report": [{"torch": "2.1", "device": "cpu", "tolerances": {}, "shard": "0/2",
                "cases": [{"definition": "g", "uuid": "u", "status": "passed", "seconds": 0.5,
                           "max_absolute_errors": [0.1, None]}]}],
    "validation": [{"status": "failed", "tolerances": None}],
    "trajectory": [{  # a one-step diffusion trajectory (tests/diffusion has real ones)
        "trajectory": "d" * 64, "status": "incomplete", "reason": "stopped",
        "pipeline": {"class": "LTXPipeline", "library": "diffusers", "model": None},
        "scheduler": {"class": "FlowMatchEulerDiscreteScheduler", "config": {"shift": 1.0}, "order": 1},
        "request": {"steps": 2, "height": 32, "seed": 7, "prompt": "a cat", "prompt_embeds_digest": None},
        "streams": ["video"], "selection": {"steps": None, "streams": None},
        "steps": [{"index": 0, "stream": "video", "timestep": 1000.0, "sigma": 1.0, "sigma_next": 0.5,
                   "x": dict(DESCRIPTOR, dtype="torch.float32", shape=[1, 4]), "out": DESCRIPTOR,
                   "x_next": DESCRIPTOR, "workloads": {"scheduler_step": ["u"]}, "skipped": {"denoiser": "why"}}],
        "final": {}, "decoded": {"video": DESCRIPTOR},
        "noise": {"recipe": "cpu-randn-float32/1", "seed": 7, "streams": [{"name": "video", "shape": [1, 4]}],
                  "digest": "e" * 64, "check": {"video": True}, "reason": None},
        "model": {"digest": "f" * 64, "class": "LTXVideoTransformer3DModel", "record": "models/x.json",
                  "stored": True},
        "provenance": {"engine": "diffusers"}}],
    "census": [{"run": "20261203T094523Z-10311dee", "pid": 7, "host": "h", "argv": ["run.py"], "rank": None,
                "world_size": None, "time": "2026-12-03T09:45:24Z", "torch": True, "enabled": True, "reason": None,
                "adapters": [{"module": "m", "error": None}],
                "ops": [{"op": "aten::addmm", "calls": 3, "recorded": [{"definition": "g", "calls": 1}],
                         "skipped": [{"reason": "selection rule", "definition": "g", "calls": 2}]}]}],
    "model": [{"digest": "a" * 64, "class": "UNet2DModel", "library": "diffusers", "config": {"sample_size": 16},
               "stored": False, "bytes": 12, "repo_id": "org/model", "revision": None,
               "tensors": {"conv.weight": {"digest": "b" * 64, "dtype": "torch.float32", "shape": [3]}}}],
    "pack-index": [{"format": "ikdata-pack-index/1", "pack": "c" * 64 + ".safetensors", "bytes": 200,
                    "tensors": {"d" * 64: {"dtype": "torch.float32", "shape": [2, 3], "offset": 96, "length": 24}}}],
    "flashinfer-call": [{"function_name": "rmsnorm", "module": "flashinfer.norm", "call_sequence": 1, "process_id": 7,
                         "timestamp": "20261203_094027_951", "execution_status": "completed",
                         "tensor_format": "safetensors", "function_signature": "(input, weight, eps=1e-06)",
                         "graph_capture": False, "versions": {"flashinfer": "0.7.2.post1"},
                         "input_metadata": {"kwarg_eps": 1e-6}, "output_metadata": {},
                         "tensor_info": {"input_tensor_keys": ["arg_0", "kwarg_weight"],
                                         "output_tensor_keys": ["result"]}}],
    "origin": [{"format": "ikdata-origin/1", "how": "clone", "source": "s3://bucket/gemm", "id": "a" * 64,
                "at": 1764750000.5, "ikdata_version": "0.1.0"}],
}
REPLACEMENTS = [None, True, False, 0, -1, 1.0, 2.5, "", "x", "urn:ikdata", [], [1], {}, {"type": "random"},
                "a" * 64, "1/2"]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _mutate(record, rng: random.Random):
    record = copy.deepcopy(record)
    for _ in range(rng.randint(1, 2)):
        paths = [p for p in _paths(record) if p]
        if not paths:
            return rng.choice(REPLACEMENTS)
        path = rng.choice(paths)
        parent = record
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if action < 0.3 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.4 and isinstance(parent, dict):
            parent["extra_" + str(rng.randint(0, 9))] = rng.choice(REPLACEMENTS)
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(REPLACEMENTS))
    return record


@pytest.mark.parametrize("kind", schema.KINDS)
def test_fast_path_agrees_with_jsonschema(kind):
    fast = schema.fast_validator(kind)
    assert fast is not None, f"{kind}.schema.json uses a keyword the fast path does not compile"
    slow = schema.validator(kind)
    rng = random.Random(kind)
    for record in VALID[kind]:
        assert slow.is_valid(record), record
        assert fast(record)
        for _ in range(400):
            mutated = _mutate(record, rng)
            assert fast(mutated) == slow.is_valid(mutated), mutated


@pytest.mark.parametrize("value, expected", [(1, True), (1.0, True), (True, False), ("1", False), (None, False)])
def test_fast_path_integer_semantics(value, expected):
    row = {"definition": "g", "workload": {"uuid": "u", "axes": {"M": value}, "inputs": {}}}
    assert schema.is_valid("workload", row) is expected
    assert schema.validator("workload").is_valid(row) is expected


def test_without_the_compiled_validator_jsonschema_alone_decides(monkeypatch):
    """An install without jsonschema-rs still validates (slower), with the same answers."""
    import builtins

    real_import = builtins.__import__

    def no_rs(name, *args, **kwargs):
        if name == "jsonschema_rs":
            raise ImportError("not installed")
        return real_import(name, *args, **kwargs)

    schema.fast_validator.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_rs)
    try:
        assert schema.fast_validator("workload") is None
        row = {"definition": "g", "workload": {"uuid": "u", "axes": {"M": 1}, "inputs": {}}}
        assert schema.is_valid("workload", row)
        assert not schema.is_valid("workload", {**row, "definition": 3})
        assert schema.check("workload", {**row, "definition": 3}, path="w.jsonl", line=4)[0].line == 4
    finally:
        monkeypatch.undo()
        schema.fast_validator.cache_clear()
    assert schema.fast_validator("workload") is not None



@pytest.mark.parametrize("kind", schema.KINDS)
def test_compiled_and_explaining_validators_agree_on_every_removal_and_type_change(kind):
    """Systematic corpus: every field of every valid record removed, and every value replaced by each
    JSON type; the compiled check and jsonschema must accept and reject the same records."""
    fast, slow = schema.fast_validator(kind), schema.validator(kind)
    for record in VALID[kind]:
        for path in [p for p in _paths(record) if p]:
            removed = object()
            variants = []
            parent = record
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict):
                variants.append(removed)
            variants += [r for r in REPLACEMENTS if not isinstance(r, dict) or r]
            for replacement in variants:
                mutated = copy.deepcopy(record)
                target = mutated
                for key in path[:-1]:
                    target = target[key]
                if replacement is removed:
                    del target[path[-1]]
                else:
                    target[path[-1]] = copy.deepcopy(replacement)
                assert fast(mutated) == slow.is_valid(mutated), (path, replacement)
