"""Commands of this feature register on ikdata.cli.app here: ``ikdata capture``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._declared import with_family_options
from ikdata.cli._options import JsonOpt, QuietOpt

CAPTURE_EXAMPLES = """
\b
Examples:
  ikdata capture --into runs/minilm -- python tools/examples/minilm_embed.py
  ikdata capture --into runs/llama --only gemm,attention --steps 0,1 \\
      --max-bytes 256MB -- python gen.py
  ikdata capture --into runs/srv --request-file /tmp/req.json \\
      --step-module Qwen3ForCausalLM \\
      -- python -m sglang.launch_server --disable-cuda-graph ...
"""


def _split(values: Optional[list[str]]) -> tuple[str, ...]:
    return tuple(n.strip() for v in values or () for n in v.split(",") if n.strip())


@app.command("capture", epilog=CAPTURE_EXAMPLES,
             context_settings={"allow_interspersed_args": False})
@with_family_options("capture")  # each family's declared capture options (diffusion's --streams), by the registry
def capture(
    command: Annotated[list[str], typer.Argument(help="The command to run, after '--'.", show_default=False)],
    into: Annotated[Path, typer.Option("--into", help="Dataset folder to write (created if missing).")],
    definitions: Annotated[Optional[list[Path]], typer.Option(
        "--definitions", help="Folder of exact definitions to capture by name (repeatable).")] = None,
    only: Annotated[Optional[list[str]], typer.Option(
        "--only", help="Capture only these op types, templates or definitions (comma-separated).")] = None,
    steps: Annotated[Optional[str], typer.Option("--steps", help="Steps to capture, e.g. 0,4,7 or 0-3.")] = None,
    per_step: Annotated[bool, typer.Option(
        "--per-step", help="Keep each distinct call once per step (default: once per run, from a spread of steps).")] = False,
    step_module: Annotated[Optional[str], typer.Option(
        "--step-module", help="Class name of the module whose forward calls count steps (default: any outermost module).")] = None,
    max_per_definition: Annotated[Optional[int], typer.Option(
        "--max-per-definition", help="At most N workloads per definition.")] = None,
    max_bytes: Annotated[Optional[str], typer.Option(
        "--max-bytes", help="Stop after copying this much, e.g. 64MB or 1GiB.")] = None,
    request_file: Annotated[Optional[Path], typer.Option(
        "--request-file", help="JSON file naming the current request, replaced atomically by a driver.")] = None,
    adapter: Annotated[Optional[list[str]], typer.Option(
        "--adapter", help="Module path of an adapter of yours, with install(api) (repeatable).")] = None,
    engine: Annotated[Optional[str], typer.Option("--engine", help="Engine name for the receipts.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Model name for the receipts.")] = None,
    model_revision: Annotated[Optional[str], typer.Option("--model-revision", help="Model revision.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="A failing hook raises in the program (for tests).")] = False,
    json_: JsonOpt = False, quiet: QuietOpt = False, **family_options: Any,
) -> None:
    """Run CMD with capture on in it and every Python process it starts; commit and summarise."""
    from ikdata.capture.config import CaptureConfig, parse_size, parse_steps
    from ikdata.capture.runner import run_capture
    from ikdata.core.locking import refuse_remote

    refuse_remote(into)  # before the program starts: its hooks would only fail one by one
    provenance = {k: v for k, v in (("engine", engine), ("model", model), ("model_revision", model_revision)) if v}
    config = CaptureConfig(
        into=str(into), definitions=tuple(str(d) for d in definitions or ()), only=_split(only),
        steps=parse_steps(steps) if steps is not None else None, per_step=per_step, step_module=step_module,
        max_per_definition=max_per_definition, max_bytes=parse_size(max_bytes) if max_bytes is not None else None,
        request_file=str(request_file) if request_file else None, strict=strict, adapters=_split(adapter),
        provenance=provenance, **{name: _split(value) if isinstance(value, list) else value
                                  for name, value in family_options.items() if value is not None})
    o = out.Output(json=json_, quiet=quiet)
    from ikdata.core.features import hooks as family_hooks

    family_stats = family_hooks("stats")  # every family's figures before and after: what the run added (trajectories)
    before = [stats(into) for stats in family_stats]
    with out.stdout_to_stderr(json_):  # the program's own output must not mix with the JSON document
        result = run_capture(config, command)
    if json_:
        out.emit_json({"into": str(into), **dataclasses.asdict(result)})
    o.table(f"captured into {into}", ["definition", "workloads"], sorted(result.counts.items()))
    for failure in result.failures:
        out.err_console.print(f"failed in process {failure['pid']}: {failure['definition']}: {failure['message']}",
                              markup=False)
    if result.refused:
        o.info("not captured (caps reached): " + ", ".join(f"{k}: {v}" for k, v in sorted(result.refused.items())))
    for stats, earlier in zip(family_stats, before):  # e.g. one line per diffusion pipeline call recorded
        for line in stats(into).since(earlier):
            o.info(line)
    for line in result.selection_lines():  # what the default kept, and how to ask for more
        o.info(line)
    for line in result.census_lines:  # what ran, what was recorded, why the rest was not
        o.info(f"census: {line}")
    total = sum(result.counts.values())
    code = result.returncode if result.returncode >= 0 else 128 - result.returncode
    if result.counts and result.dataset_id is not None:
        o.info(f"{total} workload(s) in {len(result.counts)} definition(s); dataset id {result.dataset_id}. "
               f"Check it with: ikdata validate --deep {into}")
    else:  # a capture that recorded nothing is a problem: say why (from the census), exit 1
        where = f"{into} holds no dataset" if result.dataset_id is None else f"{into} is unchanged"
        out.error(f"nothing was captured; {where}: {result.why_nothing or 'no reason known'}")
        code = code or 1
    for problem in result.census_problems():  # a process without capture, an adapter that did not install
        out.error(problem)
        code = code or 1
    why_nothing = result.nothing_kept()
    if why_nothing is not None:
        message, impossible = why_nothing
        if impossible:  # what was asked cannot be had from this program
            out.error(message)
            code = code or 1
        else:
            o.warn(message)
    if result.unverified:
        o.warn(f"{result.unverified} workload(s) are marked unverified: a weight they reused changed in place "
               "(see docs/capture.md); replay and import will not judge them")
    if result.lost:
        out.error(f"{result.lost} captured workload(s) could not be written (see the failures above); "
                  "the dataset holds the others, each row with its receipt")
        code = code or 1
    for lost in result.lost_calls():  # the program's calls that capture could not record: never exit 0
        out.error(f"not captured: {lost}")
        code = code or 1
    if result.returncode != 0:
        out.err_console.print(_how_it_ended(result.returncode), markup=False)
    raise typer.Exit(code)


def _how_it_ended(returncode: int) -> str:
    """How the program ended: 'exited with status 3', or for a negative code (a signal) 'was killed by SIGTERM'."""
    if returncode > 0:
        return f"the command exited with status {returncode}"
    import signal

    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"the command was killed by {name} (exit code {128 - returncode})"
