"""Capture decides engines and libraries by their declarations (ikdata.core.features Source), never by name,
and features reach the running capture through ikdata.capture.running, never through the boot hook."""

from __future__ import annotations

import sys
import types
from importlib.metadata import version

import pytest
import torch

from ikdata.capture import running, sources
from ikdata.core import features
from ikdata.core.features import Source
from capture_helpers import read_jsonl


def _declare(monkeypatch, *added: Source) -> None:
    """Declare extra sources after the real ones, for this test only."""
    declared = features.sources()
    monkeypatch.setattr(features, "sources", lambda: (*declared, *added))


def _class_in(module: str) -> type:
    return type("Model", (torch.nn.Module,), {"__module__": module})


def test_a_model_class_names_the_source_that_declares_its_modules(monkeypatch):
    transformers = features.source("transformers")
    assert sources.of_model(_class_in("transformers.models.llama.modeling_llama")) is transformers
    assert sources.of_model(_class_in("transformers_modules.org.repo.modeling_x")) is transformers  # hub code
    assert sources.of_model(_class_in("transformersish.models")) is None  # a module prefix, not a string prefix
    assert sources.of_model(_class_in("__main__")) is None
    mylib = Source("mylib", "mylib", models=("mylib",))
    _declare(monkeypatch, mylib)
    assert sources.of_model(_class_in("mylib.nets")) is mylib


def test_the_serving_engine_is_the_declared_one_whose_module_is_loaded_else_torch(monkeypatch):
    assert sources.loaded() is sources.TORCH
    monkeypatch.setitem(sys.modules, "myserver", types.ModuleType("myserver"))
    myserver = Source("myserver", "myserver", engine=True)
    _declare(monkeypatch, myserver, Source("mylib", "sys"))  # a loaded library is not a serving engine
    assert sources.loaded() is myserver
    assert sources.TORCH not in features.sources()  # torch is the fallback, never a source whose hooks install


def test_a_named_engine_has_its_declared_sources_version_else_its_packages(monkeypatch):
    sources.version_of.cache_clear()
    assert sources.version_of(" SGLang ") is None  # declared, not installed here
    assert sources.version_of("typer") == version("typer")  # not declared: the package of that name
    assert sources.version_of("") is None and sources.version_of(None) is None
    module = types.ModuleType("mylib_engine")
    module.__version__ = "9.9"
    monkeypatch.setitem(sys.modules, "mylib_engine", module)
    _declare(monkeypatch, Source("declared-name", "mylib_engine"))
    assert sources.version_of("Declared-Name") == "9.9"
    sources.version_of.cache_clear()


def test_completions_accept_every_declared_serving_engine_with_an_order(monkeypatch):
    from ikdata.sampling.completions import definitions_by_engine

    assert definitions_by_engine() == {"sglang": "sampling_top_logprobs_sglang", "vllm": "sampling_top_logprobs_vllm"}
    _declare(monkeypatch, Source("myserver", "myserver", order="hf", engine=True), Source("lib", "lib", order="hf"))
    assert definitions_by_engine()["myserver"] == "sampling_top_logprobs_hf" and "lib" not in definitions_by_engine()


def test_receipts_of_a_declared_librarys_model_name_that_library(capture_into, monkeypatch, tmp_path):
    library = types.ModuleType("mylib")
    library.__version__ = "1.2"
    monkeypatch.setitem(sys.modules, "mylib", library)
    _declare(monkeypatch, Source("mylib", "mylib", models=("mylib",)))
    model_class = type("Net", (torch.nn.Module,), {"__module__": "mylib.nets", "forward": lambda self, x: self.linear(x)})
    model = model_class()
    model.linear = torch.nn.Linear(8, 4, bias=False)
    capture_into(only=["gemm"])
    import ikdata.capture

    with ikdata.capture.request("r"):
        model(torch.randn(3, 8))
    ikdata.capture.flush()
    receipts = read_jsonl(tmp_path / "ds" / "receipts.jsonl")
    assert receipts and {(r["engine"], r["engine_version"]) for r in receipts} == {("mylib", "1.2")}
    assert {r["module_path"] for r in receipts} == {"Net.linear"}


def test_a_feature_patches_a_module_for_the_capturer_active_when_the_program_imports_it(tmp_path, monkeypatch):
    (tmp_path / "late_library_for_capture.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def patch(capturer, module):
        seen.append((capturer, module.__name__))

    monkeypatch.setattr(running, "_ACTIVE", None)
    running.when_imported("late_library_for_capture", "installing", patch)
    running.when_imported("late_library_for_capture", "installing", patch)  # watched once
    running.activate("the capturer")
    try:
        import late_library_for_capture  # noqa: F401
    finally:
        running.activate(None)
        sys.modules.pop("late_library_for_capture", None)
    assert seen == [("the capturer", "late_library_for_capture")]
    running.when_imported("sys", "now", patch)  # already imported: patched at once, for the capturer given
    assert seen[-1] == ("now", "sys")


def test_no_capturer_active_when_the_module_loads_means_no_patch(tmp_path, monkeypatch):
    (tmp_path / "later_library_for_capture.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    monkeypatch.setattr(running, "_ACTIVE", None)
    running.when_imported("later_library_for_capture", "uninstalled", lambda c, m: seen.append(c))
    try:
        import later_library_for_capture  # noqa: F401
    finally:
        sys.modules.pop("later_library_for_capture", None)
    assert seen == []
