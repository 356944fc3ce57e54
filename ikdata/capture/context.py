"""Request and step context: which request is running, which step it is at, and which module is executing.

Three ways to name the request, checked in this order:

1. ``with ikdata.capture.request("req-1", steps=[0, 4]):`` in the program itself;
2. a request file (``CaptureConfig.request_file``): JSON with ``request_id`` and
   optionally ``capture_steps`` and provenance fields, replaced atomically by a
   driver in another process; while it is absent nothing is captured;
3. neither: the request id is None.

Steps are counted per request by the forward calls of a named top-level module
(``step_module``) or, without one, by every outermost module call. A step can
also be set explicitly with ``with ikdata.capture.step(3):``.

The process's place in a distributed program (:func:`distributed_facts`): rank, world
size and process group from ``torch.distributed`` once it is initialised, else from the
launcher's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, as torchrun sets them).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple

import orjson


@dataclass(frozen=True)
class Request:
    """The request being served: its id, the steps to capture (None: all), and provenance to record."""

    request_id: str | int | None
    steps: tuple[int, ...] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


_REQUEST: contextvars.ContextVar[Request | None] = contextvars.ContextVar("ikdata_capture_request", default=None)
_STEP: contextvars.ContextVar[int | None] = contextvars.ContextVar("ikdata_capture_step", default=None)
# the step a ``with step(N):`` block marks: module calls inside it are that step, not one counted
_EXPLICIT: contextvars.ContextVar[int | None] = contextvars.ContextVar("ikdata_capture_explicit_step", default=None)
_NO_REQUEST = Request(None)
REQUEST_FIELDS_MAX_BYTES = 64 << 10  # JSON bytes of request-file fields copied into every receipt


@contextlib.contextmanager
def request(request_id: str | int, *, steps: list[int] | tuple[int, ...] | None = None,
            **provenance: Any) -> Iterator[Request]:
    """Run a block as one request: captures are tagged with its id, and its steps counted from 0.

    Args:
        request_id: the id recorded in every receipt.
        steps: capture only these steps of the request (default: the run's ``--steps``).
        **provenance: extra receipt fields, e.g. ``model="..."``.

    Example:
        >>> with ikdata.capture.request("req-7", steps=[0, 1]):
        ...     model.generate(ids, max_new_tokens=8)
    """
    token = _REQUEST.set(Request(request_id, tuple(steps) if steps is not None else None, dict(provenance)))
    try:
        yield _REQUEST.get()  # type: ignore[misc]
    finally:
        _REQUEST.reset(token)


@contextlib.contextmanager
def step(index: int) -> Iterator[int]:
    """Mark a block as step ``index`` of the current request (instead of counting module calls).

    Module calls inside the block are that step (they count no step of their own), so ``--steps 5``
    selects what runs in ``with step(5):`` and nothing else; a call recorded in the block is kept per
    step (the step joins its selection key, as if ``--per-step`` were given for it).

    Example:
        >>> model(warm_up)                 # counted as step 0
        >>> with ikdata.capture.step(5):
        ...     model(ids)                 # step 5, whatever ran before
    """
    token, explicit = _STEP.set(index), _EXPLICIT.set(index)
    try:
        yield index
    finally:
        _EXPLICIT.reset(explicit)
        _STEP.reset(token)


@contextlib.contextmanager
def at_step(index: int) -> Iterator[int]:
    """Record the calls of a block as step ``index`` (capture's own adapters: a sampler's decode step),
    without marking the block as a step of the program's (:func:`step`)."""
    token = _STEP.set(index)
    try:
        yield index
    finally:
        _STEP.reset(token)


def current_request() -> Request | None:
    """The request named in the program (``with request(...)``, or a request file's during its steps), if any."""
    return _REQUEST.get()


def step_asked() -> bool:
    """Whether the steps of the calls running now were asked for: a ``with step(N):`` block, or a request
    with its own ``steps`` (then the step is part of what makes a call distinct: selection keeps each)."""
    if _EXPLICIT.get() is not None:
        return True
    req = _REQUEST.get()
    return req is not None and req.steps is not None


class RequestFile:
    """A request file read again only when it changed (inode, size or mtime)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple | None = None
        self._request: Request | None = None

    def current(self) -> Request | None:
        """The request the file names now, or None while it is absent (asked as every step begins)."""
        try:
            # absent is the common answer between requests: asked first, without an exception
            st = os.stat(self.path) if os.access(self.path, os.F_OK) else None
        except FileNotFoundError:  # removed in between
            st = None
        if st is None:
            self._stamp, self._request = None, None
            return None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp != self._stamp:
            try:
                data = orjson.loads(open(self.path, "rb").read())
            except (OSError, ValueError):
                return self._request  # a driver that does not replace atomically: keep the last good one
            if not isinstance(data, dict):
                return self._request
            steps = data.pop("capture_steps", None)
            self._request = Request(data.pop("request_id", None), tuple(steps) if steps is not None else None,
                                    capped_fields(data, where=self.path))
            self._stamp = stamp
        return self._request


def capped_fields(fields: dict[str, Any], *, where: str, cap: int = REQUEST_FIELDS_MAX_BYTES) -> dict[str, Any]:
    """Request fields for the receipts: JSON values kept as they are (a request body, a server
    command line), up to ``cap`` bytes of JSON in all; a field past the cap is replaced by a note
    saying so, and a line on stderr names it (once per request file version)."""
    kept: dict[str, Any] = {}
    used = 0
    for key, value in fields.items():
        size = len(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)) if value is not None else 4
        if used + size > cap:
            kept[key] = (f"<omitted by ikdata: {size} bytes of JSON, past the {cap}-byte cap on request-file "
                         "fields; keep large bodies elsewhere and put a reference here>")
            sys.stderr.write(f"ikdata capture [{os.getpid()}]: {where}: field {key!r} is {size} bytes of JSON; "
                             f"request-file fields are capped at {cap} bytes in all, so receipts record a note "
                             "instead of it\n")
            continue
        used += size
        kept[key] = value
    return kept


@dataclass(frozen=True)
class Ranks:
    """Where this process sits in a distributed program (None everywhere: not distributed)."""

    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    process_group: dict[str, Any] | None = None  # {"source": "torch.distributed"|"env", "backend", "name", ...}

    @property
    def distributed(self) -> bool:
        """More than one process shares the work: tensors may differ by rank, so every rank is kept."""
        return self.rank is not None and (self.world_size or 1) > 1

    def facts(self) -> dict[str, Any]:
        """The receipt fields: rank, world_size, local_rank, process_group (rank 0 of 1 for a lone process)."""
        if self.rank is None and self.world_size is None:
            return {"rank": 0, "world_size": 1, **({"local_rank": self.local_rank} if self.local_rank is not None else {})}
        return {k: v for k, v in (("rank", self.rank), ("world_size", self.world_size),
                                  ("local_rank", self.local_rank), ("process_group", self.process_group))
                if v is not None}


def _env_int(env: Any, name: str) -> int | None:
    value = env.get(name)
    try:
        return int(value) if value is not None and value.strip() else None
    except ValueError:
        return None


def ranks_from_env(env: Any = None) -> Ranks:
    """The launcher's view (torchrun, mpirun via its env, SLURM launchers that set RANK/WORLD_SIZE)."""
    env = os.environ if env is None else env
    rank, world = _env_int(env, "RANK"), _env_int(env, "WORLD_SIZE")
    if rank is None and world is None:
        return Ranks(local_rank=_env_int(env, "LOCAL_RANK"))
    group: dict[str, Any] = {"source": "env"}
    for key, name in (("MASTER_ADDR", "master_addr"), ("MASTER_PORT", "master_port")):
        if env.get(key):
            group[name] = env[key]
    return Ranks(rank, world, _env_int(env, "LOCAL_RANK"), group)


def ranks_from_torch() -> Ranks | None:
    """torch.distributed's view, when the program has imported and initialised it; else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        group: dict[str, Any] = {"source": "torch.distributed", "backend": str(dist.get_backend())}
        try:
            group["name"] = str(dist.group.WORLD.group_name)
        except (AttributeError, RuntimeError):
            pass
        env = ranks_from_env()
        return Ranks(int(dist.get_rank()), int(dist.get_world_size()), env.local_rank, group)
    except (RuntimeError, ValueError, AttributeError):  # torch.distributed half torn down
        return None


class RankProbe:
    """The process's :class:`Ranks`, asked on every capture but cheap: torch's answer is kept once it has one.

    A program initialises torch.distributed after capture is installed (often after its first
    operators ran), so until then the environment's answer stands; a fork gets a fresh probe.
    """

    def __init__(self) -> None:
        self._pid = -1
        self._env = Ranks()
        self._torch: Ranks | None = None

    def current(self) -> Ranks:
        if self._pid != os.getpid():
            self._pid, self._env, self._torch = os.getpid(), ranks_from_env(), None
        if self._torch is None:
            self._torch = ranks_from_torch()
            if self._torch is None:
                return self._env
        return self._torch


def distributed_facts() -> dict[str, Any]:
    """Rank, world size, local rank and process group of this process, as receipts record them.

    Example:
        >>> distributed_facts()   # under torchrun --nproc-per-node 2, on the second process
        {'rank': 1, 'world_size': 2, 'local_rank': 1, 'process_group': {'source': 'env', ...}}
    """
    return (ranks_from_torch() or ranks_from_env()).facts()


class ThreadState(threading.local):
    """One thread's capture state: its module stack and whether it runs a step that is not selected.

    The class attributes are every thread's defaults, so reading one never fails: the module hook reads
    ``skip`` on every module call of the program, and a failed thread-local lookup costs ten times a read."""

    skip = False
    stack: list | None = None


class StepTokens(NamedTuple):
    """A step begun (:meth:`StepTracker.begin_step`): what :meth:`StepTracker.end_step` resets, whether the step
    is selected (read once, as it begins: the module hook and the dispatcher path both ask), and what the
    dispatcher path entered for it."""

    step: contextvars.Token
    request: contextvars.Token | None
    selected: bool
    entered: tuple = ()
    excluded: Any = None  # a step not selected: the guard keeping the dispatcher path out of it


class StepTracker:
    """The module stack of each thread, and the step counter of each request.

    ``steps``: the run's ``--steps``, which a request's own ``steps`` replace; without either, every step
    (``per_step``) or the default's spread of them (:func:`ikdata.capture.spread.looks_at`)."""

    def __init__(self, *, step_module: str | None, request_file: str | None,
                 steps: tuple[int, ...] | None = None, per_step: bool = False) -> None:
        self.step_module = step_module
        self.steps = steps
        self.per_step = per_step
        self._exclude: Any = None
        self.request_file = RequestFile(request_file) if request_file else None
        self.local = ThreadState()
        self._counters: dict[Any, int] = {}
        self._lock = threading.Lock()

    # -- the module stack -----------------------------------------------------------------------

    def stack(self) -> list:
        stack = self.local.stack
        if stack is None:
            stack = self.local.stack = []
        return stack

    def is_step_module(self, module: Any, stack: list) -> bool:
        if self.step_module is None:
            return not stack
        cls = type(module)
        if cls.__name__ != self.step_module and f"{cls.__module__}.{cls.__qualname__}" != self.step_module:
            return False
        return not any(type(m) is cls for m in stack)  # a step module nested in itself is one step

    def begin_step(self) -> StepTokens:
        """Called as a step module's forward starts: count the step of the current request, and say whether
        it is selected (a request, and its steps or else the run's name the step, or none are named)."""
        from ikdata.capture.spread import looks_at

        req = self.current_request()
        key = req.request_id if req is not None else None
        explicit = _EXPLICIT.get()
        with self._lock:
            if explicit is None:  # counted: the n-th step module call of this request
                index = self._counters.get(key, 0)
                self._counters[key] = index + 1
            else:  # inside ``with step(N):``: that step, counting none
                index = explicit
                self._counters[key] = max(self._counters.get(key, 0), index + 1)
        token = _STEP.set(index)
        file_token = _REQUEST.set(req) if req is not None and _REQUEST.get() is None else None
        steps = req.steps if req is not None and req.steps is not None else self.steps
        selected = req is not None and (index in steps if steps is not None else
                                        self.per_step or explicit is not None or looks_at(index))
        return StepTokens(token, file_token, selected, excluded=None if selected else self._excluded())

    def _excluded(self) -> Any:
        """Enter a guard that keeps the dispatcher path's kernels out of a step not selected (capture may have
        entered it for the whole thread): the step's ops then cost what they cost without capture."""
        if self._exclude is None:
            import torch

            from ikdata.capture.dispatch import KEY

            keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, KEY))
            self._exclude = lambda: torch._C._ExcludeDispatchKeyGuard(keys)
        guard = self._exclude()
        guard.__enter__()
        return guard

    @staticmethod
    def end_step(tokens: StepTokens) -> None:
        if tokens.excluded is not None:
            tokens.excluded.__exit__(None, None, None)
        if tokens.request is not None:
            _REQUEST.reset(tokens.request)
        _STEP.reset(tokens.step)

    def steps_seen(self) -> int:
        """The most steps counted for one request in this process (0: no step module call ran)."""
        with self._lock:
            return max(self._counters.values(), default=0)

    # -- what the hooks ask ---------------------------------------------------------------------

    def current_request(self) -> Request | None:
        """The explicit request, else the request file's (None while it is absent), else no request."""
        req = _REQUEST.get()
        if req is not None:
            return req
        if self.request_file is not None:
            return self.request_file.current()
        return _NO_REQUEST

    @staticmethod
    def current_step() -> int | None:
        return _STEP.get()


def read_request_file(path: str) -> dict[str, Any]:
    """The JSON of a request file (for drivers and tests)."""
    with open(path) as stream:
        return json.load(stream)


def write_request_file(path: str, request_id: str | int, *, capture_steps: list[int] | None = None,
                       **provenance: Any) -> None:
    """Replace a request file atomically (what a driver in another process does between requests).

    Example:
        >>> write_request_file("/tmp/req.json", "req-2", capture_steps=[0, 7], model="Qwen/Qwen3-8B")
    """
    data: dict[str, Any] = {"request_id": request_id, **provenance}
    if capture_steps is not None:
        data["capture_steps"] = list(capture_steps)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as stream:
        json.dump(data, stream)
    os.replace(tmp, path)


__all__ = ["Ranks", "RankProbe", "ranks_from_env", "ranks_from_torch", "distributed_facts", "REQUEST_FIELDS_MAX_BYTES", "capped_fields", "Request", "request", "step", "at_step", "current_request", "step_asked", "StepTracker", "RequestFile", "write_request_file", "read_request_file"]
