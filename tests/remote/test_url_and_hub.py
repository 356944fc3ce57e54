"""URL parsing, the public API, and the Hub specifics: batched commits, paginated listing."""

from __future__ import annotations

import pytest

import ikdata.remote
from ikdata.core import manifest
from ikdata.core.errors import UsageError
from ikdata.remote import hub as hub_mod
from ikdata.remote.pull import clone
from ikdata.remote.push import push
from ikdata.remote.url import RemoteOptions, parse_url, resolve_options


def test_exported_members():
    import types

    # submodules become attributes once any test imports them: only the package's own names count;
    # the exported names are loaded on first use, so each must resolve and none may be left out
    own = {name for name, value in vars(ikdata.remote).items()
           if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert own <= set(ikdata.remote.__all__)
    for name in ikdata.remote.__all__:
        assert getattr(ikdata.remote, name).__name__ == name
    with pytest.raises(AttributeError):
        ikdata.remote.no_such_name


@pytest.mark.parametrize("url, protocol, path, repo_id, revision", [
    ("s3://bucket/some/prefix/", "s3", "bucket/some/prefix", None, None),
    ("memory://share/x", "memory", "/share/x", None, None),
    ("hf://datasets/acme/gemm@v2", "hf", "", "acme/gemm", "v2"),
    ("hf://datasets/acme/gemm@main/sub/dir", "hf", "sub/dir", "acme/gemm", "main"),
])
def test_parse_url(url, protocol, path, repo_id, revision):
    parsed = parse_url(url)
    assert (parsed.protocol, parsed.path, parsed.repo_id, parsed.revision) == (protocol, path, repo_id, revision)


def test_local_paths_and_file_urls_are_the_same_place(tmp_path):
    assert parse_url(str(tmp_path)).path == parse_url(f"file://{tmp_path}").path == str(tmp_path)


def test_options_come_from_flags_then_the_environment(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env:9000")
    monkeypatch.setenv("AWS_PROFILE", "env-profile")
    monkeypatch.setenv("HF_ENDPOINT", "http://hub-env")
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    s3 = parse_url("s3://b/p")
    assert resolve_options(None, s3) == RemoteOptions(endpoint_url="http://env:9000", profile="env-profile")
    assert resolve_options(RemoteOptions(endpoint_url="http://flag"), s3).endpoint_url == "http://flag"
    hf = parse_url("hf://datasets/a/b@rev-in-url")
    resolved = resolve_options(None, hf)
    assert (resolved.endpoint_url, resolved.token, resolved.revision) == ("http://hub-env", "hf_env", "rev-in-url")
    assert resolve_options(RemoteOptions(revision="flag-rev"), hf).revision == "flag-rev"


def test_malformed_hf_url():
    with pytest.raises(UsageError, match="expected hf://datasets/ORG/NAME"):
        parse_url("hf://acme")


def test_hub_push_uses_few_commits_and_pages_through_the_tree(hub_env, make_dataset, tmp_path, monkeypatch):
    root = make_dataset("src", rows=4)
    blobs = len(list((root / "blob").rglob("*.safetensors")))
    monkeypatch.setattr(hub_env, "page_size", 3)  # many pages for a tiny tree
    url = "hf://datasets/test-org/batched"
    push(root, url)
    # one commit of blobs, one of small files, one of the manifest: never one per file
    assert hub_env.commit_count("test-org/batched") == 3 < blobs
    assert set(hub_env.files("test-org/batched")) >= {"ikdata.json"}

    monkeypatch.setattr(hub_mod, "BATCH_FILES", 4)
    root2 = make_dataset("src2", rows=4, seed=5)
    push(root2, "hf://datasets/test-org/batched-small", pack=False)  # many loose objects, in batches
    blobs2 = len(list((root2 / "blob").rglob("*.safetensors")))
    assert hub_env.commit_count("test-org/batched-small") == -(-blobs2 // 4) + 2

    tree_before, commits_before = hub_env.requests["tree"], hub_env.commit_count("test-org/batched")
    again = push(root, url)
    # a no-op push commits nothing, but lists and checks what it relies on (issue 21, finding 5)
    assert not again.published and hub_env.commit_count("test-org/batched") == commits_before
    assert again.checked == {"git-blob-id": 1 + len(manifest.read(root)["files"])}  # its one pack, its files
    tree_before = hub_env.requests["tree"]
    copy = clone(url, tmp_path / "copy")
    assert hub_env.requests["tree"] - tree_before >= 2  # clone's listing followed the pages
    assert copy.dataset_id == manifest.current_id(root)


def test_hub_revision_in_url_is_read(hub_env, make_dataset, tmp_path):
    root = make_dataset("src", rows=2)
    push(root, "hf://datasets/test-org/rev")
    sha = hub_env.repos["test-org/rev"].branches["main"]
    copy = clone(f"hf://datasets/test-org/rev@{sha}", tmp_path / "copy")
    assert copy.dataset_id == manifest.current_id(root)


def test_s3_noop_push_lists_once_and_sends_nothing(s3_env, make_dataset, s3_requests):
    root = make_dataset("src", rows=3)
    push(root, "s3://ikdata-test/noop")
    s3_requests.clear()
    again = push(root, "s3://ikdata-test/noop")
    assert not again.published
    lists = [r for r in s3_requests if "list-type=2" in r]
    writes = [r for r in s3_requests if r.startswith(("PUT", "POST"))]
    assert writes == []
    # the remote manifest is this dataset's, yet what it names is listed (one listing of the whole remote)
    # and checked against the listing's ETags (the pack and the 3 small files), with no request per object
    # (issue 21, finding 5; issue 26: the bucket check and a second listing are gone)
    assert len(lists) == 1 and again.checked == {"etag-md5": 1 + 3}
    assert len(s3_requests) == 2, s3_requests  # the manifest read and the listing
