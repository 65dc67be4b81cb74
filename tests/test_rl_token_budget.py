"""Micro-batches by token budget (`[training].micro_batch_tokens`, `batches.micro_batches`) and the
`[training].activation_checkpointing` key, through the GSPO trainer on the tiny Qwen3: both limits hold, a split
step gives the same gradient and the same update as one pass, the sample-count key behaves as before, and a
budget smaller than the longest sample the config allows is refused when the job is created."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from backend_support import TINY_TEXT, serve_backend
from rl_support import Recorder, quiz_app, rl_body, run_in_process
from taskapp_support import running_app
from test_rl_minibatches import _gradients_per_step, _samples, _trainer

torch = pytest.importorskip("torch")


def _sample(prompt: int, completion: int) -> Any:
    from synth_ai.backend.trainers.rl.types import Sample

    return Sample(prompt_ids=[7] * prompt, completion_ids=[8] * completion, old_logprobs=[0.0] * completion,
                  advantage=1.0)


def test_micro_batches_hold_both_limits() -> None:
    from synth_ai.backend.trainers.rl.batches import micro_batches

    lengths = [(4, 6), (3, 2), (10, 30), (5, 5), (2, 3), (6, 4), (60, 50)]  # totals 10, 5, 40, 10, 5, 10, 110
    samples = [_sample(p, c) for p, c in lengths]
    parts = micro_batches(samples, 64, 30)
    for part in parts:  # padded rows x the longest row, within the budget, unless one sample is longer alone
        assert len(part) * max(s.length for s in part) <= 30 or len(part) == 1
    assert [[s.length for s in part] for part in parts] == [[5, 5, 10], [10, 10], [40], [110]]
    assert sorted(id(s) for part in parts for s in part) == sorted(id(s) for s in samples)  # each sample once
    assert [len(part) for part in micro_batches(samples, 2, 30)] == [2, 2, 1, 1, 1]  # both limits hold
    assert [len(part) for part in micro_batches(samples, 2, None)] == [2, 2, 2, 1]  # the sample count alone


def test_a_split_step_has_the_gradient_and_update_of_one_pass(tmp_path: Path, tiny_text_models: list[Path]):
    from synth_ai.backend.trainers.rl.batches import micro_batches

    split = _trainer(tmp_path / "split", tiny_text_models, micro_batch_tokens=24, max_grad_norm=0.0)
    samples = _samples(split, 8)
    assert len(micro_batches(samples, 64, 24)) >= 4  # this budget splits the step
    assert len(micro_batches(samples, 64, 4096)) == 1
    split_grads = _gradients_per_step(split, samples)
    split.settings = dataclasses.replace(split.settings, micro_batch_tokens=4096)
    one_grads = _gradients_per_step(split, samples)
    assert len(split_grads) == len(one_grads) == 1 and split_grads[0].keys() == one_grads[0].keys()
    for name, grad in one_grads[0].items():
        assert float(grad.abs().max()) > 0 or "bias" in name
        assert torch.allclose(split_grads[0][name], grad, atol=1e-6, rtol=1e-4), name

    # the update itself: two fresh trainers, the same samples, one AdamW step each. Adam divides each gradient by
    # its own size, so an element whose gradient is float noise (near 0) may move either way: those are left out
    after = {}
    for name, budget in (("split", 24), ("one", 4096)):
        trainer = _trainer(tmp_path / f"update-{name}", tiny_text_models, micro_batch_tokens=budget)
        before = {n: p.detach().clone() for n, p in trainer.trainable.items()}
        stats = trainer.train([dataclasses.replace(s) for s in samples])
        assert stats.steps == 1 and stats.sequences == 8
        after[name] = {n: p.detach() - before[n] for n, p in trainer.trainable.items()}
    compared = 0
    for name, grad in one_grads[0].items():
        clear = grad.abs() > 1e-5 * float(grad.abs().max())
        compared += int(clear.sum())
        assert torch.allclose(after["split"][name][clear], after["one"][name][clear], atol=1e-9, rtol=1e-4), name
    assert compared > 0.9 * sum(g.numel() for g in one_grads[0].values())


def test_the_sample_count_key_still_sets_steps_and_micro_batches(tmp_path: Path, tiny_text_models: list[Path]):
    from synth_ai.backend.trainers.rl.batches import micro_batches

    trainer = _trainer(tmp_path, tiny_text_models, max_accumulated_minibatch=2, gradient_accumulation_steps=2)
    assert (trainer.settings.micro_batch, trainer.settings.micro_batch_tokens) == (2, 8192)
    samples = _samples(trainer, 10)
    assert micro_batches(samples, 2, 8192) == micro_batches(samples, 2, None)  # short samples: as before
    assert len(_gradients_per_step(trainer, samples)) == 3  # 4 + 4 + 2 samples per optimiser step, as before


def test_unset_the_budget_grows_to_the_configs_longest_sample() -> None:
    """A config nobody tuned is never refused: the default (8192) rises to `[vllm].max_model_len`."""
    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings

    def budget(tables: dict[str, Any], **training: Any) -> int:
        spec = {"job_id": "rljob_budget", **rl_body("http://127.0.0.1:9", tables=tables, **training)}
        return resolve_rl_settings(spec).micro_batch_tokens

    assert budget({"vllm": {"max_model_len": 20000}}) == 20000
    assert budget({"vllm": {"max_model_len": 4096}}) == 8192
    assert budget({"vllm": {"max_model_len": 4096}}, micro_batch_tokens=5000) == 5000


@pytest.mark.parametrize(("value", "on"), [(None, False), (True, True), (False, False)])
def test_activation_checkpointing_key(tmp_path: Path, tiny_text_models: list[Path], value: Any, on: bool):
    """Unset is "auto": off on the CPU (on with CUDA); set, it is what it says, with the same gradient."""
    extra = {} if value is None else {"activation_checkpointing": value}
    trainer = _trainer(tmp_path, tiny_text_models, max_grad_norm=0.0, **extra)
    assert trainer.settings.activation_checkpointing is value
    assert trainer.policy.activation_checkpointing is on and not trainer.model.training
    layer = trainer.decoder.layers[0]
    assert ("forward" in vars(layer)) is on  # the layers run through the checkpoint
    samples = _samples(trainer, 6)
    grads = _gradients_per_step(trainer, samples)[0]
    reference = _trainer(tmp_path / "plain", tiny_text_models, max_grad_norm=0.0, activation_checkpointing=False)
    for name, grad in _gradients_per_step(reference, samples)[0].items():
        assert torch.allclose(grads[name], grad, atol=1e-7, rtol=1e-6), name


def test_a_job_trains_with_both_keys_and_says_so(tmp_path: Path, tiny_text_models: list[Path],
                                                 monkeypatch: pytest.MonkeyPatch):
    """One iteration of a real job, checkpointed, its samples split by a small budget (12 new tokens at most)."""
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "sk_env_rl_token_budget_0123456789")  # the task app's and the job's
    recorder = Recorder()
    with running_app(quiz_app()) as app:
        run_in_process(tmp_path, tiny_text_models, app, recorder, iterations_per_epoch=1, activation_checkpointing=True,
                       micro_batch_tokens=64)
    started = recorder.of("rl.train.started")[0]["data"]
    assert (started["activation_checkpointing"], started["micro_batch_tokens"]) == (True, 64)
    assert len(recorder.of("rl.train.step")) == 1 and recorder.series("loss")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Any:
    yield from serve_backend(tmp_path_factory, "token-budget", tiny=(TINY_TEXT,),
                             env={"SYNTH_AI_BACKEND_WARM_WORKER": "0"})


def test_a_budget_below_the_longest_sample_is_refused_at_create(backend: Any) -> None:
    body = rl_body("http://127.0.0.1:9", micro_batch_tokens=300,
                   tables={"rollout": {"policy_config": {"temperature": 1.0, "max_tokens": 512}}})
    with backend.client() as api:
        response = api.post("/rl/jobs", json=body)
        assert response.status_code == 400, response.text
        detail = response.json()["detail"]
        assert "[training].micro_batch_tokens = 300 is smaller than one sample may be: " \
               "[rollout.policy_config].max_tokens = 512 lets a completion alone" in detail
        assert "Raise [training].micro_batch_tokens to at least 512, or lower [rollout.policy_config].max_tokens" \
            in response.text
        assert api.get("/rl/jobs").json()["data"] == []  # no job was made
        body["data"]["config"]["vllm"] = {"max_model_len": 2048}
        body["data"]["config"]["training"]["micro_batch_tokens"] = 1024
        response = api.post("/rl/jobs", json=body)
        assert response.status_code == 400 and "[vllm].max_model_len = 2048 lets a prompt and its completion " \
            "reach 2048 tokens" in response.json()["detail"]
