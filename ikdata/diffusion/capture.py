"""Diffusers hooks: every pipeline call becomes a trajectory, with no change to the program.

:func:`install` (run by :func:`ikdata.capture.adapters.install`, once torch is imported) patches, at class
level, ``__call__`` of every Diffusers pipeline class (subclasses of ``DiffusionPipeline`` or
``ModularPipeline`` that define it) and ``step`` of every scheduler class (subclasses of
``SchedulerMixin`` that define it): in the Diffusers modules already imported, and in every one
imported later (a meta-path finder patches each module as it finishes loading, the way capture
waits for torch). Class-level patches tell LTX-2's audio scheduler (a deep copy of the video one)
from the video scheduler by identity, which an instance attribute could not: the copy would carry
it along, still bound to the video scheduler.

A patched function costs one lookup when no capture is active. While a pipeline call runs, a
:class:`~ikdata.diffusion.recorder.TrajectoryRecorder` is active in that thread: scheduler steps
report to it, and ``torch.randn`` draws with a CPU generator are noted (the noise check).
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
import threading
from typing import Any, Callable

from ikdata.capture.sources import declared_by

_LOCAL = threading.local()
_PATCHED: set[type] = set()
_PENDING: set[str] = set()
_WATCHER: Any = None
_CAPTURER: Any = None
_RANDN_ORIGINAL: Any = None
_LOCK = threading.RLock()
_LOOSE: dict[str, int] = {}  # scheduler class -> step() calls made outside any pipeline call (a hand-written loop)

PIPELINE_BASES = ("DiffusionPipeline", "ModularPipeline")
SCHEDULER_BASES = ("SchedulerMixin",)


def library() -> Any:
    """Diffusers' declaration (:mod:`ikdata.diffusion.feature`): the package whose modules are patched, the engine
    a trajectory names."""
    return declared_by(__name__)


def _in_library(name: str) -> bool:
    package = library().module
    return name == package or name.startswith(package + ".")


def install(capturer: Any) -> None:
    """Route Diffusers pipeline calls and scheduler steps of this process to ``capturer``. Idempotent."""
    global _CAPTURER
    with _LOCK:
        _CAPTURER = capturer
        _patch_randn()
        patch_loaded()
        _watch()
    hooks = getattr(capturer, "on_shutdown", None)
    if isinstance(hooks, list) and abort_open not in hooks:
        hooks.append(abort_open)
    if isinstance(hooks, list) and report_loose not in hooks:
        hooks.append(report_loose)


def uninstall() -> None:
    """Stop routing to the capturer (tests). Class patches stay and pass straight through."""
    global _CAPTURER
    with _LOCK:
        _CAPTURER = None


def active() -> Any:
    """The recorder of the pipeline call running in this thread, or None."""
    stack = _LOCAL.__dict__.get("stack")
    return stack[-1] if stack else None


def abort_open() -> None:
    """Write every trajectory still open in this process as incomplete (the process is ending)."""
    from ikdata.diffusion.recorder import open_recorders

    for recorder in open_recorders():
        try:
            recorder.finish(error="the process ended during the pipeline call")
        except Exception as exc:  # noqa: BLE001  ending the process must go on
            sys.stderr.write(f"ikdata capture: writing an open trajectory failed: {exc}\n")


def report_loose() -> None:
    """Name, as a capture failure that is never exit 0, the scheduler steps made outside any pipeline call:
    capture ties steps to a pipeline's ``__call__`` and could not record them."""
    capturer = _CAPTURER
    if capturer is None or not _LOOSE:
        return
    total = sum(_LOOSE.values())
    by_class = ", ".join(f"{name}: {n}" for name, n in sorted(_LOOSE.items()))
    capturer.failures.append({"definition": "trajectory", "lost": True,
                              "message": f"saw {total} scheduler step(s) it could not tie to a pipeline ({by_class}): "
                                         "step() called outside any pipeline __call__ (a hand-written denoising "
                                         "loop); ikdata records the steps of a Diffusers pipeline call only"})
    _LOOSE.clear()


# -- patching -------------------------------------------------------------------------------------


def patch_loaded() -> None:
    """Patch the classes of every Diffusers module loaded so far (modules still loading: when they finish),
    every subclass of the pipeline and scheduler bases already defined elsewhere (a program's own
    pipeline), and every subclass defined later (through the bases' ``__init_subclass__``)."""
    for name, module in list(sys.modules.items()):
        if _in_library(name):
            _patch_or_defer(name, module)
    for module_name, base_name in _BASES:
        base = getattr(sys.modules.get(module_name), base_name, None)
        if isinstance(base, type):
            _patch_subclasses(base)
            _hook_subclassing(base)


_BASES = (("diffusers.pipelines.pipeline_utils", "DiffusionPipeline"),
          ("diffusers.modular_pipelines.modular_pipeline", "ModularPipeline"),
          ("diffusers.schedulers.scheduling_utils", "SchedulerMixin"))


def _patch_subclasses(base: type) -> None:
    stack = list(base.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        _patch_class(cls)


def _hook_subclassing(base: type) -> None:
    """Classes defined after capture started (a program's own pipeline or scheduler) are patched as created."""
    if base.__dict__.get("__ikdata_subclass_hook__"):
        return
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        _patch_class(cls)

    base.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
    base.__ikdata_subclass_hook__ = True  # type: ignore[attr-defined]


def _patch_or_defer(name: str, module: Any) -> None:
    spec = getattr(module, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        _PENDING.add(name)
        return
    _PENDING.discard(name)
    patch_module(module)


def patch_module(module: Any) -> int:
    """Patch the pipeline and scheduler classes a module defines; return how many were patched."""
    count = 0
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            count += _patch_class(value)
    return count


def _patch_class(cls: type) -> int:
    if cls in _PATCHED:
        return 0
    bases = {c.__name__ for c in cls.__mro__}  # ModularPipeline defines __call__ on the base itself
    if bases & set(SCHEDULER_BASES) and callable(cls.__dict__.get("set_timesteps")):
        _wrap(cls, "set_timesteps", _set_timesteps_wrapper)  # the schedule's arguments (replay's schedule check)
    if bases & set(SCHEDULER_BASES) and callable(cls.__dict__.get("add_noise")):
        _wrap(cls, "add_noise", _add_noise_wrapper)  # a partial schedule's start: the image's latents noised
    if bases & set(SCHEDULER_BASES) and callable(cls.__dict__.get("step")):
        _wrap(cls, "step", _step_wrapper)
        return 1
    if bases & set(PIPELINE_BASES) and callable(cls.__dict__.get("__call__")):
        _wrap(cls, "__call__", _call_wrapper)
        return 1
    return 0


def _wrap(cls: type, name: str, make: Callable[[Callable], Callable]) -> None:
    original = cls.__dict__[name]
    if getattr(original, "__ikdata_original__", None) is not None:
        return
    wrapper = make(original)
    wrapper.__ikdata_original__ = original  # type: ignore[attr-defined]
    setattr(cls, name, wrapper)
    _PATCHED.add(cls)


def _call_wrapper(original: Callable) -> Callable:
    @functools.wraps(original)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        capturer = _CAPTURER
        if capturer is None or not capturer.enabled or active() is not None:
            return original(self, *args, **kwargs)
        from ikdata.diffusion.recorder import TrajectoryRecorder

        recorder = TrajectoryRecorder.start(capturer, self, original, args, kwargs, library=library())
        if recorder is None:
            return _in_call(original, self, args, kwargs)
        stack = _LOCAL.__dict__.setdefault("stack", [])
        stack.append(recorder)
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            stack.pop()
            recorder.finish(error=f"the program raised {type(exc).__name__}: {exc}")
            raise
        stack.pop()
        recorder.finish(result=result)
        return result

    return __call__


def _step_wrapper(original: Callable) -> Callable:
    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = active()
        if recorder is None:
            capturer = _CAPTURER
            if capturer is not None and capturer.enabled and not _LOCAL.__dict__.get("depth"):
                name = type(self).__name__  # outside any pipeline call (a pipeline not captured counts its depth)
                _LOOSE[name] = _LOOSE.get(name, 0) + 1
                return _in_call(original, self, args, kwargs)  # a step calling another step counts once
            return original(self, *args, **kwargs)
        if recorder.in_step:
            return original(self, *args, **kwargs)
        return recorder.on_step(original, self, args, kwargs)

    return step


def _add_noise_wrapper(original: Callable) -> Callable:
    @functools.wraps(original)
    def add_noise(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        recorder = active()
        if recorder is not None and not recorder.in_step:
            recorder.on_add_noise(self, args, kwargs, result)
        return result

    return add_noise


def _in_call(original: Callable, owner: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``original`` marked as inside a call, so the scheduler steps it makes are not counted as loose."""
    _LOCAL.depth = _LOCAL.__dict__.get("depth", 0) + 1
    try:
        return original(owner, *args, **kwargs)
    finally:
        _LOCAL.depth -= 1


def _set_timesteps_wrapper(original: Callable) -> Callable:
    @functools.wraps(original)
    def set_timesteps(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = active()
        if recorder is not None:
            recorder.on_set_timesteps(original, self, args, kwargs)
        return original(self, *args, **kwargs)

    return set_timesteps


def _patch_randn() -> None:
    """Note ``torch.randn`` draws made with a generator while a pipeline call is recorded."""
    global _RANDN_ORIGINAL
    import torch

    if _RANDN_ORIGINAL is not None or getattr(torch.randn, "__ikdata_original__", None) is not None:
        return
    original = _RANDN_ORIGINAL = torch.randn

    @functools.wraps(original)
    def randn(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        recorder = active()
        if recorder is not None and (kwargs.get("generator") is not None or recorder.in_step):
            recorder.on_draw(kwargs.get("generator"), out)  # in a scheduler step: the noise it adds
        return out

    randn.__ikdata_original__ = original  # type: ignore[attr-defined]
    torch.randn = randn


class _DiffusersWatcher(importlib.abc.MetaPathFinder):
    """Patches each Diffusers module right after it finishes loading."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not _in_library(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        try:
            with _LOCK:
                patch_module(module)
                for module_name, base_name in _BASES:
                    if module.__name__ == module_name and isinstance(getattr(module, base_name, None), type):
                        _hook_subclassing(getattr(module, base_name))
                for name in list(_PENDING):
                    if name in sys.modules:
                        _patch_or_defer(name, sys.modules[name])
        except Exception as exc:  # noqa: BLE001  a hook that fails must not break the program's import
            sys.stderr.write(f"ikdata capture: cannot hook {module.__name__}: {exc}\n")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _watch() -> None:
    global _WATCHER
    if _WATCHER is None:
        _WATCHER = _DiffusersWatcher()
        sys.meta_path.insert(0, _WATCHER)


__all__ = ["install", "uninstall", "active", "library", "abort_open", "patch_loaded", "patch_module", "report_loose"]
