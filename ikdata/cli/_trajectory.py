"""Printing diffusion trajectories for ``ikdata show`` and ``ikdata stats`` (human output)."""

from __future__ import annotations

from typing import Any

from ikdata.cli import _output as out


def print_trajectory(document: dict[str, Any]) -> None:
    """A trajectory: request, noise and its check, model, then every step of every stream."""
    out.info(f"trajectory {document['trajectory']}  {document['pipeline']} / {document['scheduler']}  "
             f"({document['source']})  {document['status']}"
             + (f": {document['reason']}" if document.get("reason") else ""))
    request = {k: v for k, v in document["request"].items() if v is not None}
    out.info("request: " + ", ".join(f"{k}={v}" for k, v in sorted(request.items())))
    noise = document["noise"]
    checks = ", ".join(f"{s}={'yes' if ok else 'NO'}" for s, ok in document["noise_check"].items())
    shapes = " ".join(f"{s['name']}={'x'.join(map(str, s['shape']))}" for s in noise.get("streams", []))
    out.info(f"noise: {noise['recipe']} seed {noise.get('seed')} {shapes} digest {noise.get('digest')}; "
             f"first latents are the recipe's noise: {checks or 'no stream checked'}"
             + (f" ({noise['reason']})" if noise.get("reason") else ""))
    model = document.get("model")
    if model:
        out.info(f"model: {model['class']} ({model['component']}) digest {model['digest']}, "
                 f"{'stored in the dataset' if model['stored'] else 'recorded by digests (not stored)'}")
    out.info("steps per stream: " + ", ".join(f"{s}={n}/{document['expected_steps']}"
                                             for s, n in document["steps"].items()))
    out.table("steps", ["step", "stream", "t", "sigma", "next", "x", "out", "x_next", "workloads"],
              [(s["index"], s["stream"], _num(s["timestep"]), _num(s["sigma"]), _num(s["sigma_next"]),
                s["x"]["digest"][:8], s["out"]["digest"][:8], s["x_next"]["digest"][:8],
                " ".join(f"{k}:{len(v)}" for k, v in s["workloads"].items()))
               for s in document["steps_detail"]])
    reasons: dict[str, set] = {}
    for s in document["steps_detail"]:
        for kind, why in s["skipped"].items():
            reasons.setdefault(f"{kind}: {why}", set()).add(f"{s['index']}{s['stream'][0]}")
    for reason, where in sorted(reasons.items()):
        out.info(f"no workload for {reason} (steps {' '.join(sorted(where))})")
    for name, ref in document["decoded"].items():
        out.info(f"decoded {name}: {ref['shape']} {ref['dtype']} {ref['digest'][:12]}")
    for name, ref in document["final"].items():
        out.info(f"final latent {name}: {ref['digest'][:12]}")


def trajectory_line(counts: dict[str, Any]) -> str | None:
    """The stats line for trajectories, or None when the dataset has none."""
    if not counts or not counts.get("trajectories"):
        return None
    per = ", ".join(f"{k} {v}" for k, v in sorted(counts["per_pipeline"].items()))
    return (f"trajectories {counts['trajectories']} ({per}) · steps {counts['steps']} · "
            f"incomplete {counts['incomplete']} · models {counts['models']}")


def _num(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"
