"""A feature left out of the registry is unknown to every path, never to some (issue 50): with diffusion
unregistered, ``ikdata noise``, replay's diffusion options, capture's ``--streams``, the schema list and the record
kinds no longer know it; with the serving engines unregistered, the sampling judge no longer knows their cut orders
(derived from the sources' declarations, not a list of its own). Each path knows it again once it is back."""

from __future__ import annotations

from types import SimpleNamespace

from typer.testing import CliRunner

from ikdata.core import features


def _cli(*args: str):
    from ikdata.cli import app

    return CliRunner().invoke(app, list(args))


def _diffusion_everywhere() -> dict[str, bool]:
    from ikdata.core import record_kinds, schema

    return {
        "noise runs": _cli("noise", "1", "--shape", "video=1,2").exit_code == 0,
        "noise listed": any(line.split()[:1] == ["noise"] for line in _cli("--help").output.splitlines()),
        "replay --floor-k": "--floor-k" in _cli("replay", "--help").output,
        "capture --streams": "--streams" in _cli("capture", "--help").output,
        "trajectory schema": "trajectory" in schema.KINDS and "model" in schema.KINDS,
        "trajectories kind": "trajectories" in record_kinds.RECORD_TOPS,
    }


def test_diffusion_left_out_is_unknown_to_every_path_and_known_again_once_back():
    assert set(_diffusion_everywhere().values()) == {True}
    with features.unregistered("diffusion"):
        assert _diffusion_everywhere() == dict.fromkeys(_diffusion_everywhere(), False)
        refused = _cli("noise", "1", "--shape", "video=1,2")
        assert refused.exit_code == 2 and "no registered feature offers it" in refused.output
        assert _cli("replay", "nowhere", "--floor-k", "3").exit_code == 2  # no such option
    assert set(_diffusion_everywhere().values()) == {True}
    assert [f.name for f in features.features()][:2] == ["sampling", "diffusion"]  # back in its place


def test_flashinfer_left_out_takes_its_call_schema_with_it():
    from ikdata.core import schema

    assert "flashinfer-call" in schema.KINDS
    with features.unregistered("flashinfer"):
        assert "flashinfer-call" not in schema.KINDS
    assert "flashinfer-call" in schema.KINDS


def test_the_sampling_judge_reads_engine_cut_orders_from_the_sources_declarations():
    from ikdata.core.features import Feature, Source
    from ikdata.sampling.judge import receipt_order

    def receipt(engine: str):
        return SimpleNamespace(provenance={"engine": engine})

    assert receipt_order(receipt("vllm")) == "vllm" and receipt_order(receipt("transformers")) == "hf"
    with features.unregistered("engines"):
        assert receipt_order(receipt("vllm")) == "any"  # a source no feature declares has no known order
    with features.registered(Feature("toyserve", sources=(Source("toyserve", "toyserve_module", order="sglang"),))):
        assert receipt_order(receipt("toyserve")) == "sglang"
    assert receipt_order(receipt("toyserve")) == "any"


def test_every_shipped_hook_takes_the_call_every_path_makes():
    """Each hook of each registered feature resolves and its signature binds its declared call (a hook that did
    not would be a DefinitionError naming it on its first use)."""
    from ikdata.core.features import FAMILY_CALLS, SOURCE_CALLS

    checked = []
    for family in features.families():
        checked += [(family.name, name) for name in FAMILY_CALLS if family.hook(name) is not None]
    for source in features.sources():
        checked += [(source.name, name) for name in SOURCE_CALLS if name != "hooks" and source.hook(name) is not None]
    assert ("diffusion", "settle") in checked and ("sampling", "execute") in checked
    assert ("flashinfer", "importer") in checked


def test_sampling_left_out_takes_the_completions_import_with_it(tmp_path):
    """``ikdata import LOG.jsonl`` reads a completions log through sampling's declaration (``file_imports``), so
    without sampling the file is read as nothing of its."""
    log = tmp_path / "draws.jsonl"
    log.write_text('{"x": 1}\n')
    read = _cli("import", str(log), str(tmp_path / "dst"))
    assert read.exit_code == 1 and "/top_logprobs top_logprobs must list" in read.output  # read as completions
    with features.unregistered("sampling"):
        assert features.file_importer(log) is None
        unread = _cli("import", str(log), str(tmp_path / "dst"))
        assert "top_logprobs" not in unread.output and unread.exit_code != 0
    assert features.file_importer(log) is not None
