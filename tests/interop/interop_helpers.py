"""Helpers of the interop tests: real captures, flashinfer-bench's own evaluator path, and foreign layouts.

Import them as ``from interop_helpers import ...``. Every helper writes only where it is told.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

SEED_TOLERANCES = {"bfloat16": {"rtol": 0.016, "atol": 0.005}, "float32": {"rtol": 1e-4, "atol": 2e-5},
                   "integer": "exact"}


def capture_tiny_llama(root: Path) -> Path:
    """Capture prefill and one decode step of the tiny random-weight Llama (bf16) into ``root``, committed."""
    import torch

    import ikdata.capture as capture
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.core import manifest

    sys.path.insert(0, str(REPO / "tools/examples"))
    try:
        from tiny_llama_generate import build_model
    finally:
        sys.path.pop(0)
    boot.install(CaptureConfig(into=str(root), strict=True, step_module="LlamaForCausalLM", steps=(0, 2)))
    try:
        model = build_model()
        prompt = torch.tensor([[1, 5, 7, 9, 3]])
        with capture.request("interop-llama"), torch.inference_mode():
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=False,
                           pad_token_id=0)
        capture.flush()
    finally:
        boot.uninstall()
    manifest.write(root)
    return root


def capture_minilm(root: Path) -> Path:
    """Capture the real all-MiniLM-L6-v2 (float32, padded batch of two sentences) into ``root``, committed."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    import ikdata.capture as capture
    from ikdata.capture import boot
    from ikdata.capture.config import CaptureConfig
    from ikdata.core import manifest

    sys.path.insert(0, str(REPO / "tools/examples"))
    try:
        from minilm_embed import SENTENCES, model_dir
    finally:
        sys.path.pop(0)
    path = model_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="sdpa").eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    boot.install(CaptureConfig(into=str(root), strict=True))
    try:
        with capture.request("interop-minilm"), torch.inference_mode():
            model(**batch)
        capture.flush()
    finally:
        boot.uninstall()
    manifest.write(root)
    return root


def captured_outputs(root: Path) -> dict[str, dict[str, Any]]:
    """uuid -> output name -> the tensor the engine produced, as the dataset's receipts record it."""
    import ikdata

    ds = ikdata.open(root)
    return {r.uuid: ds.load_expected(r) for r in ds.receipts() if r.expected_output}


def flashinfer_disagreements(root: Path, expected: dict[str, dict[str, Any]]) -> tuple[int, list[str]]:
    """Run every workload as flashinfer-bench's evaluator does and compare with ``expected``.

    ``TraceSet.from_path``, ``BuilderRegistry.build_reference``, ``load_safetensors``, then
    ``gen_inputs`` and ``ref(*inputs)``: positional, in the definition file's input order.
    Each output is judged by ikdata's rule for its dtype. Statistical definitions (samplers) are
    left out: their outputs are draws. Returns (outputs compared, disagreements).
    """
    from flashinfer_bench.bench.utils import gen_inputs, load_safetensors
    from flashinfer_bench.compile import BuilderRegistry
    from flashinfer_bench.data import TraceSet

    import ikdata
    from ikdata.core.tolerances import tolerance_for
    from ikdata.replay import judges

    trace_set = TraceSet.from_path(str(root))
    ours = ikdata.open(root).definitions
    compared, wrong = 0, []
    for name, traces in sorted(trace_set.workloads.items()):
        if "ikdata:statistical" in ours[name].record.get("tags", ()):
            continue  # a sampler's output is a random draw, judged statistically (flashinfer's sampling evaluator)
        definition = trace_set.definitions[name]
        reference = BuilderRegistry.get_instance().build_reference(definition)
        for trace in traces:
            workload = trace.workload
            if workload.uuid not in expected:
                continue
            inputs = gen_inputs(definition, workload, device="cpu",
                                safe_tensors=load_safetensors(definition, workload, Path(root)))
            try:
                result = reference(*inputs)
            except Exception as exc:  # noqa: BLE001 - a wrong order may also raise (shape errors)
                wrong.append(f"{name} {workload.uuid}: the reference raised {type(exc).__name__}: {exc}")
                continue
            values = list(result) if isinstance(result, (tuple, list)) else [result]
            for output, actual in zip(definition.outputs, values):
                compared += 1
                rule = tolerance_for(ours[name].outputs[output].dtype, ours[name].tolerance)  # the dtype's tolerance
                verdict = judges.judge_output(output, actual, expected[workload.uuid][output], rule)
                if not verdict.passed:
                    wrong.append(f"{name} {workload.uuid} {output}: {verdict.reason}")
    return compared, wrong


def sorted_definitions(root: Path) -> list[Path]:
    """Rewrite every definition file as ikdata did before it kept the declared order (sorted keys,
    compact), then refresh the manifest: an "old" dataset."""
    from ikdata.core import manifest
    from ikdata.core.digest import canonical_json

    changed = []
    for path in sorted((root / "definitions").rglob("*.json")):
        record = json.loads(path.read_text())
        old = canonical_json(record) + b"\n"
        if old != path.read_bytes():
            path.write_bytes(old)
            changed.append(path)
    if (root / "ikdata.json").exists():
        manifest.write(root)
    return changed


def write_sorted_definition(folder: Path, record: dict) -> Path:
    path = folder / record["op_type"] / f"{record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, sort_keys=True, indent=2) + "\n")
    return path


def to_seed_layout(src: Path, dst: Path, definitions: Path, *, sort_keys: bool = True) -> None:
    """Rewrite an ikdata dataset as the seed capture script's layout (seeds/002).

    Blobs at ``blob/workloads/<name>/<digest>.safetensors``, rows with sorted keys, receipts in
    ``results/captures.jsonl`` (a bare descriptor for one output), a passing
    ``results/replay.json`` as that script writes it, and the definitions outside the dataset.
    """
    import ikdata

    ds = ikdata.open(src)
    for name, definition in ds.definitions.items():
        record = dict(definition.record)
        if sort_keys:
            write_sorted_definition(definitions, record)
        else:
            path = definitions / record["op_type"] / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=2) + "\n")

    def move(descriptor: dict, name: str) -> dict:
        if descriptor["type"] != "safetensors":
            return descriptor
        rel = f"blob/workloads/{name}/{Path(descriptor['path']).name}"
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        if not (dst / rel).exists():
            shutil.copyfile(src / descriptor["path"], dst / rel)
        return {"type": "safetensors", "path": rel, "tensor_key": "tensor"}

    for path in sorted((src / "workloads").rglob("*.jsonl")):
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for line in path.read_text().splitlines():
            row = json.loads(line)
            row["workload"]["inputs"] = {k: move(v, row["definition"]) for k, v in row["workload"]["inputs"].items()}
            lines.append(json.dumps(row, sort_keys=True))
        out.write_text("".join(line + "\n" for line in lines))
    receipts, cases = [], []
    for line in (src / "receipts.jsonl").read_text().splitlines():
        receipt = json.loads(line)
        outputs = {k: move(v, receipt["definition"]) for k, v in receipt["expected_output"].items()}
        receipt["expected_output"] = next(iter(outputs.values())) if len(outputs) == 1 else outputs
        receipts.append(json.dumps(receipt, sort_keys=True))
        cases.append({"definition": receipt["definition"], "uuid": receipt["uuid"], "axes": receipt["axes"],
                      "max_absolute_errors": [0.0] * len(outputs), "status": "passed", "seconds": 0.01})
    (dst / "results").mkdir(parents=True, exist_ok=True)
    (dst / "results/captures.jsonl").write_text("".join(r + "\n" for r in receipts))
    report = {"torch": "2.9.0", "device": "cpu", "comparison": "all output elements",
              "tolerances": SEED_TOLERANCES, "cases": cases}
    (dst / "results/replay.json").write_text(json.dumps(report, indent=2) + "\n")


def to_flashinfer_layout(src: Path, dst: Path) -> None:
    """Rewrite an ikdata dataset as a FlashInfer Trace dataset: one multi-tensor safetensors file per
    workload (named by uuid), rows without receipts, definitions with sorted keys."""
    from safetensors.torch import save_file

    import ikdata

    ds = ikdata.open(src)
    for definition in ds.definitions.values():
        write_sorted_definition(dst / "definitions", dict(definition.record))
    for row in ds.workloads():
        definition = ds.definitions[row.definition]
        tensors = {n: v.contiguous() for n, v in ds.load_inputs(row).items() if not isinstance(v, (int, float, bool))}
        rel = f"blob/workloads/{definition.op_type}/{row.definition}/{row.definition}_{row.uuid}.safetensors"
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(dst / rel))
        inputs = {}
        for name, descriptor in row.to_dict()["workload"]["inputs"].items():
            inputs[name] = descriptor if descriptor["type"] == "scalar" else \
                {"type": "safetensors", "path": rel, "tensor_key": name}
        out = dst / "workloads" / definition.op_type / f"{row.definition}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as stream:
            stream.write(json.dumps({"definition": row.definition, "solution": None, "evaluation": None,
                                     "workload": {"uuid": row.uuid, "axes": row.axes, "inputs": inputs}}) + "\n")
