"""The interpreter-start hook: standard library only until the program imports torch, then capture.

These run real child processes of the test interpreter, so they exercise the installed
``ikdata_capture.pth`` (editable or not) and the top-level ``ikdata_boot`` module it imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from capture_helpers import capture_env

MODULES = "import json, sys; print(json.dumps(sorted(sys.modules)))"


def _modules(env: dict[str, str], code: str = MODULES) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_capture_on_loads_only_the_standard_library_in_a_process_that_never_imports_torch(tmp_path):
    off = set(_modules(capture_env()))
    on = set(_modules(capture_env({"into": str(tmp_path / "ds")})))
    assert "ikdata_boot" in on  # the hook did run: this test would pass vacuously without the .pth
    loaded = on - off - {"ikdata_boot"}
    forbidden = sorted(m for m in on if m.split(".")[0] in ("ikdata", "jsonschema", "jsonschema_rs", "orjson",
                                                             "torch", "numpy", "safetensors", "typer", "rich"))
    assert forbidden == []
    not_stdlib = sorted(m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names)
    assert not_stdlib == []
    assert not (tmp_path / "ds").exists()  # nothing was captured, nothing was created


def test_capture_starts_when_the_program_imports_torch(tmp_path):
    code = ("import sys; import torch, torch.nn.functional as F\n"
            "from ikdata.capture import current\n"
            "print(current() is not None)\n"
            "F.linear(torch.randn(2, 384), torch.randn(384, 384))\n")
    done = subprocess.run([sys.executable, "-c", code], env=capture_env({"into": str(tmp_path / "ds")}),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]
    rows = list((tmp_path / "ds" / "workloads").rglob("*.jsonl"))
    assert len(rows) == 1 and rows[0].read_text().count("\n") == 1


def test_a_bad_setting_is_reported_when_torch_arrives_and_the_program_still_runs(tmp_path):
    env = capture_env()
    env["IKDATA_CAPTURE"] = "{not json"
    plain = _modules(env)
    assert "ikdata" not in plain  # nothing is parsed before torch
    done = subprocess.run([sys.executable, "-c", "import torch; print(torch.ones(2).sum().item())"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.0"]
    assert "ikdata capture: not enabled in process" in done.stderr
    assert "IKDATA_CAPTURE is not valid JSON" in done.stderr


def test_watch_calls_back_once_after_the_module_has_executed(tmp_path):
    (tmp_path / "watched_mod.py").write_text("VALUE = 42\n")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
            "import ikdata_boot\n"
            "seen = []\n"
            "def on_import(): seen.append(sys.modules['watched_mod'].VALUE)\n"
            "assert ikdata_boot.watch(on_import, 'watched_mod') is not None\n"
            "assert ikdata_boot.watch(on_import, 'watched_mod') is None\n"
            "import json, watched_mod, importlib; importlib.reload(watched_mod)\n"
            "print(seen, any(isinstance(f, ikdata_boot.ImportWatcher) for f in sys.meta_path))\n")
    done = subprocess.run([sys.executable, "-c", code], env=capture_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[42]", "False"]


def test_the_boot_module_imports_nothing_outside_the_standard_library():
    source = (Path(__file__).resolve().parents[2] / "ikdata_boot.py").read_text()
    imported = set()
    for line in source.splitlines():
        words = line.strip().split()
        if words[:1] == ["import"] or words[:1] == ["from"] and len(words) > 1:
            imported.add(words[1].split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"ikdata"}  # only inside _start, once torch is there
