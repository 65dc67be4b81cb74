"""The vLLM rollout engine itself, over real HTTP, on the tiny head_dim-64 Qwen3 and vLLM's CPU build: one engine for
the module (loading vLLM takes 8-18 s). Its log-probs are the trainer's after a weight sync, a prompt longer than
max_model_len fails only its own call, and an engine that died fails every call at once with the reason (last:
it ends the module's engine)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from vllm_support import hd64_model, require_vllm

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

MAX_MODEL_LEN = 96


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    require_vllm()
    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.inference.vllm_engine import VllmPolicyServer
    from synth_ai.backend.inference.vllm_options import VllmOptions
    from synth_ai.backend.ml import loading

    # a process that has run crafter holds numba's llvmlite, whose `ffi.lib` broke vLLM's start-up scan of modules
    import crafter  # noqa: F401

    assert "llvmlite.binding.ffi" in __import__("sys").modules
    path = hd64_model(tmp_path_factory)
    loading.configure_threads(tiny=True)
    model = loading.load_model(path, loading.Placement("cpu", torch.float32)).eval()
    tokenizer = loading.load_tokenizer(path)
    options = VllmOptions(max_model_len=MAX_MODEL_LEN, kv_cache_memory_bytes=64 * 1024 * 1024)
    server = VllmPolicyServer(describe_model("policy", Path(path), model, tokenizer, vision=False), options,
                              bf16=False, cpu=True, seed=7, cid_prefix="job-")
    url = server.start()
    yield server, url, model, tokenizer
    server.stop()


def _sample(url: str, server, cid: str, content: str = "What color is the sky?", **params):
    body = {"model": "policy", "messages": [{"role": "user", "content": content}], "max_tokens": 10, **params}
    answer = httpx.post(f"{url}?cid={cid}", json=body, timeout=120)
    answer.raise_for_status()
    return server.take_calls(cid)[0].samples[0]


def _trainer_logprobs(model, tokenizer, sampled) -> list[float]:
    """What GSPO's update recomputes for this completion: temperature-scaled log-probs of the trainer's model."""
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.rl.batches import collate, completion_logprobs
    from synth_ai.backend.trainers.rl.types import Sample

    sample = Sample(prompt_ids=list(sampled.prompt_ids), completion_ids=list(sampled.completion_ids),
                    old_logprobs=list(sampled.logprobs), advantage=1.0, temperature=sampled.temperature)
    decoder, lm_head = loading.core_parts(model)
    batch = collate([sample], tokenizer.pad_token_id or 0, "cpu")
    with torch.no_grad():
        return completion_logprobs(decoder, lm_head, batch)[0, :len(sampled.completion_ids)].tolist()


def test_the_hd64_model_is_the_tiny_recipe_at_a_head_size_vllm_runs(tmp_path_factory: pytest.TempPathFactory):
    import json

    from synth_ai.backend.inference.vllm_options import cpu_refusal
    from synth_ai.backend.store.model_store import ModelStore

    path = hd64_model(tmp_path_factory)
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["vocab_size"] == 1024
    shape = {k: config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                    "intermediate_size", "num_hidden_layers")}
    assert shape == {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
                     "intermediate_size": 256, "num_hidden_layers": 2}
    assert cpu_refusal(config) is None and cpu_refusal({"head_dim": 16}) is not None
    card = json.loads((path / "synth_model.json").read_text())
    assert card["model_id"] == "synth-ai/tiny-qwen3-hd64" and card["tiny"] is True
    assert card["pretrain_loss_final"] < card["pretrain_loss_first"] - 3  # pretrained like the tiny model
    listed = {m["id"]: m for m in ModelStore(path.parents[2]).list_models()}
    assert listed["synth-ai/tiny-qwen3-hd64"]["status"] == "ready"


def test_vllm_logprobs_are_the_trainers_after_a_weight_sync(engine):
    server, url, model, tokenizer = engine
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():  # the trainer's policy moves away from what vLLM loaded
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    stale = _sample(url, server, "job-it0-s0-g0", temperature=0.7)
    gap = max(abs(a - b) for a, b in zip(stale.logprobs, _trainer_logprobs(model, tokenizer, stale)))
    assert gap > 0.05  # before the sync vLLM samples from the old weights

    server.sync_weights()
    for index, temperature in enumerate((0.7, 1.0)):
        sampled = _sample(url, server, f"job-it1-s0-g{index}", temperature=temperature)
        assert sampled.temperature == temperature and len(sampled.logprobs) == len(sampled.completion_ids) >= 1
        trainer = _trainer_logprobs(model, tokenizer, sampled)
        assert sampled.logprobs == pytest.approx(trainer, abs=1e-3)  # GSPO's ratio starts at 1


def test_a_prompt_longer_than_max_model_len_fails_only_its_own_call(engine):
    server, url, _model, _tokenizer = engine
    answers: dict[str, httpx.Response] = {}

    def call(name: str, content: str) -> None:
        body = {"model": "policy", "messages": [{"role": "user", "content": content}], "max_tokens": 6}
        answers[name] = httpx.post(f"{url}?cid=job-long-{name}", json=body, timeout=120)

    threads = [threading.Thread(target=call, args=("long", "red green blue " * 80)),
               threading.Thread(target=call, args=("short", "Name a color."))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers["short"].status_code == 200, answers["short"].text
    assert answers["long"].status_code == 400
    message = answers["long"].json()["error"]["message"]
    assert f"max_model_len is {MAX_MODEL_LEN}" in message and "tokens long" in message
    assert server.take_calls("job-long-long") == [] and len(server.take_calls("job-long-short")) == 1
    assert server.failure is None  # a refused request is that caller's error, not the engine's


def test_an_engine_that_died_fails_every_call_with_the_reason(engine):
    """Last in the module: it shuts the shared engine's core down, as a crash inside vLLM would leave it."""
    from synth_ai.backend.inference.vllm_engine import RolloutEngineLost

    server, url, _model, _tokenizer = engine
    server.llm.llm_engine.engine_core.shutdown()
    body = {"model": "policy", "messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 4}
    for _ in range(2):  # the first call finds the engine dead; the next fails at once with the same reason
        answer = httpx.post(f"{url}?cid=job-dead", json=body, timeout=120)
        assert answer.status_code == 500
        assert "the vLLM engine failed while sampling" in answer.json()["error"]["message"]
    assert isinstance(server.failure, RolloutEngineLost) and server.failure.resume_in_new_worker
    with pytest.raises(RolloutEngineLost):
        server.sync_weights()
