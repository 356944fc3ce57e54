"""One per-user cache folder: ``$IKDATA_CACHE_DIR``, else ``$XDG_CACHE_HOME/ikdata``, else ``~/.cache/ikdata``.

The index key, the remote pack-index and checksum caches and replay's reuse cache all follow the one rule
(core/cache_dir.py), so one setting moves every cache and none is left behind in the home folder."""

from __future__ import annotations

from pathlib import Path

import pytest


def _folders() -> dict[str, Path]:
    """The folder each cache would use now."""
    from ikdata.core.cache_dir import user_cache_dir
    from ikdata.core.index import key_path
    from ikdata.remote.packs import ChecksumCache, IndexCache
    from ikdata.replay.reuse import default_cache_path

    return {"rule": user_cache_dir(), "index key": key_path().parent, "pack indexes": IndexCache().root.parent,
            "checksums": ChecksumCache().path.parent, "replay reuse": default_cache_path().parent}


@pytest.mark.parametrize("setting", ["IKDATA_CACHE_DIR", "XDG_CACHE_HOME", "HOME"])
def test_every_cache_follows_the_one_rule(monkeypatch, tmp_path, setting):
    for name in ("IKDATA_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = {"IKDATA_CACHE_DIR": tmp_path / "mine", "XDG_CACHE_HOME": tmp_path / "xdg" / "ikdata",
                "HOME": tmp_path / "home" / ".cache" / "ikdata"}[setting]
    if setting != "HOME":
        monkeypatch.setenv(setting, str(expected if setting == "IKDATA_CACHE_DIR" else expected.parent))
    assert _folders() == dict.fromkeys(_folders(), expected)


def test_ikdata_cache_dir_wins_over_xdg_and_an_empty_one_is_unset(monkeypatch, tmp_path):
    from ikdata.core.cache_dir import user_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("IKDATA_CACHE_DIR", str(tmp_path / "mine"))
    assert user_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("IKDATA_CACHE_DIR", "")
    assert user_cache_dir() == tmp_path / "xdg" / "ikdata"
