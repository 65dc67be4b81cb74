"""The GSPO loop's settings, run for real (tiny Qwen3, the color-quiz app over HTTP): seeded runs repeat exactly;
`weight_sync_interval` > 1 makes the task app sample from stale weights (ratios leave 1 until the next sync);
a reference model adds a KL that starts at 0; `[evaluation]` runs the eval seeds in `mode: "eval"`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_support import Recorder, quiz_app, run_in_process
from taskapp_support import running_app

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

ENV_KEY = "sk_env_rl_loop_0123456789"
EVALUATION = {"instances": 2, "every_n_iters": 2, "seeds": "10-11"}


@pytest.fixture(autouse=True)
def env_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    return ENV_KEY


def test_stale_weights_reference_kl_evaluation_and_seeded_repeats(tmp_path: Path, tiny_text_models: list[Path]):
    runs = []
    for name in ("a", "b"):
        seen: list[tuple[str, int]] = []
        recorder = Recorder()
        with running_app(quiz_app(seen=seen)) as app:
            result = run_in_process(tmp_path / name, tiny_text_models, app, recorder, iterations_per_epoch=3, seed=4,
                                    weight_sync_interval=2, kl_coef=0.05,
                                    tables={"reference": {"placement": "colocated"}, "evaluation": EVALUATION})
        runs.append((recorder, seen, result))
    recorder, seen, result = runs[0]

    # weight sync every 2 iterations: iteration 1 samples from the weights of before iteration 0's update
    ratios = [s["data"]["ratio_mean"] for s in recorder.of("rl.train.step")]
    assert ratios[0] == pytest.approx(1.0, abs=1e-5) and ratios[2] == pytest.approx(1.0, abs=1e-5)
    assert abs(ratios[1] - 1.0) > 1e-4
    assert recorder.series("clip_fraction")[1] > 0
    # the reference is the starting policy: no KL before the first update, some after
    kl_ref = recorder.series("kl_ref")
    assert kl_ref[0] == pytest.approx(0.0, abs=1e-6) and kl_ref[2] > 0
    # evaluation at iterations 0 and 2 and after the last one, on the eval seeds, in eval mode
    evals = [(step, v) for n, step, v in recorder.metrics if n == "eval.mean_return"]
    assert [step for step, _ in evals] == [0, 2, 3]
    assert sorted(seed for mode, seed in seen if mode == "eval") == [10, 10, 10, 11, 11, 11]
    assert sorted({seed for mode, seed in seen if mode == "rl"}) == [0, 1, 2, 3, 4, 5]
    assert result["eval_mean_return"] == evals[-1][1]

    # the same seed and config: the same samples, rewards, losses and evaluations
    again = runs[1][0]
    for name in ("reward.mean", "eval.mean_return", "response_tokens.mean"):
        assert recorder.series(name) == again.series(name), name
    # recorded log-probs come from batched rows: float rounding may differ with the batch a call lands in
    for name in ("loss", "kl_ref"):
        assert recorder.series(name) == pytest.approx(again.series(name), rel=1e-4, abs=1e-6), name
