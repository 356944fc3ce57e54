"""Shared, generic fixtures: a small definition, an ikdata dataset and a seed-layout dataset; and the isolation
every test gets (its own HOME and caches) so the suite never touches the developer's files and runs in parallel.

Every fixture writes under pytest's ``tmp_path``. Other test modules may use them;
keep them generic (no assertions about any one feature here). Plain helpers live in
``foundation_helpers.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from foundation_helpers import (GEMM_NAME, gemm_definition_record, tree_digest, write_definition,  # noqa: F401
                                write_seed_dataset)

# What decides where ikdata (and the libraries it drives) keep per-user files: ikdata/core/cache_dir.py reads
# IKDATA_CACHE_DIR, then XDG_CACHE_HOME, then HOME. Each is pointed into a folder of the test's own.
USER_DIRS = ("HOME", "XDG_CACHE_HOME", "IKDATA_CACHE_DIR")


def _point_user_dirs(folder: Path, setenv: Callable[[str, str], None]) -> None:
    """HOME, XDG_CACHE_HOME and IKDATA_CACHE_DIR under ``folder`` (created, empty)."""
    places = {"HOME": folder / "home", "XDG_CACHE_HOME": folder / "home" / ".cache",
              "IKDATA_CACHE_DIR": folder / "ikdata-cache"}
    for name in USER_DIRS:
        places[name].mkdir(parents=True, exist_ok=True)
        setenv(name, str(places[name]))


@pytest.fixture(autouse=True, scope="session")
def _session_user_dirs(tmp_path_factory):
    """Session- and module-scoped fixtures (servers, engines, clusters) start before any test's own folders
    exist: they get this pytest process's (one per xdist worker), never the developer's."""
    patch = pytest.MonkeyPatch()
    _point_user_dirs(tmp_path_factory.mktemp("session-user"), patch.setenv)
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _own_user_dirs(tmp_path_factory, monkeypatch):
    """Each test its own empty HOME, XDG cache and ikdata cache (replay's reuse cache, remote caches, the index
    key), inherited by every subprocess it starts. Kept beside ``tmp_path``, not in it, so a test that lists its
    ``tmp_path`` sees only what it wrote."""
    _point_user_dirs(tmp_path_factory.mktemp("user"), monkeypatch.setenv)


@pytest.fixture
def gemm_record() -> dict:
    return gemm_definition_record()


@pytest.fixture
def gemm_definition():
    """The small float32 GEMM as a USER-origin Definition."""
    from ikdata.core.definitions import USER, Definition

    return Definition.from_dict(gemm_definition_record(), origin=USER, source="test")


@pytest.fixture
def make_ikdata_dataset(tmp_path: Path) -> Callable[..., Path]:
    """Factory: an ikdata dataset written by DatasetWriter with ``rows`` GEMM workloads (numpy tensors).

    Rows share the same ``W`` so the store deduplicates it. The manifest is
    committed unless ``commit=False``.
    """
    counter = [0]

    def make(rows: int = 3, *, name: str | None = None, commit: bool = True, seed: int = 0) -> Path:
        from ikdata.core.definitions import USER, Definition
        from ikdata.core.writer import DatasetWriter

        counter[0] += 1
        root = tmp_path / (name or f"ikdata-ds{counter[0]}")
        definition = Definition.from_dict(gemm_definition_record(), origin=USER, source="test")
        writer = DatasetWriter(root)
        rng = np.random.default_rng(seed)
        w = rng.standard_normal((4, 8)).astype(np.float32)
        for i in range(rows):
            a = rng.standard_normal((i + 1, 8)).astype(np.float32)
            writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T},
                       {"engine": "test", "model": "tiny", "request_id": f"r{i}", "step": i})
        if commit:
            writer.commit()
        return root

    return make


@pytest.fixture
def ikdata_dataset(make_ikdata_dataset) -> Path:
    """An ikdata dataset with 3 GEMM workloads, receipts and a manifest."""
    return make_ikdata_dataset(3)


@pytest.fixture
def seed_dataset(tmp_path: Path) -> tuple[Path, Path]:
    """(dataset root, definitions folder) of a seed-layout dataset with 3 bf16 GEMM workloads."""
    root = tmp_path / "seed-capture"
    definitions = tmp_path / "seed-definitions"
    write_seed_dataset(root, definitions)
    return root, definitions


# -- running in parallel (pytest-xdist, ``make test``: -n auto --dist loadgroup) ----------------------------------

# Session fixtures that start an engine or capture a pipeline (minutes): every test that uses one runs in the same
# worker as the others of its folder that do, so each engine starts once per run, not once per worker.
ENGINE_FIXTURES = frozenset({"vllm_python", "tiny_model", "honest_run", "faulty_run", "served", "reference_capture"})
# Folders whose every test shares one engine or cluster: a local Ray cluster is one per machine at a time.
ENGINE_FOLDERS = {"distributed": "ray"}
# Groups that start a real engine or cluster: marked slow (still run by ``make test`` and ``.ci/run``;
# ``-m 'not slow'`` leaves them out of a quick loop).
SLOW_GROUPS = frozenset({"vllm", "ray"})
START_FIRST = ("vllm", "ray", "diffusion_judge")  # the longest groups, longest first


def _work_group(item: pytest.Item) -> str | None:
    """The xdist group ``item`` must share a worker with, or None to run anywhere: the engine it uses (a session
    fixture, else started once per worker) or its folder's cluster, else its file when it uses a module- or
    class-scoped fixture (built once per module in each worker that runs one of its tests)."""
    folder = Path(str(item.path)).parent.name
    if folder in ENGINE_FOLDERS:
        return ENGINE_FOLDERS[folder]
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is None:
        return None
    if ENGINE_FIXTURES & set(fixtures.names_closure):
        return folder
    for name in fixtures.names_closure:
        definitions = fixtures.name2fixturedefs.get(name) or ()
        if definitions and definitions[-1].scope in ("module", "class", "package"):
            return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests that share an expensive fixture (honoured by ``--dist loadgroup``), mark the engine groups
    slow, and put the longest groups first."""
    ranked = []
    for item in items:
        group = _work_group(item)
        if group in SLOW_GROUPS:
            item.add_marker(pytest.mark.slow)
        if group is not None and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
        ranked.append((START_FIRST.index(group) if group in START_FIRST else len(START_FIRST), item))
    # The longest groups first (make test passes --no-loadscope-reorder), so no worker starts one at the end
    # while the other has nothing left; the rest keep their order (a module's tests stay together).
    items[:] = [item for _, item in sorted(ranked, key=lambda pair: pair[0])]


def _apply_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker under ``--dist loadgroup``: end each grouped test's node id with ``@GROUP``, the way
    the scheduler reads groups. xdist (3.8) writes ``item._nodeid``, which pytest >= 9.2 no longer reads (it keeps
    the id in ``item._id``), so there every test would run anywhere, engines started once per worker."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        marks = [m.args[0] if m.args else m.kwargs.get("name", "default") for m in item.iter_markers("xdist_group")]
        if not marks or item.nodeid.rfind("@") > item.nodeid.rfind("]"):
            continue  # no group, or xdist applied it (as its scheduler reads it)
        if hasattr(item, "_id"):
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(sorted(set(map(str, marks))))}")


class _GroupsAfterXdist:
    """Runs after xdist's own pytest_collection_modifyitems (trylast), to check its work (:func:`_apply_groups`)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        _apply_groups(config, items)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupsAfterXdist(), "ikdata-xdist-groups")
