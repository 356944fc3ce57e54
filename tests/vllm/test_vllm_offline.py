"""A real vLLM (offline ``LLM``) under ``ikdata capture``, replayed: honest passes, a broken engine fails by name.

Two engine runs for the whole module (session fixtures in conftest.py): an honest one, and one with three
faults planted below the layers ikdata records at (tests/vllm/vllm_faults.py).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

from safetensors.torch import load_file

from ikdata.capture.spread import looks_at

from conftest import PROMPTS, TOKENS

OPERATOR_TEMPLATES = {"attention_varlen_causal_f32", "dense_gemm_f32_nt", "rmsnorm_f32", "fused_add_rmsnorm_f32",
                      "rotary_neox_f32", "silu_and_mul_f32"}
SAMPLER = "sampling_logits_f32_v320"


def _template(definition: str) -> str:
    for template in OPERATOR_TEMPLATES:
        if definition.startswith(template + "_"):
            return template
    return definition


def _statuses(report: dict) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for case in report["cases"]:
        found[case["definition"]].add(case["status"])
    return found


def _verdict(report: dict) -> dict:
    return next(v for v in report["sampling"] if v["definition"] == SAMPLER)


def _blob(dataset: Path, descriptor: dict):
    return load_file(str(dataset / descriptor["path"]))[descriptor["tensor_key"]]


def test_an_honest_engine_captured_offline_replays_clean_with_every_operator_and_the_sampler(honest_run):
    assert honest_run.replay.returncode == 0, honest_run.replay.stdout[-3000:]
    statuses = _statuses(honest_run.report)
    # vLLM's layers (and whatever the dispatcher path records besides, e.g. aten::embedding)
    assert OPERATOR_TEMPLATES | {SAMPLER} <= {_template(d) for d in statuses}
    # every linear layer shape of the model (qkv, o, gate_up, down, lm_head)
    assert {d for d in statuses if d.startswith("dense_gemm")} == {
        "dense_gemm_f32_nt_n256_k128", "dense_gemm_f32_nt_n128_k128", "dense_gemm_f32_nt_n512_k128",
        "dense_gemm_f32_nt_n128_k256", "dense_gemm_f32_nt_n320_k128"}
    assert all(s <= {"passed", "skipped"} for s in statuses.values()), statuses
    verdict = _verdict(honest_run.report)
    assert verdict["verdict"] == "passed", verdict


def test_sampler_rows_are_the_requests_the_user_got_with_their_ids_decode_steps_and_settings(honest_run):
    dataset = honest_run.dataset
    sampled = [r for r in honest_run.receipts() if r["definition"] == SAMPLER]
    by_request: dict[str, dict[int, dict]] = defaultdict(dict)
    for receipt in sampled:
        assert receipt["step"] not in by_request[receipt["request_id"]], "one row per request and decode step"
        by_request[receipt["request_id"]][receipt["step"]] = receipt
    users = {r["request_id"]: r["tokens"] for r in honest_run.outputs["requests"]}
    assert len(users) == PROMPTS and set(by_request) == set(users)
    looked_at = [i for i in range(TOKENS) if looks_at(i)]  # the default: a spread of decode steps (0-3, 4, 8, 16)
    for request_id, tokens in users.items():
        steps = by_request[request_id]
        assert sorted(steps) == looked_at
        drawn = [int(_blob(dataset, steps[i]["expected_output"]["samples"])[0]) for i in looked_at]
        assert drawn == [tokens[i] for i in looked_at], f"request {request_id}: recorded draws differ from vLLM's"
    # settings per row, as each request asked (tests/vllm/vllm_offline_prog.py: kind i % 5)
    workloads = {}
    for line in (dataset / "workloads" / "sampling" / f"{SAMPLER}.jsonl").read_text().splitlines():
        row = json.loads(line)
        workloads[row["workload"]["uuid"]] = row["workload"]["inputs"]
    for receipt in sampled:
        i, inputs = int(receipt["request_id"]), workloads[receipt["uuid"]]
        assert receipt["sampler"]["order"] == "vllm"
        assert receipt["operation"] == "vllm.v1.sample.sampler.Sampler.forward"
        value = {name: _blob(dataset, inputs[name])[0].item() for name in
                 ("temperature", "seed", "top_k", "top_p", "repetition_penalty", "generated")}
        expected = {0: (0.6, 1000 + i, 40, 1.0, 1.0), 1: (0.8, -1, 0, 0.9, 1.0), 2: (0.7, 2000 + i, 50, 0.95, 1.2),
                    3: (0.6, -1, 0, 1.0, 1.0), 4: (0.0, -1, 0, 1.0, 1.0)}[i % 5]
        got = (round(value["temperature"], 6), value["seed"], value["top_k"], round(value["top_p"], 6),
               round(value["repetition_penalty"], 6))
        assert got == expected, (i, got)
        assert value["generated"] == receipt["step"]


def test_lineage_names_the_engine_its_version_and_the_model_folder_by_digest(honest_run, tiny_model):
    parts = hashlib.sha256()  # each file's path, size, mtime and first and last MiB (never a whole-file hash)
    for file in sorted(p for p in tiny_model.rglob("*") if p.is_file()):
        data, stat = file.read_bytes(), file.stat()
        head, tail = data[: 1 << 20], data[max(len(data) - (1 << 20), 1 << 20):]
        identity = f"{stat.st_size}:{stat.st_mtime_ns}:{hashlib.sha256(head + tail).hexdigest()}"
        parts.update(f"{file.relative_to(tiny_model)}\0{identity}\n".encode())
    sampled = [r for r in honest_run.receipts() if r["definition"] == SAMPLER]
    assert {r["model_digest"] for r in sampled} == {parts.hexdigest()}
    assert {r["model_revision"] for r in sampled} == {f"sha256:{parts.hexdigest()}"}  # what lineage shows
    assert {r["model"] for r in sampled} == {str(tiny_model)}
    assert {(r["engine"], r["engine_version"]) for r in honest_run.receipts()} == {("vllm", honest_run.outputs["vllm"])}


def test_capture_starts_in_the_program_the_engine_core_and_the_worker_and_records_in_the_worker(honest_run):
    names = {b["pid"]: b["name"] for b in honest_run.boot}
    assert names.get(honest_run.outputs["pid"]) == "MainProcess"
    cores = [pid for pid, name in names.items() if name.startswith("EngineCore")]
    assert len(cores) == 1, names
    recorded = {r["process_id"] for r in honest_run.receipts()}
    # the model runs two processes below the program: in the worker, neither the program nor the engine core
    assert len(recorded) == 1 and recorded <= set(names) - {honest_run.outputs["pid"], *cores}, (recorded, names)


def test_a_broken_engine_fails_replay_naming_the_broken_operator_layer_and_the_sampler(faulty_run):
    assert faulty_run.replay.returncode == 1, faulty_run.replay.stdout[-3000:]
    statuses = _statuses(faulty_run.report)
    failed = {d for d, s in statuses.items() if "failed" in s}
    # the down projection is the model's only n128 x k256 GEMM; attention of layer 0; the sampler
    assert failed == {"dense_gemm_f32_nt_n128_k256", "attention_varlen_causal_f32_h2_kv1_d64", SAMPLER}
    receipts = {r["uuid"]: r for r in faulty_run.receipts()}
    paths = {(c["definition"], receipts[c["uuid"]].get("module_path")) for c in faulty_run.report["cases"]
             if c["status"] == "failed" and c["definition"] != SAMPLER}
    assert paths == {("dense_gemm_f32_nt_n128_k256", "LlamaForCausalLM.model.layers.0.mlp.down_proj"),
                     ("attention_varlen_causal_f32_h2_kv1_d64", "LlamaForCausalLM.model.layers.0.self_attn.attn")}
    assert "dense_gemm_f32_nt_n128_k256" in faulty_run.replay.stdout
    verdict = _verdict(faulty_run.report)
    assert verdict["verdict"] == "failed", verdict
