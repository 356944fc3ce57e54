"""Round four: every cache write of remote state survives SIGKILL (issue 31, "random-kill tests for every
cache write").

Two writers fill the per-user caches: the pack-index cache (one atomic file per remote and index) and the
checksum cache (appended lines). A child process writes them in a loop and is SIGKILLed at random moments;
after each kill every entry is either whole and true or skipped. A push killed right after each cache
write (named checkpoints) leaves a remote the next push publishes whole.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

_TESTS = Path(__file__).resolve().parent.parent
for _folder in ("remote",):
    if str(_TESTS / _folder) not in sys.path:
        sys.path.insert(0, str(_TESTS / _folder))
_spec = importlib.util.spec_from_file_location("ikdata_remote_fixtures_kills", _TESTS / "remote" / "conftest.py")
_remote = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_remote)
s3_server, s3_env = _remote.s3_server, _remote.s3_env

RUNS = int(os.environ.get("IKDATA_KILL_RUNS", "3")) * 2
SEED = int(os.environ.get("IKDATA_KILL_SEED", str(random.SystemRandom().randrange(1 << 30))))

WRITER = textwrap.dedent("""
    import hashlib, sys
    from pathlib import Path
    from ikdata.remote.connect import open_backend
    from ikdata.remote.packs import ChecksumCache, IndexCache, hashes_of
    cache, remote = Path(sys.argv[1]), sys.argv[2]
    backend = open_backend(remote)
    indexes, checksums = IndexCache(cache), ChecksumCache(cache)
    print("ready", flush=True)
    i = 0
    while True:
        data = (b'{"pack": "%d"}' % i) * (1 + i % 50)
        name = hashlib.sha256(b"pack %d" % i).hexdigest()
        indexes.put(backend, f"blob/packs/{name}.index.json", data)
        path = cache / "payload"
        path.write_bytes(data)
        checksums.note(*hashes_of(path))
        checksums.flush()
        i += 1
""")


def _truth(i: int) -> tuple[str, bytes]:
    return hashlib.sha256(b"pack %d" % i).hexdigest(), (b'{"pack": "%d"}' % i) * (1 + i % 50)


def test_random_kills_of_cache_writers_leave_only_whole_true_entries(tmp_path):
    from ikdata.remote.connect import open_backend
    from ikdata.remote.packs import CACHE_FORMAT, ChecksumCache

    rng = random.Random(SEED)
    cache, remote = tmp_path / "cache", str(tmp_path / "remote")
    truths = dict(_truth(i) for i in range(20000))
    by_sha = {hashlib.sha256(data).hexdigest(): data for data in truths.values()}
    identity = open_backend(remote).identity
    for run in range(RUNS):
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(cache), remote], stdout=subprocess.PIPE,
                                 text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.4))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        entries = list((cache / "pack-indexes").glob("*/*.index.json"))
        assert entries or run == 0
        for entry in entries:
            record = orjson.loads(entry.read_bytes())  # atomic: never torn
            assert record["format"] == CACHE_FORMAT and record["remote"] == identity
            stem = entry.name[:-len(".index.json")]
            assert record["data"].encode() == truths[stem], entry
        loaded = ChecksumCache(cache).known
        for sha256, (md5, git) in loaded.items():  # a torn line is skipped, never read as another
            data = by_sha[sha256]
            assert md5 == hashlib.md5(data).hexdigest()
            assert git == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    print(f"kill cache writers: runs {RUNS}, seed {SEED}")


DRIVER = "import sys; from ikdata.remote.push import push; push(sys.argv[1], sys.argv[2])"


@pytest.mark.parametrize("where", ["index-cache-written", "checksum-cache-written"])
def test_a_push_killed_at_a_cache_write_is_completed_by_the_next(where, s3_env, tmp_path, make_ikdata_dataset,
                                                                 monkeypatch):
    import ikdata
    from ikdata.core import manifest
    from ikdata.ops.validate import validate
    from ikdata.remote.pull import clone
    from ikdata.remote.push import push

    small, large = make_ikdata_dataset(3, name="small"), make_ikdata_dataset(6, name="large")
    url = f"s3://ikdata-test/kill-{where}-{os.getpid()}-{random.randrange(1 << 30)}"
    cache = tmp_path / "cache"
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(cache))
    push(small, url)
    env = {**os.environ, "IKDATA_TEST_CRASH_AT": where}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(large), url], env=env, capture_output=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    result = push(large, url)
    assert result.published and result.cache_ignored == ()
    clone(url, tmp_path / "copy")
    assert manifest.current_id(tmp_path / "copy") == manifest.current_id(large)
    assert validate(ikdata.open(tmp_path / "copy"), deep=True).ok
