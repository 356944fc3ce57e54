"""The Capturer: function patches, the module-call hook, and the engine-thread half of a capture.

Hooks patch functions (``torch.nn.functional.linear`` and friends) rather than
use a dispatch mode: a patched function costs one attribute check when nothing
is selected. On a selected call the Capturer checks the tensors against their
definition, claims the selection key and budget, copies the tensors to host
memory, and queues the job for the background writer. That is all the engine
thread pays.

Adapters (built-in in :mod:`ikdata.capture.adapters`, or a user's module with an
``install(api)`` function) talk to the Capturer through :meth:`Capturer.patch`,
:meth:`Capturer.on_module` and :meth:`Capturer.record`.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ikdata.core import jsonl
from ikdata.capture import census, selection, sources
from ikdata.capture.config import CaptureConfig
from ikdata.capture.context import RankProbe, StepTracker
from ikdata.core.templates import instantiate, load_templates
from ikdata.capture.weights import BlobHandle, WeightCache
from ikdata.capture.writer import CaptureWriter, Job
from ikdata.core.definitions import USER, Definition, read_folder
from ikdata.core.errors import DefinitionError, UsageError

Handler = Callable[..., None]
UNSTEPPED_SAMPLES = 16  # calls per hooked function outside any step run through the adapter, to name them
_MISSING = object()


def _log(message: str) -> None:
    sys.stderr.write(f"ikdata capture [{os.getpid()}]: {message}\n")
    sys.stderr.flush()


class Capturer:
    """Capture in one process, as configured.

    Example (a user adapter module, loaded with ``--adapter mypkg.capture_gelu``):
        >>> def install(api):
        ...     def on_gelu(api, args, kwargs, out):
        ...         api.record("gelu_f32_h4096", {"X": args[0]}, {"Y": out}, operation="F.gelu")
        ...     api.patch(torch.nn.functional, "gelu", on_gelu)
    """

    def __init__(self, config: CaptureConfig) -> None:
        self.config = config
        self.enabled = True
        self.user: dict[str, Definition] = {}
        for folder in config.definitions:
            found, problems = read_folder(Path(folder), origin=USER)
            if problems:
                raise UsageError(f"--definitions {folder}: " + "; ".join(str(p) for p in problems[:5]))
            self.user.update(found)
        self.only = frozenset(config.only)
        self.templates = load_templates()
        self.tracker = StepTracker(step_module=config.step_module, request_file=config.request_file,
                                   steps=config.steps, per_step=config.per_step)
        self.ranks = RankProbe()
        self.ledger = selection.Ledger(config.state_dir, max_per_definition=config.max_per_definition,
                                       max_bytes=config.max_bytes,
                                       per_step=config.per_step or config.steps is not None)
        self.weights = WeightCache(min_bytes=config.weight_cache_min_bytes)
        self.writer = CaptureWriter(config.into, queue_bytes=config.queue_bytes, on_error=self._writer_failed,
                                    weights=self.weights)
        self.disabled: set[str] = set()
        self.failures: list[dict[str, Any]] = []
        self.captured: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self.unstepped: dict[str, int] = {}  # definition -> calls outside any step, left out by --steps
        self._noted: dict[str, int] = {}  # label -> calls outside any step run through its adapter to name them
        self._resolved: dict[tuple, Definition | None] = {}
        self._local = _HookState()
        self._module_handlers: list[tuple[Callable[[Any], bool], Handler, str]] = []
        self._handler_by_class: dict[type, list[tuple[Handler, str]]] = {}
        self._paths: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._root_facts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._pending_error: BaseException | None = None
        self._shutdown_pid: int | None = None
        self._patches: list[tuple[Any, str, Any]] = []
        self._engine: tuple[Any, str | None] | None = None  # (the Source this process runs in, its version)
        self.on_shutdown: list[Callable[[], None]] = []  # run before the final flush (open diffusion trajectories)
        # (label, reason) -> [calls of unselected steps], for the census: one counter cell per patch and reason
        self._left: dict[tuple[str, str], list[int]] = {}
        from ikdata.capture import dispatch

        self.patched: dict[Any, tuple[str, Handler]] = {}  # original function -> (label, handler): compiled graphs' taps
        self.dispatch = dispatch.install(self)  # ops at the dispatcher (torch.library), the census's survey
        from ikdata.capture import compiled

        self.compiled = compiled.install(self)  # compiled regions counted, ops inside compiled graphs tapped

    # -- the adapter API ------------------------------------------------------------------------

    def patch(self, owner: Any, name: str, handler: Handler, *, label: str | None = None) -> None:
        """Replace ``owner.name`` by a wrapper that calls ``handler(args, kwargs, output)`` after it.

        A built-in patch that could produce no definition ``--only`` allows is not installed (its calls cost nothing).
        """
        original = getattr(owner, name)
        label = label or f"{getattr(owner, '__name__', owner)}.{name}"
        if not self.dispatch.may_record(label):
            return
        capturer = self
        tracker_local = self.tracker.local
        busy_local = self._local
        step_left = self._left.setdefault((label, "step"), [0])  # calls left in steps not selected
        budget_left = self._left.setdefault((label, "budget"), [0])  # calls left once the byte budget was full
        compiling = _compiling_test()
        from ikdata.capture.compiled import DYNAMO as dynamo  # [True] once torch._dynamo is imported

        op_local = self.dispatch.local

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if dynamo[0] and compiling():
                # Dynamo or AOT is tracing: it sees the original call and nothing of capture (no graph break,
                # no thread-local read traced), so the compiled graph is the one compiled without capture.
                # What the compiled graph runs is counted and recorded by ikdata.capture.compiled.
                return original(*args, **kwargs)
            if tracker_local.skip:  # a step not selected: the call, counted in the census, and nothing else
                out = original(*args, **kwargs)
                if not busy_local.busy:
                    (step_left if capturer.enabled else budget_left)[0] += 1  # a plain increment (no lock)
                return out
            if capturer.enabled:
                # The dispatcher path records the op this function runs, if it maps it, under this label;
                # the handler runs only for what it left (``claimed``), counted under that op (``inner``).
                state = op_local.__dict__
                outer = state.get("patch"), state.get("claimed"), state.get("inner")
                state["patch"], state["claimed"], state["inner"] = label, False, None
                try:
                    out = original(*args, **kwargs)
                finally:
                    claimed, inner = state["claimed"], state["inner"]
                    state["patch"], state["claimed"], state["inner"] = outer
                if not claimed and not busy_local.busy:
                    capturer._dispatch(handler, label, (args, kwargs, out), op=inner)
                return out
            out = original(*args, **kwargs)
            if not busy_local.busy:  # counted in the census, with why it was left
                # a plain increment (no lock): these are the calls capture must not slow down
                (step_left if capturer.enabled else budget_left)[0] += 1
            return out

        wrapper.__ikdata_original__ = original  # type: ignore[attr-defined]
        self.patched[original] = self.patched[wrapper] = (label, handler)  # Dynamo's graphs name either
        setattr(owner, name, wrapper)
        self._patches.append((owner, name, original))

    def on_module(self, match: str | Callable[[Any], bool], handler: Handler, *, label: str | None = None) -> None:
        """Call ``handler(module, args, kwargs, output)`` after each call of a matching module.

        ``match`` is a class name or a predicate on the module's class.
        """
        if label is not None and not self.dispatch.may_record(label):
            return  # a built-in module adapter whose definitions --only leaves out
        test = (lambda cls, name=match: cls.__name__ == name) if isinstance(match, str) else match
        self._module_handlers.append((test, handler, label or getattr(handler, "__name__", "module adapter")))
        self._handler_by_class.clear()

    def add_definitions(self, folder: str) -> None:
        """Make the definitions of a folder available to :meth:`record` by name."""
        found, problems = read_folder(Path(folder), origin=USER)
        if problems:
            raise UsageError(f"{folder}: " + "; ".join(str(p) for p in problems[:5]))
        self.user.update(found)

    def record(self, definition: str, inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
               operation: str, variant: str | None = None, weights: Iterable[str] = (),
               fills: Mapping[str, int] | None = None, provenance: Mapping[str, Any] | None = None,
               op: str | None = None) -> bool:
        """Capture one call, if it is selected. Returns True if it was queued.

        Args:
            definition: a definition name (from --definitions), or a template name with ``fills``.
            inputs, outputs: name -> tensor or Python scalar, as the definition names them.
            operation: what was called, for the receipt.
            variant: what distinguishes calls of the same step worth keeping apart (e.g. ``m128``).
            weights: names of inputs that are weights: reused while unchanged, each reuse checked off the
                engine thread (see :mod:`ikdata.capture.weights`).
            fills: the template's const axes as observed.
            provenance: extra receipt fields of this call (e.g. the sampler's processors).
            op: the census's name for the call (``aten::addmm``); default: the hook's label, else ``operation``.

        Raises:
            DefinitionError: only in strict mode (otherwise logged, counted, and the definition stops).
        """
        if _IS_COMPILING():  # a source's hook traced by Dynamo: compiled code is recorded by its taps
            return False
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error
        op = op or self._local.label or operation  # the census's name for the call
        req = self.tracker.current_request()
        if req is None:
            census.skipped(op, "not selected", definition)
            return False
        step = self.tracker.current_step()
        steps = req.steps if req.steps is not None else self.config.steps
        if steps is not None and (step is None or step not in steps):
            if step is None:  # say in the summary which definitions --steps left out, and why
                resolved = self._resolve(definition, fills)
                if resolved is not None:
                    self.unstepped[resolved.name] = self.unstepped.get(resolved.name, 0) + 1
            census.skipped(op, "step", definition)
            return False
        resolved = self._resolve(definition, fills)
        if resolved is None:
            why = "disabled" if definition in self.disabled else "not selected" if self.only else "no definition"
            census.skipped(op, why, definition)
            return False
        ranks = self.ranks.current()
        # in a distributed program each rank holds its own shard: its calls are keyed (and budgeted) apart
        budget = f"{resolved.name}@rank{ranks.rank}" if ranks.distributed else resolved.name
        key = (budget, req.request_id, step, variant)
        if self.ledger.is_seen(key):
            census.skipped(op, "selection rule", resolved.name)
            return False
        try:
            axes = self.writer.dataset.check(resolved, inputs, outputs)
        except DefinitionError as exc:
            census.skipped(op, "definition mismatch", resolved.name)
            self._fail(resolved.name, exc)
            return False
        weight_names = set(weights)
        cached = {}  # weight name -> (the copy made earlier, the check this capture joins)
        for name in weight_names:
            value = inputs.get(name)
            if _is_tensor(value) and self.weights.is_cacheable(value):
                found = self.weights.lookup(value)
                if found is not None:
                    cached[name] = found
        nbytes = sum(_nbytes(v) for n, v in {**inputs, **outputs}.items() if n not in cached)
        refusal = self.ledger.reserve(budget, key, nbytes)
        if refusal is not None:
            for _, check in cached.values():
                self.weights.leave(check)
            census.skipped(op, "selection rule" if refusal == selection.SEEN else "budget", resolved.name)
            if refusal != selection.SEEN:
                self.refused[refusal] = self.refused.get(refusal, 0) + 1
            if refusal == selection.BYTES_FULL:
                self.enabled = False
            return False
        host_in = {n: cached[n][0] if n in cached else self._host(v, n in weight_names) for n, v in inputs.items()}
        host_out = {n: self._host(v, False) for n, v in outputs.items()}
        facts = {**self._provenance(req, step, operation, variant), **(provenance or {}), **ranks.facts()}
        job = Job(resolved, axes, host_in, host_out, facts, nbytes, {n: c for n, (_, c) in cached.items()})
        if self.config.strict:
            self.writer.write(job)
        else:
            self.writer.submit(job)
        self.captured[resolved.name] = self.captured.get(resolved.name, 0) + 1
        census.recorded(op, resolved.name)
        return True

    # -- internals ------------------------------------------------------------------------------

    def is_selected_now(self) -> bool:
        """Whether the current request and step are selected (the cheap test before any adapter work).

        Never while Dynamo or AOT traces (``torch.compiler.is_compiling()``, which Dynamo folds to a constant): a
        source's hook that asks this first is then traced as its plain call, and no request or step (a
        ``ContextVar``) is read into a compiled graph. Compiled code is recorded by its taps (capture/compiled.py).
        """
        if _IS_COMPILING():
            return False
        req = self.tracker.current_request()
        if req is None:
            return False
        steps = req.steps if req.steps is not None else self.config.steps
        return steps is None or self.tracker.current_step() in steps

    def _is_unstepped(self, label: str) -> bool:
        """A call outside any step while --steps selects steps: run its adapter a few times, so that
        :meth:`record` can name the definitions it would have captured (and keeps nothing)."""
        req = self.tracker.current_request()
        if req is None or self.tracker.current_step() is not None:
            return False
        if (req.steps if req.steps is not None else self.config.steps) is None:
            return False
        seen = self._noted.get(label, 0)
        if seen >= UNSTEPPED_SAMPLES:
            return False
        self._noted[label] = seen + 1
        return True

    def _dispatch(self, handler: Handler, label: str, call: tuple, *, op: str | None = None) -> None:
        """Run a hook's handler on one call. ``op``: the dispatcher op under it, already counted as seen."""
        local = self._local
        if local.busy or _IS_COMPILING():  # ikdata's own call, inside a hook; or Dynamo tracing a source's hook
            return
        out = call[-1]
        if type(out).__name__ == "FakeTensor" or getattr(getattr(out, "device", None), "type", None) == "meta":
            return  # shape propagation (torch.compile, meta devices): no data to capture
        name = op or label
        if op is None:
            census.seen(label)
        if label in self.disabled:
            census.skipped(name, "disabled")
            return
        if not self.is_selected_now() and not self._is_unstepped(label):
            census.skipped(name, "step" if self.tracker.current_request() is not None else "not selected")
            return
        local.busy = True
        local.label = name  # the op record() counts its outcome under, in the census
        try:
            handler(self, *call)
        except DefinitionError:
            raise  # strict mode only: record() logs and swallows it otherwise
        except Exception as exc:  # noqa: BLE001  a failing hook must not crash the engine
            census.skipped(name, "hook failed")
            self._fail(label, exc)
        finally:
            local.busy = False
            local.label = None

    def _resolve(self, name: str, fills: Mapping[str, int] | None) -> Definition | None:
        cache_key = (name, tuple(sorted(fills.items())) if fills else None)
        found = self._resolved.get(cache_key, _MISSING)
        if found is _MISSING:
            found = self._resolve_uncached(name, fills)
            self._resolved[cache_key] = found
        if found is not None and found.name in self.disabled:
            return None
        return found  # type: ignore[return-value]

    def _resolve_uncached(self, name: str, fills: Mapping[str, int] | None) -> Definition | None:
        template = self.templates.get(name) if fills is not None else None
        if template is not None:
            instance_name = template.pattern.format(**fills)
            definition = self.user.get(instance_name) or instantiate(template, fills)
            names = {definition.name, template.name, definition.op_type}
        else:
            definition = self.user.get(name)
            if definition is None:
                self._fail(name, DefinitionError("no such definition; name it in a --definitions folder",
                                                 definition=name))
                return None
            names = {definition.name, definition.op_type}
        if self.only and not (names & self.only):
            return None
        return definition

    def _host(self, value: Any, is_weight: bool) -> Any:
        if not _is_tensor(value):
            return value
        import torch

        copy = torch.empty(tuple(value.shape), dtype=value.dtype, device="cpu")
        copy.copy_(value.detach())
        if is_weight and self.weights.is_cacheable(value):
            handle = BlobHandle(copy)
            self.weights.put(value, handle)
            return handle
        return copy

    def _provenance(self, req: Any, step: int | None, operation: str, variant: str | None) -> dict[str, Any]:
        if self._engine is None:  # detected late: the engine may import after torch
            engine = sources.loaded()
            self._engine = (engine, engine.version())
        facts: dict[str, Any] = {"engine": self._engine[0].name, "engine_version": self._engine[1]}
        stack = self.tracker.stack()
        if stack:
            root = stack[0]
            facts.update(self._facts_of(root))
            facts["module_path"] = self._module_path(root, stack[-1])
        detected = facts["engine"]
        facts.update(self.config.provenance)
        facts.update(req.provenance)
        given = {**self.config.provenance, **req.provenance}
        if facts.get("engine") != detected and "engine_version" not in given:
            # an engine named by the user: its own package's version, else none (never torch's)
            facts["engine_version"] = sources.version_of(facts.get("engine"))
        facts.update(request_id=req.request_id, step=step, operation=operation, variant=variant,
                     captured_at=time.time())
        return facts

    def _facts_of(self, root: Any) -> dict[str, Any]:
        """The model a top-level module names, and the source it comes from (after :meth:`_provenance` detected
        the engine)."""
        facts = self._root_facts.get(root)
        if facts is None:
            facts = {}
            model = getattr(root, "name_or_path", None)
            if isinstance(model, str) and model:
                facts["model"] = model
            brings = sources.of_model(type(root)) if self._engine[0] is sources.TORCH else None
            if brings is not None:  # a library's model, run with no serving engine: the library is the engine
                facts["engine"], facts["engine_version"] = brings.name, brings.version()
            self._root_facts[root] = facts
        return facts

    def _module_path(self, root: Any, module: Any) -> str:
        names = self._paths.get(root)
        if names is None:
            names = {id(m): n for n, m in root.named_modules()}
            self._paths[root] = names
        path = names.get(id(module))
        prefix = type(root).__name__
        return prefix if not path else f"{prefix}.{path}"

    def _fail(self, name: str, exc: BaseException, *, lost: bool = False) -> None:
        """A hook failed: raise (strict), else stop capturing ``name`` in this process. ``lost``: calls the
        program made were not captured at all (ikdata capture then exits 1, naming them)."""
        if self.config.strict:
            raise exc
        self.disabled.add(name)
        self.failures.append({"definition": name, "message": f"{type(exc).__name__}: {exc}", **({"lost": True} if lost else {})})
        _log(f"{name}: {exc}; capture of {name} stops in this process")

    def _writer_failed(self, job: Job, exc: BaseException) -> None:
        if self.config.strict:
            self._pending_error = exc
        self.disabled.add(job.definition.name)
        self.failures.append({"definition": job.definition.name, "message": f"{type(exc).__name__}: {exc}"})
        _log(f"{job.definition.name}: writing failed: {exc}; capture of {job.definition.name} stops")

    def module_handlers_for(self, cls: type) -> list[tuple[Handler, str]]:
        found = self._handler_by_class.get(cls)
        if found is None:
            found = [(h, label) for test, h, label in self._module_handlers if test(cls)]
            self._handler_by_class[cls] = found
        return found

    # -- process life ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything queued so far (raises a pending writer error in strict mode)."""
        self.writer.flush()
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error

    def count_left(self) -> None:
        """Hand the calls patched functions left in unselected steps, and compiled regions' calls, to the census
        (counted without a lock)."""
        self.compiled.count()
        self.dispatch.flush_surveys()
        for (label, reason), cell in list(self._left.items()):  # the wrappers hold the cells: subtract, never swap
            n = cell[0]
            if n:
                cell[0] -= n
                census.seen(label, n)
                census.skipped(label, reason, n=n)

    def shutdown(self) -> None:
        """Flush and leave a summary line for ``ikdata capture`` (once per process)."""
        if self._shutdown_pid == os.getpid():
            return
        self._shutdown_pid = os.getpid()
        self.count_left()
        try:
            for hook in list(self.on_shutdown):
                hook()
            self.writer.flush()
        finally:
            if self.config.state_dir:
                jsonl.append(os.path.join(self.config.state_dir, "events.jsonl"),
                             [{"pid": os.getpid(), "host": socket.gethostname(), "captured": self.captured,
                               "refused": self.refused, "failures": self.failures, "lost": self.writer.failed,
                               "unstepped": self.unstepped, "steps_seen": self.tracker.steps_seen(),
                               "weight_cache_hits": self.weights.hits, "weight_checks": self.weights.checks,
                               "unverified": self.weights.flagged}], fsync=False)

    def after_fork_in_child(self) -> None:
        self.writer.after_fork_in_child()
        self.ledger._lock = threading.Lock()
        self.tracker._lock = threading.Lock()
        self.captured, self.refused, self.failures, self.unstepped = {}, {}, [], {}
        self._shutdown_pid = None
        for cell in [*self._left.values(), *self.compiled.regions.values()]:  # the parent's calls are the parent's
            cell[0] = 0

    def uninstall(self) -> None:
        """Restore every patched function and interposed op (tests)."""
        self.count_left()
        self.compiled.uninstall()
        self.dispatch.uninstall()
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._patches.clear()


class _HookState(threading.local):
    """One thread's hook state: ``busy`` while a hook's handler runs (ikdata's own calls are not the program's),
    ``label`` the op its outcome is counted under. Class attributes: every thread's defaults, read without a
    failed lookup on every patched call."""

    busy = False
    label: str | None = None


def _compiling_test() -> Callable[[], bool]:
    """torch.compiler.is_compiling: True while Dynamo traces (and runs ops on fake tensors), when capture must not run."""
    try:
        import torch.compiler

        return torch.compiler.is_compiling
    except (ImportError, AttributeError):
        return lambda: False


_IS_COMPILING = _compiling_test()


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "element_size")


def _nbytes(value: Any) -> int:
    return value.numel() * value.element_size() if _is_tensor(value) else 0


__all__ = ["Capturer"]
