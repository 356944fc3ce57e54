"""Honest CPU engines for FlashInfer's templates, called under FlashInfer's own flight recorder.

An engine is a function with the API's parameter names (from the template's ``init``) that
returns what the template's reference returns, decorated with ``@flashinfer_api(trace=TEMPLATE)``
and called in a child process with ``FLASHINFER_LOGLEVEL=10``: the dump is what FlashInfer
writes for a real engine of that template on CPU. Used by the tests and the end-to-end census.

    python tools/flashinfer_engines.py OUT norm:rmsnorm_trace gdn:gated_delta_rule_decode_trace,scale=None

OUT/dumps holds the recorder's call folders. ``MODULE:ATTR[,name=value...]``: a value is a
Python literal; a name the template's ``init`` takes (a var axis) sizes the call, any other
replaces that argument (``scale=None`` leaves an optional scalar out).
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EngineCall:
    """One call of an honest engine: the template (``module:attr``), var-axis sizes and replaced arguments."""

    module: str
    attr: str
    sizes: dict[str, Any] = field(default_factory=dict)
    replace: dict[str, Any] = field(default_factory=dict)
    seed: int = 1
    wrong: bool = False  # every float output 1% off: an engine each family must fail

    def to_arg(self) -> str:
        extra = [f"{k}={v!r}" for k, v in {**self.sizes, **self.replace}.items()]
        return ",".join([f"{self.module}:{self.attr}", f"seed={self.seed}", *extra] + (["wrong=True"] if self.wrong
                                                                                      else []))

    @classmethod
    def from_arg(cls, text: str) -> "EngineCall":
        head, *rest = text.split(",")
        module, attr = head.split(":", 1)
        values = {k: ast.literal_eval(v) for k, v in (item.split("=", 1) for item in rest)}
        seed = values.pop("seed", 1)
        wrong = bool(values.pop("wrong", False))
        return cls(module, attr, {}, values, seed, wrong)


def engine(name: str, template: Any, params: list[str], wrong: bool = False) -> Any:
    """A CPU engine named ``name`` taking ``params`` that returns the template's reference outputs (``wrong``:
    each float output 1% off)."""
    mapping = {key: (descriptor.param or key) for key, descriptor in template.inputs.items()}

    def compute(values: dict) -> Any:
        reference = template.reference
        accepted = inspect.signature(reference).parameters
        kwargs = {}
        for key, param in mapping.items():  # the reference takes the input's name, or the API's parameter name
            if param in values and key in accepted:
                kwargs[key] = values[param]
            elif param in values and param in accepted:
                kwargs[param] = values[param]
            elif getattr(template.inputs[key], "optional", False) and (key in accepted or param in accepted):
                name = key if key in accepted else param
                if accepted[name].default is inspect.Parameter.empty:  # required by the reference: None it is
                    kwargs[name] = None  # (an optional input init leaves out; with a default, the default)
        from ikdata.flashinfer.convert import SCRATCH

        for name in SCRATCH & set(accepted):  # a kernel's scratch buffer: the reference gets None, as run passes
            if accepted[name].default is inspect.Parameter.empty:
                kwargs.setdefault(name, None)
        returned = _as_declared(reference(**kwargs), template, values)
        if wrong:
            returned = _off(returned)
        from ikdata.flashinfer.convert import COMPLETED_OUTPUTS

        written = [d.param for d in template.outputs.values()]
        if not written or not all(p in values for p in written):
            # returned as the reference returns it (None: it wrote its outputs into its arguments, as
            # fused_topk_deepseek's does; gemma_fused_add_rmsnorm's returns 1 of its 2 outputs: not recorded)
            return returned
        # an in-place API (fused_add_rmsnorm): its outputs go into its arguments and it returns None
        items = list(returned) if isinstance(returned, (tuple, list)) else [returned]
        completion = COMPLETED_OUTPUTS.get(reference.__name__)
        if completion is not None and len(items) < len(written):
            import torch

            named = {key: values[param] for key, param in mapping.items() if param in values}
            items.append(eval(completion, {"torch": torch}, named))  # noqa: S307  ikdata's own table
        for param, value in zip(written, items):
            values[param].copy_(value)
        return None

    source = f"def {name}({', '.join(params)}):\n    return _compute(dict({', '.join(f'{p}={p}' for p in params)}))\n"
    namespace = {"_compute": compute, "__name__": "ikdata_honest_engines"}
    exec(source, namespace)  # noqa: S102  a function with the API's own parameter names
    return namespace[name]


def _off(returned: Any) -> Any:
    import torch

    def off(v: Any) -> Any:
        return (v.float() * 1.01 + 0.01).to(v.dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v

    return type(returned)(off(v) for v in returned) if isinstance(returned, (tuple, list)) else off(returned)


def _as_declared(returned: Any, template: Any, values: dict) -> Any:
    """The reference's outputs in the dtypes the API declares for this call (a kernel returns bf16 where a
    reference computes in float32), read from the definition the template renders for these arguments."""
    import torch

    try:
        record = template.build_fi_trace_fn("engine")(**values)
        dtypes = [spec.get("dtype") for spec in record["outputs"].values()]
    except Exception:  # noqa: BLE001  no rendering: the outputs as the reference returns them
        return returned
    items = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    cast = [v.to(getattr(torch, d)) if isinstance(v, torch.Tensor) and isinstance(d, str) and hasattr(torch, d)
            and v.dtype != getattr(torch, d) else v for v, d in zip(items, dtypes)] + items[len(dtypes):]
    return type(returned)(cast) if isinstance(returned, (tuple, list)) else cast[0]


# Const axes a template's init takes, set small where its defaults (DeepSeek's hidden size 7168, 256 experts) make
# the CPU reference run for minutes: the math is the same at any size. Keyed by "module:attr" prefix.
SMALL_SIZES: dict[str, dict[str, int]] = {
    "moe:trtllm_fp8_block_scale_moe_llama4_routing_trace": {"hidden_size": 256, "intermediate_size": 256,
                                                            "num_experts": 32, "num_local_experts": 32, "top_k": 1},
    "moe:trtllm_fp8_block_scale_moe_": {"hidden_size": 256, "intermediate_size": 256, "num_experts": 32,
                                        "num_local_experts": 32, "top_k": 4},
    "moe:mono_moe_trace": {"hidden_size": 256, "intermediate_size": 256, "num_experts": 32, "top_k": 4},
    "attention:trtllm_batch_decode_mla_ragged_trace": {"batch_size": 2, "batch_size_plus_1": 3},
}


def small_sizes(key: str) -> dict[str, int]:
    """The small const sizes for a template (``module:attr``, as :data:`SMALL_SIZES` keys it), or {}."""
    short = key.split("trace.templates.")[-1]
    found = [k for k in SMALL_SIZES if short.startswith(k)]
    return dict(SMALL_SIZES[max(found, key=len)]) if found else {}


def _cute_dsl_batch_prefill_run(seed: int) -> dict[str, Any]:
    """q, k, v of one ragged prefill: 8 query and 8 key rows, 4 heads of 64 (the template's reference is plain
    softmax attention over them)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(8, 4, 64, generator=g).to(torch.bfloat16) for n in ("q", "k", "v")}


def _cutlass_fused_moe(seed: int) -> dict[str, Any]:
    """A 4-token, 4-expert, top-2 MoE of hidden size 32 and intermediate size 16 (FC1 holds gate and up: 32 rows),
    experts picked at random, routing weights a softmax."""
    import torch

    g = torch.Generator().manual_seed(seed)
    tokens, hidden, inter, experts, top_k = 4, 32, 16, 4, 2
    return {"input": torch.randn(tokens, hidden, generator=g).to(torch.bfloat16),
            "token_selected_experts": torch.randint(0, experts, (tokens, top_k), generator=g, dtype=torch.int32),
            "token_final_scales": torch.softmax(torch.randn(tokens, top_k, generator=g), -1),
            "fc1_expert_weights": (torch.randn(experts, 2 * inter, hidden, generator=g) * 0.1).to(torch.bfloat16),
            "fc2_expert_weights": (torch.randn(experts, hidden, inter, generator=g) * 0.1).to(torch.bfloat16)}


# CPU inits for templates FlashInfer ships without one, where the template's inputs are plain tensors
CPU_INITS = {
    "attention:cute_dsl_batch_prefill_run_trace": _cute_dsl_batch_prefill_run,
    "moe:cutlass_fused_moe_trace": _cutlass_fused_moe,
}


def cpu_init(key: str) -> Any | None:
    """The CPU init twin for a template without an init (``module:attr``), or None."""
    return CPU_INITS.get(key.split("trace.templates.")[-1])


def call_values(template: Any, call: EngineCall, default_size: int = 2) -> dict[str, Any]:
    """The arguments of one call: the template's ``init`` at the given sizes, then the replaced ones."""
    init = inspect.signature(template.init).parameters
    merged = {**call.sizes, **call.replace}
    # a var axis the init defaults to 0 is derived from the others (batch_size_plus_1, head_dim): left to the init
    sizes = {a: default_size for a, m in template.axes.items() if type(m).__name__ == "Var" and a in init
             and init[a].default != 0}
    sizes.update({k: v for k, v in merged.items() if k in init})
    values = template.init(device="cpu", seed=call.seed, **sizes)
    values.update({k: v for k, v in merged.items() if k not in init})
    return values


def api_of(template: Any) -> str | None:
    """The one FlashInfer API (``module.function``) whose decorator traces with ``template`` (directly or through
    a dispatcher), or None: none, or several."""
    import re

    from ikdata.flashinfer import loader

    apis = [api for api in loader.api_templates()
            if any(ref.template is template for ref in loader.declared_templates(api))]
    apis = sorted(apis, key=lambda a: (len(loader.declared_templates(a)), a))[:1]  # APIs sharing a dispatcher: one
    if len(apis) != 1 or not re.fullmatch(r"flashinfer(\.[A-Za-z_][A-Za-z0-9_]*)+", apis[0]):
        return None
    return apis[0]


def as_api(function: Any, fi_api: str) -> Any:
    """``function`` named as the FlashInfer API it stands for, so the recorder writes that API's name and module
    (and import matches the call to the template the API's decorator names)."""
    function.__module__, _, function.__name__ = fi_api.rpartition(".")
    function.__qualname__ = function.__name__
    return function


def _child(calls: list[EngineCall], named_as_api: bool = False) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ikdata.flashinfer import loader

    api = loader.submodule("api_logging")
    engines: dict[str, Any] = {}
    for call in calls:
        template = getattr(loader.submodule(f"trace.templates.{call.module}"), call.attr)
        values = call_values(template, call)
        name = ("wrong_" if call.wrong else "") + call.attr.removesuffix("_trace")
        if name not in engines:
            function = engine(name, template, list(values), call.wrong)
            fi_api = api_of(template) if named_as_api else None
            engines[name] = api.flashinfer_api(trace=template)(as_api(function, fi_api) if fi_api else function)
        engines[name](**values)


def recorder_env(out: Path, fmt: str = "safetensors") -> dict[str, str]:
    """The environment a child runs FlashInfer's recorder in: dumps in ``out/dumps`` (safetensors or torch files),
    its log in ``out/log.txt``."""
    return {**os.environ, "FLASHINFER_LOGLEVEL": "10", "FLASHINFER_DUMP_DIR": str(out / "dumps"),
            "FLASHINFER_LOGDEST": str(out / "log.txt"), "PYTHONWARNINGS": "ignore",
            "FLASHINFER_DUMP_SAFETENSORS": "1" if fmt == "safetensors" else "0"}


def record(out: Path, calls: list[EngineCall], *, fmt: str = "safetensors", timeout: float = 600,
           named_as_api: bool = False) -> Path:
    """Call each engine under FlashInfer's recorder in a child process; returns ``out/dumps``.

    ``named_as_api``: each engine is named as the one FlashInfer API that traces with its template (:func:`api_of`).

    Raises:
        subprocess.CalledProcessError: the child failed (its stderr says why).
    """
    out.mkdir(parents=True, exist_ok=True)
    env = recorder_env(out, fmt)
    flag = ["--child-as-api"] if named_as_api else ["--child"]
    subprocess.run([sys.executable, __file__, *flag, *(c.to_arg() for c in calls)], env=env, check=True,
                   capture_output=True, timeout=timeout)
    return out / "dumps"


def main() -> None:
    if sys.argv[1:2] in (["--child"], ["--child-as-api"]):
        _child([EngineCall.from_arg(a) for a in sys.argv[2:]], named_as_api=sys.argv[1] == "--child-as-api")
        return
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(record(Path(sys.argv[1]), [EngineCall.from_arg(a) for a in sys.argv[2:]]))


if __name__ == "__main__":
    main()
