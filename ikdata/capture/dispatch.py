"""Operators at the dispatcher: every call of a bound op, whatever Python function reached it.

Two mechanisms, chosen by measurement (docs/capture.md, "The dispatcher path"):

* **Interposition** (``torch.library``): for each op something could be recorded from (a built-in
  aten mapper whose templates ``--only`` allows, or a definition's ``capture`` binding), a Python
  kernel is registered at the :data:`KEY` dispatch key; it runs the op below that key, then maps the
  call to a definition (:mod:`ikdata.capture.op_binding`) and hands it to :meth:`Capturer.record`.
  The key is included in a thread's dispatch state only in selected steps (for the whole run on the
  installing thread when every call is selected), so elsewhere no op, interposed or not, pays
  anything. Autograd, ``inference_mode``, backward passes and compiled graphs' calls reach it; fake,
  meta and functorch tensors (tracing) are never recorded. Ops that write an argument (in place,
  ``out=``) have the inputs a binding reads copied before the call.
* **Survey** (a ``TorchDispatchMode``): in the first :data:`SURVEY_STEPS` selected steps of each
  process, and then in selected steps 2, 4, 8, 16, ... (:func:`surveyed`: log2(N) of N steps, so an op that
  first runs late, a backward pass, an optimizer step, is still named at a bounded cost), it counts every op
  (aten and custom) into the census, so ops with no definition are named, and it binds a declared op the
  moment it first runs (an engine's op library may load after capture starts). A mode sees every op but costs
  about 10 µs per call, so it runs only there. Composite ops (``aten::linear``, ``aten::layer_norm``) are not
  counted: the ops they run are. The mode ignores compile internals, so ``torch.compile`` compiles under it.
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any, Callable

from ikdata.capture import census, op_binding
from ikdata.capture.op_binding import NO_DEFINITION, Binding, BuiltIn, OpCall
from ikdata.capture.spread import spread

SURVEY_STEPS = 2  # the first selected steps of a process in which every op is counted (then steps 2**k)


def surveyed(index: int) -> bool:
    """Whether the ``index``-th selected step of a process (from 0) is surveyed: the first :data:`SURVEY_STEPS`,
    then every power of two, so a run of N steps surveys about log2(N) of them."""
    return spread(index, SURVEY_STEPS)
# The key the kernels are registered at. It is in no tensor's key set and ops fall through it, so a kernel
# there runs only while capture includes the key in the thread's dispatch state (a selected step): elsewhere
# every op, interposed or not, costs what it cost without capture. It sits above autograd and functorch.
KEY = "PreDispatch"
OWN = "ikdata's own"  # the census's reason for a call ikdata itself made (a reference replayed in the process)
# Built-in patches whose calls this path records as well (same definition, variant and weight), under their
# label; inside any other patched function (a user's adapter, F.scaled_dot_product_attention) the patch's
# handler records the op from its own arguments, and this path only counts it.
SUPERSEDED = frozenset({"torch.nn.functional.linear", "torch.mm", "torch.matmul"})


def allowed_templates(capturer: Any) -> set[str]:
    """Template names ``--only`` lets through (all when it is empty)."""
    templates = capturer.templates
    if not capturer.only:
        return set(templates)
    from ikdata.core.templates import match_instance

    allowed = set()
    for name, template in templates.items():
        if name in capturer.only or template.definition.op_type in capturer.only:
            allowed.add(name)
    for name in capturer.only:
        found = match_instance(name)
        if found is not None:
            allowed.add(found[0].name)
    return allowed


class Dispatcher:
    """The dispatcher path of one Capturer: interposed kernels, pending bindings, and the survey."""

    def __init__(self, capturer: Any) -> None:
        self.capturer = capturer
        self.local = threading.local()  # patch: label of the patched function running; claimed; inner op
        self.builtins: dict[str, list[BuiltIn]] = {}
        self.allowed = allowed = allowed_templates(capturer)
        for spec in op_binding.BUILT_IN:
            if any(t in allowed for t in spec.templates):
                self.builtins.setdefault(spec.op, []).append(spec)
        user = [d for d in capturer.user.values()
                if not capturer.only or {d.name, d.op_type} & capturer.only]
        bindings, problems = op_binding.bindings_of(user)
        if problems:
            from ikdata.core.errors import UsageError

            raise UsageError("; ".join(problems))
        self.bindings: dict[str, list[Binding]] = {}
        for b in bindings:
            self.bindings.setdefault(b.op if "." in b.op else f"{b.op}.default", []).append(b)
        self.pending: set[str] = set(self.builtins_overloads()) | set(self.bindings)
        self.bound: set[str] = set()  # "ns::op" of every interposed op (the survey leaves them to their kernel)
        self.libraries: dict[str, Any] = {}
        self.steps_begun = 0  # selected steps begun in this process (the survey's schedule, :func:`surveyed`)
        self.steps_surveyed = 0
        self.gaps_begun = 0  # times between steps on the thread entered for the whole run (surveyed alike)
        self.open_surveys: list[Any] = []
        self._included: tuple[Any, int] | None = None
        self._lock = threading.RLock()

    def builtins_overloads(self) -> list[str]:
        return [f"{op}.{o}" for op, specs in self.builtins.items() for o in sorted({o for s in specs for o in s.overloads})]

    def may_record(self, label: str) -> bool:
        """Whether the built-in patch ``label`` could produce a definition ``--only`` allows (others: yes)."""
        templates = op_binding.PATCH_TEMPLATES.get(label)
        return templates is None or any(t in self.allowed for t in templates)

    def supersedes(self, label: str) -> bool:
        """Whether this path records what the built-in patch ``label`` would (so the patch may stand aside)."""
        return label in SUPERSEDED and bool({"aten::mm", "aten::addmm", "aten::bmm"} & set(self.builtins))

    @property
    def wanted(self) -> bool:
        """Whether anything could be recorded through the dispatcher at all."""
        return bool(self.builtins or self.bindings)

    # -- interposition ------------------------------------------------------------------------

    def bind_pending(self) -> None:
        """Interpose every pending op that exists by now (idempotent, cheap when none is pending)."""
        if not self.pending:
            return
        with self._lock:
            for qualified in sorted(self.pending):
                self._bind(qualified)

    def _bind(self, qualified: str) -> bool:
        import torch

        name, overload = qualified.rsplit(".", 1)
        ns, op = name.split("::", 1)
        try:
            func = getattr(getattr(getattr(torch.ops, ns), op), overload)
        except (AttributeError, RuntimeError):
            return False  # not registered yet: bound when it first runs (survey) or on the next bind_pending
        self.pending.discard(qualified)
        lib = self.libraries.get(ns)
        if lib is None:
            lib = self.libraries[ns] = torch.library.Library(ns, "IMPL")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lib.impl(op if overload == "default" else f"{op}.{overload}", self._kernel(name, func), KEY)
        except Exception as exc:  # noqa: BLE001  one op that cannot be interposed: say so, keep the rest
            self.capturer._fail(name, RuntimeError(f"could not interpose {qualified}: {exc}"))
            return False
        self.bound.add(name)
        return True

    def _kernel(self, op: str, func: Any) -> Callable[..., Any]:
        """The Python kernel of one op: run the op below this key, then map the call and record it."""
        import torch

        capturer = self.capturer
        tracker_local = capturer.tracker.local
        hooks_local = capturer._local  # busy while a hook's handler runs: its own ops are not the program's
        local = self.local
        builtins = self.builtins.get(op, [])
        bindings = self.bindings.get(f"{op}.{func._overloadname}", [])
        names = op_binding.schema_names(func)
        written = sorted(op_binding.written_arguments(func) & {s for b in bindings for s in b.inputs.values()})
        below = torch._C._ExcludeDispatchKeyGuard
        ours = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, KEY))
        seen = census.seen
        compiling = torch.compiler.is_compiling

        def call(args: tuple, kwargs: dict) -> Any:
            with below(ours):
                return func(*args, **kwargs)

        def run(*args: Any, **kwargs: Any) -> Any:
            state = local.__dict__
            if state.get("busy") or not capturer.enabled or hooks_local.__dict__.get("busy") or compiling():
                return call(args, kwargs)
            seen(op)
            if tracker_local.__dict__.get("skip"):  # inside a step that is not selected
                census.skipped(op, "step")
                return call(args, kwargs)
            patch = state.get("patch")
            if patch is not None and patch not in SUPERSEDED:
                state["inner"] = op  # the patched function's handler records it, from its own arguments
                return call(args, kwargs)
            if not capturer.is_selected_now():
                census.skipped(op, "not selected")
                return call(args, kwargs)
            if patch is None and _called_by_ikdata():
                census.skipped(op, OWN)
                return call(args, kwargs)
            before = {}
            if written:
                before = {n: _copy(op_binding.argument(func, names, args, kwargs, n)) for n in written}
            out = call(args, kwargs)
            if not _real(out):  # tracing (fake, meta or functorch-wrapped tensors): no data to record
                return out
            state["busy"] = True
            try:
                handled = self._record(op, func, names, builtins, bindings, args, kwargs, out, before, patch)
            finally:
                state["busy"] = False
            if patch is not None:
                state["inner"] = op
                state["claimed"] = state.get("claimed") or handled
            return out

        run.__name__ = f"ikdata_capture_{op.replace('::', '_')}"
        return run

    def _record(self, op: str, func: Any, names: list[str], builtins: list[BuiltIn], bindings: list[Binding],
                args: tuple, kwargs: dict, out: Any, before: dict, patch: str | None) -> bool:
        """Map one call and record it; returns True when a definition took it (recorded or refused by a rule)."""
        from ikdata.core.errors import DefinitionError

        reason = NO_DEFINITION
        try:
            found: OpCall | str = NO_DEFINITION
            for spec in builtins:
                found = spec.mapper(args, kwargs, out)
                if isinstance(found, OpCall):
                    break
                reason = found
            if not isinstance(found, OpCall):
                for binding in bindings:
                    found = op_binding.bind_call(binding, func, names, args, kwargs, out, before)
                    if isinstance(found, OpCall):
                        break
                    reason = found
            if not isinstance(found, OpCall):
                census.skipped(op, reason)
                return False
            self.capturer.record(found.definition, found.inputs, found.outputs, operation=patch or op,
                                 variant=found.variant, weights=found.weights, fills=found.fills, op=op)
            return True
        except DefinitionError:
            raise  # strict mode only: record() logs and counts it otherwise
        except Exception as exc:  # noqa: BLE001  a failing mapper must not crash the engine
            census.skipped(op, "disabled")
            self.capturer._fail(op, exc)
            return False

    # -- where the path is entered -------------------------------------------------------------

    def step_began(self) -> list[Any]:
        """A selected step begins on this thread: include the key (when something could be recorded) and
        survey it while surveys are left. Returns what :meth:`step_ended` undoes."""
        import torch

        entered: list[Any] = []
        gap_on = self.gap_ended()  # still on (under a mode the program pushed): it counts this step's ops
        if not self.capturer.enabled:
            return entered
        self.bind_pending()
        if self.wanted:
            guard = torch._C._IncludeDispatchKeyGuard(getattr(torch._C.DispatchKey, KEY))
            guard.__enter__()
            entered.append(guard)
        with self._lock:
            surveying = surveyed(self.steps_begun) and not gap_on
            self.steps_begun += 1
            self.steps_surveyed += surveying
        if surveying:
            survey = _survey_mode(self)
            survey.__enter__()
            entered.append(survey)
        return entered

    def step_ended(self, entered: tuple[Any, ...] | list[Any]) -> None:
        for item in reversed(entered):
            if hasattr(item, "flush"):  # a survey: popped only from the top of the mode stack (never another mode)
                if _on_top(item):
                    item.__exit__(None, None, None)
                else:
                    self.open_surveys.append(item)  # left on, counting; its counts reach the census at exit
                item.flush()
                continue
            item.__exit__(None, None, None)
        if self._included is not None and self._included[1] == threading.get_ident():
            self.gap_began()

    # -- the survey between steps (a backward pass, an optimizer step, ops outside any module) ---------------

    def gap_began(self) -> None:
        """On the thread capture is entered on for the whole run: survey the time until the next step, on the same
        schedule as steps (:func:`surveyed`): gap 0 is from install to the first step."""
        if not self.capturer.enabled or getattr(self.local, "gap", None) is not None or not _may_push_or_pop():
            return
        with self._lock:
            surveying = surveyed(self.gaps_begun)
            self.gaps_begun += 1
        if surveying:
            survey = _survey_mode(self)
            survey.__enter__()
            self.local.gap = survey
            self.open_surveys.append(survey)

    def gap_ended(self) -> bool:
        """End this thread's survey between steps, if it is on and on top of the mode stack. A mode the program
        pushed after it (its own TorchDispatchMode, an engine's) is never popped in its place: the gap survey then
        stays on, counting, until it is on top again. Returns whether a gap survey is still on."""
        survey = getattr(self.local, "gap", None)
        if survey is not None and (not _on_top(survey) or not _may_push_or_pop()):
            return True
        if survey is not None:
            self.local.gap = None
            try:
                survey.__exit__(None, None, None)
            finally:
                survey.flush()
                if survey in self.open_surveys:
                    self.open_surveys.remove(survey)
        return False

    def flush_surveys(self) -> None:
        """Hand what the open surveys counted so far to the census (at exit: the last gap is never ended)."""
        for survey in list(self.open_surveys):
            survey.flush()

    def include_here(self) -> None:
        """Include the key on this thread until :meth:`uninstall` (a configuration that selects every call)."""
        import torch

        if self.wanted and self._included is None:
            guard = torch._C._IncludeDispatchKeyGuard(getattr(torch._C.DispatchKey, KEY))
            guard.__enter__()
            self._included = (guard, threading.get_ident())

    def uninstall(self) -> None:
        self.gap_ended()
        self.flush_surveys()
        if self._included is not None and self._included[1] == threading.get_ident():
            self._included[0].__exit__(None, None, None)
        self._included = None
        for lib in self.libraries.values():
            lib._destroy()
        self.libraries.clear()
        self.bound.clear()


_OURS = "ikdata.capture."


def _called_by_ikdata() -> bool:
    """Whether the Python code that called this op (past torch's own frames) is ikdata's: a reference replayed
    or a judge run in the program's process computes no workload of the program."""
    frame = sys._getframe(2)
    for _ in range(16):
        if frame is None:
            return False
        name = frame.f_globals.get("__name__") or ""
        if name.startswith("ikdata_reference_") or (name.startswith("ikdata.") and not name.startswith(_OURS)):
            return True
        if not name.startswith(("torch", _OURS)):  # torch's frames and capture's survey are passed through
            return False
        frame = frame.f_back
    return False


def _real(out: Any) -> bool:
    """Whether an op's result is a real tensor with data (not fake, meta or a functorch wrapper)."""
    import torch

    first = out[0] if isinstance(out, (tuple, list)) and out else out
    if first is None:
        return True  # an in-place op returns nothing: its arguments were checked by the binding
    if type(first) not in (torch.Tensor, torch.nn.Parameter) or first.device.type == "meta":
        return False
    return not torch._C._functorch.is_functorch_wrapped_tensor(first)


def _copy(value: Any) -> Any:
    return value.detach().clone() if hasattr(value, "detach") else value


def _survey_mode(dispatcher: Dispatcher) -> Any:
    from torch._ops import HigherOrderOperator
    from torch.utils._python_dispatch import TorchDispatchMode

    ours, hooks = dispatcher.local, dispatcher.capturer._local

    def busy() -> bool:
        return bool(ours.__dict__.get("busy") or hooks.__dict__.get("busy"))

    class Survey(TorchDispatchMode):
        """Counts every op of a step (those interposed count themselves) and binds declared ops as they appear."""

        def __init__(self) -> None:
            super().__init__()
            self.counts: dict[str, int] = {}
            self.names: dict[Any, str] = {}

        supports_higher_order_operators = True  # torch.cond, with_effects, ...: counted and run as they are

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = self.names.get(func)
            if name is None and isinstance(func, HigherOrderOperator):
                name = self.names[func] = f"higher_order::{func.name()}"
            if name is None:
                name = func._schema.name
                qualified = f"{name}.{func._overloadname}"
                if qualified in dispatcher.pending:
                    with dispatcher._lock:
                        dispatcher._bind(qualified)
                if name.startswith("ikdata::") or _composite(name):
                    name = ""  # capture's own tap, or an op whose parts are counted (aten::linear runs aten::addmm)
                self.names[func] = name
            if name and name not in dispatcher.bound and not busy():  # ikdata's own copies are not the program's
                self.counts[name] = self.counts.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            """Only once Dynamo is loaded: otherwise torch wraps ``__torch_dispatch__`` in a disable that imports
            ``torch._dynamo`` at its first call (1.5 s, a program that never compiles must not pay); nothing can
            compile before that import, and the class is built anew for each survey."""
            return "torch._dynamo" in sys.modules

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            """torch.compile compiles under this mode as it would without it (a mode that does not say so makes
            Dynamo skip every frame); the mode sees the compiled code's calls that reach the dispatcher."""
            return True

        def flush(self) -> None:
            counts, self.counts = self.counts, {}
            for name, n in counts.items():
                census.seen(name, n)

    return Survey()


_HOP_DISPATCH: list[Any] = []  # HigherOrderOperator.dispatch as torch defined it, while capture lets HOPs pass


def let_higher_order_ops_pass() -> None:
    """Let higher-order ops (``torch.cond``, ``with_effects``, ``auto_functionalized`` in compiled graphs) run
    while capture includes :data:`KEY` in the thread's dispatch state.

    A higher-order op dispatches in Python, and at ``PreDispatch`` it has a kernel only for export's pre-dispatch
    tracing: with the key included and no pre-dispatch tracing on, torch finds none and raises. Capture interposes
    no higher-order op, so such a call is redispatched with the key left out, as without capture. Idempotent.
    """
    if _HOP_DISPATCH:
        return
    import torch
    from torch import _ops

    cls = _ops.HigherOrderOperator
    original = cls.dispatch
    key = getattr(torch._C.DispatchKey, KEY)
    keys = torch._C.DispatchKeySet(key)
    exclude = torch._C._ExcludeDispatchKeyGuard
    tracing_depth = _ops._len_torch_dispatch_stack_pre_dispatch

    def dispatch(hop: Any, dispatch_key: Any, *args: Any, **kwargs: Any) -> Any:
        if dispatch_key == key and key not in hop.py_kernels and tracing_depth() == 0:
            with exclude(keys):
                below = _ops._compute_keyset(args, kwargs, hop.non_fallthrough_keys).highestPriorityTypeId()
                return original(hop, below, *args, **kwargs)
        return original(hop, dispatch_key, *args, **kwargs)

    dispatch.__wrapped__ = original  # type: ignore[attr-defined]
    cls.dispatch = dispatch
    _HOP_DISPATCH.append(original)


def _may_push_or_pop() -> bool:
    """Whether a mode pushed or popped now cannot be undone behind capture's back. A gap survey is pushed at one
    step's end and popped at the next one's beginning, which a program's blocks need not nest with; leaving
    ``torch.inference_mode()`` restores the thread's whole dispatch key set as it was on entering, so a mode pushed
    or popped inside one would leave the key set and the mode stack disagreeing after it (torch then stops at its
    first op: "Hit Python dispatch key but no arguments had PyInterpreter"). Gap surveys change nothing there."""
    import torch

    return not torch.is_inference_mode_enabled()


def _on_top(mode: Any) -> bool:
    """Whether ``mode`` is the top of this thread's TorchDispatchMode stack (the one ``__exit__`` would pop)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return _get_current_dispatch_mode() is mode


def _composite(name: str) -> bool:
    """Whether ``name`` is an op that decomposes into others before any backend (CompositeImplicitAutograd)."""
    import torch

    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd"))
    except RuntimeError:
        return False


def install(capturer: Any) -> Dispatcher:
    """Interpose the ops ``capturer`` could record, entered in its selected steps. Returns the Dispatcher.

    A configuration that selects every call (no ``--steps``, no request file) enters the path on the
    installing thread for good; otherwise each selected step enters it (and the first ones are surveyed).
    """
    dispatcher = Dispatcher(capturer)
    let_higher_order_ops_pass()
    dispatcher.bind_pending()
    tracker = capturer.tracker
    begin, end = tracker.begin_step, tracker.end_step

    def begin_step() -> Any:
        tokens = begin()
        if tokens.selected:
            entered = dispatcher.step_began()
            if entered:
                return tokens._replace(entered=tuple(entered))
        return tokens

    def end_step(tokens: Any) -> None:
        try:
            if tokens.entered:
                dispatcher.step_ended(tokens.entered)
        finally:
            end(tokens)

    tracker.begin_step, tracker.end_step = begin_step, end_step  # the step hook (boot) calls these
    if capturer.config.steps is None and capturer.config.request_file is None:
        dispatcher.include_here()
        dispatcher.gap_began()  # ops before the first step (a custom op run outside any module) are named
    return dispatcher


__all__ = ["KEY", "Dispatcher", "SURVEY_STEPS", "allowed_templates", "install"]
