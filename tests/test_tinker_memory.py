"""Memory limits of Tinker training clients: the estimate counts the model's real weights, and a backend with a
memory budget refuses the client that would go past it with the numbers and the fixes, then takes one again once
an earlier client has ended."""

from __future__ import annotations

import httpx
import pytest

from backend_support import TINY_TEXT, serve_backend, wait_for
from synth_ai.backend.api import tinker_memory
from synth_ai.errors import InvalidInputError


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    # the tiny model's client is estimated at a little over 512 MiB (mostly the worker's headroom): one fits
    yield from serve_backend(tmp_path_factory, "tinker-memory", tiny=(TINY_TEXT,),
                             env={"SYNTH_AI_BACKEND_TINKER_MEMORY_MIB": "800"})


def test_the_estimate_counts_the_models_own_weights(backend):
    import torch
    from transformers import AutoModelForCausalLM

    from synth_ai.backend.store.model_store import ModelStore

    folder = ModelStore(backend.data_dir).resolve(TINY_TEXT)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    linear_and_embedding = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    cpu = tinker_memory.client_bytes(folder, 8, on_gpu=False)
    gpu = tinker_memory.client_bytes(folder, 8, on_gpu=True)
    rank16 = tinker_memory.client_bytes(folder, 16, on_gpu=False)
    # fp32 weights on a CPU, bf16 on a GPU, each plus a tenth for activations: the difference is 2 bytes x 1.1
    assert cpu - gpu == pytest.approx(linear_and_embedding * 2 * 1.1, rel=0.01)
    assert rank16 > cpu  # a bigger adapter and its Adam state
    assert tinker_memory.client_bytes(folder / "missing", 8, on_gpu=False) is None


def test_past_the_budget_a_client_is_refused_until_one_ends(backend):
    headers = {"X-API-Key": f"tml-{backend.key}"}

    def session() -> str:
        return httpx.post(f"{backend.url}/api/v1/create_session", json={}, headers=headers).json()["session_id"]

    def create(session_id: str, seq: int) -> httpx.Response:
        return httpx.post(f"{backend.url}/api/v1/create_model", headers=headers, timeout=30,
                          json={"session_id": session_id, "model_seq_id": seq, "base_model": TINY_TEXT,
                                "lora_config": {"rank": 4}})

    first = session()
    assert create(first, 0).status_code == 200
    refused = create(first, 1)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "insufficient_memory"
    assert f"on {TINY_TEXT} needs about" in error["message"] and "800 MiB" in error["message"]
    assert "ServiceClient.close()" in error["hint"]
    # nothing was stored for the refused one: its model is unknown
    info = httpx.post(f"{backend.url}/api/v1/get_info", json={"model_id": f"{first}:train:1"}, headers=headers)
    assert info.status_code == 404
    # the first client's session closes, its job ends, and a new client fits again
    httpx.post(f"{backend.url}/api/v1/sessions/{first}/finish", json={}, headers=headers).raise_for_status()
    api = backend.client()
    wait_for(lambda: all(j["status"] in ("succeeded", "failed", "cancelled") for j in _tinker_jobs(api)) or None,
             timeout=120, what="the first client's job to end")
    second = session()
    assert create(second, 0).status_code == 200
    httpx.post(f"{backend.url}/api/v1/sessions/{second}/finish", json={}, headers=headers).raise_for_status()


def test_without_a_budget_the_free_memory_decides():
    with pytest.raises(InvalidInputError, match="machine's free memory"):
        tinker_memory.refuse_if_it_cannot_fit(1 << 60, [], [], budget_mib=0, on_gpu=False, base_model="m")
    tinker_memory.refuse_if_it_cannot_fit(1 << 20, [], [], budget_mib=0, on_gpu=False, base_model="m")
    with pytest.raises(InvalidInputError, match="less the 2 live clients"):
        tinker_memory.refuse_if_it_cannot_fit(300 << 20, [400 << 20, 400 << 20], [], budget_mib=1000,
                                              on_gpu=False, base_model="m")


def _tinker_jobs(api: httpx.Client) -> list[dict]:
    return [j for j in api.get("/learning/jobs", params={"limit": 100}).json()["data"]
            if j["id"].startswith("tinkerjob_")]
