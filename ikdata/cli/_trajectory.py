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
    from rich import box
    from rich.table import Table

    table = Table(title="steps (digests of x, out, x_next; workloads: step = scheduler step, den = denoiser)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column in ("step", "stream", "t", "sigma", "next", "x", "out", "x_next", "work"):  # fits 80 columns
        table.add_column(column, no_wrap=True)
    for s in document["steps_detail"]:
        table.add_row(*map(out.cell, (  # cells from the record: shown literally (out.cell)
            s["index"], s["stream"], _num(s["timestep"]), _num(s["sigma"]), _num(s["sigma_next"]),
            s["x"]["digest"][:8], s["out"]["digest"][:8], s["x_next"]["digest"][:8],
            " ".join(_SHORT.get(k, k) + (f"x{len(v)}" if len(v) > 1 else "")
                     for k, v in sorted(s["workloads"].items(), reverse=True)))))
    out.console.print(table)
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


_SHORT = {"scheduler_step": "step", "denoiser": "den"}


def _num(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"
