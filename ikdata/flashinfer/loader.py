"""Import FlashInfer's pure-Python parts without its top level, which needs CUDA libraries.

``import flashinfer`` loads its JIT machinery (``tvm_ffi``, CUDA); the recorder
(``flashinfer.api_logging``) and the templates (``flashinfer.trace``) need only
torch. When the top level fails, the package is entered through a bare module
whose ``__path__`` is the installed folder, so only those submodules run.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
import types
from dataclasses import dataclass
from typing import Any

from ikdata.core.errors import UsageError

# The flashinfer-python versions ikdata is tested with (the ``flashinfer`` extra allows exactly this range;
# tests/flashinfer/test_fi_versions.py keeps the extra, the installed version and docs/flashinfer.md in step).
TESTED_VERSIONS = ("0.7.2.post1", "0.7.4")

# The submodules that run on CPU with torch alone (checked by tests/flashinfer/test_fi_loader.py).
CPU_SUBMODULES = ("flashinfer.api_logging", "flashinfer.trace", "flashinfer.trace.template",
                  "flashinfer.trace.templates")


def available() -> bool:
    """Whether FlashInfer is installed (nothing is imported)."""
    return "flashinfer" in sys.modules or importlib.util.find_spec("flashinfer") is not None


def submodule(name: str) -> types.ModuleType:
    """Import ``flashinfer.<name>``, entering the package without its top level if that fails.

    Raises:
        UsageError: FlashInfer is not installed.
    """
    full = f"flashinfer.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.util.find_spec("flashinfer") if "flashinfer" not in sys.modules else None
    if "flashinfer" not in sys.modules:
        if spec is None or not spec.submodule_search_locations:
            raise UsageError("FlashInfer is not installed; install flashinfer-python (pip install "
                             "'ikdata[flashinfer]') to read its dumps and templates")
        try:
            importlib.import_module("flashinfer")
        except Exception:  # the top level needs CUDA libraries: enter through a bare package
            for key in [k for k in sys.modules if k == "flashinfer" or k.startswith("flashinfer.")]:
                del sys.modules[key]
            package = types.ModuleType("flashinfer")
            package.__path__ = list(spec.submodule_search_locations)
            package.__spec__ = spec
            package.__file__ = spec.origin
            sys.modules["flashinfer"] = package
    return importlib.import_module(full)


@dataclass(frozen=True)
class TemplateRef:
    """One TraceTemplate installed with FlashInfer: where it is defined and the object."""

    module: str
    attr: str
    template: Any

    @property
    def key(self) -> str:
        return f"{self.module}:{self.attr}"


def templates() -> list[TemplateRef]:
    """Every TraceTemplate object in ``flashinfer.trace.templates`` (each once, by identity), in module order.

    A template module that fails to import is skipped; :func:`template_import_failures` names them.
    """
    found, _ = _scan()
    return found


def template_import_failures() -> dict[str, str]:
    """Template modules that could not be imported here, with the error."""
    return _scan()[1]


_SCANNED: tuple[list[TemplateRef], dict[str, str]] | None = None


def _scan() -> tuple[list[TemplateRef], dict[str, str]]:
    global _SCANNED
    if _SCANNED is not None:
        return _SCANNED
    package = submodule("trace.templates")
    template_cls = submodule("trace.template").TraceTemplate
    seen: set[int] = set()
    found: list[TemplateRef] = []
    failed: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        name = f"{package.__name__}.{info.name}"
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # a template module needing a GPU-only dependency
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        for attr, value in list(vars(module).items()):
            for where, template in _reachable(value, attr, template_cls, 0):
                if id(template) not in seen:
                    seen.add(id(template))
                    found.append(TemplateRef(name, where, template))
    _SCANNED = (found, failed)
    return _SCANNED


def _reachable(value: Any, where: str, template_cls: type, depth: int):
    """Templates held by a module attribute: itself, inside dicts, lists and tuples, or a dispatcher's ``templates``."""
    if isinstance(value, template_cls):
        yield where, value
        return
    if depth >= 3 or isinstance(value, (str, bytes, types.ModuleType, type)):
        return
    if isinstance(value, dict):
        for key, item in list(value.items()):
            yield from _reachable(item, f"{where}[{key!r}]", template_cls, depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _reachable(item, f"{where}[{index}]", template_cls, depth + 1)
    elif callable(value) and isinstance(getattr(value, "templates", None), (list, tuple)):
        for index, item in enumerate(value.templates):
            yield from _reachable(item, f"{where}.templates[{index}]", template_cls, depth + 1)


def declared_templates(fi_api: str) -> list[TemplateRef]:
    """The installed templates FlashInfer's API ``fi_api`` traces with: each name its decorator gives
    (:func:`api_templates`), resolved in the template modules, a dispatcher's ``templates`` included (an API
    decorated with ``trace=x_dispatch`` may render any template the dispatcher holds, each also listed under its
    own module attribute)."""
    if fi_api in _DECLARED:
        return _DECLARED[fi_api]
    names = api_templates().get(fi_api) or set()
    refs = {id(ref.template): ref for ref in templates()}
    template_cls = submodule("trace.template").TraceTemplate if names else None
    found: dict[int, TemplateRef] = {}
    for module in sorted({ref.module for ref in refs.values()}) if names else ():
        for name in sorted(names):
            value = getattr(sys.modules.get(module), name, None)
            for _, template in _reachable(value, name, template_cls, 0) if value is not None else ():
                if id(template) in refs:
                    found[id(template)] = refs[id(template)]
    _DECLARED[fi_api] = list(found.values())
    return _DECLARED[fi_api]


_DECLARED: dict[str, list[TemplateRef]] = {}


def dispatched(fi_api: str, arguments: dict) -> list[TemplateRef] | None:
    """The template FlashInfer's own dispatcher picks for a call of ``fi_api`` with these arguments (an API
    decorated with ``trace=x_dispatch`` picks by, say, ``routing_method_type``), as a one-item list; None when the
    API has no dispatcher or it picks nothing it can name."""
    names = api_templates().get(fi_api) or set()
    refs = {id(ref.template): ref for ref in templates()}
    for module in sorted({ref.module for ref in refs.values()}) if names else ():
        for name in sorted(names):
            value = getattr(sys.modules.get(module), name, None)
            if not callable(value) or not isinstance(getattr(value, "templates", None), (list, tuple)):
                continue
            try:
                picked = value(**arguments)
            except Exception:  # noqa: BLE001  a dispatcher that cannot read these arguments picks nothing
                return None
            return [refs[id(picked)]] if id(picked) in refs else None
    return None


__all__ = ["CPU_SUBMODULES", "TESTED_VERSIONS", "TemplateRef", "available", "declared_templates", "dispatched",
           "submodule",
           "template_import_failures", "templates"]


def api_templates() -> dict[str, set[str]]:
    """FlashInfer's own decorated APIs (``module.function``) -> the template attribute names they trace with.

    Read from the installed sources with ``ast`` (nothing imported or run): each
    ``@flashinfer_api(trace=NAME)``. A recorder dump names its function and module, so a
    call of a FlashInfer API finds its template here without trying all of them.
    """
    global _API_TEMPLATES
    if _API_TEMPLATES is not None:
        return _API_TEMPLATES
    import ast
    from pathlib import Path

    spec = importlib.util.find_spec("flashinfer") if "flashinfer" not in sys.modules else sys.modules["flashinfer"].__spec__
    roots = list(spec.submodule_search_locations or []) if spec else []
    found: dict[str, set[str]] = {}
    for root in roots:
        for path in Path(root).rglob("*.py"):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if "flashinfer_api(trace=" not in text:
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            module = "flashinfer." + ".".join(path.relative_to(root).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            owners = {id(child): node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                      for child in node.body}
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                for decorator in getattr(node, "decorator_list", []):
                    if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "flashinfer_api":
                        for kw in decorator.keywords:
                            if kw.arg == "trace":
                                name = kw.value.id if isinstance(kw.value, ast.Name) else getattr(kw.value, "attr", None)
                                if name:
                                    found.setdefault(f"{module}.{node.name}", set()).add(name)
                                    if id(node) in owners:  # a wrapper's method, as the recorder names it
                                        found.setdefault(f"{module}.{owners[id(node)]}.{node.name}", set()).add(name)
    _API_TEMPLATES = found
    return found


_API_TEMPLATES: dict[str, set[str]] | None = None
