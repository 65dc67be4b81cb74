"""Multi-turn Crafter episodes (text and vision) through the RL data path with the tiny models: the bundled
crafter task app over HTTP calls the policy server every turn; every turn's prompt and sampled tokens (and, for
Qwen3-VL, its image tensors) are recorded under the rollout's cid; a GSPO step on them is exactly on-policy.
Learning is not the point here (the tiny models score 0 at Crafter); the data path is. Also: images beyond
`max_images_per_step` are dropped from policy prompts (oldest first) and counted in an event. And a vision job
under asynchronous GSPO (`max_staleness = 1`) trains each turn with its image and its step reward's advantage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rl_support import Recorder, hold_first_publish_until_calls, record_policy_calls

from synth_ai.backend.store.model_store import ModelStore

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
pytest.importorskip("crafter")

ENV_KEY = "sk_env_rl_crafter_0123456789"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    return ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)  # the task app reads it per request
    return ENV_KEY


@pytest.fixture(scope="module")
def crafter_url():
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.discovery import load_task_app
    from synth_ai.taskapp.serving import running_in_background

    with running_in_background(create_task_app(load_task_app("crafter").config_factory())) as url:
        yield url


def spec(url: str, model: str, mode: str, **rollout: Any) -> dict[str, Any]:
    return {"job_id": "rljob_crafter", "data": {"endpoint_base_url": url, "base_model": model, "config": {
        "model": {"base": model, "trainer_mode": mode, "label": "crafter-policy"},
        "rollout": {"env_name": "crafter", "policy_name": "crafter-react", "max_turns": 3, "episodes_per_batch": 2,
                    "max_concurrent_rollouts": 2, **rollout,
                    "policy_config": {"temperature": 1.0, "max_tokens": 24}},
        "training": {"num_epochs": 1, "iterations_per_epoch": 1, "max_turns": 3, "batch_size": 1, "group_size": 2,
                     "learning_rate": 1e-3, "weight_sync_interval": 1, "log_interval": 1,
                     "rewards": {"step_rewards_enabled": True, "step_rewards_mode": "decision_stepwise"}}}}}


@pytest.mark.parametrize(("model", "mode", "rollout"), [
    ("synth-ai/tiny-qwen3", "full", {}),
    ("synth-ai/tiny-qwen3-vl", "lora", {"use_vision": True}),
    ("synth-ai/tiny-qwen3-vl", "full", {"use_vision": True, "image_only_mode": True}),
], ids=["text-full", "vision-lora", "vision-image-only"])
def test_crafter_turns_are_recorded_and_train_on_policy(store: ModelStore, crafter_url: str, tmp_path: Path,
                                                        model: str, mode: str, rollout: dict[str, Any]):
    from synth_ai.backend.inference.policy_server import LocalPolicyServer
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.rl.rollouts import RolloutRunner
    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
    from synth_ai.backend.trainers.rl.step import GSPOTrainer, build_samples

    store.resolve(model)
    settings = resolve_rl_settings(spec(crafter_url, model, mode, **rollout))
    trainer = GSPOTrainer(settings, store, tmp_path / "work")
    engine = LocalPolicyServer(trainer.served(), seed=3, cid_prefix="rljob_crafter-")
    try:
        runner = RolloutRunner(settings, engine, ENV_KEY, lambda: False)
        rollouts = runner.run([(5, 0, "rljob_crafter-it0-s5-g0"), (5, 1, "rljob_crafter-it0-s5-g1")], mode="rl")
    finally:
        engine.stop()
    image_pad = loading.special_token_id(trainer.tokenizer, "<|image_pad|>")
    for r in rollouts:
        assert r.ok, r.error
        assert r.steps == 3 and [c.index for c in r.calls] == [0, 1, 2]  # one recorded call per turn, in order
        for call in r.calls:
            sample = call.samples[0]
            assert len(sample.completion_ids) == len(sample.logprobs) >= 1
            assert call.request["tools"][0]["function"]["name"] == "interact_many"
            if rollout.get("use_vision"):
                grid = sample.vision_inputs["image_grid_thw"]
                assert sample.images == 1 and grid.shape == (1, 3)
                merge = trainer.processor.image_processor.merge_size
                assert sample.prompt_ids.count(image_pad) == int(grid.prod()) // merge ** 2
                text = trainer.tokenizer.decode(sample.prompt_ids)
                assert ("CRAFTER GAME STATE" in text) != bool(rollout.get("image_only_mode"))
            else:
                assert not sample.vision_inputs and image_pad not in sample.prompt_ids

    # step rewards: one r_t per turn; LLM call k takes turn k's advantage (the tiny models unlock nothing: given here)
    assert settings.policy_config["step_rewards"]["mode"] == "decision_stepwise"  # forwarded to the app
    assert [len(r.step_rewards) for r in rollouts] == [3, 3]
    rollouts[0].step_rewards, rollouts[1].step_rewards = [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    per_turn, counts = build_samples(rollouts, settings)
    assert counts["turns_unmatched"] == 0 and counts["groups_zero_variance"] == 0
    # returns to go: [1, 0, 0] vs [0, 0, 0]: only turn 0 differs, so only the first call of each episode trains
    assert [(s.rollout_index, s.turn, round(s.advantage, 3)) for s in per_turn] == [(0, 0, 1.0), (1, 0, -1.0)]

    # the tiny models score 0 at Crafter: give the group rewards that differ so the step has advantages
    rollouts[0].reward, rollouts[1].reward = 1.0, 0.0
    samples, counts = build_samples(rollouts)
    assert counts["samples"] == 6
    before = {n: p.detach().clone() for n, p in trainer.trainable.items()}
    stats = trainer.train(samples)
    assert stats.steps == 1 and stats.sequences == 6
    assert stats.clip_fraction == 0.0 and stats.ratio_mean == pytest.approx(1.0, abs=1e-4)
    assert any(not torch.equal(before[n], p) for n, p in trainer.trainable.items())
    # after the update the recorded log-probs are off-policy; recomputed ones (what a bf16 GPU run uses) are not
    trainer.recompute_old = True
    again = trainer.train(samples)
    assert again.clip_fraction == 0.0 and again.ratio_mean == pytest.approx(1.0, abs=1e-5)
    if mode == "lora" and model.endswith("-vl"):  # the projector is trained in full, never LoRA'd
        assert any("merger" in n and "lora" not in n for n in trainer.trainable)


def test_images_beyond_max_images_per_step_are_dropped_and_counted(store: ModelStore):
    from types import SimpleNamespace

    from PIL import Image

    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.inference.policy_server import LocalPolicyServer
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.rl.iteration_report import report_dropped_images
    from synth_ai.taskapp.vision import image_to_png_bytes, png_data_url

    path = store.resolve("synth-ai/tiny-qwen3-vl")
    model = loading.load_model(path, loading.Placement("cpu", torch.float32)).eval()
    tokenizer = loading.load_tokenizer(path)
    processor = loading.build_processor(tokenizer, loading.load_image_processor(path))
    server = LocalPolicyServer(describe_model("vl", Path(path), model, tokenizer, vision=True, processor=processor),
                               max_images=1)
    frames = [{"type": "image_url", "image_url": {"url": png_data_url(image_to_png_bytes(Image.new("RGB", (32, 32), color)))}}
              for color in ((200, 0, 0), (0, 200, 0))]
    try:
        import httpx

        url = server.start()
        answer = httpx.post(f"{url}?cid=vl-1", json={"model": "vl", "max_tokens": 4, "messages": [
            {"role": "user", "content": [*frames, {"type": "text", "text": "What changed?"}]}]}, timeout=60)
        assert answer.status_code == 200, answer.text
    finally:
        server.stop()
    sample = server.take_calls("vl-1")[0].samples[0]
    assert sample.images == 1 and sample.vision_inputs["image_grid_thw"].shape[0] == 1  # the newest frame only
    events: list[tuple[str, dict[str, Any]]] = []
    reporter = SimpleNamespace(event=lambda kind, message, data=None, level="info": events.append((kind, data)))
    report_dropped_images(reporter, server, SimpleNamespace(max_images_per_step=1), 0, SimpleNamespace(enabled=False))
    assert events == [("rl.images.dropped", {"iteration": 0, "images_dropped": 1, "max_images_per_step": 1})]
    assert server.images_dropped == 0  # counted once


def test_an_asynchronous_vision_job_trains_each_turn_with_its_image_and_step_reward(
        store: ModelStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`run_rl` on Qwen3-VL (LoRA) with `max_staleness = 1`: two iterations of two-turn episodes, the second batch
    sampled while the first trains. The app is wrapped to pay episode 0 of each group 1 at its first turn (the tiny
    model unlocks nothing), so with env_sparse step rewards only turn 0 has an advantage: each iteration trains its
    two first-turn calls, each with its frame."""
    import dataclasses

    from synth_ai.backend.trainers.rl import run_rl
    from synth_ai.taskapp import create_task_app
    from synth_ai.taskapp.discovery import load_task_app
    from synth_ai.taskapp.serving import running_in_background

    base = load_task_app("crafter").config_factory()

    async def paid_first_turn(request: Any, fastapi_request: Any = None) -> Any:
        answer = await base.rollout(request, fastapi_request)
        if request.run_id.endswith("-g0"):
            answer.trajectories[0].steps[0].reward = 1.0
            answer.metrics.mean_return, answer.metrics.episode_returns = 1.0, [1.0]
        return answer

    taken: list = []
    record_policy_calls(monkeypatch, taken)
    # batch 0 is 4 calls (2 episodes x 2 turns); its first update publishes version 1 only once batch 1's 2 first
    # turns are answered, so they are sampled by version 0 on any machine, however the threads are scheduled
    hold_first_publish_until_calls(monkeypatch, 4 + 2)
    model = "synth-ai/tiny-qwen3-vl"
    body = spec("", model, "lora", use_vision=True, max_turns=2, max_concurrent_rollouts=4)
    config = body["data"]["config"]
    config["algorithm"] = {"type": "online", "method": "policy_gradient", "variety": "gspo"}
    config["rollout"]["policy_config"]["max_tokens"] = 8
    config["training"].update({"iterations_per_epoch": 2, "max_turns": 2, "max_staleness": 1, "seed": 1, "rewards": {
        "step_rewards_enabled": True, "step_rewards_mode": "env_sparse"}})
    store.resolve(model)
    recorder = Recorder()
    with running_in_background(create_task_app(dataclasses.replace(base, rollout=paid_first_turn))) as url:
        body["data"]["endpoint_base_url"] = url
        run_rl(body, workdir=tmp_path / "work", model_store=store, reporter=recorder, should_stop=lambda: False)

    samples = [s for call in taken for s in call.samples]
    assert len(samples) == 2 * 2 * 2  # 2 iterations x 2 episodes x 2 turns
    for sample in samples:
        assert sample.images == 1 and sample.vision_inputs["image_grid_thw"].shape == (1, 3)
        assert set(sample.versions) <= {0, 1}
    steps = [e["data"] for e in recorder.of("rl.train.step")]
    assert [(s["rollouts"], s["errors"], s["turns_unmatched"]) for s in steps] == [(2, 0, 0)] * 2
    # returns to go [1, 0] vs [0, 0]: only the first call of each episode has an advantage, and it trains
    assert [s["samples"] for s in steps] == [2, 2] and all(s["optimizer_steps"] >= 1 for s in steps)
    assert recorder.series("staleness.max") == [0, 1]  # the second batch's first turns were sampled by version 0
    assert recorder.of("rl.train.started")[0]["data"]["vision"] is True
