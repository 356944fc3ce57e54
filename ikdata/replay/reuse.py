"""Reuse: a case identical to one already judged takes that result instead of running again.

Two cases are identical when their reuse key is (:func:`case_reuse_key`): sha256 over everything that
decides what the reference computes and how its result is compared:

- the definition record itself, every field in its written order (so the reference source, its ``entry``,
  the inputs' and outputs' names in order, their dtypes and shapes, the axes, tolerance and judge), less
  only the fields listed in :data:`NOT_COMPUTATION` with why each cannot change a verdict; a field a later
  schema adds is in the key until someone argues it out (``tests/security/test_round5_reuse_key.py``);
- the rule each output is judged by, as the judges select it (whatever settings a rule grows), and the
  default tolerance table;
- the input digests and scalar values, the row's axes, the expected-output digests;
- the device kind (``cpu``, ``cuda``), the torch and ikdata versions, and a digest of the judging code:
  the source files of the family that owns the definition and of the replay loop and judges
  (:func:`judging_code_digest`), so a changed judge is never answered by the old one's verdict.

Where results come from: cases judged earlier in the same run, and a per-user
cache file, ``$IKDATA_CACHE_DIR/replay-reuse.jsonl`` (default
``$XDG_CACHE_HOME/ikdata`` or ``~/.cache/ikdata``: :mod:`ikdata.core.cache_dir`). The cache is written only by
ikdata replay on this machine (not with ``--no-reuse``), never read from a dataset: a report shipped with
a dataset from elsewhere could claim passes that never ran, so it is not a
source of reuse. Errors and skips are never reused; only judged cases
("passed" or "failed") are.

A reuse key names blobs by digest, so reuse must never vouch for bytes it did not
check: each blob's path goes through the path rule (:mod:`ikdata.core.paths`) first,
then either matches the evidence recorded when replay last verified that very file
(device, inode, size, ``mtime_ns`` and ``ctime_ns``, taken before it was hashed; ctime
cannot be set back by a user) or is rehashed now (:meth:`ReuseCache.confirm`). A blob kept in
a pack (:mod:`ikdata.core.packs`) is vouched for the same way by its slice: the evidence names the
pack file (device, inode, size, times) and the tensor's offset in it, else the slice is rehashed
now (one read). The evidence lives beside the cache in ``replay-verified.jsonl``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ikdata.core import jsonl
from ikdata.core.cache_dir import user_cache_dir
from ikdata.core.digest import record_digest
from ikdata.core.store import rehash_file
from ikdata.core.status import JUDGED
from ikdata.core.cases import Case

CACHE_FILE = "replay-reuse.jsonl"
EVIDENCE_FILE = "replay-verified.jsonl"
FLUSH_EVERY = 64  # verdicts per cache append; a killed run loses at most these (it is only a cache)
# What a reused case takes from its own workload and run, never from the earlier case; the rest is the verdict
# (status, reason, metrics, tolerance, digests, what judged it, and a family's record such as a trajectory's).
OWN_FIELDS = ("definition", "uuid", "axes", "seconds", "reused")


def _verdict(case: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in case.items() if k not in OWN_FIELDS}


def default_cache_path() -> Path:
    """``replay-reuse.jsonl`` in the per-user cache folder (:func:`ikdata.core.cache_dir.user_cache_dir`)."""
    return user_cache_dir() / CACHE_FILE


# Fields of a definition record left out of the reuse key, each with why it cannot change what the reference
# computes or how its result is judged. Every other field, present or added later, is in the key.
NOT_COMPUTATION: Mapping[str, str] = {
    "description": "prose for people; nothing reads it to run or judge",
    "capture": "binds a dispatcher op when capturing; replay never reads it (the captured blobs are keyed)",
    "init": "FlashInfer's input generator source, never run by ikdata: the inputs are the captured blobs, "
            "whose digests are keyed",
}


def ordered(value: Any) -> Any:
    """``value`` with every mapping as a list of ``[key, value]`` pairs in its order: canonical JSON sorts keys,
    and the order of a definition's inputs and outputs decides which tensor a reference gets and returns."""
    if isinstance(value, Mapping):
        return [[str(k), ordered(v)] for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [ordered(v) for v in value]
    return value


def definition_identity(record: Mapping[str, Any]) -> list[Any]:
    """What of a definition record the reuse key covers: every field but :data:`NOT_COMPUTATION`, in order."""
    return ordered({k: v for k, v in record.items() if k not in NOT_COMPUTATION})


_DEFINITION_DIGESTS: dict[int, tuple[Mapping[str, Any], str]] = {}  # id(record) -> (the record, its digest)


def definition_digest(record: Mapping[str, Any]) -> str:
    """sha256 of :func:`definition_identity`, computed once per record object (a definition's record is shared
    by all its rows and never changed: a 2 MiB reference is hashed once, not once per case)."""
    known = _DEFINITION_DIGESTS.get(id(record))
    if known is not None and known[0] is record:
        return known[1]
    digest = record_digest(definition_identity(record))
    if len(_DEFINITION_DIGESTS) >= 4096:
        _DEFINITION_DIGESTS.clear()
    _DEFINITION_DIGESTS[id(record)] = (record, digest)  # the record is held, so its id is not reused meanwhile
    return digest


# Files (in the ikdata package) whose code judges every case replay's loop judges, whatever family owns it.
JUDGING_FILES = ("replay/runner.py", "replay/api.py", "replay/blobs.py", "replay/judges.py", "core/tolerances.py",
                 "core/judge_registry.py", "core/definitions.py", "core/references.py")
_PACKAGE = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=64)
def _code_digest(modules: tuple[str, ...]) -> str:
    """sha256 over :data:`JUDGING_FILES` and, for each of ``modules``, every source file of its package's folder
    (a family's code is its package), named relative to ikdata's folder where they lie in it. A module that
    cannot be found counts by its name."""
    import importlib.util

    from ikdata.core.digest import bytes_digest

    paths: dict[str, Path] = {name: _PACKAGE / name for name in JUDGING_FILES}
    files: dict[str, str] = {}
    for module in modules:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None)
        if not origin or not os.path.isfile(origin):
            files[module] = "missing"
            continue
        for path in sorted(Path(origin).resolve().parent.glob("*.py")):
            inside = path.is_relative_to(_PACKAGE)
            paths[path.relative_to(_PACKAGE).as_posix() if inside else str(path)] = path
    for name, path in paths.items():
        try:
            files[name] = bytes_digest(path.read_bytes())
        except OSError:
            files[name] = "unreadable"
    return record_digest(files)


def judging_code_digest(family: Any, judge_functions: Iterable[Any] = ()) -> str:
    """A digest of the code that judges a case of ``family`` (:class:`ikdata.core.features.Family`): the replay
    loop and judges (:data:`JUDGING_FILES`), the family's hook modules' packages, and the modules of plugin
    judge functions (``judge_functions``) a definition names."""
    modules: set[str] = set()
    for value in vars(family).values() if family is not None else ():
        if isinstance(value, str) and ":" in value:
            modules.add(value.split(":", 1)[0])
    for function in judge_functions:
        module = getattr(function, "__module__", None)
        if isinstance(module, str):
            modules.add(module)
    return _code_digest(tuple(sorted(modules)))


def reuse_key(*, definition: Mapping[str, Any], input_digests: Mapping[str, str], scalars: Mapping[str, Any],
              expected_digests: Mapping[str, str], axes: Mapping[str, int], device_kind: str, torch_version: str,
              judging: Any, code: str) -> str:
    """The digest that decides whether two cases are the same replay (module docstring: what it covers).

    Args:
        definition: the definition record as written (:func:`definition_identity` takes what counts).
        judging: the rules the outputs are judged by, as JSON (any settings a rule has are keyed).
        code: :func:`judging_code_digest` of the family that judges the case.
    """
    from ikdata._version import __version__

    return record_digest({"definition": definition_digest(definition), "inputs": dict(input_digests),
                          "scalars": dict(scalars), "expected": dict(expected_digests), "axes": dict(axes),
                          "device": device_kind, "torch": torch_version, "judging": ordered(judging),
                          "code": code, "ikdata": __version__})


def case_reuse_key(run: Any, definition: Any, row: Any, receipt: Any) -> str | None:
    """The reuse key of judging ``row`` against ``receipt`` in ``run`` (an :class:`ikdata.replay.api.Run`), from
    the blob names (no reads); None when a blob is not named by its digest (FlashInfer layout) or the rule an
    output is judged by cannot be chosen (the case then runs and says why)."""
    from ikdata.core import tolerances
    from ikdata.core.records import Scalar, TensorRef
    from ikdata.core.store import digest_from_path
    from ikdata.judging import families
    from ikdata.replay import judges

    input_digests, scalars = {}, {}
    for name, descriptor in row.inputs.items():
        if isinstance(descriptor, Scalar):
            scalars[name] = descriptor.value
        elif isinstance(descriptor, TensorRef):
            input_digests[name] = digest_from_path(descriptor.path)
        else:
            return None
    expected_digests = {n: digest_from_path(d.path) if isinstance(d, TensorRef) else None
                        for n, d in receipt.expected_output.items()}
    if None in input_digests.values() or None in expected_digests.values():
        return None  # blobs not named by digest (FlashInfer layout): no cheap key
    rules, plugins = {}, []
    try:
        for name in definition.outputs:
            chosen = judges.select_rule(definition, name, layout=run.ds.layout)
            rule = chosen.rule
            # every field of the rule, whatever settings a judge grows later (not only those to_dict names)
            settings = dataclasses.asdict(rule) if dataclasses.is_dataclass(rule) else repr(rule)
            rules[name] = {"rule": settings, "type": type(rule).__name__, "chosen_by": chosen.chosen_by}
            plugin = getattr(rule, "name", None)
            if isinstance(plugin, str) and plugin not in judges.METRIC_JUDGES:
                found = _plugin_metrics(plugin)
                if found is not None:
                    plugins.append(found)
    except Exception:  # noqa: BLE001 - no rule, no key: the case runs and reports why
        return None
    return reuse_key(
        definition=definition.record, input_digests=input_digests, scalars=scalars,
        expected_digests=expected_digests, axes=row.axes, device_kind=run.device_kind,
        torch_version=run.torch_version, judging={"outputs": rules, "defaults": tolerances.table(),
                                                  "layout": run.ds.layout},
        code=judging_code_digest(families.owner(definition), plugins))


def _plugin_metrics(name: str) -> Any:
    from ikdata.core import judge_registry

    judge = judge_registry.get(name)
    return getattr(judge, "metrics", None) if judge is not None else None


@dataclass
class ReuseCache:
    """Judged cases by reuse key: this run's, and the cache file's when one is given.

    Example:
        >>> cache = ReuseCache.open(default_cache_path())
        >>> earlier = cache.lookup(key)
    """

    path: Path | None = None
    known: dict[str, dict[str, Any]] = field(default_factory=dict)
    _pending: list[str] = field(default_factory=list)
    evidence: dict[tuple[int, ...], tuple[int, int, int, str]] = field(default_factory=dict)  # (dev, ino[, offset])
    _pending_evidence: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | os.PathLike | None) -> ReuseCache:
        """Load the cache file and its verification evidence if they exist (bad lines are ignored:
        it is only a cache)."""
        cache = cls(Path(path) if path else None)
        if cache.path is not None and cache.path.is_file():
            for _, record in jsonl.read(cache.path).records:
                if isinstance(record, dict) and isinstance(record.get("reuse_key"), str) \
                        and record.get("status") in JUDGED:
                    cache.known[record["reuse_key"]] = record
        if cache.evidence_path is not None and cache.evidence_path.is_file():
            for _, record in jsonl.read(cache.evidence_path).records:
                try:
                    key = (int(record["dev"]), int(record["ino"]))
                    if "offset" in record:  # a packed tensor: its pack file and where it lies there
                        key += (int(record["offset"]),)
                    cache.evidence[key] = (int(record["size"]), int(record["mtime_ns"]), int(record["ctime_ns"]),
                                           str(record["digest"]))
                except (KeyError, TypeError, ValueError):
                    continue
        return cache

    @property
    def evidence_path(self) -> Path | None:
        return self.path.with_name(EVIDENCE_FILE) if self.path is not None else None

    def note_verified(self, before: os.stat_result, digest: str, *, offset: int | None = None) -> None:
        """Record that the file ``before`` describes (stat taken before it was hashed) holds ``digest``
        (at ``offset``, for a pack). Without a cache file (``--no-reuse``) nothing is kept: no lookup would
        read it."""
        if self.path is None:
            return
        key: tuple[int, ...] = (before.st_dev, before.st_ino) + ((offset,) if offset is not None else ())
        value = (before.st_size, before.st_mtime_ns, before.st_ctime_ns, digest)
        if self.evidence.get(key) != value:
            self.evidence[key] = value
            record = {"dev": key[0], "ino": key[1], "size": value[0], "mtime_ns": value[1],
                      "ctime_ns": value[2], "digest": digest}
            if offset is not None:
                record["offset"] = offset
            self._pending_evidence.append(record)

    def confirm(self, path: Path, digest: str) -> bool:
        """Whether ``path`` holds the one tensor ``digest``: by evidence recorded when this very file
        (same device, inode, size, mtime and ctime) was verified, else by rehashing it now. A canonical
        blob path that is not on disk is looked up in the dataset's packs (:meth:`confirm_packed`)."""
        try:
            before = os.stat(path)
        except FileNotFoundError:
            return self.confirm_packed(path, digest)
        except OSError:
            return False
        known = self.evidence.get((before.st_dev, before.st_ino))
        if known == (before.st_size, before.st_mtime_ns, before.st_ctime_ns, digest):
            return True
        check = rehash_file(path)
        if check.error or list(check.digests) != [digest]:
            return False
        self.note_verified(before, digest)
        return True

    def confirm_packed(self, path: Path, digest: str) -> bool:
        """Whether the pack holding ``digest`` (``path`` is its canonical loose path in a dataset) holds it
        where its index says: by evidence (the pack file's identity and the offset), else by rehashing the
        slice now (:func:`ikdata.core.packs.read_packed`)."""
        from ikdata.core.errors import StoreError
        from ikdata.core.packs import read_packed
        from ikdata.core.store import BlobStore, blob_path

        rel = blob_path(digest) if digest else ""
        text = str(path)
        if not rel or not text.endswith("/" + rel):
            return False
        root = Path(text[:-len(rel) - 1])
        blob = BlobStore(root).packed(digest)
        if blob is None:
            return False
        try:
            before = os.stat(root / blob.pack)
        except OSError:
            return False
        known = self.evidence.get((before.st_dev, before.st_ino, blob.offset))
        if known == (before.st_size, before.st_mtime_ns, before.st_ctime_ns, digest):
            return True
        try:
            read_packed(root, blob)
        except StoreError:
            return False
        self.note_verified(before, digest, offset=blob.offset)
        return True

    def lookup(self, key: str) -> dict[str, Any] | None:
        return self.known.get(key)

    def remember(self, case: Mapping[str, Any]) -> None:
        """Keep a judged case for later ones; it goes to the cache file at the next :meth:`flush`."""
        key = case.get("reuse_key")
        if not key or case.get("status") not in JUDGED or case.get("reused"):
            return
        if key not in self.known:
            self._pending.append(key)
        self.known[key] = _verdict(case)
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Append the evidence and the verdicts learned since the last flush to the cache files (one
        locked write each); evidence first, so a verdict never lands without the checks behind it."""
        pending, self._pending = self._pending, []
        evidence, self._pending_evidence = self._pending_evidence, []
        if self.path is None:
            return
        try:
            if evidence:
                jsonl.append(self.evidence_path, evidence, fsync=False)
            if pending:
                jsonl.append(self.path, [self.known[k] for k in pending], fsync=False)
        except OSError:
            self.path = None  # an unwritable cache only costs speed, never a verdict


def reused_case(earlier: Mapping[str, Any], *, definition: str, uuid: str, axes: Mapping[str, int],
                seconds: float) -> Case:
    """A case for this workload carrying an earlier verdict, marked ``reused``."""
    case: dict[str, Any] = {"definition": definition, "uuid": uuid, "axes": dict(axes)}
    case.update(_verdict(earlier))
    case.update(seconds=seconds, reused=True)
    return Case.from_json(case, path="the reuse cache")


__all__ = ["CACHE_FILE", "EVIDENCE_FILE", "JUDGING_FILES", "NOT_COMPUTATION", "ReuseCache", "case_reuse_key",
           "default_cache_path", "definition_digest", "definition_identity", "judging_code_digest", "ordered",
           "reuse_key", "reused_case"]
