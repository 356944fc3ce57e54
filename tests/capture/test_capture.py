"""Capture in one process: checking against definitions, selection, caps, weights, provenance, failures."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import ikdata
from ikdata.core.writer import DatasetWriter
import ikdata.capture as capture
from ikdata.core.errors import DefinitionError
from capture_helpers import gemm_record, read_jsonl, write_definitions


@pytest.fixture
def user_definitions(tmp_path):
    return write_definitions(tmp_path / "defs", gemm_record())  # gemm_test_n4_k8, float32


def _rows(root):
    files = sorted((root / "workloads").rglob("*.jsonl")) if (root / "workloads").is_dir() else []
    return [row for f in files for row in read_jsonl(f)]


def _receipts(root):
    path = root / "receipts.jsonl"
    return read_jsonl(path) if path.exists() else []


def _blobs(root):
    return sorted((root / "blob").rglob("*.safetensors")) if (root / "blob").is_dir() else []


def test_wrong_dtype_or_shape_is_refused_and_nothing_is_written(capture_into, user_definitions, tmp_path):
    a, w = torch.randn(3, 8), torch.randn(4, 8)
    c = a @ w.T  # before capture: under it this GEMM is a workload of its own (the dispatcher sees it)
    cap = capture_into(definitions=[str(user_definitions)])
    with pytest.raises(DefinitionError, match="gemm_test_n4_k8: 'A' has dtype torch.bfloat16, expected torch.float32"):
        cap.record("gemm_test_n4_k8", {"A": a.bfloat16(), "W": w}, {"C": c}, operation="test")
    with pytest.raises(DefinitionError, match="'W' axis 'N' is 5, expected the constant 4"):
        cap.record("gemm_test_n4_k8", {"A": a, "W": torch.randn(5, 8)}, {"C": torch.randn(3, 5)}, operation="test")
    with pytest.raises(DefinitionError, match="'C' axis 'M' is 2, but another tensor bound it to 3"):
        cap.record("gemm_test_n4_k8", {"A": a, "W": w}, {"C": torch.randn(2, 4)}, operation="test")
    capture.flush()
    root = tmp_path / "ds"
    assert _rows(root) == [] and _receipts(root) == [] and _blobs(root) == []


def test_non_strict_refusal_is_logged_counted_and_stops_that_definition(capture_into, user_definitions, tmp_path,
                                                                        capsys):
    a, w = torch.randn(3, 8), torch.randn(4, 8)
    c = a @ w.T  # before capture: under it this GEMM is a workload of its own (the dispatcher sees it)
    cap = capture_into(definitions=[str(user_definitions)], strict=False)
    assert cap.record("gemm_test_n4_k8", {"A": a.double(), "W": w}, {"C": c}, operation="t") is False
    assert "gemm_test_n4_k8: gemm_test_n4_k8: 'A' has dtype torch.float64" in capsys.readouterr().err
    assert cap.failures[0]["definition"] == "gemm_test_n4_k8"
    with capture.request("later"):
        assert cap.record("gemm_test_n4_k8", {"A": a, "W": w}, {"C": c}, operation="t") is False
    capture.flush()
    assert _rows(tmp_path / "ds") == []


def test_a_failing_hook_never_crashes_the_engine(capture_into, tmp_path, capsys):
    cap = capture_into(strict=False)

    class Engine:
        @staticmethod
        def op(x):
            return x * 2

    def broken(api, args, kwargs, out):
        raise RuntimeError("adapter bug")

    cap.patch(Engine, "op", broken, label="Engine.op")
    assert Engine.op(3) == 6
    assert Engine.op(4) == 8  # still runs; the adapter is off now
    assert cap.failures == [{"definition": "Engine.op", "message": "RuntimeError: adapter bug"}]
    assert capsys.readouterr().err.count("adapter bug") == 1


def test_strict_mode_raises_from_a_failing_hook(capture_into):
    cap = capture_into(strict=True)

    class Engine:
        @staticmethod
        def op(x):
            return x

    cap.patch(Engine, "op", lambda api, a, k, o: 1 / 0, label="Engine.op")
    with pytest.raises(ZeroDivisionError):
        Engine.op(1)


def test_linear_capture_with_provenance_validates_deep(capture_into, tmp_path):
    capture_into(provenance={"model": "tiny-test", "model_revision": "abc123"})

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 4, bias=False)

        def forward(self, x):
            return self.proj(x)

    block = Block().to(torch.bfloat16)
    x = torch.randn(2, 3, 8).to(torch.bfloat16)
    with capture.request("req-1"):
        expected = block(x)
    capture.flush()
    root = tmp_path / "ds"
    [row] = _rows(root)
    [receipt] = _receipts(root)
    assert row["definition"] == "dense_gemm_bf16_nt_n4_k8" and row["workload"]["axes"] == {"M": 6}
    for key in ("engine", "engine_version", "model", "model_revision", "request_id", "step", "operation",
                "module_path", "process_id", "host", "ikdata_version", "torch_version", "captured_at"):
        assert receipt.get(key) is not None, key
    assert receipt["module_path"] == "Block.proj" and receipt["request_id"] == "req-1" and receipt["step"] == 0
    assert receipt["operation"] == "torch.nn.functional.linear" and receipt["model_revision"] == "abc123"
    DatasetWriter(root).commit()  # what 'ikdata capture' does once the command has ended
    ds = ikdata.open(root)
    assert ikdata.validate(ds, deep=True).problems == []
    [rec] = list(ds.receipts())
    torch.testing.assert_close(ds.load_expected(rec)["C"], expected.reshape(6, 4))
    torch.testing.assert_close(ds.load_inputs(next(ds.workloads()))["W"], block.proj.weight.detach())


def test_a_weight_seen_again_is_copied_and_stored_once(capture_into, tmp_path):
    cap = capture_into(weight_cache_min_bytes=0)  # this small weight is reused too, not copied every time
    linear = torch.nn.Linear(16, 8, bias=False)
    for i in range(20):
        with capture.request(f"r{i}"):
            linear(torch.randn(2, 16))
    capture.flush()
    root = tmp_path / "ds"
    rows = _rows(root)
    assert len(rows) == 20
    assert len({r["workload"]["inputs"]["W"]["path"] for r in rows}) == 1
    assert cap.weights.hits == 19
    assert len(_blobs(root)) == 1 + 20 + 20  # W once; A and C per workload
    with torch.no_grad():
        linear.weight.add_(1.0)  # an in-place update bumps the version: copied again
    with capture.request("after-update"):
        linear(torch.randn(2, 16))
    capture.flush()
    assert len({r["workload"]["inputs"]["W"]["path"] for r in _rows(root)}) == 2


def test_each_key_is_captured_once_and_variants_apart(capture_into, tmp_path):
    capture_into()
    w = torch.randn(4, 8)
    with capture.request("r"), capture.step(0):
        for _ in range(3):
            F.linear(torch.randn(3, 8), w)
        F.linear(torch.randn(5, 8), w)
    capture.flush()
    assert sorted(r["workload"]["axes"]["M"] for r in _rows(tmp_path / "ds")) == [3, 5]


def test_steps_are_counted_by_the_named_module_and_selected(capture_into, tmp_path):
    capture_into(step_module="Outer", steps=(1, 2))

    class Inner(torch.nn.Module):
        def forward(self, x):
            return F.linear(x, torch.ones(4, 8))

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x)

    model = Outer()
    with capture.request("gen"):
        for _ in range(4):
            model(torch.randn(1, 8))
    with capture.request("other", steps=[0]):
        model(torch.randn(1, 8))
    capture.flush()
    receipts = _receipts(tmp_path / "ds")
    assert sorted((r["request_id"], r["step"]) for r in receipts) == [("gen", 1), ("gen", 2), ("other", 0)]
    assert {r["module_path"] for r in receipts} == {"Outer.inner"}


def test_caps_per_definition_and_bytes(capture_into, tmp_path):
    cap = capture_into(max_per_definition=2)
    w = torch.randn(4, 8)
    for i in range(5):
        with capture.request(i):
            F.linear(torch.randn(1, 8), w)
            F.layer_norm(torch.randn(1, 8), (8,), torch.ones(8), torch.zeros(8))
    capture.flush()
    names = [r["definition"] for r in _rows(tmp_path / "ds")]
    assert sorted(names) == ["dense_gemm_f32_nt_n4_k8"] * 2 + ["layernorm_f32_h8"] * 2
    assert cap.refused == {"definition-full": 2}  # learned once per definition, then skipped cheaply


def test_max_bytes_stops_capture(capture_into, tmp_path):
    cap = capture_into(max_bytes=300, weight_cache_min_bytes=0)  # W is reused, not copied at every capture
    w = torch.randn(4, 8)  # one capture copies A (32 B) + W (128 B) + C (16 B) = 176 B
    for i in range(5):
        with capture.request(i):
            F.linear(torch.randn(1, 8), w)
    capture.flush()
    # 176, then 48 per capture (W is cached): 224, 272; a fourth would reach 320 > 300
    assert len(_rows(tmp_path / "ds")) == 3
    assert cap.refused.get("bytes-full") == 1 and cap.enabled is False


def test_request_file_names_the_request(capture_into, tmp_path):
    request_file = tmp_path / "request.json"
    capture_into(request_file=str(request_file))
    w = torch.randn(4, 8)
    linear = lambda: F.linear(torch.randn(1, 8), w)  # noqa: E731
    linear()  # no request file yet: nothing is captured
    capture.write_request_file(str(request_file), "req-a", capture_steps=[0, 1], model="org/model")
    with capture.step(0):
        linear()
    with capture.step(5):
        linear()  # not in capture_steps
    capture.write_request_file(str(request_file), "req-b")
    with capture.step(5):
        linear()
    capture.flush()
    receipts = _receipts(tmp_path / "ds")
    assert [(r["request_id"], r["step"], r.get("model")) for r in receipts] == [("req-a", 0, "org/model"),
                                                                                 ("req-b", 5, None)]


def test_only_restricts_by_op_type(capture_into, tmp_path):
    capture_into(only=["norm"])
    F.linear(torch.randn(1, 8), torch.randn(4, 8))
    F.layer_norm(torch.randn(1, 8), (8,), torch.ones(8), torch.zeros(8))
    capture.flush()
    assert [r["definition"] for r in _rows(tmp_path / "ds")] == ["layernorm_f32_h8"]


def test_unsupported_forms_are_skipped_quietly(capture_into, tmp_path):
    cap = capture_into()
    q = torch.randn(1, 2, 3, 4)
    F.scaled_dot_product_attention(q, q, q, attn_mask=torch.zeros(3, 3))  # float additive mask
    F.linear(torch.randn(2, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64))
    F.layer_norm(torch.randn(2, 8), (8,))  # no weight
    capture.flush()
    assert _rows(tmp_path / "ds") == [] and cap.failures == []


def test_user_adapter_from_a_module_path(tmp_path, monkeypatch, user_definitions, capture_into):
    (tmp_path / "my_adapter.py").write_text(
        "import torch\n"
        "class Engine:\n"
        "    @staticmethod\n"
        "    def gemm(a, w):\n"
        "        return a @ w.T\n"
        "def on_gemm(api, args, kwargs, out):\n"
        "    api.record('gemm_test_n4_k8', {'A': args[0], 'W': args[1]}, {'C': out}, operation='Engine.gemm')\n"
        "def install(api):\n"
        "    api.patch(Engine, 'gemm', on_gemm)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    capture_into(definitions=[str(user_definitions)], adapters=["my_adapter"])
    import my_adapter

    my_adapter.Engine.gemm(torch.randn(3, 8), torch.randn(4, 8))
    capture.flush()
    [receipt] = _receipts(tmp_path / "ds")
    assert receipt["definition"] == "gemm_test_n4_k8" and receipt["operation"] == "Engine.gemm"
    assert json.loads((tmp_path / "ds/definitions/gemm/gemm_test_n4_k8.json").read_text())["name"] == "gemm_test_n4_k8"


def test_fake_tensors_are_not_captured(capture_into, tmp_path):
    """torch.compile traces ops on fake tensors (and may call patched functions then): nothing is captured."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    cap = capture_into()
    with FakeTensorMode():
        out = F.linear(torch.randn(3, 8), torch.randn(4, 8))
    assert type(out).__name__ == "FakeTensor"
    F.linear(torch.randn(2, 8, device="meta"), torch.randn(4, 8, device="meta"))
    capture.flush()
    assert _rows(tmp_path / "ds") == [] and cap.failures == []


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_capture_works_inside_torch_compile(capture_into, tmp_path, backend):
    """A patched call inside a compiled function breaks the graph there and is captured eagerly,
    on the real tensors, with the output the compiled program really produced."""
    import torch._dynamo

    a, w = torch.randn(3, 8), torch.randn(4, 8)
    linear = F.linear(a, w)  # computed before capture is installed, so not captured itself
    torch._dynamo.reset()
    capture_into()

    def layer(a, w):
        return F.linear(a, w).relu()

    compiled = torch.compile(layer, backend=backend)
    with capture.request("compiled"):
        result = compiled(a, w)
    capture.flush()
    torch._dynamo.reset()
    assert torch.allclose(result, linear.relu())
    [row] = [r for r in _rows(tmp_path / "ds") if r["definition"].startswith("dense_gemm")]  # and relu_f32_h4
    ds = ikdata.open(tmp_path / "ds")
    [receipt] = [r for r in ds.receipts() if r.definition == row["definition"]]
    assert receipt.provenance["request_id"] == "compiled"
    inputs = ds.load_inputs(next(w for w in ds.workloads() if w.definition == row["definition"]))
    assert torch.equal(inputs["A"], a) and torch.equal(inputs["W"], w)
    [expected] = ds.load_expected(receipt).values()
    assert torch.equal(expected, linear)
    DatasetWriter(tmp_path / "ds").commit()  # what 'ikdata capture' does once the command has ended
    assert ikdata.validate(ikdata.open(tmp_path / "ds"), deep=True).problems == []


def test_compiled_code_has_no_graph_break_when_capture_is_not_installed():
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda a, w: F.linear(a, w).relu(), backend="eager")
    compiled(torch.randn(3, 8), torch.randn(4, 8))
    assert sum(counters["graph_break"].values()) == 0
    torch._dynamo.reset()
