"""Capture starts however torch arrives, in every process the program starts (issue 32, part 1).

An import-order matrix (transformers first, diffusers first, a ``find_spec`` probe first,
``importlib.import_module``, a package that imports torch for the program, torch imported in a
thread, a lazy module) crossed with a spawn matrix (fork, spawn, forkserver, subprocess,
torch.multiprocessing). Each program is tiny: every process runs one ``F.linear`` whose row count
names the process, so the receipts say which processes captured, and each process's census record
says that capture was enabled in it.
"""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from capture_helpers import read_jsonl, write_script
from ikdata.capture import census
from ikdata.cli import app

# How the program (and every child that starts a fresh interpreter) gets torch, first thing.
ORDERS = {
    "transformers first": "from transformers import AutoConfig  # probes find_spec('torch') before any import\n"
                          "import torch\n",
    "diffusers first": "from diffusers import DDIMScheduler  # imports torch itself\nimport torch\n",
    "find_spec probe": "import importlib.util\nassert importlib.util.find_spec('torch') is not None\nimport torch\n",
    "importlib.import_module": "import importlib\ntorch = importlib.import_module('torch')\n",
    "a package imports it": "import torch_user\ntorch = torch_user.torch\n",
    "in a thread": "import threading, importlib\n"
                   "_t = threading.Thread(target=importlib.import_module, args=('torch',))\n_t.start()\n_t.join()\n"
                   "import torch\n",
    "lazy module": "import importlib.util, sys\n"
                   "_spec = importlib.util.find_spec('torch')\n"
                   "_loader = importlib.util.LazyLoader(_spec.loader)\n_spec.loader = _loader\n"
                   "torch = importlib.util.module_from_spec(_spec)\nsys.modules['torch'] = torch\n"
                   "_loader.exec_module(torch)\n",
}

METHODS = ("fork", "spawn", "forkserver", "subprocess", "torch.multiprocessing")

PROGRAM = """
import multiprocessing, os, subprocess, sys

def work(rows):
    import torch.nn.functional as F
    F.linear(torch.ones(rows, 8), torch.ones(4, 8))

def tm_work(index, rows):
    work(rows)

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        work(int(sys.argv[2]))
        sys.exit(0)
    work(1)
    for rows, method in enumerate(sys.argv[1].split(","), 2):
        if method == "subprocess":
            subprocess.run([sys.executable, __file__, "--child", str(rows)], check=True)
        elif method == "torch.multiprocessing":
            import torch.multiprocessing as tmp
            tmp.spawn(tm_work, args=(rows,), nprocs=1)
        else:
            process = multiprocessing.get_context(method).Process(target=work, args=(rows,))
            process.start()
            process.join()
            assert process.exitcode == 0, (method, process.exitcode)
"""


@pytest.mark.parametrize("order", list(ORDERS))
def test_capture_starts_in_every_process_whatever_imports_torch_first(tmp_path, monkeypatch, order):
    (tmp_path / "torch_user.py").write_text("import torch\n")
    script = write_script(tmp_path, "program.py", ORDERS[order] + PROGRAM)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # forking after OpenMP ran hangs libgomp children, capture or not
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    into = tmp_path / "ds"
    done = CliRunner().invoke(app, ["capture", "--into", str(into), "--", sys.executable, str(script),
                                    ",".join(METHODS)])
    text = done.output + (getattr(done, "stderr", "") or "")
    assert done.exit_code == 0, text
    receipts = read_jsonl(into / "receipts.jsonl")
    by_rows = {r["axes"]["M"]: r["process_id"] for r in receipts}
    # the parent (1 row) and one child per spawn method (2..6 rows), each recorded by its own process
    assert sorted(by_rows) == list(range(1, 2 + len(METHODS))), (order, text)
    assert len(set(by_rows.values())) == 1 + len(METHODS)
    records, problems = census.read(into)
    assert problems == []
    ran = [r for r in records if r["ops"]]
    assert len(ran) == 1 + len(METHODS)
    assert all(r["enabled"] and r["torch"] and r["reason"] is None for r in records), records
    assert {r["pid"] for r in ran} == set(by_rows.values())
    summary = census.summarise(records)
    assert summary.recorded_calls == 1 + len(METHODS)
    assert "census: ran " in text


def test_a_find_spec_probe_leaves_the_watcher_waiting_for_the_real_import(tmp_path):
    """The cause of the bug: the watcher answered the probe, removed itself and never saw ``import torch``."""
    import subprocess

    from capture_helpers import capture_env

    code = ("import importlib.util, sys, ikdata_boot\n"
            "seen = []\n"
            "ikdata_boot.watch(lambda: seen.append('json_mod' in sys.modules), 'json_mod')\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "assert importlib.util.find_spec('json_mod') is not None\n"
            "assert importlib.util.find_spec('json_mod') is not None\n"
            "print(seen, any(isinstance(f, ikdata_boot.ImportWatcher) for f in sys.meta_path))\n"
            "import json_mod\n"
            "print(seen, any(isinstance(f, ikdata_boot.ImportWatcher) for f in sys.meta_path))\n")
    (tmp_path / "json_mod.py").write_text("X = 1\n")
    done = subprocess.run([sys.executable, "-c", code], env=capture_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[] True", "[True] False"]


def test_a_process_whose_torch_import_the_watcher_never_saw_is_named_and_capture_exits_1(tmp_path):
    """A finder ahead of ikdata's finds torch: the process reports it at exit, and capture does not stay silent."""
    script = write_script(tmp_path, "program.py", """
import importlib.machinery, sys

class Ahead:
    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.PathFinder.find_spec(name, path, target) if name == "torch" else None

sys.meta_path.insert(0, Ahead())
import torch, torch.nn.functional as F
F.linear(torch.ones(2, 8), torch.ones(4, 8))
""")
    into = tmp_path / "ds"
    done = CliRunner().invoke(app, ["capture", "--into", str(into), "--", sys.executable, str(script)])
    text = " ".join((done.output + (getattr(done, "stderr", "") or "")).split())
    assert done.exit_code == 1, text
    assert "error: capture was not enabled in process" in text
    assert "torch was imported without the import watcher seeing it" in text
    assert "nothing was captured" in text
    assert not into.exists()  # nothing recorded: no empty dataset folder left behind
