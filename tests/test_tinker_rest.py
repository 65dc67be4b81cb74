"""The Tinker SDK's REST listing (`tinker.RestClient`) on the embedded backend: a training client's runs, its
checkpoints as they are on disk, its session, and deleting a checkpoint, driven by the real SDK (0.38.0) in a
client process of its own; and the on-disk rules those listings follow (`store.tinker_checkpoints`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from backend_support import TINY_TEXT, serve_backend
from synth_ai.backend.store import tinker_checkpoints
from synth_ai.errors import InvalidInputError
from test_tinker_api import _client

# One training client with metadata saves a state, sampler weights and a second state; a RestClient lists and
# reads them; then the first state and the sampler weights are deleted and loading them is refused.
_REST = r"""
import json, sys, tinker
base_url, model = sys.argv[1], sys.argv[2]
seen = {}
def attempt(call):
    try:
        call()
        return "no error"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
sc = tinker.ServiceClient(base_url=base_url)
tc = sc.create_lora_training_client(base_model=model, rank=4, user_metadata={"recipe": "rest", "seed": 7}).result()
run = seen["run"] = tc.model_id
state = seen["state"] = tc.save_state("a").result().path
sampler = seen["sampler"] = tc.save_weights_for_sampler("s").result().path
later = seen["later"] = tc.save_state("b").result().path
tc.save_weights_and_get_sampling_client().result()  # kept in the worker's memory: not a checkpoint
rest = tinker.RestClient(base_url=base_url)
dump = lambda item: item.model_dump(mode="json")
listed = rest.list_training_runs().result()
seen["runs"], seen["runs_cursor"] = [dump(r) for r in listed.training_runs], dump(listed.cursor)
seen["run_by_id"] = dump(rest.get_training_run(run).result())
seen["run_by_path"] = dump(rest.get_training_run_by_tinker_path(sampler).result())
seen["checkpoints"] = dump(rest.list_checkpoints(run).result())
seen["user_checkpoints"] = dump(rest.list_user_checkpoints().result())
seen["user_page"] = dump(rest.list_user_checkpoints(limit=1, offset=1).result())
seen["info"] = dump(rest.get_weights_info_by_tinker_path(state).result())
session_id = run.split(":train:")[0]
seen["session"] = dump(rest.get_session(session_id).result())
seen["sessions"] = rest.list_sessions().result().sessions
seen["ttl"] = attempt(lambda: rest.set_checkpoint_ttl_from_tinker_path(state, 86400).result())
seen["publish"] = attempt(lambda: rest.publish_checkpoint_from_tinker_path(state).result())
seen["unpublish"] = attempt(lambda: rest.unpublish_checkpoint_from_tinker_path(state).result())
seen["delete"] = attempt(lambda: rest.delete_checkpoint_from_tinker_path(state).result())
seen["delete_sampler"] = attempt(lambda: rest.delete_checkpoint(run, "sampler_weights/s").result())
seen["after_delete"] = [c.checkpoint_id for c in rest.list_checkpoints(run).result().checkpoints]
seen["delete_again"] = attempt(lambda: rest.delete_checkpoint_from_tinker_path(state).result())
seen["delete_malformed"] = attempt(lambda: rest.delete_checkpoint(run, "a").result())
seen["load_deleted"] = attempt(lambda: sc.create_training_client_from_state(state).result())
seen["sample_deleted"] = attempt(lambda: sc.create_sampling_client(model_path=sampler).result())
seen["info_deleted"] = attempt(lambda: rest.get_weights_info_by_tinker_path(state).result())
seen["unknown_run"] = attempt(lambda: rest.get_training_run("sess_nobody:train:0").result())
seen["unknown_session"] = attempt(lambda: rest.get_session("sess_nobody").result())
sc.close("success").result()
print("SEEN " + json.dumps(seen))
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    yield from serve_backend(tmp_path_factory, "tinker-rest", tiny=(TINY_TEXT,))


@pytest.mark.slow
def test_the_rest_client_lists_runs_and_checkpoints_and_deletes_them(backend, tmp_path):
    seen = _client(backend, _REST, tmp_path)
    run = seen["run"]
    # the training run: what it was created as, with its metadata (non-string values as JSON text)
    assert [r["training_run_id"] for r in seen["runs"]] == [run]
    assert seen["runs_cursor"] == {"offset": 0, "limit": 20, "total_count": 1}
    training_run = seen["run_by_id"]
    assert training_run == seen["runs"][0] == seen["run_by_path"]
    assert training_run["base_model"] == TINY_TEXT and training_run["is_lora"] and training_run["lora_rank"] == 4
    assert training_run["model_owner"] == "local" and training_run["corrupted"] is False
    assert training_run["user_metadata"] == {"recipe": "rest", "seed": "7"}
    assert training_run["last_checkpoint"]["tinker_path"] == seen["later"]
    assert training_run["last_sampler_checkpoint"]["tinker_path"] == seen["sampler"]
    # its checkpoints: both kinds, newest first, the ephemeral sampler not among them
    listed = seen["checkpoints"]
    assert listed["cursor"] is None
    by_id = {c["checkpoint_id"]: c for c in listed["checkpoints"]}
    assert set(by_id) == {"weights/a", "weights/b", "sampler_weights/s"}
    assert [c["checkpoint_id"] for c in listed["checkpoints"]][0] == "weights/b"
    assert by_id["weights/a"]["tinker_path"] == seen["state"] and by_id["weights/a"]["checkpoint_type"] == "training"
    assert by_id["sampler_weights/s"]["checkpoint_type"] == "sampler"
    assert all(c["size_bytes"] > 0 and c["public"] is False and c["expires_at"] is None for c in by_id.values())
    assert seen["user_checkpoints"]["checkpoints"] == listed["checkpoints"]
    assert seen["user_checkpoints"]["cursor"] == {"offset": 0, "limit": 100, "total_count": 3}
    assert seen["user_page"]["checkpoints"] == listed["checkpoints"][1:2]
    assert seen["info"] == {"base_model": TINY_TEXT, "is_lora": True, "lora_rank": 4, "train_unembed": False,
                            "train_mlp": True, "train_attn": True, "optimizer_config": {"type": "adamw"}}
    # the session: its training client and its sampler (the in-memory one, which is a sampling client)
    session = seen["session"]
    assert session["training_run_ids"] == [run] and len(session["sampler_ids"]) == 1
    assert seen["sessions"] == [run.split(":train:")[0]]
    # a TTL is accepted (and kept nowhere); publishing is refused with the reason
    assert seen["ttl"] == "no error"
    for refused in (seen["publish"], seen["unpublish"]):
        assert refused.startswith("BadRequestError") and "not published" in refused
    # deleting: gone from the listing and from disk; loading what was deleted is a not-found, before any worker
    assert seen["delete"] == seen["delete_sampler"] == "no error"
    assert seen["after_delete"] == ["weights/b"]
    root = _checkpoints_root(backend)
    assert (root / "weights" / "b").is_dir()
    assert not (root / "weights" / "a").exists() and not (root / "sampler_weights" / "s").exists()
    # and no longer models of the store (the one left still is)
    models = {m["id"] for m in backend.client().get("/learning/models").json()["data"]}
    assert f"tinker://{run}/weights/b" in models
    assert not {f"tinker://{run}/weights/a", f"tinker://{run}/sampler_weights/s"} & models
    for gone in ("delete_again", "load_deleted", "sample_deleted", "info_deleted"):
        assert seen[gone].startswith("NotFoundError") and "it was never saved, or it was deleted" in seen[gone], gone
    assert seen["delete_malformed"].startswith("BadRequestError") and "'a' is not a checkpoint id" in seen[
        "delete_malformed"]
    assert seen["unknown_run"].startswith("NotFoundError") and "sess_nobody:train:0" in seen["unknown_run"]
    assert seen["unknown_session"].startswith("NotFoundError") and "sess_nobody" in seen["unknown_session"]
    _bad_requests_are_refused(backend, run)


def _checkpoints_root(backend) -> Path:
    # the module's one training client: the refused load and sampler above started no job
    roots = list((backend.data_dir / "backend" / "jobs").glob("*/work/tinker"))
    assert len(roots) == 1, roots
    return roots[0]


def _bad_requests_are_refused(backend, run: str) -> None:
    """What the SDK would never send, as a raw client could: refused with a message, nothing deleted."""
    headers = {"X-API-Key": f"tml-{backend.key}"}
    base = f"{backend.url}/api/v1/training_runs/{run}/checkpoints"
    for name in ("%2E%2E", "%2E"):  # '..' and '.': never a folder outside the run's checkpoints
        answer = httpx.delete(f"{base}/weights/{name}", headers=headers)
        assert answer.status_code == 400 and "non-empty name without '/'" in answer.json()["detail"], answer.text
    nested = httpx.delete(f"{base}/weights/b/c", headers=headers)
    assert nested.status_code == 400 and "not a checkpoint id" in nested.json()["detail"]
    kind = httpx.delete(f"{base}/optimizer/b", headers=headers)
    assert kind.status_code == 400 and "'optimizer' is not a kind of checkpoint" in kind.json()["detail"]
    ttl = httpx.put(f"{base}/weights/b/ttl", json={"ttl_seconds": "soon"}, headers=headers)
    assert ttl.status_code == 400 and "ttl_seconds" in ttl.json()["detail"]
    assert httpx.get(f"{backend.url}/api/v1/training_runs", params={"limit": 0}, headers=headers).status_code == 422
    assert httpx.get(f"{backend.url}/api/v1/training_runs", headers={"X-API-Key": "tml-wrong"}).status_code == 401
    assert (_checkpoints_root(backend) / "weights" / "b" / "optimizer.pt").exists()


def test_a_checkpoint_counts_once_its_files_are_written(tmp_path):
    root = tmp_path / "tinker"
    (root / "weights" / "half").mkdir(parents=True)  # a save_state under way: the adapter written, not the optimizer
    (root / "weights" / "half" / "trainable.pt").write_bytes(b"x")
    (root / "weights" / "whole").mkdir()
    for file in ("trainable.pt", "optimizer.pt"):
        (root / "weights" / "whole" / file).write_bytes(b"xy")
    (root / "sampler_weights" / "s").mkdir(parents=True)
    (root / "sampler_weights" / "s" / "trainable.pt").write_bytes(b"xyz")
    (root / "sampler_weights" / "s" / "adapter_config.json").write_text("{}")
    older = time.time() - 60
    for file in (root / "weights" / "whole").iterdir():
        os.utime(file, (older, older))
    assert [c.checkpoint_id for c in tinker_checkpoints.saved(root)] == ["sampler_weights/s", "weights/whole"]
    assert tinker_checkpoints.find(root, "weights", "half") is None
    whole = tinker_checkpoints.find(root, "weights", "whole")
    assert whole is not None and whole.size_bytes == 4 and whole.time.endswith("Z")
    assert tinker_checkpoints.find(root, "sampler_weights", "s").size_bytes == 5
    assert tinker_checkpoints.saved(tmp_path / "nothing") == []
    for bad in ("..", ".", "a/b", ""):
        with pytest.raises(InvalidInputError, match="non-empty name without '/'"):
            tinker_checkpoints.find(root, "weights", bad)
    with pytest.raises(InvalidInputError, match="not a kind of checkpoint"):
        tinker_checkpoints.find(root, "external_weights", "x")
