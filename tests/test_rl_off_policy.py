"""Asynchronous GSPO's parts taken one by one: truncated importance sampling in log space (by hand), the k3
`mismatch_kl`, the staleness bound, the policy versions the rollout engine tags sampled tokens with (the built-in
engine's swap between decoding steps, and an engine that overrides only `sync_weights`), and the new `[training]`
keys' checks in `config validate`, `config schema` and at job creation."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

from synth_ai.errors import InvalidInputError

torch = pytest.importorskip("torch")


def test_truncated_weights_by_hand_per_token_and_per_sequence():
    from synth_ai.backend.trainers.rl.off_policy import truncated_weights

    proximal = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]])
    sampler = torch.tensor([[-1.5, -1.0, -0.5], [-0.3, -2.7, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    token_w, seq_w, stats = truncated_weights(proximal, sampler, mask, cap=2.0)
    # log w = proximal - sampler: [0.5, -1, 0] and [0, 2]; exp(2) = 7.39 is truncated to the cap 2
    assert token_w.tolist()[0] == pytest.approx([math.exp(0.5), math.exp(-1.0), 1.0])
    assert token_w.tolist()[1] == pytest.approx([1.0, 2.0, 0.0])
    assert seq_w.tolist() == pytest.approx([math.exp(-0.5 / 3), 2.0])  # exp(mean log w) = exp(1) -> capped
    assert stats.truncated_tokens == 1 and stats.tokens == 5
    k3 = [math.exp(x) - 1 - x for x in (0.5, -1.0, 0.0, 0.0, 2.0)]
    record = stats.record()
    assert record["mismatch_kl"] == pytest.approx(sum(k3) / 5)
    assert record["is_ratio_max"] == pytest.approx(math.e)  # the untruncated sequence ratio
    assert record["is_truncated_frac"] == pytest.approx(0.2)


def test_long_traces_stay_finite_in_log_space():
    """A 20k-token thinking trace at log-prob -5 per token: the probabilities' product underflows (e^-100000),
    the log-space weight does not."""
    from synth_ai.backend.trainers.rl.off_policy import truncated_weights

    n = 20000
    sampler = torch.full((1, n), -5.0)
    proximal = sampler + 0.001
    _token_w, seq_w, stats = truncated_weights(proximal, sampler, torch.ones(1, n), cap=2.0)
    assert float(torch.exp(sampler.double().sum())) == 0.0  # what a probability-space ratio would divide by
    assert float(seq_w[0]) == pytest.approx(math.exp(0.001), rel=1e-4)
    assert math.isfinite(stats.record()["mismatch_kl"])


def test_a_cap_that_is_not_positive_is_refused():
    from synth_ai.backend.trainers.rl.off_policy import truncated_weights

    with pytest.raises(ValueError, match="positive"):
        truncated_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), cap=0.0)


def test_gspo_weighs_each_sequence_by_its_truncated_ratio_and_stays_unchanged_without_a_cap():
    from synth_ai.backend.trainers.rl.gspo import gspo_loss

    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]], requires_grad=True)
    sampler = torch.tensor([[-1.0, -2.0], [-0.5 - 3.0, -0.5]])  # the second row's first token: mu much smaller
    mask = torch.ones(2, 2)
    adv = torch.tensor([1.0, 1.0])
    plain, plain_stats = gspo_loss(logp, logp.detach(), mask, adv, eps_low=3e-4, eps_high=4e-4)
    same, stats = gspo_loss(logp, logp.detach(), mask, adv, eps_low=3e-4, eps_high=4e-4, sampler_logp=sampler)
    assert float(same.detach()) == float(plain.detach()) == pytest.approx(-2.0)  # sampler given, no cap: only measured
    assert plain_stats.off_policy is None and stats.off_policy.record()["mismatch_kl"] > 0
    weighted, _ = gspo_loss(logp, logp.detach(), mask, adv, eps_low=3e-4, eps_high=4e-4, sampler_logp=sampler,
                            is_cap=10.0)
    assert float(weighted.detach()) == pytest.approx(-(1.0 + math.exp(1.5)))  # row 2: exp(mean(3, 0))
    capped, _ = gspo_loss(logp, logp.detach(), mask, adv, eps_low=3e-4, eps_high=4e-4, sampler_logp=sampler,
                          is_cap=2.0)
    assert float(capped.detach()) == pytest.approx(-(1.0 + 2.0))


def _sample(versions: list[int]) -> Any:
    from synth_ai.backend.trainers.rl.types import Sample

    return Sample(prompt_ids=[1], completion_ids=[2] * len(versions), old_logprobs=[0.0] * len(versions),
                  advantage=1.0, versions=versions)


def test_staleness_counts_from_the_oldest_token_and_drops_beyond_the_bound():
    from synth_ai.backend.trainers.rl.staleness import drop_stale

    samples = [_sample([5, 5]), _sample([3, 4]), _sample([2, 2]), _sample([])]
    kept, report = drop_stale(samples, trainer_version=5, max_staleness=2)
    assert kept == [samples[0], samples[1], samples[3]]
    assert (report.max, report.dropped) == (3, 1)
    assert report.mean == pytest.approx((0 + 2 + 3 + 0) / 4)


def test_the_backlog_warning_fires_once_per_crossing():
    from synth_ai.backend.trainers.rl.staleness import BACKLOG_WARN_BATCHES, BacklogWatch

    events: list[tuple[str, dict]] = []

    class Reporter:
        def event(self, kind: str, message: str, data: dict, level: str = "info") -> None:
            events.append((kind, data))

    settings = type("S", (), {"concurrency": 16, "max_staleness": 8})()
    watch = BacklogWatch(Reporter(), batch_groups=4, settings=settings)
    limit = BACKLOG_WARN_BATCHES * 4
    for it, groups in enumerate([4, limit + 4, limit + 8, 0, limit + 4]):
        watch.check(it, groups)
    assert [(kind, data["iteration"]) for kind, data in events] == [("rl.backlog.growing", 1),
                                                                   ("rl.backlog.growing", 4)]


@pytest.fixture(scope="module")
def served_tiny(tmp_path_factory: pytest.TempPathFactory, tiny_text_models: list[Path]) -> Any:
    from synth_ai.backend.inference.engine import describe_model
    from synth_ai.backend.ml import loading

    path = tiny_text_models[0]
    loading.configure_threads(tiny=True)
    model = loading.load_model(path, loading.Placement("cpu", torch.float32)).eval()
    return describe_model("policy", Path(path), model, loading.load_tokenizer(path), vision=False)


def _ask(server: Any, cid: str, max_tokens: int, out: list) -> None:
    out.append(server.complete({"model": "policy", "messages": [{"role": "user", "content": "Name a color."}],
                                "max_tokens": max_tokens, "temperature": 1.0, "n": 2}, cid))


def test_the_builtin_engine_swaps_versions_between_decoding_steps_without_stopping_rows(served_tiny: Any):
    from synth_ai.backend.inference.policy_server import LocalPolicyServer

    server = LocalPolicyServer(served_tiny, seed=3, share_weights=False, cid_prefix="job-")
    runner = server.engine.batcher.runner
    step, steps_done = runner.step, []
    at_fifth_step, published = threading.Event(), threading.Event()

    def step_then_wait_at_the_fifth(batch: Any) -> list:
        # the decoding thread stops after its fifth step until the new version is out: polling `steps` from here
        # let a busy machine finish all 200 steps before the publish (CI saw one version per row)
        finished = step(batch)
        steps_done.append(1)
        if len(steps_done) == 5:
            at_fifth_step.set()
            published.wait(120)
        return finished

    runner.step = step_then_wait_at_the_fifth
    answers: list = []
    thread = threading.Thread(target=_ask, args=(server, "job-a", 200, answers))
    thread.start()
    assert at_fifth_step.wait(120)
    server.publish(1)  # between two steps of the running batch
    published.set()
    thread.join(120)
    versions = [s.versions for s in server.take_calls("job-a")[0].samples]
    long_rows = [v for v in versions if len(v) > 10]
    assert long_rows, versions  # at 200 tokens and a temperature of 1 the tiny model rarely ends early
    for row in long_rows:
        assert row[0] == 0 and row[-1] == 1 and row == sorted(row)  # one row, two versions, in order
    _ask(server, "job-b", 4, answers)
    assert all(set(s.versions) == {1} for s in server.take_calls("job-b")[0].samples)


def test_an_engine_that_overrides_only_sync_weights_is_a_versioned_engine(served_tiny: Any):
    """The vLLM engine's shape: a subclass with its own `sync_weights`; `publish` still moves the version and
    tags each call's tokens with the version current when it arrived."""
    from synth_ai.backend.inference.policy_server import LocalPolicyServer

    class OwnSync(LocalPolicyServer):
        synced = 0

        def sync_weights(self) -> None:
            self.synced += 1

    server = OwnSync(served_tiny, seed=3, cid_prefix="job-")
    server.publish(4)
    assert (server.synced, server.version) == (1, 4)
    answers: list = []
    _ask(server, "job-c", 3, answers)
    assert all(s.versions == [4] * len(s.completion_ids) for s in server.take_calls("job-c")[0].samples)


def _toml(tmp_path: Path, **training: Any) -> Path:
    from rl_support import CONFIG

    text = CONFIG.read_text().replace("[training]\n", "[training]\n" + "".join(
        f"{k} = {json.dumps(v)}\n" for k, v in training.items()), 1)
    if "weight_sync_interval" in training:
        text = text.replace("weight_sync_interval = 1\n", "", 1)
    path = tmp_path / "rl.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("training", "key", "expected"), [
    ({"max_staleness": -1}, "[training].max_staleness", "expected an integer >= 0 (found -1)"),
    ({"max_staleness": 1.5}, "[training].max_staleness", "integer"),
    ({"importance_sampling_cap": 0}, "[training].importance_sampling_cap", "greater than zero (found 0)"),
    ({"max_staleness": 2, "weight_sync_interval": 3}, "[training].weight_sync_interval", "must be 1"),
])
def test_config_validate_refuses_bad_async_keys_with_the_key(cli, tmp_path: Path, training: dict, key: str,
                                                             expected: str):
    result = cli("config", "validate", str(_toml(tmp_path, **training)))
    text = result.stdout + result.stderr
    assert result.exit_code != 0, text
    assert key in text and expected in text, text


def test_config_validate_accepts_async_and_the_schema_lists_the_keys(cli, tmp_path: Path):
    result = cli("config", "validate", str(_toml(tmp_path, max_staleness=2, importance_sampling_cap=3.0)))
    assert result.exit_code == 0, result.stdout + result.stderr
    schema = cli("config", "schema", "rl")
    assert schema.exit_code == 0
    assert "max_staleness" in schema.stdout and "importance_sampling_cap" in schema.stdout


def test_an_async_setting_the_trainer_cannot_honour_is_refused_at_create_time():
    from synth_ai.backend.trainers.rl.rl_settings import check_rl_job, resolve_rl_settings

    config = {"model": {"base": "synth-ai/tiny-qwen3", "trainer_mode": "full"}, "rollout": {"max_turns": 1},
              "training": {"batch_size": 1, "group_size": 2, "max_staleness": 2, "weight_sync_interval": 4}}
    spec = {"job_id": "rljob_async", "data": {"endpoint_base_url": "http://127.0.0.1:8102",
                                              "base_model": "synth-ai/tiny-qwen3", "config": config}}
    with pytest.raises(InvalidInputError) as caught:
        check_rl_job(spec)
    assert "[training].weight_sync_interval" in caught.value.message and "found 4" in caught.value.message
    assert "max_staleness = 0" in caught.value.hint
    assert caught.value.details == {"field": "data.config.training.weight_sync_interval"}
    config["training"]["weight_sync_interval"] = 1
    settings = resolve_rl_settings(spec)
    assert settings.asynchronous and settings.importance_sampling_cap == 2.0
    config["training"].pop("max_staleness")
    assert resolve_rl_settings(spec).max_staleness == 0  # the default: the synchronous loop
