"""The read-only commands' bodies (ls, show, stats, lineage), free of typer: the typer commands call them,
and so does the fast path (:mod:`ikdata.cli._fast`) that runs them without loading typer (issue 26).
Each returns the command's exit code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ikdata.cli import _output as out


def ls(ds, definition: str | None, o: out.Output) -> int:
    """``ikdata ls``: uuid, definition and axes of every workload (of one definition)."""
    rows = list(ds.workloads(definition))
    if definition is not None and not rows:
        _no_such_definition(ds, definition)
    o.result([{"uuid": r.uuid, "definition": r.definition, "axes": r.axes, "source": r.source} for r in rows],
             lambda: out.table(f"{len(rows)} workloads", ["uuid", "definition", "axes"],
                               [(r.uuid, r.definition, " ".join(f"{k}={v}" for k, v in r.axes.items()))
                                for r in rows]))
    o.problems(ds.problems)
    return 1 if ds.problems else 0


def _no_such_definition(ds, definition: str):
    """``ls --definition NAME`` naming no definition of the dataset: refused, with the names it has."""
    from ikdata.core.errors import IkdataError

    names = sorted(set(ds.definitions) | {r.definition for r in ds.workloads(validate=False)})
    if definition not in names:
        shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
        raise IkdataError(f"--definition {definition!r}: {ds.root} has no such definition"
                         + (f"; it has {shown}" if names else "; it has none"))


def show(ds, key: str, o: out.Output) -> int:
    """``ikdata show``: one workload (or a record of a family's own, such as a trajectory by its id, or the
    workloads of TRAJECTORY:STEP[:STREAM]), then the capture census when the dataset keeps one."""
    from ikdata.core.features import hooks as family_hooks
    from ikdata.ops.inspect import describe_workload

    for describe in family_hooks("describe", ds.root):  # only a dataset holding a family's records loads its module
        found = describe(ds, key)  # a family's own record: a diffusion trajectory by its id (prefix)
        if found is not None:
            o.result(found.document, lambda: found.show(out))
            return 0
    if ":" in key:  # TRAJECTORY:STEP[:STREAM]: the workloads of those steps, as lineage finds them
        from ikdata.ops.lineage import trace

        uuids = list(dict.fromkeys(c.uuid for c in trace(ds.root, key)))
        documents = [describe_workload(ds, u) for u in uuids]
        o.result(documents if len(documents) != 1 else documents[0],
                 lambda: [_print_workload(d) for d in documents])
    else:
        document = describe_workload(ds, key)
        census = census_beside(ds.root, document)  # what the capture run ran and recorded, when the dataset keeps it
        if census is not None:
            document = {**document, "census": census.to_json()}
        o.result(document, lambda: _print_workload(document, census))
    o.problems(ds.problems)
    return 1 if ds.problems else 0


def census_beside(root: str | os.PathLike, document: dict[str, Any]):
    """The capture census ``show`` prints beside a workload: :func:`ikdata.ops.inspect.census_beside` (the runs
    its receipts name, never a process id and host)."""
    from ikdata.ops.inspect import census_beside as of_its_run

    return of_its_run(root, document)


def _print_workload(document: dict, census=None) -> None:
    """One workload for a person: its row, inputs as dtype, shape and blob, each receipt's facts, then the
    capture census (``census``: :class:`ikdata.ops.inspect.ShownCensus`) when there is one."""
    from ikdata.cli._records import descriptor_text, fact_lines, value_text

    row = document["row"]
    workload = row["workload"]
    out.info(f"workload {workload['uuid']}  definition {row['definition']}  ({document['source']})")
    out.info(f"  axes: {value_text(workload.get('axes') or {}) or 'none'}")
    out.info("  inputs:")
    for name, entry in document["inputs"].items():
        text = descriptor_text(entry["descriptor"], dtype=entry.get("dtype"), shape=entry.get("shape"))
        out.info(f"    {name}: {text}" + (f" ({entry['error']})" if entry.get("error") else ""))
    for receipt in document["receipts"]:
        out.info("  receipt:")
        for line in fact_lines(receipt, skip=("uuid", "definition", "axes")):
            out.info(f"    {line}")
    for line in census.lines() if census is not None else ():
        out.info(f"  {line}")


def stats(ds, shown_as: str, o: out.Output) -> int:
    """``ikdata stats``: definitions, workloads, blobs, bytes, dedup."""
    from ikdata.ops.stats import compute

    result = compute(ds)

    def human() -> None:
        out.table(f"{shown_as} ({result.layout} layout)", ["definition", "workloads"],
                  sorted(result.workloads_per_definition.items()))
        out.info(f"definitions {result.definitions} · workloads {result.workloads} · receipts {result.receipts} · "
                 f"unique blobs {result.unique_blobs} · stored {out.human_bytes(result.stored_bytes)} · "
                 f"referenced {out.human_bytes(result.referenced_bytes)} · dedup ×{result.dedup_ratio:.2f}")
        for line in result.lines():  # every family's figures (trajectories)
            out.info(line)

    o.result(result.to_dict(), human)
    o.problems(ds.problems)
    return 1 if ds.problems else 0


def lineage(path, key: str | None, dot: bool, o: out.Output) -> int:
    """``ikdata lineage``: a workload's chain (capture, imports, validations), or the parent graph."""
    from ikdata.ops.lineage import graph, trace

    if key is None or dot:
        found = graph(path)
        if dot:
            sys.stdout.write(out.terminal_safe(found.to_dot()))
        elif not o.human:
            o.result(found.to_dict())
        else:
            for node_id, node in found.nodes.items():
                out.info(f"{node_id[:12]} {node.name or '(no name)'}" + (f" ({node.path})" if node.path else ""))
                if node.cloned:
                    out.info(f"  {_cloned(node.cloned)}")
                for parent in node.parents:
                    out.info(f"  <- {parent['id'][:12]} by {parent.get('how', '?')} at {_when(parent.get('at'))}"
                             f" from {parent.get('source', '?')}")
        o.problems(found.problems)
        return 1 if found.problems else 0
    chains = trace(path, key)
    if not o.human:
        o.result([c.to_dict() for c in chains])
        return 0
    for chain in chains:
        out.info(f"workload {chain.uuid} ({chain.definition}) at {chain.row}"
                 + (f", uses the blob as {', '.join(chain.uses)}" if chain.uses else ""))
        capture = chain.capture or {}
        from ikdata.cli._records import fact_lines

        out.info("  captured:" + ("" if capture else " no receipt"))
        for line in fact_lines(capture):
            out.info(f"    {line}")
        if chain.call_line is not None:  # the family record the workload belongs to (a pipeline call)
            out.info(f"  {chain.call_line}")
        if chain.request is not None:
            out.info("  request: " + _shortened(json.dumps(chain.request, sort_keys=True, ensure_ascii=False,
                                                           default=str)))
        for hop in chain.imports:
            out.info(f"  imported: from {hop['from'][:12]} ({hop.get('source', '?')}) by {hop.get('how', 'import')} "
                     f"at {_when(hop.get('at'))}")
        if chain.cloned:
            out.info(f"  {_cloned(chain.cloned)}")
        for check in chain.validations:
            metrics = check.get("metrics")
            out.info(f"  validated: {check.get('status')} on {check.get('device', '?')} "
                     f"(torch {check.get('torch', '?')}; {check['from']})" + (f": {_metrics(metrics)}" if metrics else ""))
    return 0


def _cloned(note: dict) -> str:
    """``cloned from SOURCE (id 3f2a9c..., at TIME)``: where the dataset was copied from, as its local note claims
    (marked unverified: :data:`ikdata.core.origin.UNVERIFIED`)."""
    claim = "; unverified local note" if note.get("verified") is False else ""
    return f"cloned from {note['source']} (id {note['id'][:12]}, at {_when(note.get('at'))}{claim})"


_REQUEST_SHOWN = 2000  # characters of a request payload in the text output; --json has all of it


def _shortened(text: str) -> str:
    if len(text) <= _REQUEST_SHOWN:
        return text
    return f"{text[:_REQUEST_SHOWN]}… ({len(text)} characters; --json shows all of it)"


def _metrics(metrics: object) -> str:
    """Per-output error metrics in a line a person reads: ``O: max abs 4.9e-04, rel rms 1.6e-03, ...``."""
    if not isinstance(metrics, dict):
        return str(metrics)
    short = {"max_abs_error": "max abs", "max_rel_error": "max rel", "relative_rms": "rel rms",
             "cosine_similarity": "cos", "mismatched_fraction": "mismatched"}
    parts = []
    for output, values in metrics.items():
        if not isinstance(values, dict):
            parts.append(f"{output}: {values}")
            continue
        shown = ", ".join(f"{label} {values[key]:.3g}" for key, label in short.items()
                          if isinstance(values.get(key), (int, float)))
        if not shown:  # a family's own metrics (a sampler's: draws judged, tests, p-value): each as it is named
            shown = ", ".join(f"{key.replace('_', ' ')} {value:.3g}" if isinstance(value, float) else
                              f"{key.replace('_', ' ')} {value}" for key, value in values.items()
                              if isinstance(value, (int, float, str)) and not isinstance(value, bool)) or "no figures"
        parts.append(f"{output}: {shown}")
    return "; ".join(parts)


def _when(at: object) -> str:
    from ikdata.cli._records import iso_time

    return iso_time(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else "?"
