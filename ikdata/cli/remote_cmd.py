"""Sharing commands: push, pull, clone (thin layer over :mod:`ikdata.remote`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ikdata.cli import _output as out
from ikdata.cli import app
from ikdata.cli._options import (DatasetArg, DefinitionsOpt, EndpointOpt, JsonOpt, ProfileOpt, QuietOpt,
                                 _local_callback, _location_callback, remote_options)
from ikdata.cli.merge_cmd import RejudgeAllOpt, TrustOpt, TrustReportsOpt, check_trusted_digests

UrlArg = Annotated[str, typer.Argument(help="Remote: a folder, file://, memory://, s3://bucket/prefix or "
                                            "hf://datasets/org/name[@revision].", show_default=False,
                                       metavar="URL", callback=_location_callback)]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", min=1, help="Parallel transfers.")]
RevisionOpt = Annotated[Optional[str], typer.Option("--revision", metavar="REV",
                                                    help="Hub branch or commit (or URL@REV).")]
PackOpt = Annotated[bool, typer.Option("--pack/--no-pack", help="Send packs as packs and pack small loose blobs "
                                       "(default); --no-pack sends every blob loose (remote layout 1, which "
                                       "older ikdata reads).")]

PUSH_EXAMPLES = """
\b
Examples:
  ikdata push runs/gemm s3://team-bucket/datasets/gemm
  ikdata push runs/gemm hf://datasets/acme/gemm-captures --jobs 16
  ikdata push runs/gemm /mnt/shared/gemm --json
"""
PULL_EXAMPLES = """
\b
Examples:
  ikdata pull s3://team-bucket/datasets/gemm shared/gemm
  ikdata pull hf://datasets/acme/gemm-captures@main shared/gemm
"""
CLONE_EXAMPLES = """
\b
Examples:
  ikdata clone s3://team-bucket/datasets/gemm gemm
  ikdata clone hf://datasets/acme/gemm-captures gemm \\
      --endpoint-url http://localhost:8080
"""


@app.command(epilog=PUSH_EXAMPLES)
def push(path: DatasetArg, url: UrlArg,
         jobs: JobsOpt = 8, json_: JsonOpt = False, endpoint_url: EndpointOpt = None, profile: ProfileOpt = None,
         revision: RevisionOpt = None, quiet: QuietOpt = False, definitions: DefinitionsOpt = None,
         trust_reports: TrustReportsOpt = False, trust: TrustOpt = None, rejudge_all: RejudgeAllOpt = False,
         pack: PackOpt = True) -> None:
    """Publish a dataset: only the blobs the remote lacks, then the files, then the manifest (last, atomically).
    When another pusher got there first, their data is merged in first by the rules of pull (re-judged
    unless --trust-reports)."""
    from ikdata.core.dataset import require_dataset
    from ikdata.remote import push as push_mod

    require_dataset(path)  # what is pushed is a dataset; a folder holding none is refused before any remote work
    judging = dict(definitions=definitions or (), trust=check_trusted_digests(trust), trust_reports=trust_reports,
                   rejudge_all=rejudge_all)
    o = out.Output(json=json_, quiet=quiet)
    with o.progress("push", unit="objects") as progress:
        result = push_mod.push(path, url, options=remote_options(endpoint_url, profile, revision), jobs=jobs,
                               progress=progress, pack=pack, **judging)
    if not o.human:
        o.result(result.to_dict())
        return
    if result.merged:
        out.info(f"merged remote dataset(s) {', '.join(m[:12] for m in result.merged)} into {path} first")
    verdict = "published" if result.published else "already up to date"
    if result.repaired:
        shown = ", ".join(result.repaired[:3]) + (" ..." if len(result.repaired) > 3 else "")
        out.info(f"{url}: held {len(result.repaired)} damaged or missing object(s) its manifest names ({shown}); "
                 "sent them again")
        verdict = "repaired" if not result.published else verdict
    how = ", ".join(f"{n} {method}" for method, n in result.checked.items() if method != "size")
    out.info(f"{url}: {verdict} (id {result.dataset_id[:12]}) — sent {result.blobs_sent} blobs "
             f"({out.human_bytes(result.bytes_sent)}{f', in {result.packs_sent} pack(s)' if result.packs_sent else ''}) and {result.files_sent} files; "
             f"{result.blobs_present} blobs were already there; remote objects relied on: "
             f"{result.objects_checked} checked ({how or 'none'}), {len(result.trusted_by_size)} trusted by size only")
    if result.trusted_by_size:
        out.info(f"{url}: this backend cannot check those {len(result.trusted_by_size)} object(s) cheaply; "
                 f"'ikdata validate --deep {url}' rehashes what the remote holds")
    for line in result.cache_ignored:
        out.info(f"{url}: {line}")


@app.command(epilog=PULL_EXAMPLES)
def pull(url: UrlArg, path: Annotated[str, typer.Argument(help="Dataset folder (created if new).",
                                                          show_default=False, metavar="DIR",
                                                          callback=_local_callback)],
         jobs: JobsOpt = 8, json_: JsonOpt = False, endpoint_url: EndpointOpt = None, profile: ProfileOpt = None,
         revision: RevisionOpt = None, quiet: QuietOpt = False, definitions: DefinitionsOpt = None,
         trust_reports: TrustReportsOpt = False, trust: TrustOpt = None, rejudge_all: RejudgeAllOpt = False) -> None:
    """Fetch a remote dataset into PATH, verifying every blob; merges (import rules, the remote's verdicts
    re-judged unless --trust-reports) when PATH has data."""
    from ikdata.remote import pull as pull_mod

    o = out.Output(json=json_, quiet=quiet)
    judging = dict(definitions=definitions or (), trust=check_trusted_digests(trust), trust_reports=trust_reports,
                   rejudge_all=rejudge_all)
    with o.progress("pull", unit="objects") as progress:
        result = pull_mod.pull(url, path, options=remote_options(endpoint_url, profile, revision), jobs=jobs,
                               progress=progress, **judging)
    _report(result, path, o)


@app.command(epilog=CLONE_EXAMPLES)
def clone(url: UrlArg, path: Annotated[str, typer.Argument(help="New dataset folder.", show_default=False,
                                                           metavar="DIR", callback=_local_callback)],
          jobs: JobsOpt = 8, json_: JsonOpt = False, endpoint_url: EndpointOpt = None, profile: ProfileOpt = None,
          revision: RevisionOpt = None, quiet: QuietOpt = False) -> None:
    """Copy a remote dataset into a new folder, verifying every blob; the folder appears only when complete."""
    from ikdata.remote import pull as pull_mod

    o = out.Output(json=json_, quiet=quiet)
    with o.progress("clone", unit="objects") as progress:
        result = pull_mod.clone(url, path, options=remote_options(endpoint_url, profile, revision), jobs=jobs,
                                progress=progress)
    _report(result, path, o)


def _report(result, path: Path, o: out.Output) -> None:
    if not o.human:
        o.result(result.to_dict())
        return
    if result.how == "up-to-date":
        out.info(f"{path}: already holds {result.remote_id[:12]}")
        return
    merged = f", {result.added} workloads merged" if result.how == "pull" else ""
    out.info(f"{path}: {result.how} of {result.url} (id {result.dataset_id[:12]}) — fetched "
             f"{result.blobs_fetched} blobs ({out.human_bytes(result.bytes_fetched)}), verified; "
             f"{result.blobs_present} already present{merged}")
    if result.rejudged:
        out.info(result.rejudged)
    for line in result.cache_ignored:
        out.info(f"{result.url}: {line}")
