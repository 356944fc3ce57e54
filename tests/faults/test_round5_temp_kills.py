"""Round five, finding 7: a killed writer's temporary files never stay in the dataset.

A killed index build left ``.tmp-index-*.sqlite`` for good (13 of 20 SIGKILLs, 146 MB) and no command removed it
within the hour. Now every writer's temp file follows one rule (``.tmp-[KIND-]PID.HOST-``: its writer can be
asked whether it still lives): ``ikdata repair`` and the writer's next run remove a dead writer's at once, and
leave a live one's. Children are SIGKILLed at random moments (``IKDATA_KILL_RUNS``, ``IKDATA_KILL_SEED``); after
them validate names what is left, repair removes it, and the dataset is clean with no temp file.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from typer.testing import CliRunner

from ikdata.cli import app
from ikdata.core.index import INDEX_FILE, open_index

RUNS = int(os.environ.get("IKDATA_KILL_RUNS", "3")) * 2
SEED = int(os.environ.get("IKDATA_KILL_SEED", str(random.SystemRandom().randrange(1 << 30))))
runner = CliRunner()

INDEX_BUILDER = textwrap.dedent("""
    import sys
    from ikdata.core.index import open_index
    print("ready", flush=True)
    while True:
        open_index(sys.argv[1], rebuild=True)[0].close()
""")

CENSUS_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ikdata.capture import census
    root = Path(sys.argv[1])
    big = [census.record("run-big")]  # one process's record, many times: a run's census as the runner keeps it
    big[0]["ops"] = [{"op": f"aten::op{i}", "calls": 2, "recorded": [], "skipped": [
        {"reason": "no definition", "definition": None, "calls": 2}]} for i in range(400)]
    print("ready", flush=True)
    while True:
        census.reset()
        census.enabled()
        census.seen("aten::mm", 3)
        census.write(None, str(root))  # by hand (IKDATA_CAPTURE set): appended to census/<host>-<pid>.jsonl
        census.keep(root, "run-big", big * 300)  # as ikdata capture keeps a run's census: written whole, renamed
""")


def _temps(root) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob(".tmp-*"))


def _kill_at_random(rng, script: str, root) -> None:
    for _ in range(RUNS):
        child = subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 1.0))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def _said(result) -> str:
    return " ".join((result.output + (result.stderr if result.stderr_bytes is not None else "")).split())


def test_random_kills_of_index_builds_leave_no_temp_file_after_the_next_build_or_repair(make_ikdata_dataset,
                                                                                         tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    rng = random.Random(SEED)
    root = make_ikdata_dataset(60)
    _kill_at_random(rng, INDEX_BUILDER, root)
    left = _temps(root)
    repaired = runner.invoke(app, ["repair", str(root)])
    assert repaired.exit_code == 0, _said(repaired)
    assert _temps(root) == []
    checked = runner.invoke(app, ["validate", str(root)])
    assert checked.exit_code == 0, _said(checked)
    # and a killed build's leftovers go with the next build, never an hour later
    _kill_at_random(rng, INDEX_BUILDER, root)
    open_index(root, rebuild=True)[0].close()
    assert _temps(root) == [] and (root / INDEX_FILE).is_file()
    print(f"kill index builds: runs {RUNS} x2, seed {SEED}, temp files left by the first kills {len(left)}")


def test_random_kills_of_the_census_writer_leave_a_clean_dataset_after_repair(make_ikdata_dataset, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    rng = random.Random(SEED + 1)
    root = make_ikdata_dataset(2)
    _kill_at_random(rng, CENSUS_WRITER, root)
    left = _temps(root)
    checked = runner.invoke(app, ["validate", str(root)])
    if left:  # a killed writer's temp file is named, with what to do
        assert checked.exit_code == 1 and "a temporary file of a writer that was killed" in _said(checked)
    repaired = runner.invoke(app, ["repair", str(root)])
    assert repaired.exit_code == 0, _said(repaired)
    assert _temps(root) == []
    checked = runner.invoke(app, ["validate", str(root)])
    assert checked.exit_code == 0, _said(checked)
    print(f"kill census writers: runs {RUNS}, seed {SEED + 1}, temp files left {len(left)}")


def test_a_live_writer_s_temp_file_is_never_swept(make_ikdata_dataset, tmp_path):
    from ikdata.core.paths import sweep_temps, temp_prefix

    root = make_ikdata_dataset(1)
    mine = root / "census" / f"{temp_prefix()}abc.jsonl"  # this process lives: its temp file stays
    mine.parent.mkdir()
    mine.write_text("{}\n")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs = root / (temp_prefix().replace(f"-{os.getpid()}.", f"-{sleeper.pid}.") + "x")
        theirs.write_text("")
        assert sweep_temps(root, recursive=True) == []
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sweep_temps(root, recursive=True) == [theirs.name]  # its writer is gone now
    assert mine.exists()
