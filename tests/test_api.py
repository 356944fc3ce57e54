"""Guards on the public surface: ikdata.__all__, --help on every command, and the read-only
commands never importing torch."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import types

import pytest
import typer
from typer.testing import CliRunner

import ikdata
from ikdata.cli import app

runner = CliRunner()


def test_all_lists_every_public_name_and_only_existing_ones():
    public = {name for name, value in vars(ikdata).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    public.discard("annotations")  # from __future__ import annotations
    assert sorted(set(ikdata.__all__)) == sorted(ikdata.__all__), "duplicates in __all__"
    assert public - set(ikdata.__all__) == set(), "public names missing from __all__"
    missing = [name for name in ikdata.__all__ if not hasattr(ikdata, name)]
    assert missing == []


def test_every_error_class_is_exported():
    from ikdata.core import errors

    classes = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, errors.IkdataError)}
    assert classes <= set(ikdata.__all__)


def test_api_open_iterates_and_loads(ikdata_dataset):
    ds = ikdata.open(ikdata_dataset)
    assert isinstance(ds, ikdata.Dataset)
    assert list(ds.definitions) == ["gemm_test_n4_k8"]
    rows = list(ds.workloads())
    assert all(isinstance(r, ikdata.WorkloadRow) for r in rows) and len(rows) == 3
    assert all(isinstance(r, ikdata.Receipt) for r in ds.receipts())
    inputs = ds.load_inputs(rows[0])
    assert list(inputs) == ["A", "W"] and tuple(inputs["A"].shape) == (1, 8)
    assert isinstance(ikdata.validate(ds), ikdata.ValidationReport)
    with pytest.raises(ikdata.UsageError):
        ikdata.open(ikdata_dataset / "missing")


def _command_names() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(group.commands)


def test_the_foundation_commands_exist():
    assert {"init", "validate", "ls", "show", "stats", "repair", "manifest"} <= set(_command_names())


@pytest.mark.parametrize("name", _command_names())
def test_every_command_has_help(name):
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert "Traceback" not in result.output


_PROBE = """
import contextlib, io, json, sys
from ikdata.cli import main
for args in json.loads(sys.argv[1]):
    if args == ["__import_torch__"]:
        import torch
        code = 0
    else:
        sys.argv = ["ikdata"] + args
        code = 0
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main()
            except SystemExit as exc:
                code = exc.code or 0
    print("PROBE " + json.dumps({"args": args, "code": code, "torch": "torch" in sys.modules}), flush=True)
"""


def _probe(steps: list[list[str]]) -> list[dict]:
    """Run CLI invocations in ONE fresh interpreter; after each, whether torch has been imported."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(steps)], capture_output=True, text=True,
                          timeout=300)
    found = [json.loads(l[len("PROBE "):]) for l in proc.stdout.splitlines() if l.startswith("PROBE ")]
    assert len(found) == len(steps), proc.stdout + proc.stderr
    return found


def test_help_and_read_only_commands_never_import_torch(ikdata_dataset, seed_dataset):
    seed_root, seed_definitions = seed_dataset
    uuid = next(ikdata.open(ikdata_dataset).workloads()).uuid
    steps = [
        ["--help"],
        ["validate", "--help"],
        ["validate", str(ikdata_dataset), "--deep"],
        ["validate", str(ikdata_dataset), "--json"],
        ["validate", str(seed_root), "--deep", "--definitions", str(seed_definitions)],
        ["ls", str(ikdata_dataset)],
        ["ls", str(seed_root), "--definitions", str(seed_definitions), "--json"],
        ["show", str(ikdata_dataset), uuid[:8]],
        ["show", str(ikdata_dataset), uuid, "--json"],
        ["stats", str(ikdata_dataset)],
        ["stats", str(seed_root), "--definitions", str(seed_definitions), "--json"],
        ["__import_torch__"],  # proves the probe sees an import of torch
    ]
    found = _probe(steps)
    assert [(f["args"], f["code"], f["torch"]) for f in found[:-1]] == [(s, 0, False) for s in steps[:-1]]
    assert found[-1]["torch"] is True
