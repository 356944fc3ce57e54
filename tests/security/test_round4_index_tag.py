"""Round four, finding 8 (second half): index files are private to their user, and each index carries a tag of
its own, so an index of one dataset (copied, or planted from a dataset the user shared) is never taken as the
index of another.

The campaign found the owner tag the same constant in every index of a user (any one of them, read from a
shared copy, passed for all), and index files world-readable.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat

from ikdata.core.index import INDEX_FILE, open_index


def _meta(path) -> dict:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(connection.execute("SELECT key, value FROM meta"))
    finally:
        connection.close()


def test_index_files_are_private_to_their_user(make_ikdata_dataset):
    root = make_ikdata_dataset(3)
    index, _ = open_index(root)
    index.close()
    for path in root.glob(INDEX_FILE + "*"):
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        assert mode & 0o077 == 0, f"{path.name} is mode {oct(mode)}"


def test_each_index_has_its_own_tag(make_ikdata_dataset):
    a, b = make_ikdata_dataset(3), make_ikdata_dataset(3)
    for root in (a, b):
        open_index(root)[0].close()
    assert _meta(a / INDEX_FILE)["owner"] != _meta(b / INDEX_FILE)["owner"]


def test_an_index_copied_from_another_dataset_of_the_user_is_rebuilt_not_believed(make_ikdata_dataset):
    a, b = make_ikdata_dataset(3), make_ikdata_dataset(4, seed=5)
    open_index(a)[0].close()
    open_index(b)[0].close()
    planted = b / INDEX_FILE
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(str(planted) + suffix):
            os.unlink(str(planted) + suffix)
    shutil.copyfile(a / INDEX_FILE, planted)  # the user's own valid index, of another dataset
    os.chmod(planted, 0o600)
    before = os.lstat(planted).st_ino
    index, _ = open_index(b)
    index.close()
    assert os.lstat(planted).st_ino != before, "the copied index was opened as this dataset's"
    assert _meta(planted)["owner"] != _meta(a / INDEX_FILE)["owner"]


def test_an_index_is_reused_while_it_stays_in_place(make_ikdata_dataset):
    root = make_ikdata_dataset(3)
    open_index(root)[0].close()
    inode = os.lstat(root / INDEX_FILE).st_ino
    open_index(root)[0].close()
    assert os.lstat(root / INDEX_FILE).st_ino == inode  # ours: opened, not rebuilt
