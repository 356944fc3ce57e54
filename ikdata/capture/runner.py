"""Run a command with capture on in it and every Python process it starts; then commit and summarise.

:func:`prepare` checks the configuration before anything starts (a folder that
cannot be written, unknown ``--only`` names, bad definitions, adapters that
cannot be found); :func:`run_capture` runs the command with ``IKDATA_CAPTURE``
set, forwards SIGINT/SIGTERM to it, commits the manifest when it ends (however
it ends) and returns what was captured per definition, with the run's census: every
process's record merged (:mod:`ikdata.capture.census`), kept in the dataset as
``census/<run>.jsonl`` when the run added workloads. A run that added nothing leaves no
dataset folder behind it that was not there before.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import orjson

from ikdata.capture import census
from ikdata.capture.config import ENV, CaptureConfig
from ikdata.core.errors import FileSystemError, UsageError
from ikdata.core.record_kinds import RUN_FIELD


@dataclass(frozen=True)
class CaptureResult:
    """What a capture run did.

    Attributes:
        returncode: the command's exit status (negative: killed by that signal).
        counts: definition -> workloads added by this run.
        failures: per-process failures ({"pid", "definition", "message"}).
        refused: why selected calls were not captured (caps) -> how many.
        dataset_id: the committed manifest's id (None: nothing was written).
        processes: how many processes reported (those killed by SIGKILL cannot).
        lost: workloads captured but not written (a write failed: disk full, file-size limit...);
            none of them left a row or a receipt.
        unverified: workloads written with ``unverified`` in their receipt (a reused weight changed
            in place; replay and import do not judge them).
        unstepped: definition -> calls left out by ``--steps`` because they ran outside any step.
        steps_seen: the most steps one request counted in one process (0: no step ran).
        steps: the ``--steps`` asked for (None: the default selection, or ``--per-step``).
        per_step: ``--per-step`` was given (each distinct call kept once per step).
        census: the run's census merged over its processes (:meth:`ikdata.capture.census.Summary.to_json`).
        census_lines: the census in words ("ran 1,204 calls of 37 ops; recorded 52 calls of 9 definitions", ...).
        why_nothing: why nothing was recorded, from the census (None: something was).
        not_enabled: processes that imported torch with capture off ({"pid", "host", "argv", "reason"}).
        adapter_failures: ``--adapter`` modules that failed to install ({"pid", "module", "error"}).
        run: this run's id, the name of its census file in the dataset.
        removed: the --into folder the run created (or found empty) was removed again: nothing was recorded.
    """

    returncode: int
    counts: dict[str, int]
    failures: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)
    dataset_id: str | None = None
    processes: int = 0
    lost: int = 0
    unverified: int = 0
    unstepped: dict[str, int] = field(default_factory=dict)
    steps_seen: int = 0
    steps: tuple[int, ...] | None = None
    per_step: bool = False
    census: dict[str, Any] = field(default_factory=dict)
    census_lines: list[str] = field(default_factory=list)
    why_nothing: str | None = None
    not_enabled: list[dict[str, Any]] = field(default_factory=list)
    adapter_failures: list[dict[str, Any]] = field(default_factory=list)
    run: str | None = None
    removed: bool = False

    def census_problems(self) -> list[str]:
        """What makes the run a failure by the census: processes capture could not enable, adapters that
        did not install. One line per reason, naming the processes (a server's workers fail alike)."""
        found = [f"capture was not enabled in process {p['pid']} ({' '.join(p['argv'])[:120]}): {p['reason']}"
                 for p in self.not_enabled]
        by_error: dict[tuple[str, str], list[int]] = {}
        for a in self.adapter_failures:
            by_error.setdefault((a["module"], a["error"]), []).append(a["pid"])
        for (module, error), pids in by_error.items():
            where = f"process {pids[0]}" if len(pids) == 1 else f"{len(pids)} processes ({', '.join(map(str, pids))})"
            found.append(f"--adapter {module} failed to install in {where}: {error}")
        return found

    def lost_calls(self) -> list[str]:
        """What the program ran that could not be captured at all (a failure marked ``lost``), one line each."""
        return [f"{f['definition']}: {f['message']}" for f in self.failures if f.get("lost")]

    def selection_lines(self) -> list[str]:
        """What the selection kept, and how to ask for more (none when ``--steps`` chose the steps)."""
        from ikdata.capture.spread import LOOKED_AT_FIRST, looked_at
        from ikdata.core import features

        if self.steps is not None or not self.counts:
            return []
        if self.per_step:
            return ["selection: --per-step: each distinct call kept once in every step it ran in"]
        seen = self.steps_seen
        where = (f"looked at {looked_at(seen)} of the {seen} steps of a request (0-{LOOKED_AT_FIRST - 1}, then every "
                 "power of two)" if seen > LOOKED_AT_FIRST else f"in all {seen} step(s)" if seen else "")
        lines = ["selection (default): each distinct call (definition, shapes, dtypes, settings; the request when "
                 f"named) kept once per run{'; ' + where if where else ''}. More: --per-step keeps one per step, "
                 "--steps 0,4,7 chosen steps, --max-per-definition N a cap"]
        for source in features.sources():  # a source's own calls (HF's sampler) kept by its own rule
            said = source.hook("selection")
            if said is not None:
                lines += said(dict(self.counts))
        return lines

    def nothing_kept(self) -> tuple[str, bool] | None:
        """Why ``--steps`` kept nothing, and whether what was asked is impossible; None when something was kept.

        Example:
            >>> CaptureResult(0, {}, unstepped={"dense_gemm_f32_nt_n4_k8": 3}, steps=(0,)).nothing_kept()[1]
            True
        """
        if self.counts or self.steps is None or self.lost:
            return None
        asked = ",".join(map(str, self.steps))
        if self.unstepped:
            seen = ", ".join(f"{name} ({n} call{'s' if n != 1 else ''})" for name, n in sorted(self.unstepped.items()))
            where = ("no step ran at all" if not self.steps_seen else
                     f"steps 0-{self.steps_seen - 1} ran, these calls outside all of them")
            return (f"--steps {asked} kept nothing: {seen} ran outside any step, so no step can be known for "
                    f"them ({where}; a step is a call of the outermost module, or of --step-module). Drop "
                    "--steps, or mark steps in the program with 'with ikdata.capture.step(i):'", not self.steps_seen)
        if self.steps_seen:
            return (f"--steps {asked} kept nothing: each request ran {self.steps_seen} step(s) at most "
                    f"(steps 0-{self.steps_seen - 1}); choose steps among those", False)
        return None


def prepare(config: CaptureConfig) -> CaptureConfig:
    """Check everything that can be checked before the command starts.

    Raises:
        UsageError: the dataset folder cannot be written or holds another layout, a definitions
            folder is bad, a ``--only`` name is unknown, an adapter module cannot be found, or a cap
            is not positive.
    """
    from ikdata.capture.config import check_only
    from ikdata.core.dataset import IKDATA, detect_layout
    from ikdata.core.definitions import USER, read_folder

    root = Path(config.into)
    if root.exists() and not root.is_dir():
        raise UsageError(f"--into {root}: exists and is not a folder; choose a new or an ikdata dataset folder")
    if root.is_dir() and any(root.iterdir()) and detect_layout(root) != IKDATA:
        raise UsageError(f"--into {root}: folder holds files but no ikdata dataset; choose an empty folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".tmp-probe-")
        probe.close()
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.EEXIST, errno.ENOENT):  # the path itself cannot be a folder
            raise UsageError(f"--into {root}: cannot write there ({exc.strerror or exc}); choose a writable "
                             "folder") from exc
        # the OS said no (read-only, full, permission): a problem, exit 1, as every such refusal (docs/validate.md)
        raise FileSystemError(exc, operation="write into the --into folder", filename=root) from exc
    user = {}
    for folder in config.definitions:
        if not Path(folder).is_dir():
            raise UsageError(f"--definitions {folder}: no such folder; expected a folder of definition JSON files")
        found, problems = read_folder(Path(folder), origin=USER)
        if problems:
            raise UsageError(f"--definitions {folder}: " + "; ".join(str(p) for p in problems[:5]))
        user.update(found)
    check_only(config, user)
    for name, value in (("--max-per-definition", config.max_per_definition), ("--max-bytes", config.max_bytes)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be positive, got {value}")
    search = [os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    for module in config.adapters:
        sys.path[:0] = search
        try:
            found_spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found_spec = None
        finally:
            del sys.path[:len(search)]
        if found_spec is None:
            raise UsageError(f"--adapter {module}: no such module; make it importable (PYTHONPATH) and give "
                             "its dotted path")
    return config


def run_capture(config: CaptureConfig, command: Sequence[str]) -> CaptureResult:
    """Run ``command`` with capture on; commit the manifest; return what was captured.

    Example:
        >>> result = run_capture(CaptureConfig(into="captures/minilm"), ["python", "embed.py"])
        >>> result.counts
        {'dense_gemm_bias_f32_nt_n384_k384': 2, ...}

    Raises:
        UsageError: a configuration error (nothing was started) or a command that cannot be run.
    """
    if not command:
        raise UsageError("no command to run; put it after '--', e.g. ikdata capture --into D -- python run.py")
    root = Path(config.into)
    fresh = not root.exists() or (root.is_dir() and not any(root.iterdir()))  # no dataset there before the run
    created = not root.exists()
    made_parents = [p for p in root.absolute().parents if not p.exists()]  # runs/ of runs/z, made with it
    try:
        config = prepare(config)
    except BaseException:
        if fresh:  # refused before anything ran: a folder this run made is not left behind
            _remove_leftovers(root, created, made_parents)
        raise
    run = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(4).hex()
    state = tempfile.mkdtemp(prefix="ikdata-capture-")
    try:
        # every receipt names its run, so the census shown beside a workload is its own run's (RUN_FIELD)
        config = replace(config, state_dir=state, into=str(root.resolve()),
                         provenance={**config.provenance, RUN_FIELD: run})
        before = row_counts(root)
        env = dict(os.environ, **{ENV: config.to_env()})
        try:
            process = subprocess.Popen(list(command), env=env)
        except OSError as exc:
            if fresh:  # the program never started: a folder this run made is not left behind
                _remove_leftovers(root, created, made_parents)
            raise UsageError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from exc
        returncode = _wait_forwarding(process)
        events = _read_events(Path(state) / "events.jsonl")
        records = [dict(r, run=run) for r in _read_events(Path(state) / census.STATE_FILE)]
        summary = census.summarise(records)
        after = row_counts(root)
        counts = {name: after[name] - before.get(name, 0) for name in sorted(after) if after[name] > before.get(name, 0)}
        removed = False
        if counts and records:
            _keep_census(root, run, records)
        elif not counts and fresh:
            removed = _remove_leftovers(root, created, made_parents)
        dataset_id = None if removed else _commit(root)
        failures = [dict(f, pid=e["pid"]) for e in events for f in e.get("failures", [])]
        refused: dict[str, int] = {}
        unstepped: dict[str, int] = {}
        for event in events:
            for reason, n in event.get("refused", {}).items():
                refused[reason] = refused.get(reason, 0) + n
            for name, n in (event.get("unstepped") or {}).items():
                unstepped[name] = unstepped.get(name, 0) + n
        return CaptureResult(returncode, counts, failures, refused, dataset_id, len(events),
                             lost=sum(e.get("lost", 0) for e in events),
                             unverified=sum(e.get("unverified", 0) for e in events), unstepped=unstepped,
                             steps_seen=max((e.get("steps_seen", 0) for e in events), default=0), steps=config.steps,
                             per_step=config.per_step,
                             census=summary.to_json(), census_lines=summary.lines(),
                             why_nothing=None if counts else _why_nothing(summary, config),
                             not_enabled=summary.to_json()["not_enabled"],
                             adapter_failures=summary.to_json()["adapter_failures"], run=run, removed=removed)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def row_counts(root: Path) -> dict[str, int]:
    """Definition name -> rows in its workload file."""
    counts = {}
    folder = root / "workloads"
    if folder.is_dir():
        for path in folder.rglob("*.jsonl"):
            counts[path.stem] = sum(1 for line in path.read_bytes().split(b"\n") if line.strip())
    return counts


def _wait_forwarding(process: subprocess.Popen) -> int:
    """Wait for the command; pass SIGTERM on to it, and let Ctrl-C reach it alone.

    A terminal sends SIGINT to the whole foreground process group, so the command
    already has it; the runner ignores it, to commit what was captured afterwards.
    """
    def forward(signum: int, frame: Any) -> None:
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, forward)
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _read_events(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    events = []
    for line in path.read_bytes().splitlines():
        try:
            events.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return events


def _why_nothing(summary: census.Summary, config: CaptureConfig) -> str:
    """Why the run recorded nothing: the census's reason, with the ``--only`` that narrowed what capture looked at."""
    why = summary.why_nothing()
    if config.only and summary.processes and not summary.not_enabled:
        return f"--only {','.join(config.only)} selected none of the calls that ran ({why})"
    return why


def _keep_census(root: Path, run: str, records: list[dict[str, Any]]) -> None:
    """Write the run's census records (one line per process) as ``census/<run>.jsonl``, atomically
    (:func:`ikdata.capture.census.keep`: a killed keeper's temp files go first)."""
    census.keep(root, run, records)


def _capture_made() -> frozenset[str]:
    """What a capture may have written into a fresh --into folder: the top of every record kind declared
    (:mod:`ikdata.core.record_kinds`), the blobs, the manifest and the locks (anything else is left alone)."""
    from ikdata.core.locking import LOCK_FILE
    from ikdata.core.manifest import MANIFEST
    from ikdata.core.record_kinds import KINDS
    from ikdata.core.store import BLOB_DIR

    return frozenset({kind.top.split("/")[0] for kind in KINDS} | {BLOB_DIR, MANIFEST, LOCK_FILE, ".lock"})


def _remove_leftovers(root: Path, created: bool, made_parents: Sequence[Path] = ()) -> bool:
    """A run that recorded nothing into a folder with no dataset: remove what capture made there, and the
    folder itself when the run created it (with the parents it made for it, ``made_parents``, nearest first,
    while empty). Returns whether no dataset is left (the folder is gone or empty)."""
    if not root.is_dir():
        return True
    made = _capture_made()
    for entry in root.iterdir():
        if entry.name in made or entry.name.startswith(".tmp-"):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                try:
                    entry.unlink()
                except OSError:
                    pass
    left = any(root.iterdir())
    if created and not left:
        try:
            root.rmdir()
        except OSError:
            return False
        for parent in made_parents:
            try:
                parent.rmdir()
            except OSError:  # not empty (something else was written there meanwhile), or gone: stop
                break
    return not left


def _commit(root: Path) -> str | None:
    from ikdata.core.writer import DatasetWriter

    if not any((root / sub).exists() for sub in ("workloads", "definitions", "ikdata.json")):
        return None
    return DatasetWriter(root).commit()


__all__ = ["CaptureResult", "prepare", "run_capture", "row_counts"]
