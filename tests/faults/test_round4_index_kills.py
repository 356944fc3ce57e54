"""Round four: the index (a cache of the dataset's record files) survives SIGKILL at any moment of its build.

A child rebuilds the index in a loop and is SIGKILLed at random moments; after each kill the next open
answers every lookup from the files (the index it finds is whole and its own, or it is rebuilt), and the
temp files a killed build left are swept by a later build once they are stale.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from ikdata.core.index import INDEX_FILE, open_index

RUNS = int(os.environ.get("IKDATA_KILL_RUNS", "3")) * 2
SEED = int(os.environ.get("IKDATA_KILL_SEED", str(random.SystemRandom().randrange(1 << 30))))

BUILDER = textwrap.dedent("""
    import sys
    from ikdata.core.index import open_index
    print("ready", flush=True)
    while True:
        open_index(sys.argv[1], rebuild=True)[0].close()
""")


def _rows(root) -> dict[str, dict]:
    found = {}
    for path in (root / "workloads").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                found[row["workload"]["uuid"]] = row
    return found


def test_random_kills_of_index_builds_never_give_a_wrong_answer(make_ikdata_dataset):
    rng = random.Random(SEED)
    root = make_ikdata_dataset(60)
    rows = _rows(root)
    for _ in range(RUNS):
        child = subprocess.Popen([sys.executable, "-c", BUILDER, str(root)], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 1.5))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        index, _ = open_index(root)
        try:
            for uuid, row in rows.items():
                [entry] = index.find(uuid)
                assert index.read(entry)["workload"]["uuid"] == uuid
        finally:
            index.close()
    left = [p for p in root.iterdir() if p.name.startswith(".tmp-index-")]
    old = time.time() - 7200
    for path in left:
        os.utime(path, (old, old))  # as a later day's build finds them
    open_index(root, rebuild=True)[0].close()
    assert [p.name for p in root.iterdir() if p.name.startswith(".tmp-index-")] == []
    assert (root / INDEX_FILE).is_file()
    print(f"kill index builds: runs {RUNS}, seed {SEED}, temp files swept {len(left)}")
