"""Round five, finding 10: every file ikdata reads has a size cap checked before reading.

``ikdata.json`` padded with 1 GiB cost validate and lineage 2.1 GB, and lineage opened ``<source>/ikdata.json``
for any local folder a parent names (a 3 GB file: 6.3 GB). Now the manifest is refused unread past its cap, with
a located error, and a parent's folder holding such a manifest is a leaf of the graph. Checked by the peak memory
(``ru_maxrss``) of the real command in a subprocess against the same command on a plain dataset: never a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ikdata.core.manifest import MANIFEST, dataset_id, read


def _run(tmp_path, *args: str) -> tuple[int, int, str]:
    """(exit code, peak resident MB, output) of ``python -m ikdata ARGS``, measured by a parent of its own."""
    measure = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
               " print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024);"
               " print(done.stdout + done.stderr)")
    env = dict(os.environ, HOME=str(tmp_path / "home"), COLUMNS="300")
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "ikdata", *args],
                          capture_output=True, text=True, env=env, check=True, cwd=tmp_path)
    head, _, output = done.stdout.partition("\n")
    code, peak = map(int, head.split())
    return code, peak, " ".join(output.split())


def _pad(path, size: int) -> None:
    """Pad a manifest past ``size`` bytes with spaces after its JSON (a sparse hole, then spaces at the end)."""
    with open(path, "r+b") as stream:
        stream.seek(0, os.SEEK_END)
        stream.write(b" " * 4096)
        stream.truncate(size)
        stream.seek(size)
        stream.write(b" " * 4096)


def test_a_padded_manifest_is_refused_unread_by_validate(make_ikdata_dataset, tmp_path):
    plain, padded = make_ikdata_dataset(1, name="plain"), make_ikdata_dataset(1, name="padded")
    _pad(padded / MANIFEST, 1 << 30)
    _, base, _ = _run(tmp_path, "validate", str(plain))
    code, peak, said = _run(tmp_path, "validate", str(padded))
    assert code == 1
    assert "ikdata.json" in said and "more than the" in said and "refused unread" in said
    assert "Traceback" not in said
    assert peak - base < 64, (base, peak)  # read whole, the padding alone is 1,024 MB


def test_lineage_never_reads_a_huge_manifest_in_a_folder_a_parent_names(make_ikdata_dataset, tmp_path):
    plain, child = make_ikdata_dataset(1, name="plain"), make_ikdata_dataset(1, name="child")
    evil = make_ikdata_dataset(1, name="evil")
    _pad(evil / MANIFEST, 3 << 30)
    manifest = read(child)
    manifest["parents"] = [{"id": "ab" * 32, "at": 1.0, "how": "import", "source": str(evil)}]
    (child / MANIFEST).write_text(json.dumps(manifest))
    _, base, _ = _run(tmp_path, "lineage", str(plain))
    code, peak, said = _run(tmp_path, "lineage", str(child))
    assert code == 0, said
    assert dataset_id(manifest)[:12] in said or "child" in said
    assert "Traceback" not in said
    assert peak - base < 64, (base, peak)
