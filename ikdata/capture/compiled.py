"""Compiled code under capture: ``torch.compile`` compiles what it compiles without capture, and what the
compiled code runs is counted and recorded where it runs.

Capture's Python hooks (patched functions, the module-call hook, the dispatcher kernels) step aside while
Dynamo or AOT traces (``torch.compiler.is_compiling()``): Dynamo sees the original calls, so the graphs, their
number and their breaks are the ones compiled without capture. What runs is seen in two places, both set up
when the program imports ``torch._dynamo`` (a program that never compiles pays nothing):

* **The region.** Each graph Dynamo hands to a backend comes back as a callable the compiled bytecode calls on
  real tensors. Capture wraps that callable (outside the graph, so it stays outside a CUDA graph too) and counts
  its calls into the census as ``compiled region: <function> (<backend>)``: the summary names every compiled
  region that ran, and how often.
* **Ops inside the graph.** Before the backend compiles the graph, a pass adds, after each call that a capture
  hook maps (``F.linear``, ``torch.mm``, ``torch.matmul``, SDPA, the norms, GELU/SiLU/ReLU), a call of the
  op ``ikdata::tap(site, tensors)`` with that call's tensors and its result. The tap is an ordered side effect
  (never removed or reordered by AOT or Inductor); its kernel, at run time, hands the real tensors to the same
  handler the patched function would have run, under the same selection (steps, requests, ``--only``, caps).
  So a model compiled by Inductor is recorded with what Inductor computed, and judged against the eager
  reference. The tap makes Inductor keep the tapped result in memory (a fused norm or activation is written
  out once more); the graphs and their count do not change.
  Every backend gets the taps (``eager``, ``aot_eager``, ``inductor``, an engine's own): compiled code runs with
  the dispatcher path's key left out (:meth:`Compiled._wrap_entry`), so its kernels never see compiled graphs'
  ops and no call is recorded twice.

CUDA graphs (``mode="reduce-overhead"``) replay kernels without Python, so a Python tap kernel would run only
while the graph is recorded. There the tap must become a device copy into buffers that the region wrapper
allocates and drains after each replay (outside the graph): see docs/capture.md, "Compiled code".
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable

REGION = "compiled region"  # the census's prefix for a compiled region's calls
# Set once the program has imported torch._dynamo: until then nothing can trace, and the hooks skip asking
# ``torch.compiler.is_compiling()`` (a list index instead of two Python calls on every module and patched call).
DYNAMO = [False]
TAP = "ikdata::tap"


@dataclass(frozen=True)
class Site:
    """One tapped call of a compiled graph: what to run at run time, and how to rebuild the call's arguments."""

    label: str  # the census's name: the patched function's label, or the aten op a dispatcher mapper takes
    handler: Callable[..., Any] | None  # a patch's handler (capturer, args, kwargs, out), or None: ``op``'s mappers
    op: str | None
    args: tuple  # constants, or _Slot(i): tensors[i]
    kwargs: dict


@dataclass(frozen=True)
class _Slot:
    index: int


# torch-level functions (as Dynamo's graph names them) whose calls the dispatcher's aten mappers take as they are
_ACTIVATIONS = {"gelu": "aten::gelu", "silu": "aten::silu", "relu": "aten::relu"}


class Compiled:
    """Counts compiled regions and taps the ops inside compiled graphs, for one Capturer."""

    def __init__(self, capturer: Any) -> None:
        self.capturer = capturer
        self.sites = _SITES  # per process: a graph tapped under one Capturer may run under the next (tests)
        self.regions: dict[str, list[int]] = {}  # region name -> [calls not yet handed to the census]
        self._lock = threading.Lock()
        self._restore: list[tuple[Any, str, Any]] = []
        self._started = False

    # -- installation --------------------------------------------------------------------------

    def watch(self) -> None:
        """Start when the program imports ``torch._dynamo`` (at once if it already has)."""
        import sys

        if "torch._dynamo" in sys.modules:
            self.start()
            return
        import ikdata_boot

        ikdata_boot.watch(self.start, "torch._dynamo")

    def start(self) -> None:
        DYNAMO[0] = True
        if self._started:
            return
        self._started = True
        try:
            from torch._dynamo import output_graph
        except ImportError:  # a torch without Dynamo: nothing compiles
            return
        _define_tap(self)
        owner = output_graph.OutputGraph
        original = owner.call_user_compiler
        compiled = self

        @functools.wraps(original)
        def call_user_compiler(graph: Any, gm: Any, example_inputs: Any) -> Any:
            backend = _backend_name(graph.compiler_fn)
            try:
                if compiled.capturer.enabled:
                    compiled.tap(gm)
            except Exception as exc:  # noqa: BLE001  the graph compiles untapped: say so, never break compilation
                compiled.capturer._fail(REGION, RuntimeError(f"could not tap a compiled graph: {exc}"))
            name = _region_name(graph, gm)
            fn = original(graph, gm, example_inputs)
            return compiled.region(fn, name, backend)

        owner.call_user_compiler = call_user_compiler
        self._restore.append((owner, "call_user_compiler", original))
        self._wrap_entry()

    def _wrap_entry(self) -> None:
        """Run every ``torch.compile``'d callable with the dispatcher path's key out of the thread's dispatch state.

        Dynamo guards each compiled graph on the dispatch keys its tensors carry, the thread's included keys
        among them. Capture includes its key in selected steps only, so a graph compiled in one step would fail
        its guards in the next and be compiled again (two graphs for one). With the key left out of every call
        of compiled code, compilation and every run see the state they see without capture, and the ops inside
        compiled graphs are recorded by their taps, not by the dispatcher path's kernels.
        """
        import torch
        from torch._dynamo import eval_frame

        from ikdata.capture.dispatch import KEY

        keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, KEY))
        exclude = torch._C._ExcludeDispatchKeyGuard
        owner = eval_frame.OptimizeContext
        original = owner.__call__

        @functools.wraps(original)
        def call(context: Any, fn: Any) -> Any:
            result = original(context, fn)
            if isinstance(result, torch.nn.Module) or not callable(result):
                return result  # an OptimizedModule: its forward was made by this same call, on a function

            @functools.wraps(result)
            def compiled_call(*args: Any, **kwargs: Any) -> Any:
                with exclude(keys):
                    return result(*args, **kwargs)

            return compiled_call

        owner.__call__ = call
        self._restore.append((owner, "__call__", original))

    def uninstall(self) -> None:
        if _TAP_OWNER and _TAP_OWNER[0] is self:
            _TAP_OWNER.clear()  # graphs tapped earlier still run: their taps do nothing now
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()
        self.count()

    # -- the region ----------------------------------------------------------------------------

    def region(self, fn: Callable[..., Any], name: str, backend: str) -> Callable[..., Any]:
        """``fn`` (a backend's compiled graph) with its calls counted, outside the graph."""
        label = f"{REGION}: {name} ({backend})"
        with self._lock:
            cell = self.regions.setdefault(label, [0])

        def run(*args: Any, **kwargs: Any) -> Any:
            cell[0] += 1  # a plain increment: this runs on every call of compiled code
            return fn(*args, **kwargs)

        run.__dict__.update(getattr(fn, "__dict__", {}))  # e.g. _boxed_call: Dynamo calls it as it would call fn
        run.__wrapped__ = fn  # type: ignore[attr-defined]
        return run

    def count(self) -> None:
        """Hand the regions' calls to the census (at exit; the cells are subtracted, never swapped)."""
        from ikdata.capture import census

        for label, cell in list(self.regions.items()):
            n = cell[0]
            if n:
                cell[0] -= n
                census.seen(label, n)
                census.skipped(label, census.COMPILED, n=n)

    # -- ops inside the graph ------------------------------------------------------------------

    def targets(self) -> dict[Any, tuple[str, Callable[..., Any] | None, str | None]]:
        """Dynamo-graph call targets capture maps -> (label, handler, aten op)."""
        import torch
        import torch.nn.functional as F

        found: dict[Any, tuple[str, Callable[..., Any] | None, str | None]] = {}
        for original, (label, handler) in self.capturer.patched.items():
            found[original] = (label, handler, None)
            inner = getattr(original, "__wrapped__", None)
            if inner is not None:
                found.setdefault(inner, (label, handler, None))
        builtins = self.capturer.dispatch.builtins
        for name, op in _ACTIVATIONS.items():
            if op not in builtins:
                continue
            for owner in (F, torch, torch._C._nn):
                target = getattr(owner, name, None)
                target = getattr(target, "__ikdata_original__", target)
                if target is not None:
                    found.setdefault(target, (op, None, op))
        return found

    def tap(self, gm: Any) -> int:
        """Add a tap after each mapped call of ``gm`` (Dynamo's graph, before the backend). Returns the taps added."""
        import torch

        targets = self.targets()
        tap_op = torch.ops.ikdata.tap.default
        added = 0
        for node in list(gm.graph.nodes):
            if node.op != "call_function":
                continue
            found = targets.get(node.target)
            if found is None or not _is_tensor_node(node):
                continue
            tensors: list[Any] = []

            def slot(value: Any) -> Any:
                if isinstance(value, torch.fx.Node):
                    if not _is_tensor_node(value):
                        raise NotTappable
                    tensors.append(value)
                    return _Slot(len(tensors) - 1)
                if isinstance(value, (list, tuple)):
                    return type(value)(slot(v) for v in value)
                return value

            try:
                args = tuple(slot(a) for a in node.args)
                kwargs = {k: slot(v) for k, v in node.kwargs.items()}
            except NotTappable:  # a symbolic size or a non-tensor value: left untapped
                continue
            original = getattr(node.target, "__ikdata_original__", None)
            if original is not None:  # Dynamo put capture's wrapper in the graph: the graph calls what it wraps
                node.target = original
            label, handler, op = found
            with self._lock:
                self.sites.append(Site(label, handler, op, args, kwargs))
                site = len(self.sites) - 1
            with gm.graph.inserting_after(node):
                gm.graph.call_function(tap_op, (site, [*tensors, node]))
            added += 1
        if added:
            gm.graph.lint()
            gm.recompile()
        return added

    def run_tap(self, site_index: int, tensors: list[Any]) -> None:
        """The tap's kernel: one mapped call of compiled code ran, with these real tensors (its result last)."""
        if self.capturer._local.busy or not 0 <= site_index < len(self.sites):
            return
        site = self.sites[site_index]
        values = list(tensors)

        def fill(value: Any) -> Any:
            if isinstance(value, _Slot):
                return values[value.index]
            if isinstance(value, (list, tuple)):
                return type(value)(fill(v) for v in value)
            return value

        args = tuple(fill(a) for a in site.args)
        kwargs = {k: fill(v) for k, v in site.kwargs.items()}
        out = values[-1]
        capturer = self.capturer
        handler = site.handler if site.handler is not None else self._mapper(site.op)
        if capturer.tracker.local.skip or not capturer.enabled:
            from ikdata.capture import census

            census.seen(site.label)
            census.skipped(site.label, "step" if capturer.enabled else "budget")
            return
        capturer._dispatch(handler, site.label, (args, kwargs, out))

    def _mapper(self, op: str | None) -> Callable[..., Any]:
        dispatcher = self.capturer.dispatch

        def handler(capturer: Any, args: tuple, kwargs: dict, out: Any) -> None:
            from ikdata.capture import census
            from ikdata.capture.op_binding import OpCall

            reason = census.NO_DEFINITION
            for spec in dispatcher.builtins.get(op, []):
                found = spec.mapper(args, kwargs, out)
                if isinstance(found, OpCall):
                    capturer.record(found.definition, found.inputs, found.outputs, operation=op, variant=found.variant,
                                    weights=found.weights, fills=found.fills, op=op)
                    return
                reason = found
            census.skipped(op, reason)

        return handler


class NotTappable(Exception):
    pass


def _is_tensor_node(node: Any) -> bool:
    import torch

    value = node.meta.get("example_value", node.meta.get("val"))
    return isinstance(value, torch.Tensor)


def _backend_name(compiler_fn: Any) -> str:
    """The backend's name as torch.compile was given it (``inductor``, ``aot_eager``, a function's name)."""
    seen = 0
    fn = compiler_fn
    while fn is not None and seen < 8:
        name = getattr(fn, "compiler_name", None) or getattr(fn, "_torchdynamo_orig_backend", None)
        if isinstance(name, str):
            return name
        inner = getattr(fn, "compiler_fn", None) or getattr(fn, "_torchdynamo_orig_backend", None)
        if inner is None or inner is fn:
            break
        fn, seen = inner, seen + 1
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return {"compile_fx": "inductor"}.get(name, name)


def _region_name(graph: Any, gm: Any) -> str:
    """What Dynamo compiled: the outermost module its graph runs (``Sequential``), else the function's name."""
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            _, cls = next(iter(stack.values()))
            return f"{getattr(cls, '__qualname__', cls)}.forward"
    try:
        code = graph.root_tx.f_code
        return getattr(code, "co_qualname", code.co_name)
    except AttributeError:
        return "<compiled code>"


_SITES: list[Site] = []  # every tapped call of this process's compiled graphs, by the index its tap carries
_TAP_OWNER: list[Compiled] = []
_LIBRARY: list[Any] = []


def _define_tap(compiled: Compiled) -> None:
    """Define ``ikdata::tap(int site, Tensor[] tensors) -> ()`` once per process: an ordered side effect whose kernel
    calls the current Capturer's :meth:`Compiled.run_tap`."""
    _TAP_OWNER[:] = [compiled]
    if _LIBRARY:
        return
    import torch

    lib = torch.library.Library("ikdata", "FRAGMENT")
    lib.define("tap(int site, Tensor[] tensors) -> ()")

    def kernel(site: int, tensors: list[Any]) -> None:
        if _TAP_OWNER:
            _TAP_OWNER[0].run_tap(site, tensors)

    def fake(site: int, tensors: list[Any]) -> None:
        return None

    lib.impl("tap", kernel, "CompositeExplicitAutograd")
    torch.library.register_fake("ikdata::tap", fake, lib=lib)
    op = torch.ops.ikdata.tap.default
    # Kept by every dead-code pass (FX, AOT, Inductor); not an effect token (with_effects), which would add a
    # higher-order op that the dispatcher path's key cannot run.
    torch.fx.node.has_side_effect(op)
    _LIBRARY.append(lib)


def install(capturer: Any) -> Compiled:
    """Count and tap compiled code for ``capturer``, from the moment the program imports ``torch._dynamo``."""
    found = Compiled(capturer)
    found.watch()
    return found


__all__ = ["Compiled", "REGION", "Site", "install"]
