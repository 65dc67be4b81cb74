"""Cheap checks of the bench scripts: they parse, and the helpers compute what they should.

Nothing here times anything or builds the reference venv; the benches themselves do that.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def bench_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_bench_script_parses(script: str) -> None:
    ast.parse((BENCH / script).read_text(), filename=script)


def test_reference_env_paths(bench_path: None) -> None:
    import reference_env as ref

    assert ref.VENV_DIR == BENCH / ".cache" / "ref-venv"
    assert ref.venv_python() == ref.VENV_DIR / "bin" / "python"
    assert ref.reference_cli() == ref.VENV_DIR / "bin" / "synth-ai"
    assert ref.REFERENCE_REQUIREMENT == "synth-ai==0.2.17"
    env = ref.reference_env()
    assert env["PATH"].startswith(str(ref.VENV_DIR / "bin"))
    assert "PYTHONPATH" not in env


def test_reference_env_ready_needs_matching_marker(bench_path: None, tmp_path: Path) -> None:
    import reference_env as ref

    venv = tmp_path / "venv"
    assert not ref.is_ready(venv)
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "synth-ai"):
        (venv / "bin" / name).write_text("")
    assert not ref.is_ready(venv)  # no marker: an interrupted build
    (venv / ref.MARKER.name).write_text(json.dumps({"version": "0.2.16"}))
    assert not ref.is_ready(venv)
    (venv / ref.MARKER.name).write_text(json.dumps({"version": ref.REFERENCE_VERSION}))
    assert ref.is_ready(venv)


def test_startup_combined_median_is_per_run_mean(bench_path: None) -> None:
    import startup

    impl = startup.Impl("x", ["x"], {})
    impl.samples = {("--help",): [0.1, 0.1, 0.3], ("train", "--help"): [0.2, 0.3, 0.2]}
    assert startup.combined_median(impl) == pytest.approx(0.2)


def test_startup_reports_a_failing_command(bench_path: None, tmp_path: Path) -> None:
    import startup

    impl = startup.Impl("x", [sys.executable, "-c", "import sys; sys.exit('no such command')"], {})
    with pytest.raises(startup.CommandFailed, match="exited 1"):
        startup.run_once(impl, ("--help",), str(tmp_path))


def test_startup_finds_forbidden_imports(bench_path: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import startup

    script = tmp_path / "fake-cli"
    script.write_text("import colorsys\nprint('Usage: fake')\n")
    monkeypatch.setattr(startup, "FORBIDDEN", ("colorsys",))
    found, _slowest = startup.forbidden_imports(startup.Impl("x", [str(script)], {}), ("--help",), str(tmp_path))
    assert found == ["colorsys"]


def test_rollout_instant_model_answers_the_generated_problems(bench_path: None, tmp_path: Path) -> None:
    import rollout

    rollout.write_dataset(tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert len(rows) == rollout.TRAIN_ROWS and len({row["problem"] for row in rows}) == len(rows)
    for row in rows[:3] + rows[-1:]:
        body = {"messages": [{"role": "system", "content": "solve"},
                             {"role": "user", "content": f"Problem:\n{row['problem']}\nSubmit it."}]}
        message = json.loads(rollout.model_answer(json.dumps(body).encode()))["choices"][0]["message"]
        (call,) = message["tool_calls"]
        assert call["function"]["name"] == "math_submit"
        answer = json.loads(call["function"]["arguments"])["answer"]
        assert f"\\boxed{{{answer}}}" in row["solution"]
    assert rollout.model_answer(b"not json")  # still a completion, with a wrong answer


def test_rollout_counts_only_numeric_rewards(bench_path: None) -> None:
    import rollout

    assert rollout.reward_of({"trajectories": [{"steps": [{"reward": 1}]}]}) == 1.0
    assert rollout.reward_of({"trajectories": [{"steps": [{"reward": None}]}]}) is None
    assert rollout.reward_of({"detail": "boom"}) is None
    assert rollout.percentile([0.3, 0.1, 0.2], 0.5) == 0.2


@pytest.mark.parametrize("size,model,max_tokens,lr", [
    ("tiny", "synth-ai/tiny-qwen3", 12, 1e-3),
    ("mid", "synth-ai/random-qwen3-34m", 128, 1e-5),
])
def test_rl_step_config_is_what_the_trainer_reads(bench_path: None, size: str, model: str, max_tokens: int,
                                                  lr: float) -> None:
    """The bench's RL config sets what it claims (batch, group, clip range, one step per iteration)."""
    import rl_step

    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings

    profile = rl_step.SIZES[size]
    settings = resolve_rl_settings({"data": {"endpoint_base_url": "http://127.0.0.1:1", "base_model": model,
                                             "config": rl_step.rl_config(profile, 5, 4, 8, 2)}})
    assert (settings.iterations, settings.batch_size, settings.group_size) == (5, 4, 8)
    assert (settings.epsilon_low, settings.epsilon_high) == (3e-4, 4e-4)
    assert settings.learning_rate == lr and settings.kl_coef == 0 and settings.gradient_accumulation_steps == 1
    assert settings.policy_config["max_tokens"] == max_tokens and settings.env_config == {"things": 2}
    assert settings.model_id == model


def test_prose_task_rewards_differ_between_replies(bench_path: None) -> None:
    """The mid bench's reward varies with the reply's text (a random model's group is never all-equal)."""
    import prose_task_app as app

    assert app.vowel_share("Aa bb") == 0.5 and app.vowel_share("xyz 123") == 0.0 and app.vowel_share("") == 0.0
    assert app.prompt_for(3) == app.prompt_for(3) != app.prompt_for(4)
    assert app.prompt_for(3).startswith("Continue this story: ")
