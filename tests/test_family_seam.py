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
    from ikdata.core import features

    family = families.Family("test", finish="ikdata_test_family:finish", regroup="ikdata_test_family:regroup")
    from ikdata.core.layout import init_dataset

    init_dataset(tmp_path / "ds")
    with features.registered(features.Feature("test", family=family)):
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


# --- the house drawn from the code: layers, the seam's strings as imports, names decided only by declarations ---

def _feature_packages() -> dict[str, int]:
    """The feature layer drawn from the registry: each registered feature's package (the package of the module
    that declares it, and where its hooks point)."""
    import sys

    from ikdata.core import features

    declared, found = features.features(), {}  # read first: it imports the declaring modules
    for name, module in list(sys.modules.items()):
        parts = name.split(".")
        if parts[0] == "ikdata" and len(parts) > 2 and getattr(module, "FEATURE", None) in declared:
            found[parts[1]] = 3
    for feature in features.features():
        specs = [getattr(feature.family, f) for f in features.FAMILY_CALLS] if feature.family else []
        specs += [getattr(s, f) for s in feature.sources for f in features.SOURCE_CALLS]
        for spec in filter(None, specs):
            parts = spec.partition(":")[0].split(".")
            if parts[0] == "ikdata" and len(parts) > 1:
                found[parts[1]] = 3
    return found


LAYERS = {"_version": 0, "core": 0, "judging": 1, "capture": 2, "replay": 2, "importing": 2, "remote": 2, "ops": 2,
          **_feature_packages(), "cli": 4, "__main__": 4, "_features": 5}
LAYER_NAMES = ("core", "judging", "engines", "features", "cli", "top")
MODULES = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
           for p in PACKAGE.rglob("*.py")}


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] not in LAYERS:
        raise AssertionError(f"{module}: its package is no layer and no registered feature's (a feature's hooks "
                             "point into its package)")
    return 5 if len(parts) == 1 else LAYERS[parts[1]]


def _known(name: str) -> str | None:
    """The ikdata module a dotted name (or ``"module:function"`` seam string) points into, or None."""
    name = name.partition(":")[0]
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges() -> list[tuple[str, str, int, str]]:
    """(from, to, line, how) for every import of an ikdata module, module-level or inside a function, and every
    string constant that names one (the seam's ``"module:function"`` declarations: resolved at run time, so an
    import all the same)."""
    found = []
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names, how = [], "import"
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                names = [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("ikdata."):
                if all(part.isidentifier() for part in node.value.replace(":", ".").split(".")):
                    names, how = [node.value], "seam string"
            for name in names:
                target = _known(name)
                if target and target != module and not module.startswith(target + "."):
                    found.append((module, target, node.lineno, how))
    return found


def test_no_module_imports_or_names_a_layer_above_its_own():
    """core <- judging <- engines (capture, replay, importing, remote, ops) <- features <- cli <- the top package."""
    upward = [f"{MODULES[a].relative_to(PACKAGE.parent)}:{line} {LAYER_NAMES[_layer(a)]} -> {b} "
              f"({LAYER_NAMES[_layer(b)]}, {how})" for a, b, line, how in _edges() if _layer(b) > _layer(a)]
    assert upward == []


def test_no_import_cycle_with_the_seam_strings_counted():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b, _, _ in _edges():
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def strong(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            strong(v)
    assert cycles == []


def _declared_names() -> set[str]:
    from ikdata.core import features

    names = {f.name for f in features.features()} | {f.name for f in features.families()}
    names |= {s.name for s in features.sources()} | {s.module for s in features.sources()}
    names |= {k.top.split("/")[0] for k in features.kinds()}
    return names


@pytest.mark.parametrize("layer", ["core", "judging", "engines", "cli"])
def test_no_file_outside_the_feature_packages_decides_a_feature_by_its_name(layer):
    """A family, a feature's record kind or a capture source is decided by its declaration, never by a string
    naming it: a path that names one forgets the next."""
    names = _declared_names()
    allowed = {("ikdata/core/dataset.py", "flashinfer")}  # the flashinfer-bench Trace layout: a format core reads
    found = []
    for module, path in MODULES.items():
        if LAYER_NAMES[_layer(module)] != layer:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in names
                    and (str(path.relative_to(PACKAGE.parent)), node.value) not in allowed):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.value!r}")
    assert found == []


def test_the_boot_hook_is_reached_only_by_the_interpreter_and_capture():
    """ikdata_boot runs from the .pth line; only the capture engine talks to it and to capture.boot, and
    features go through capture's public interface."""
    reaching = sorted(f"{MODULES[a].relative_to(PACKAGE.parent)}:{line}" for a, b, line, _ in _edges()
                      if b == "ikdata.capture.boot" and not a.startswith("ikdata.capture"))
    for module, path in MODULES.items():
        if not module.startswith("ikdata.capture"):
            reaching += [f"{path.relative_to(PACKAGE.parent)}:{n.lineno}" for n in ast.walk(ast.parse(path.read_text()))
                         if isinstance(n, ast.Import) and any(a.name == "ikdata_boot" for a in n.names)]
    assert reaching == []
