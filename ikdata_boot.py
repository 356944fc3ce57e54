"""The interpreter-start hook of ``ikdata capture``: standard library only, until the program imports torch.

``ikdata_capture.pth`` (installed into site-packages with the package) imports this
module only when ``IKDATA_CAPTURE`` is set, and calls :func:`boot`. :func:`boot`
puts a finder at the front of ``sys.meta_path`` that does nothing but compare
module names; the moment the program imports ``torch`` (and after torch has
finished importing), it hands over to :func:`ikdata.capture.boot.boot`, which
patches torch before the program can bind the original functions.

This module is top-level, not inside ``ikdata``, on purpose: importing any
``ikdata.*`` module runs ``ikdata/__init__.py``, which loads the whole library
(validation, import, jsonschema, orjson), about 150 ms and 130 modules that a
process which never touches torch does not need. Here only ``os`` and ``sys``
(already loaded by ``site``) are used. Figures: ``tools/bench/boot.py``.
"""

import os
import sys

ENV = "IKDATA_CAPTURE"
WATCHED = "torch"


def boot():
    """Called from the .pth line: hand over to capture when the program imports torch. Idempotent; never raises."""
    if not os.environ.get(ENV):
        return
    if WATCHED in sys.modules:  # called late, torch already there: start now
        _start()
        return
    import atexit  # built in: costs nothing to import

    atexit.register(_check_at_exit)
    watch(_start)


def watch(on_import, name=WATCHED):
    """Call ``on_import()`` right after the module ``name`` has finished importing (once).

    Returns the finder (already on ``sys.meta_path``), or None when one watching ``name``
    with the same callback is already installed.
    """
    for finder in sys.meta_path:
        if isinstance(finder, ImportWatcher) and finder.name == name and finder.on_import is on_import:
            return None
    finder = ImportWatcher(name, on_import)
    sys.meta_path.insert(0, finder)
    return finder


_FAILED = []  # why ikdata.capture.boot could not be imported in this process, if it could not


def _start():
    try:
        from ikdata.capture.boot import boot as capture_boot
    except Exception as exc:
        if os.environ.get("IKDATA_CAPTURE_STRICT", "") not in ("", "0"):
            raise
        _FAILED.append(f"{type(exc).__name__}: {exc}")
        sys.stderr.write(f"ikdata capture: not enabled in process {os.getpid()}: {exc}\n")
        return
    capture_boot()


def _check_at_exit():
    """At exit: a process that imported torch without capture starting (a finder ahead of the watcher found
    torch, say) reports it, so that ``ikdata capture`` names it instead of staying silent."""
    if WATCHED not in sys.modules or ("ikdata.capture.boot" in sys.modules and not _FAILED):
        return
    try:
        from ikdata.capture import census
        from ikdata.capture.config import CaptureConfig

        config = CaptureConfig.from_env()
        census.not_enabled(_FAILED[0] if _FAILED else "torch was imported without the import watcher seeing it "
                           "(a finder ahead of ikdata's on sys.meta_path found it)")
        if config is not None:
            census.write(config.state_dir, config.into)
    except Exception as exc:
        sys.stderr.write(f"ikdata capture: not enabled in process {os.getpid()}: {exc}\n")


class ImportWatcher:
    """A ``sys.meta_path`` finder that lets every import through and wraps the loader of one module.

    It finds nothing itself: for ``name`` it asks the finders behind it for the real spec and wraps
    its loader so that ``on_import`` runs after the module body. It stays on ``sys.meta_path`` until
    the module has executed: a ``find_spec`` probe (transformers and vLLM ask
    ``importlib.util.find_spec("torch")`` before importing it) gets a wrapped spec it never executes,
    and the real import later is seen all the same. Any other name costs one string comparison.
    """

    def __init__(self, name, on_import):
        self.name = name
        self.on_import = on_import
        self.fired = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        spec = None
        behind = False
        for finder in list(sys.meta_path):  # the finders behind this one, as the import system asks them
            if not behind:
                behind = finder is self
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _CallingLoader(spec.loader, self)
        return spec

    def executed(self):
        """The watched module has executed: leave ``sys.meta_path`` and call back, once."""
        if self.fired:
            return
        self.fired = True
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        self.on_import()


class _CallingLoader:
    """Delegates to the real loader; tells the watcher once the module has executed."""

    def __init__(self, loader, watcher):
        self._loader = loader
        self._watcher = watcher

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._watcher.executed()

    def __getattr__(self, name):
        return getattr(self._loader, name)
