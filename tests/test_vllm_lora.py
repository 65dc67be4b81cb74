"""A LoRA policy served by vLLM as an adapter (`vllm_lora.PolicyAdapter`), through the rollout engine's real HTTP
endpoint: each weight sync is a new adapter version, the hot swap changes what is sampled, every recorded sample
names the version that produced it, vLLM's log-probs are the trainer's adapter's, and a version whose adapter is
gone is refused rather than replaced by an older one. One vLLM engine for the module (loading takes seconds)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from vllm_support import build_head64_qwen3, use_vllm_env

pytest.importorskip("torch")
pytest.importorskip("peft")

PROMPT = {"model": "policy", "messages": [{"role": "user", "content": "What is 2 + 3?"}], "max_tokens": 10,
          "temperature": 1.0, "seed": 7}


@pytest.fixture(scope="module")
def policy(require_vllm, tmp_path_factory: pytest.TempPathFactory):
    use_vllm_env()
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.inference.vllm_engine import VllmPolicyServer
    from synth_ai.backend.inference.vllm_options import VllmOptions

    folder = build_head64_qwen3(tmp_path_factory.mktemp("head64") / "model")
    torch.manual_seed(0)
    model = get_peft_model(Qwen3ForCausalLM.from_pretrained(folder), LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"], lora_dropout=0.0))
    model.eval()
    loaded = describe_model("policy", folder, model, AutoTokenizer.from_pretrained(folder), vision=False)
    server = VllmPolicyServer(loaded, VllmOptions(max_model_len=256), bf16=False, cpu=True, seed=0)
    url = server.start()
    try:
        yield server, model, url
    finally:
        server.stop()


def _sample(url: str, cid: str, server) -> tuple[dict, object]:
    response = httpx.post(f"{url}?cid={cid}", json=PROMPT, timeout=120)
    assert response.status_code == 200, response.text
    (call,) = server.take_calls(cid)
    return response.json(), call.samples[0]


def _trainer_logprobs(model, sample) -> list[float]:
    import torch

    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(sample.prompt_ids) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(sample.completion_ids)[:, None])[:, 0].tolist()


def test_a_synced_lora_adapter_is_hot_swapped_and_changes_what_is_sampled(policy) -> None:
    import torch

    server, model, url = policy
    assert server.adapter is not None and server.adapter_refusal is None  # served as an adapter, not merged
    _, first = _sample(url, "r1", server)
    assert first.adapter_version == 1 and len(first.completion_ids) > 0
    assert first.logprobs == pytest.approx(_trainer_logprobs(model, first), abs=2e-3)

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a trained step's worth of change, large enough to move a random model's choices
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    _, before_sync = _sample(url, "r2", server)
    assert (before_sync.adapter_version, before_sync.completion_ids) == (1, first.completion_ids)

    server.sync_weights()
    _, swapped = _sample(url, "r3", server)
    assert swapped.adapter_version == 2
    assert swapped.completion_ids != first.completion_ids
    assert swapped.logprobs == pytest.approx(_trainer_logprobs(model, swapped), abs=2e-3)


def test_an_adapter_version_that_is_gone_is_refused_not_replaced(policy) -> None:
    server, _, url = policy
    server.sync_weights()
    version = server.adapter.version
    shutil.rmtree(Path(server.adapter.request().lora_path))
    refused = httpx.post(f"{url}?cid=gone", json=PROMPT, timeout=120)
    assert refused.status_code == 500
    assert f"version {version} is gone" in refused.json()["error"]["message"]
    assert server.take_calls("gone") == []

    server.sync_weights()  # the next sync publishes a fresh version and sampling resumes
    _, sample = _sample(url, "back", server)
    assert sample.adapter_version == version + 1


class _Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict]] = []

    def event(self, kind: str, message: str, data: dict, level: str = "info") -> None:
        self.events.append((kind, message, data))


def _rollout(url: str, server, cid: str, index: int):
    from synth_ai.backend.trainers.rl.types import Rollout

    response = httpx.post(f"{url}?cid={cid}", json=PROMPT, timeout=120)
    assert response.status_code == 200, response.text
    return Rollout(seed=0, index=index, cid=cid, reward=float(index), calls=server.take_calls(cid))


def test_a_sample_served_by_a_stale_adapter_is_dropped_and_named(policy, tmp_path: Path) -> None:
    """Published policy versions pass the RL loop's adapter check (an older but consistent sample too: that one is
    the staleness bound's); a sample that vLLM really sampled with the previous adapter while the engine served the
    next policy version is dropped, counted and named with both versions."""
    from synth_ai.backend.inference import vllm_lora
    from synth_ai.backend.trainers.rl.staleness import drop_stale_adapters
    from synth_ai.backend.trainers.rl.step import build_samples

    server, _, url = policy
    base = server.version
    server.publish(base + 1)
    older = server.adapter.request()
    kept_folder = shutil.copytree(older.lora_path, tmp_path / "older")  # the publish below deletes the original
    first = _rollout(url, server, "v1", 0)
    server.publish(base + 2)
    second = _rollout(url, server, "v2", 1)
    runner = server.engine.batcher.runner
    current = runner.lora
    runner.lora = lambda: vllm_lora.adapter_request("policy@old", older.lora_int_id, kept_folder)  # a stale swap
    try:
        third = _rollout(url, server, "v2-stale", 2)
    finally:
        runner.lora = current

    samples, _ = build_samples([first, second, third])
    by_rollout = {s.rollout_index: s for s in samples}
    assert len(by_rollout) == 3
    assert set(by_rollout[0].versions) == {base + 1} and set(by_rollout[1].versions) == {base + 2}
    assert by_rollout[0].adapter_version == server.adapter_versions[base + 1] == older.lora_int_id
    assert by_rollout[1].adapter_version == server.adapter_versions[base + 2] == older.lora_int_id + 1
    assert set(by_rollout[2].versions) == {base + 2} and by_rollout[2].adapter_version == older.lora_int_id

    events = _Events()
    kept, record = drop_stale_adapters(samples, server, events, it=4)
    assert record == {"stale_adapter_dropped": 1}
    assert [s.rollout_index for s in kept] == [0, 1]
    ((kind, message, data),) = events.events
    assert kind == "rl.adapter.stale"
    assert f"adapter version {older.lora_int_id} where policy version(s) [{base + 2}]" in message
    assert f"adapter version(s) [{older.lora_int_id + 1}]" in message
    assert data["samples"][0]["rollout_index"] == 2

    unstamped = [*kept[:1], type(kept[0])(**{**vars(kept[0]), "adapter_version": None})]  # served by no adapter
    kept, record = drop_stale_adapters(unstamped, server, events, it=5)
    assert record == {"stale_adapter_dropped": 1} and len(kept) == 1

    _, after = _sample(url, "back-to-current", server)  # the current adapter is served again
    assert after.adapter_version == server.adapter_versions[base + 2]
