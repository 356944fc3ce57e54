"""Capture real operator inputs and outputs from a running program into an ikdata dataset.

Usually driven by ``ikdata capture --into DIR -- CMD``, which sets ``IKDATA_CAPTURE``
for CMD and every Python process it starts. Inside the program:

    >>> import ikdata.capture
    >>> with ikdata.capture.request("req-1", steps=[0, 1]):
    ...     model.generate(ids, max_new_tokens=4)
    >>> ikdata.capture.flush()

Modules: ``config`` (settings passed to children), ``context`` (request and step),
``selection`` (once per key, caps), ``writer`` (background writer), ``hooks``
(the Capturer), ``adapters`` (built-in torch adapters), ``templates`` (shipped
definition templates and :func:`trusted_instances`), ``dispatch`` and ``op_binding`` (operators
seen at the dispatcher, aten and custom ops bound to definitions), ``census`` (every op seen,
recorded or skipped and why, per process), ``sources`` (which engine a call ran in, from the
declared capture sources; plain torch the fallback), ``running`` (the capture running in this
process: the public interface features' capture hooks use), ``module_call`` (torch's own module-call
shortcut, where it applies), ``boot`` (per-process boot, reached only by the interpreter's ``.pth`` line
and by capture), ``runner`` (run a command with capture on).
"""

from __future__ import annotations

from ikdata.capture.boot import uninstall
from ikdata.capture.running import current, flush
from ikdata.capture.config import CaptureConfig, parse_size, parse_steps
from ikdata.capture.context import request, step, write_request_file
from ikdata.core.templates import instantiate, load_templates, trusted_instances

def install(config: CaptureConfig):
    """Enable capture in this program (the library path, no ``ikdata capture``); returns the Capturer.

    As under ``ikdata capture``, the process leaves its census at exit, after the final flush: without a
    run's state folder it goes into ``INTO/census/<host>-<pid>.jsonl``. Commit with ``ikdata manifest INTO``.

    Example:
        >>> ikdata.capture.install(ikdata.capture.CaptureConfig(into="runs/x"))
    """
    import atexit

    from ikdata.capture import boot, census

    # registered before the boot's exit hook, so it runs after it (atexit is last in, first out)
    atexit.register(census.write, config.state_dir, config.into)
    return boot.install(config)


__all__ = ["CaptureConfig", "current", "flush", "install", "instantiate", "load_templates", "parse_size",
           "parse_steps", "request", "step", "trusted_instances", "uninstall", "write_request_file"]
