"""Replay on a Ray cluster: the driver plans and writes the report, Ray workers run the cases.

The driver opens the dataset (a folder, or a URL through a verified copy of its small files),
selects the workloads as a local replay would, and settles on its own everything that needs no
tensor: resumed cases, refusals (an untrusted reference never leaves the driver: its cases are
never sent), and verdicts reused from earlier runs. The rest goes to Ray in tasks of one
definition each (each task loads its reference once), ``num_gpus=1`` per task when the device is
CUDA. Results stream back and each case is committed to the report as it arrives, so
``--resume`` after a driver crash reruns only what has no result.

A worker runs the same per-case code as a local replay (:func:`ikdata.replay.runner._replay_one`)
on the dataset folder, or, for a URL, on its own verified copy of the small files, fetching only
the blobs its cases name into a bounded cache (:class:`~ikdata.remote.blob_cache.BlobCache`); every
blob is rehashed when it is loaded, so a corrupted remote blob is an ``error`` for its cases only.

Faults: a task whose worker dies is split and each of its cases sent again alone; a case alone in
a task whose worker dies twice is reported as ``error`` with the reason, and the rest go on.
Ray's own task retries are off (``max_retries=0``) so that this rule, not Ray's, decides.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from ikdata.core.errors import RemoteError, UsageError
from ikdata.core.records import TensorRef
from ikdata.core.status import Status

DEFAULT_TASK_SIZE = 64
DEFAULT_CACHE_BYTES = 4 << 30
MAX_WORKER_DEATHS = 2  # a case alone in a task whose worker died this many times is an error
CONNECT_TIMEOUT = 3.0  # seconds to wait for a cluster address to answer (IKDATA_RAY_CONNECT_TIMEOUT)


@dataclass(frozen=True)
class Source:
    """Where workers find the dataset: a local (shared) folder, or a remote URL."""

    location: str
    is_url: bool
    definitions: tuple[str, ...] = ()
    trust: tuple[str, ...] = ()
    device: str = "cpu"
    cache_bytes: int = DEFAULT_CACHE_BYTES


@dataclass
class _Task:
    definition: str
    uuids: list[str]
    deaths: int = 0  # worker deaths this exact task (a single case) has suffered


@dataclass
class ClusterInfo:
    """What the driver saw of the cluster, for the summary (start-up reported apart)."""

    address: str
    workers: int
    gpus: int
    startup_seconds: float
    tasks: int = 0
    worker_deaths: int = 0
    fetched_bytes: int = 0
    errors: list[str] = field(default_factory=list)


def require_ray():
    """The ``ray`` module, or a UsageError saying what to install."""
    try:
        import ray
    except ImportError:
        raise UsageError("replay --ray needs Ray: pip install 'ikdata[ray]' (or pip install ray), "
                         "or replay without --ray (locally, or with --shard I/N on each machine)") from None
    return ray


def probe(address: str | None) -> None:
    """Check that something answers at a cluster address before Ray is asked to join it (Ray itself retries
    an unreachable address for minutes): one TCP connect with a short timeout.

    Raises:
        UsageError: the address is malformed, or nothing answers there within the timeout.
    """
    if address in (None, "", "local"):
        return
    target: str | None = address
    if address == "auto":  # the running cluster Ray would join: RAY_ADDRESS, else the last 'ray start' here
        target = os.environ.get("RAY_ADDRESS") or _last_started()
        if not target or target == "auto":
            return  # Ray says at once that no cluster runs
    assert target is not None
    bare = target.split("://", 1)[1] if "://" in target else target
    host, sep, port = bare.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--ray {address}: expected local, auto, HOST:PORT or ray://HOST:PORT (got {target!r})")
    timeout = _connect_timeout()
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise UsageError(f"--ray {address}: no Ray cluster answers at {host}:{port} ({reason} within {timeout:g} s), "
                         "so nothing was replayed and no report was written; start one there ('ray start --head "
                         f"--port {port}'), check the address, or use --ray local") from None


def _connect_timeout() -> float:
    text = os.environ.get("IKDATA_RAY_CONNECT_TIMEOUT")
    try:
        value = float(text) if text else CONNECT_TIMEOUT
    except ValueError:
        raise UsageError(f"IKDATA_RAY_CONNECT_TIMEOUT={text!r}: expected a number of seconds") from None
    return value if value > 0 else CONNECT_TIMEOUT


def _last_started() -> str | None:
    """The address of the cluster the last 'ray start' on this machine recorded, if any."""
    try:
        from ray._private.services import find_bootstrap_address

        return find_bootstrap_address(None)
    except Exception:  # noqa: BLE001  a private helper: without it, Ray decides
        return None


@contextlib.contextmanager
def connect(address: str | None, *, num_cpus: int | None = None) -> Iterator[ClusterInfo]:
    """Join the cluster at ``address`` ("auto" for a running one) or start a local one (None or "local").

    An address that does not answer is refused within seconds (:func:`probe`).
    """
    ray = require_ray()
    started = time.perf_counter()
    owned = not ray.is_initialized()
    if owned:
        probe(address)
        kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False}
        if address in (None, "", "local"):
            kwargs.update(num_cpus=num_cpus)
        else:
            kwargs.update(address=address)
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UsageError(f"--ray {address}: cannot reach a Ray cluster ({exc}); start one with "
                             "'ray start --head', or use --ray local") from None
    resources = ray.cluster_resources()
    info = ClusterInfo(address or "local", int(resources.get("CPU", 0)), int(resources.get("GPU", 0)),
                       time.perf_counter() - started)
    try:
        yield info
    finally:
        if owned:
            ray.shutdown()


def plan_tasks(rows: Iterable[Any], task_size: int) -> list[_Task]:
    """Group workloads into tasks of one definition each, at most ``task_size`` cases per task."""
    by_definition: dict[str, list[str]] = {}
    for row in rows:
        by_definition.setdefault(row.definition, []).append(row.uuid)
    tasks = []
    for definition, uuids in sorted(by_definition.items()):
        for start in range(0, len(uuids), task_size):
            tasks.append(_Task(definition, uuids[start:start + task_size]))
    return tasks


def needed_blobs(row: Any, receipt: Any) -> list[str]:
    """Dataset-relative paths of the blobs one case loads (inputs and expected outputs)."""
    descriptors = list(row.inputs.values()) + (list(receipt.expected_output.values()) if receipt else [])
    return [d.path for d in descriptors if isinstance(d, TensorRef)]


def run_tasks(source: Source, tasks: list[_Task], *, on_case: Callable[[dict], None],
              info: ClusterInfo, max_deaths: int = MAX_WORKER_DEATHS) -> None:
    """Send tasks to Ray and hand every case to ``on_case`` as it comes back; apply the fault rule."""
    ray = require_ray()
    from ray.exceptions import RayActorError, WorkerCrashedError

    remote = ray.remote(max_retries=0)(_run_task)
    if source.device.startswith("cuda") and info.gpus:
        remote = remote.options(num_gpus=1)
    pending: deque[_Task] = deque(tasks)
    running: dict[Any, _Task] = {}
    window = max(2, 2 * max(1, info.workers))
    while pending or running:
        while pending and len(running) < window:
            task = pending.popleft()
            running[remote.remote(source, task.definition, task.uuids)] = task
            info.tasks += 1
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            task = running.pop(ref)
            try:
                cases, fetched = ray.get(ref)
            except (WorkerCrashedError, RayActorError, ray.exceptions.RayTaskError) as exc:
                if isinstance(exc, ray.exceptions.RayTaskError) and not _is_worker_death(exc):
                    raise
                info.worker_deaths += 1
                if len(task.uuids) > 1:  # which case killed it is unknown: each goes again alone
                    pending.extend(_Task(task.definition, [u]) for u in task.uuids)
                elif task.deaths + 1 >= max_deaths:
                    reason = (f"the worker running this case died {task.deaths + 1} times "
                              f"({type(exc).__name__}); not retried again")
                    info.errors.append(f"{task.uuids[0]}: {reason}")
                    on_case({"definition": task.definition, "uuid": task.uuids[0], "status": Status.ERROR,
                             "reason": reason, "error": str(exc)[-2000:], "seconds": 0.0})
                else:
                    pending.append(_Task(task.definition, task.uuids, task.deaths + 1))
                continue
            info.fetched_bytes += fetched
            for case in cases:
                on_case(case)


def _is_worker_death(exc: Exception) -> bool:
    from ray.exceptions import WorkerCrashedError

    cause = getattr(exc, "cause", None)
    return isinstance(cause, WorkerCrashedError) or "WorkerCrashedError" in str(exc) or \
        "worker died" in str(exc).lower()


def replay_on_ray(location: str | os.PathLike, *, address: str | None = None, device: str = "cpu",
                  definitions: Iterable[str] | None = None, definition_folders: Iterable[str | os.PathLike] = (),
                  resume: bool = False, report_path: str | os.PathLike | None = None, trust: Iterable[str] = (),
                  reuse: bool = True, cache_path: str | os.PathLike | None = None,
                  progress: Callable[[Any], None] | None = None, task_size: int = DEFAULT_TASK_SIZE,
                  num_cpus: int | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES,
                  settings: Mapping[str, Any] | None = None) -> tuple[Any, ClusterInfo]:
    """Replay a dataset folder or URL on Ray; returns the :class:`~ikdata.replay.runner.ReplayResult`
    (the same report a local replay writes) and what the cluster did.

    The cluster is joined (or started) before the report is opened, so a run that cannot start
    leaves an existing report as it was. ``settings`` are each family's, by its name, for what the
    driver decides over many cases (trajectories), as in a local replay.

    Raises:
        UsageError: Ray is not installed, the cluster cannot be reached, a URL without ``report_path``,
            or a folder that is a remote (``ikdata push`` writes it; replay it as a URL, or clone it).
    """
    from ikdata.core.dataset import Dataset
    from ikdata.core.locking import refuse_remote
    from ikdata.remote.url import is_url
    from ikdata.judging import families
    from ikdata.replay import runner
    from ikdata.replay.api import Pending

    require_ray()
    location = str(location)
    remote = is_url(location)
    if remote and report_path is None:
        raise UsageError(f"{location}: a replay of a URL writes its report locally; name it with --report PATH")
    if not remote:
        refuse_remote(location)  # its report and manifest would be written into the remote
    folders = tuple(str(f) for f in definition_folders)
    with contextlib.ExitStack() as stack:
        if remote:
            from ikdata.remote.readonly import open_url

            ds = stack.enter_context(open_url(location, blobs="none", definitions=folders))
        else:
            ds = Dataset.open(location, definitions=folders)
            location = str(Path(location).resolve())
        info = stack.enter_context(connect(address, num_cpus=num_cpus))  # before the report is touched
        run, rows, seen_problems = runner._start(ds, device=device, definitions=definitions, shard=None,
                                                 resume=resume, report_path=report_path, trust=trust, reuse=reuse,
                                                 cache_path=cache_path)
        resumed = sum(1 for row in rows if row.uuid in run.out.by_uuid)
        done = [resumed]

        def record(case: Any) -> None:
            recorded = run.out.add(case)
            run.cache.remember(recorded)
            done[0] += 1
            if progress:
                progress(runner.Progress(done[0], len(rows), recorded))

        if progress:
            progress(runner.Progress(resumed, len(rows)))
        to_send = []
        try:
            for row in rows:  # settled on the driver: resumed, skipped, refused, reused, broken definitions
                if row.uuid in run.out.by_uuid:
                    continue
                settled = runner._settle(run, row)
                if isinstance(settled, Pending):
                    to_send.append(row)
                elif settled is not None:
                    record(settled)
                else:
                    done[0] += 1
            trusted = tuple(sorted(set(trust) | {d.digest for d in ds.definitions.values()
                                                 if d.name in run.references}))
            source = Source(location, remote, folders, trusted, device, cache_bytes)
            if to_send:
                run_tasks(source, plan_tasks(to_send, task_size), on_case=record, info=info)
            # what spans cases (pooled sampling tests, trajectories) is decided here, as a local run does
            if remote and not definitions:
                _fetch_for_families(ds, location, cache_bytes)
            families.finish_all(run, narrowed=bool(definitions), settings=settings)
        finally:
            run.cache.flush()
        return runner._finish(run, seen_problems, resumed), info


def _fetch_for_families(ds: Any, location: str, cache_bytes: int) -> None:
    """Bring the blobs the driver's families judge (trajectories) from the remote, each verified."""
    from ikdata.judging import families
    from ikdata.remote.blob_cache import BlobCache
    from ikdata.remote.connect import open_backend

    needed = families.finish_blobs(ds)
    if not needed:
        return
    with open_backend(location) as backend:
        BlobCache(backend, ds.root, max_bytes=cache_bytes).ensure(needed)


# -- the worker side ------------------------------------------------------------------------------

_WORKER_STATE: dict[Source, Any] = {}


class _WorkerDataset:
    """One worker's view of a dataset: opened once per process and kept for every task it runs."""

    def __init__(self, source: Source):
        from ikdata.core.dataset import Dataset

        self._stack = contextlib.ExitStack()
        self.cache = None
        if source.is_url:
            from ikdata.remote.blob_cache import BlobCache
            from ikdata.remote.connect import open_backend
            from ikdata.remote.readonly import open_url

            self.ds = self._stack.enter_context(open_url(source.location, blobs="none",
                                                         definitions=source.definitions))
            backend = self._stack.enter_context(open_backend(source.location))
            self.cache = BlobCache(backend, self.ds.root, max_bytes=source.cache_bytes)
        else:
            self.ds = Dataset.open(source.location, definitions=source.definitions)
        self.run = _worker_run(self.ds, source)
        self._rows: dict[str, dict] = {}

    def rows(self, definition: str) -> dict:
        """The workloads of one definition by uuid, read once per worker."""
        if definition not in self._rows:
            self._rows[definition] = {row.uuid: row for row in self.ds.workloads(definition)}
        return self._rows[definition]


def _worker_run(ds: Any, source: Source) -> Any:
    import torch

    from ikdata.replay import runner
    from ikdata.replay.api import Run
    from ikdata.replay.reuse import ReuseCache

    device_kind, _ = runner._check_device(source.device)
    from ikdata.core.repeats import first_receipts

    receipts, seen = first_receipts(ds.receipts())
    return Run(ds, source.device, device_kind, str(torch.__version__), frozenset(source.trust), None,
               ReuseCache(None), False, receipts, repeats=seen)


def _run_task(source: Source, definition: str, uuids: list[str]) -> tuple[list[dict], int]:
    """Run one task's cases on this worker; returns the cases and the bytes fetched for them."""
    from ikdata.replay import runner

    state = _WORKER_STATE.get(source)
    if state is None:
        state = _WORKER_STATE[source] = _WorkerDataset(source)
    run = state.run
    rows = state.rows(definition)
    fetched_before = state.cache.fetched_bytes if state.cache is not None else 0
    failures: dict[str, Exception] = {}
    if state.cache is not None:  # every blob of the task in parallel, each verified before it lands
        failures = state.cache.prefetch(path for uuid in uuids if uuid in rows
                                        for path in needed_blobs(rows[uuid], run.receipts.get(uuid)))
    cases = []
    for uuid in uuids:
        row = rows.get(uuid)
        if row is None:
            cases.append({"definition": definition, "uuid": uuid, "status": Status.ERROR, "seconds": 0.0,
                          "reason": "the worker's copy of the dataset has no such workload"})
            continue
        if state.cache is not None:
            needed = needed_blobs(row, run.receipts.get(uuid))
            failed = [failures[path] for path in needed if path in failures]
            try:
                if failed:
                    raise failed[0]
                state.cache.ensure(needed)
            except RemoteError as exc:  # a damaged or missing remote blob: an error for this case only
                cases.append({"definition": definition, "uuid": uuid, "axes": dict(row.axes), "status": Status.ERROR,
                              "reason": str(exc), "seconds": 0.0})
                continue
        case = runner._replay_one(run, row)
        if case is not None:
            cases.append(case)
    fetched = (state.cache.fetched_bytes - fetched_before) if state.cache is not None else 0
    return cases, fetched


__all__ = ["ClusterInfo", "CONNECT_TIMEOUT", "DEFAULT_TASK_SIZE", "Source", "connect", "needed_blobs", "plan_tasks",
           "probe", "replay_on_ray", "require_ray", "run_tasks"]
