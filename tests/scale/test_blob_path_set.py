"""gc's set of referenced blobs (ikdata.core.blob_set): the same answers as a set of normalised paths,
in 32 bytes per content-addressed blob, so gc's memory stays bounded at millions of blobs."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

from ikdata.core.blob_set import BlobPathSet
from ikdata.core.store import blob_path


def _digest(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def test_answers_as_a_set_of_normalised_paths_would():
    stored = [blob_path(_digest(i)) for i in range(50)]
    zero_tail = blob_path("ab" + "00" * 31)  # numpy's S32 drops trailing NULs on read: must still match
    odd = ["blob/seed/x.safetensors", "blob/sha256/AB/" + "AB" * 32 + ".safetensors"]  # not digest-derived
    roundabout = "blob/./sha256/" + stored[3][len("blob/sha256/"):]  # a row naming a blob by a detour
    paths = stored * 3 + [zero_tail, roundabout] + odd
    s = BlobPathSet.build(paths)

    expected = {p if p != roundabout else stored[3] for p in paths}
    assert len(s) == len(expected)
    assert set(s) == expected
    for p in stored + [zero_tail, roundabout] + odd:
        assert p in s
    absent = [blob_path(_digest(1000)), blob_path("ab" + "00" * 30 + "01"), "blob/seed/y.safetensors", "",
              blob_path(_digest(1))[:-1], 42]
    for p in absent:
        assert p not in s
    assert s.contains_many(stored[:3] + absent[:3] + odd) == [True] * 3 + [False] * 3 + [True] * 2
    assert BlobPathSet.build([]).contains_many(stored[:2]) == [False, False]


def test_memory_is_32_bytes_per_distinct_digest_however_often_it_is_used():
    code = textwrap.dedent("""
        import hashlib, tracemalloc
        from ikdata.core.blob_set import BlobPathSet
        from ikdata.core.store import blob_path
        n = 200_000
        def paths():
            for use in range(3):  # every blob named three times, as rows and receipts do
                for i in range(n):
                    yield blob_path(hashlib.sha256(str(i).encode()).hexdigest())
        tracemalloc.start()
        s = BlobPathSet.build(paths())
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        strings = set(paths())  # what gc held before: the path strings themselves
        print(len(s), s.nbytes, kept, peak, len(strings))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    count, nbytes, kept, peak, distinct = map(int, out)
    assert count == distinct == 200_000 and nbytes == 32 * count
    assert kept < 36 * count + 2**20, kept  # the digests and a few objects; a set of the strings is ~165 B each
    assert peak < 3 * nbytes + 8 * 2**20, peak  # one merge holds the old and new arrays and a chunk
