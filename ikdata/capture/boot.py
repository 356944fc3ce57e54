"""The per-process boot: turn capture on in every Python process that starts with ``IKDATA_CAPTURE`` set.

``ikdata_capture.pth`` (installed with the package) imports the top-level
:mod:`ikdata_boot` at interpreter start only when the variable is set; that
module, standard library only, waits for the program to import torch and then
calls :func:`boot` here, which patches torch before any other module can bind
the original functions. :func:`boot` called earlier (torch not imported yet)
waits the same way, through :func:`ikdata_boot.watch`; it never imports torch.

Process life: capture flushes at normal exit (atexit), on SIGTERM (when the
program has not installed its own handler), and in ``os._exit`` (how forked
multiprocessing children leave). Before a fork the writer is drained, and the
child starts with an empty writer of its own.
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import sys
import threading
from typing import Any

from ikdata.capture import census, running
from ikdata.capture.config import CaptureConfig

_CONFIG: CaptureConfig | None = None  # this process's configuration, once read (for the census at exit)
_BOOTED = False
_REAL_EXIT = os._exit
_LOCK = threading.RLock()


def boot() -> None:
    """Called from the .pth file: enable capture if ``IKDATA_CAPTURE`` is set. Idempotent; never raises."""
    global _BOOTED
    if _BOOTED or not os.environ.get("IKDATA_CAPTURE"):
        return
    _BOOTED = True
    config = None
    try:
        config = CaptureConfig.from_env()
        if config is None:
            return
        if "torch" in sys.modules and hasattr(sys.modules["torch"], "nn"):
            install(config)
        else:
            import ikdata_boot

            ikdata_boot.watch(lambda: _install_logging(config))
    except Exception as exc:  # noqa: BLE001  a broken capture set-up must not stop the program
        if os.environ.get("IKDATA_CAPTURE_STRICT", "") not in ("", "0"):
            raise
        _not_enabled(config, exc)


def current() -> Any:
    """The Capturer of this process, or None when capture is off (features ask :mod:`ikdata.capture.running`)."""
    return running.current()


def install(config: CaptureConfig) -> Any:
    """Enable capture in this process now (imports torch). Returns the Capturer; idempotent.

    Example:
        >>> install(CaptureConfig(into="captures/run1", steps=(0,)))
    """
    global _CONFIG
    with _LOCK:
        if running.current() is not None:
            return running.current()
        from ikdata.capture import adapters
        from ikdata.capture.hooks import Capturer

        _CONFIG = config
        capturer = Capturer(config)
        running.activate(capturer)  # the hooks may patch, for it, a module another hook's install imports
        try:
            adapters.install(capturer)  # operators, then every declared source's hooks
            _install_adapters(capturer, config)
            _install_module_hook(capturer)
        except BaseException:
            running.activate(None)
            capturer.uninstall()  # no half-patched torch: capture is off in this process, and says why
            raise
        census.enabled()
        _install_process_hooks()
        return capturer


def _install_adapters(capturer: Any, config: CaptureConfig) -> None:
    """The user's ``--adapter`` modules: one that fails is named in the census (ikdata capture exits 1) and the
    built-in capture goes on, unless strict."""
    for path in config.adapters:
        try:
            importlib.import_module(path).install(capturer)
        except Exception as exc:  # noqa: BLE001  the built-in capture goes on; ikdata capture exits 1
            if config.strict:
                raise
            census.adapter_failed(path, f"{type(exc).__name__}: {exc}")
            sys.stderr.write(f"ikdata capture [{os.getpid()}]: --adapter {path} failed to install: "
                             f"{type(exc).__name__}: {exc}; the built-in capture goes on without it\n")
        else:
            census.adapter_installed(path)


def uninstall() -> None:
    """Undo :func:`install` in this process (tests): flush, restore the patched functions."""
    with _LOCK:
        capturer = running.current()
        running.activate(None)
        if capturer is not None:
            from ikdata.core.features import sources

            for source in sources():  # a source's hooks that outlive the patches (import watchers)
                module = importlib.import_module(source.hooks) if source.hooks else None
                if hasattr(module, "uninstall"):
                    module.uninstall()
            capturer.writer.flush()
            capturer.uninstall()


def flush() -> None:
    """Write everything captured so far in this process (no-op when capture is off)."""
    running.flush()


def _install_module_hook(capturer: Any) -> None:
    """Track the module stack (module paths, step counting) and run module adapters.

    Every module call of the program runs this, so it is kept lean: the tracker's state and methods are bound
    once, here, and a module with no hooks is called the way torch's own shortcut calls it
    (:mod:`ikdata.capture.module_call`), so inside a step that is not selected a module call costs one
    thread-local test more than without capture."""
    import torch

    from ikdata.capture import module_call

    original = torch.nn.Module._call_impl
    tracker = capturer.tracker
    local = tracker.local
    step_module = tracker.step_module
    begin_step, end_step = tracker.begin_step, tracker.end_step  # as the dispatcher path wrapped them
    handler_by_class, handlers_for = capturer._handler_by_class, capturer.module_handlers_for
    inline = module_call.inlinable(original)  # else every module is called through torch's _call_impl
    backward_pre, backward, forward, forward_pre = module_call.global_hooks(original) if inline else ((),) * 4
    tracing = torch._C._get_tracing_state
    compiling = torch.compiler.is_compiling
    from ikdata.capture.compiled import DYNAMO as dynamo  # [True] once torch._dynamo is imported

    def call_impl(module: Any, *args: Any, **kwargs: Any) -> Any:
        if dynamo[0] and compiling():  # Dynamo traces the module call as without capture (nothing of ours traced)
            return original(module, *args, **kwargs)
        if local.skip:  # inside a step that is not selected: no bookkeeping at all
            if (not inline or forward or forward_pre or backward or backward_pre or module._forward_hooks
                    or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks or tracing()):
                return original(module, *args, **kwargs)
            return module.forward(*args, **kwargs)  # torch's shortcut, taken here
        stack = local.stack
        if stack is None:
            stack = tracker.stack()
        tokens = None
        if (not stack) if step_module is None else tracker.is_step_module(module, stack):
            tokens = begin_step()
            if not tokens.selected:
                local.skip = True
                try:
                    return original(module, *args, **kwargs)
                finally:
                    local.skip = False
                    end_step(tokens)
        stack.append(module)
        try:
            if (not inline or forward or forward_pre or backward or backward_pre or module._forward_hooks
                    or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks or tracing()):
                out = original(module, *args, **kwargs)
            else:
                out = module.forward(*args, **kwargs)
        finally:
            stack.pop()
        try:
            if capturer.enabled:
                cls = type(module)
                handlers = handler_by_class.get(cls)
                for handler, label in handlers if handlers is not None else handlers_for(cls):
                    stack.append(module)
                    try:
                        capturer._dispatch(lambda cap, *call: handler(cap, module, *call), label, (args, kwargs, out))
                    finally:
                        stack.pop()
        finally:
            if tokens is not None:
                end_step(tokens)
        return out

    call_impl.__ikdata_original__ = original  # type: ignore[attr-defined]
    torch.nn.Module._call_impl = call_impl
    capturer._patches.append((torch.nn.Module, "_call_impl", original))


_PROCESS_HOOKS = False


def _install_process_hooks() -> None:
    global _PROCESS_HOOKS
    if _PROCESS_HOOKS:
        return
    _PROCESS_HOOKS = True
    atexit.register(_shutdown)
    os._exit = _exit_flushing  # type: ignore[assignment]
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child)
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        if previous in (signal.SIG_DFL, None) or callable(previous):
            signal.signal(signal.SIGTERM, _make_sigterm(previous))
            if previous in (signal.SIG_DFL, None):
                _forward_sigterm_to_the_main_thread()


def _shutdown() -> None:
    capturer = running.current()
    if capturer is not None:
        try:
            capturer.shutdown()
        except Exception as exc:  # noqa: BLE001
            sys.stderr.write(f"ikdata capture: flushing at exit failed: {exc}\n")
    _write_census()


def _write_census() -> None:
    """This process's census record, after the final flush (so failed writes are in it). Never raises."""
    config = _CONFIG
    if config is not None and os.environ.get("IKDATA_CAPTURE"):  # not for an install() of a test's own process
        census.write(config.state_dir, config.into)


def _exit_flushing(code: int) -> None:
    _shutdown()
    _REAL_EXIT(code)


def _forward_sigterm_to_the_main_thread() -> None:
    """Make SIGTERM flush and end the process even while the main thread sleeps.

    Python runs a signal's handler in the main thread, when it next executes bytecode. A SIGTERM
    that the kernel delivers to another thread (torch's, or any library's) does not wake a main
    thread blocked in ``time.sleep``, so without ikdata the default action would have ended the
    process at once, and with ikdata's handler it would wait. The C handler writes the signal's
    number to the wakeup fd from whichever thread; a small thread reads it and sends SIGTERM to the
    main thread itself, which interrupts the sleep and runs the handler. Skipped when the program
    already uses the wakeup fd (asyncio).
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        earlier = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:
        earlier = None
    if earlier != -1:
        if earlier is not None:
            signal.set_wakeup_fd(earlier)
        os.close(read_fd)
        os.close(write_fd)
        return
    main = threading.main_thread().ident

    def forward() -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            # Only when the main thread has not started handling it: a sleeping main thread is woken.
            if signal.SIGTERM in data and main is not None and not _TERMINATING.wait(0.05):
                signal.pthread_kill(main, signal.SIGTERM)

    threading.Thread(target=forward, name="ikdata-sigterm", daemon=True).start()


_TERMINATING = threading.Event()  # set as capture's own SIGTERM handling starts (the program has none)


def _make_sigterm(previous: Any) -> Any:
    def on_sigterm(signum: int, frame: Any) -> None:
        if callable(previous):
            _shutdown()
            previous(signum, frame)
            return
        if _TERMINATING.is_set():  # a second SIGTERM while flushing: the first one ends the process
            return
        _TERMINATING.set()
        _shutdown()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    return on_sigterm


def _before_fork() -> None:
    capturer = running.current()
    if capturer is not None:
        capturer.writer.before_fork()


def _after_fork_parent() -> None:
    capturer = running.current()
    if capturer is not None:
        capturer.writer.after_fork_in_parent()


def _after_fork_child() -> None:
    census.reset()  # the child counts its own calls, and leaves its own record
    capturer = running.current()
    if capturer is not None:
        capturer.after_fork_in_child()


def _install_logging(config: CaptureConfig) -> None:
    """Install from the import hook: a failure is printed (raised in strict mode), never stops the program."""
    try:
        install(config)
    except Exception as exc:  # noqa: BLE001
        if config.strict:
            raise
        _not_enabled(config, exc)


def _not_enabled(config: CaptureConfig | None, exc: BaseException) -> None:
    """Capture could not start here: say so now, and in this process's census at exit (``ikdata capture``
    then exits 1 naming the process). Without a readable configuration only the message is left."""
    global _CONFIG
    sys.stderr.write(f"ikdata capture: not enabled in process {os.getpid()}: {exc}\n")
    census.not_enabled(f"{type(exc).__name__}: {exc}")
    if config is not None and _CONFIG is None:
        _CONFIG = config
    if _CONFIG is not None:
        atexit.register(_write_census)
        os.register_at_fork(after_in_child=census.reset)


__all__ = ["boot", "install", "uninstall", "flush", "current"]
