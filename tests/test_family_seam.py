"""Guards of the judge-family seam (ikdata/judging/families.py) and the record-kind registry.

The replay engine names no family: its files import no feature module, so a family is added by
declaring it, not by editing the loop. Every record kind the registry declares is one the manifest
tracks and a remote may list, and nothing else is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ikdata"
ENGINE_FILES = ["replay/runner.py", "replay/report.py", "replay/distributed.py", "replay/summary.py",
                "replay/reuse.py", "replay/blobs.py"]
FEATURE_PACKAGES = ("ikdata.diffusion", "ikdata.sampling")  # a family end to end, each a package of its own


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


@pytest.mark.parametrize("relative", ENGINE_FILES)
def test_engine_files_import_no_feature_module(relative):
    named = {m for m in _imports(PACKAGE / relative) if m == "ikdata" or m.startswith(FEATURE_PACKAGES)}
    assert not {m for m in named if m.startswith(FEATURE_PACKAGES)}


def test_every_family_hook_resolves_and_the_judging_module_loads_no_torch():
    import subprocess
    import sys

    code = ("import sys; import ikdata.judging.families as f; "
            "assert 'torch' not in sys.modules, 'judging loads torch'; "
            "[fam.hook(h) for fam in f.FAMILIES for h in ('finish','regroup','owns','settle','execute','blobs')]")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_family_added_by_declaration_is_finished_and_regrouped_on_every_path(monkeypatch, tmp_path):
    """An empty test family: declaring it is enough for replay (local, shard) and combine to call it."""
    import sys
    import types

    import ikdata
    from ikdata.judging import families
    from ikdata.replay.report import combine
    from ikdata.replay.runner import replay

    calls: list[str] = []
    module = types.ModuleType("ikdata_test_family")
    module.finish = lambda run, shard=None, settings=None: calls.append(f"finish {shard}")
    module.regroup = lambda report: calls.append("regroup")
    monkeypatch.setitem(sys.modules, "ikdata_test_family", module)
    family = families.Family("test", finish="ikdata_test_family:finish", regroup="ikdata_test_family:regroup")
    monkeypatch.setattr(families, "FAMILIES", (family, *families.FAMILIES))
    from ikdata.core.layout import init_dataset

    init_dataset(tmp_path / "ds")
    reports = [replay(ikdata.open(tmp_path / "ds"), shard=f"{i}/2", reuse=False).report for i in (1, 2)]
    combine(reports)
    assert calls == ["finish 1/2", "finish 2/2", "regroup"]


def test_the_registry_is_what_the_manifest_tracks_and_a_remote_may_list():
    from ikdata.core import manifest
    from ikdata.core.paths import record_path_refusal
    from ikdata.core.record_kinds import KINDS, RECORD_FILES, RECORD_TOPS

    assert set(manifest.TRACKED_TOP) == set(RECORD_TOPS) and set(manifest.TRACKED_FILES) == set(RECORD_FILES)
    for kind in KINDS:
        example = kind.top if not kind.folder else f"{kind.top}/x{kind.suffix}"
        assert record_path_refusal(example) is None, kind
    for outside in ("blob/sha256/ab/x.json", "notes.json", "trajectories/x.txt", ".ikdata-index.sqlite"):
        assert record_path_refusal(outside) is not None


def test_the_exception_tree_drawn_in_errors_is_every_exception_the_library_defines():
    from ikdata.core import errors

    drawn = set()
    for line in errors.__doc__.splitlines():
        word = line.strip().split(" ")[0]
        if word.isidentifier() and word[0].isupper():
            drawn.add(word)
    defined = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in drawn)
                    for b in node.bases):
                defined.add(node.name)
    assert defined - drawn == set(), "exception classes missing from the tree in core/errors.py"
