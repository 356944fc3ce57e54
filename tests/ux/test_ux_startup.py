"""Issue 26, start-up: read-only commands import only what they use. ``ikdata show`` loads a bounded number of
modules (counted in a real process: no timing is asserted), ``--version`` and ``--help`` load no typer."""

from __future__ import annotations

import json
import subprocess
import sys

COUNT = ("import runpy, sys, json\n"
         "sys.argv = ['ikdata', *json.loads(sys.argv[1])]\n"
         "try:\n    from ikdata.cli import main; main()\n"
         "except SystemExit:\n    pass\n"
         "sys.stderr.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n')\n")
SHOW_LIMIT = 197  # 389 before issue 26's start-up work (typer, pydantic, rich, every command module); 207 with
# the fast path; 174 once core imports tempfile, concurrent.futures and importlib.resources only where it writes;
# 185 with the census and index keys; +10 for the features' declarations (issue 33: four torch-free feature
# modules, their packages, ikdata._features and core.features, which every record path reads)
DECLARATIONS = ("ikdata.diffusion", "ikdata.sampling", "ikdata.flashinfer", "ikdata.engines")
HEAVY = ("torch", "numpy", "ray", "s3fs", "huggingface_hub", "plotly", "typer", "pydantic", "click", "rich",
         # the standard library a read-only command never needs: pools, temp files, package resources
         "concurrent", "logging", "tempfile", "shutil", "zipfile")


def _modules(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", COUNT, json.dumps(list(args))], capture_output=True, text=True,
                          timeout=120)
    line = next(l for l in done.stderr.splitlines() if l.startswith("MODULES "))
    return json.loads(line[len("MODULES "):])


def test_show_loads_only_what_it_uses(small_dataset):
    import ikdata

    from ikdata.core.index import try_open_index

    uuid = next(ikdata.open(small_dataset).workloads()).uuid
    try_open_index(small_dataset).close()  # built (its temp file is the first show's to write), then only read
    for command in ("show", "lineage"):  # a dataset without trajectories loads no diffusion module
        loaded = _modules(command, str(small_dataset), uuid[:8])
        heavy = [m for m in loaded if m.split(".")[0] in HEAVY or m == "importlib.resources"
                 or m.startswith(("ikdata.capture", "ikdata.replay", "ikdata.importing", "ikdata.remote.push",
                                  "ikdata.remote.pull", "ikdata.cli.replay_cmd", "ikdata.cli.capture_cmd",
                                  "ikdata.cli.remote_cmd", "ikdata.diffusion", "ikdata.sampling"))
                 and not (m in DECLARATIONS or m.endswith(".feature"))]  # what a feature declares, not its code
        assert heavy == [], command
        assert len(loaded) <= SHOW_LIMIT, (command, len(loaded))


def test_the_fast_path_prints_what_typer_prints(small_dataset, capsys):
    """show, ls, stats and lineage run without typer (cli/_fast.py): the same output and exit code as the
    typer commands, and anything they do not parse is left to typer."""
    import ikdata
    from typer.testing import CliRunner

    from ikdata import cli

    uuid = next(ikdata.open(small_dataset).workloads()).uuid
    runner = CliRunner()
    for args in (["show", str(small_dataset), uuid[:8]], ["show", str(small_dataset), uuid, "--json"],
                 ["ls", str(small_dataset)], ["ls", str(small_dataset), "--definition=nosuch"],
                 ["stats", str(small_dataset), "--json"], ["lineage", str(small_dataset), uuid],
                 ["lineage", str(small_dataset), "--dot"], ["show", str(small_dataset), "nosuch"]):
        by_typer = runner.invoke(cli.app, args, env={"COLUMNS": "80"})
        try:
            cli.main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code
        fast = capsys.readouterr()
        assert code == by_typer.exit_code, args
        assert fast.out == by_typer.stdout, args
        if code:
            assert fast.err.strip() and fast.err.strip() in by_typer.output, args
    from ikdata.cli import _fast

    assert _fast.parse("show", [str(small_dataset)]) is None  # typer says what is missing
    assert _fast.parse("show", [str(small_dataset), "k", "--help"]) is None
    assert _fast.parse("ls", ["d", "--nosuch"]) is None


def test_version_and_help_load_no_typer():
    for args in (["--version"], ["--help"]):
        loaded = _modules(*args)
        assert not [m for m in loaded if m.split(".")[0] in ("typer", "rich", "pydantic", "click")], args
