"""Every judge family on every data path: the same verdicts and digests as a local replay of the source.

Families: operators (a GEMM judged by closeness), sampling (server draws judged by a pooled test), and
diffusion (a tiny LTX-2 pipeline call judged step by step against its noise floor). Each comes honest
and broken (a GEMM output off by one, draws from a shifted distribution, attention scaled by 1.01).
Paths: validate --deep, a local replay, two shards combined, a real local Ray cluster, push to a
folder remote and clone, import into a shared dataset and replay there. The broken engine fails with
exit 1 on every path; the honest one passes on every path.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import ikdata
from ikdata.replay.runner import replay

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "diffusion"))
sys.path.insert(0, str(HERE.parent / "diffusion_judge"))


def _operator(tmp: Path, broken: bool):
    import torch

    from ikdata.core.definitions import USER, Definition
    from ikdata.core.writer import DatasetWriter
    from replay.replay_helpers import gemm_record

    record = gemm_record()
    folder = tmp / "defs"
    path = folder / record["op_type"] / f"{record['name']}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    definition = Definition.from_dict(record, origin=USER, source=str(path))
    writer = DatasetWriter(tmp / "ds")
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(4, 8, generator=generator)
    for i in range(6):
        a = torch.randn(i % 3 + 1, 8, generator=generator)
        writer.add(definition, {"A": a, "W": w}, {"C": a @ w.T + (1.0 if broken and i == 2 else 0.0)},
                   {"engine": "test", "request_id": f"r{i}", "step": i})
    return tmp / "ds", [folder]


def _sampling(tmp: Path, broken: bool):
    from ikdata.sampling.completions import import_completions

    rng = np.random.default_rng(5)
    lp = np.array([-0.5, -1.5, -2.0, -2.6, -3.1])
    p = np.exp(lp / 0.7)
    p /= p.sum()
    if broken:  # the engine ignores its temperature
        p = np.exp(lp) / np.exp(lp).sum()
    lines = []
    for i in range(4):
        draws = rng.choice(5, size=150, p=p)
        lines.append({"prompt": f"prompt {i}", "model": "tiny", "position": 0, "vocab_size": 1000,
                      "settings": {"temperature": 0.7, "top_k": 5, "top_p": 1.0, "min_p": 0.0},
                      "top_logprobs": [{"token": f"token_id:{j}", "logprob": v}
                                       for j, v in enumerate([-0.5, -1.5, -2.0, -2.6, -3.1, -4.5, -5.0, -6.0])],
                      "draws": [{"seed": s + 1000 * i, "token": f"token_id:{int(t)}"} for s, t in enumerate(draws)]})
    path = tmp / "draws.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    import_completions(path, tmp / "ds")
    return tmp / "ds", []


@contextlib.contextmanager
def _attention_scaled(pipe):
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        scale = (scale if scale is not None else query.shape[-1] ** -0.5) * 1.01
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, **kw)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _diffusion(tmp: Path, broken: bool):
    pytest.importorskip("diffusers")
    import torch
    from judge_helpers import capture

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        capture(tmp / "ds", perturb=_attention_scaled if broken else None, steps=3)
    finally:
        torch.set_num_threads(threads)
    return tmp / "ds", []


FAMILIES = {"operator": _operator, "sampling": _sampling, "diffusion": _diffusion}


def _verdicts(report: dict) -> dict[str, tuple]:
    return {c["uuid"]: (c["status"], tuple(sorted((c.get("input_digests") or {}).items())),
                        tuple(sorted((c.get("expected_digests") or {}).items()))) for c in report["cases"]}


def _statuses(report: dict) -> dict[str, str]:
    return {c["uuid"]: c["status"] for c in report["cases"]}


@pytest.fixture(scope="module", params=[(f, b) for f in FAMILIES for b in (False, True)],
                ids=[f"{f}-{'broken' if b else 'honest'}" for f in FAMILIES for b in (False, True)])
def source(request, tmp_path_factory):
    """One family's capture (honest or broken), committed and replayed locally: the verdicts to match."""
    family, broken = request.param
    tmp = tmp_path_factory.mktemp(f"{family}-{broken}")
    root, folders = FAMILIES[family](tmp, broken)
    local = replay(ikdata.open(root, definitions=folders), reuse=False)
    from ikdata.core import manifest

    manifest.write(root)
    return {"family": family, "broken": broken, "root": root, "folders": folders, "local": local, "tmp": tmp}


def test_local_replay_judges_the_family(source):
    local = source["local"]
    assert local.exit_code == (1 if source["broken"] else 0), local.counts
    if source["broken"]:
        assert local.counts["failed"] >= 1
    else:
        assert local.counts["failed"] == 0 and local.counts["passed"] >= 1
    if source["family"] == "diffusion":
        assert any(c["definition"].startswith("trajectory:") for c in local.report["cases"])
    if source["family"] == "sampling":
        assert local.report["sampling"][0]["verdict"] == ("failed" if source["broken"] else "passed")


def test_validate_deep_is_clean(source):
    report = ikdata.validate(ikdata.open(source["root"], definitions=source["folders"]), deep=True)
    assert not report.problems, report.problems


def test_two_shards_combined_give_the_same_verdicts(source, tmp_path):
    from ikdata.replay.report import combine

    shards = [replay(ikdata.open(source["root"], definitions=source["folders"]), shard=f"{i}/2", reuse=False,
                     report_path=tmp_path / f"s{i}.json").report for i in (1, 2)]
    assert _verdicts(combine(shards)) == _verdicts(source["local"].report)


def test_ray_gives_the_same_verdicts(source, ray_cluster, tmp_path):
    from ikdata.replay.distributed import replay_on_ray

    result, _ = replay_on_ray(source["root"], definition_folders=source["folders"], reuse=False,
                              report_path=tmp_path / "ray.json")
    assert _verdicts(result.report) == _verdicts(source["local"].report)
    assert result.exit_code == source["local"].exit_code


def test_ray_from_a_url_gives_the_same_verdicts(source, ray_cluster, tmp_path):
    from ikdata.remote.push import push
    from ikdata.replay.distributed import replay_on_ray

    url = f"s3://ikdata-ray/matrix-{source['family']}-{int(source['broken'])}-{tmp_path.name}"
    push(source["root"], url)
    result, _ = replay_on_ray(url, definition_folders=source["folders"], reuse=False,
                              report_path=tmp_path / "ray.json")
    assert _statuses(result.report) == _statuses(source["local"].report)
    assert result.exit_code == source["local"].exit_code


def test_push_clone_and_replay_the_clone(source, tmp_path):
    from ikdata.remote.pull import clone
    from ikdata.remote.push import push

    push(source["root"], str(tmp_path / "remote"))
    clone(str(tmp_path / "remote"), tmp_path / "copy")
    copy = ikdata.open(tmp_path / "copy", definitions=source["folders"])
    assert not ikdata.validate(copy, deep=True).problems
    again = replay(copy, reuse=False)
    assert _verdicts(again.report) == _verdicts(source["local"].report)
    assert again.exit_code == source["local"].exit_code


def test_import_carries_the_family_and_replays_the_same(source, tmp_path):
    from ikdata.importing.apply import import_dataset

    from ikdata.core.errors import ProblemsFound

    shared = tmp_path / "shared"
    # import re-judges operators and sampling groups itself; a trajectory's verdict only with --trust-reports
    trusting = {"trust_reports": source["family"] == "diffusion"}
    if source["broken"]:  # a failing verdict refuses the import, naming the workloads
        with pytest.raises(ProblemsFound) as refused:
            import_dataset(source["root"], shared, definitions=source["folders"], **trusting)
        failed = [u for u, s in _statuses(source["local"].report).items() if s == "failed"]
        assert any(u in str(refused.value) for u in failed)
        return
    import_dataset(source["root"], shared, definitions=source["folders"], **trusting)
    again = replay(ikdata.open(shared, definitions=source["folders"]), reuse=False)
    assert _statuses(again.report) == _statuses(source["local"].report)
    assert again.exit_code == source["local"].exit_code


def test_only_passed_admits_nothing_a_failing_group_judged(source, tmp_path):
    from ikdata.core.errors import IkdataError
    from ikdata.importing.apply import import_dataset

    failed = {u for u, s in _statuses(source["local"].report).items() if s != "passed"}
    try:
        result = import_dataset(source["root"], tmp_path / "shared", only_passed=True,
                               definitions=source["folders"])
        admitted = set(result.added)
    except IkdataError:
        admitted = set()
    assert not admitted & failed
    if source["family"] == "sampling" and source["broken"]:
        assert not admitted  # the pooled verdict failed: no draw of the definition is validated
