"""Helpers for the dashboard tests: finding Debian's chromium for Playwright, an eval trace database with a
picture, a long finished RL job in a backend's store, and where screenshots go."""

from __future__ import annotations

import base64
import io
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from synth_ai.backend.store.db import Database
from synth_ai.backend.store.job_records import JobStore

REPO = Path(__file__).resolve().parent.parent
HOSTILE = '<img src="x" id="pwned"><script>document.title = "pwned"</script>'


def chromium_path() -> str:
    """Debian's chromium (`scripts/install_chromium.sh`; Playwright's own browser downloads are blocked here).
    scripts/test.sh (and so CI) sets SYNTH_REQUIRE_BROWSER=1, so there a missing browser fails instead of skipping."""
    found = os.environ.get("SYNTH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    missing = None
    if not found:
        missing = "no chromium on PATH (run scripts/install_chromium.sh)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "playwright is not installed (pip install -e '.[dev]')"
    if missing:
        if os.environ.get("SYNTH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the dashboard browser test needs a browser: {missing}")
        pytest.skip(f"dashboard browser test: {missing}")
    return str(found)


@contextmanager
def store_of(data_dir: Path) -> Iterator[JobStore]:
    """The job store of the backend serving `data_dir`, opened from the test as a worker process opens it."""
    store = JobStore(Database(data_dir / "backend" / "backend.sqlite3"))
    try:
        yield store
    finally:
        store.db.close()


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("SYNTH_TEST_ARTIFACTS", REPO / "test-artifacts")) / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _square_png(rgb: tuple[int, int, int]) -> str:
    from PIL import Image

    image = Image.new("RGB", (24, 24), (255, 255, 255))
    image.paste(rgb, (4, 4, 20, 20))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def write_eval_traces(path: Path, run_id: str = "eval_dashboard") -> Path:
    """Three seeds of a Qwen3-VL eval run as `synth-ai eval` stores them: a picture in the user turn, a score per
    seed; seed 2's answer is hostile markup that must show as text."""
    from synth_ai.tracing.session import SessionRecorder
    from synth_ai.tracing.store import TraceStore

    with TraceStore(path) as store:
        for seed, (colour, rgb, score) in enumerate((("red", (220, 30, 30), 1.0), ("green", (30, 200, 60), 0.0),
                                                     ("blue", (30, 60, 220), 0.5))):
            rec = SessionRecorder(metadata={"eval_run_id": run_id, "eval_seed": seed, "official_score": score,
                                            "model": "synth-ai/tiny-qwen3-vl", "app_id": "colours",
                                            "task_id": f"colours:{seed}"})
            rec.message("user", {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": _square_png(rgb)}},
                {"type": "text", "text": "Which colour is the square?"}]})
            answer = HOSTILE if seed == 2 else f"The square is {colour}."
            rec.message("assistant", {"role": "assistant", "content": answer})
            rec.set_outcome(score)
            store.write(rec)
    return path


@dataclass(frozen=True)
class LongRLJob:
    job_id: str
    events: int  # how many events it wrote; the last is the job's completion
    kept: list[int]  # iterations whose checkpoints are still on disk
    pruned: list[int]  # iterations whose checkpoints the trainer pruned


def write_long_rl_job(store: JobStore, model: str, workdir: Path, *, iterations: int = 300,
                      checkpoint_every: int = 5, eval_every: int = 10, kept: int = 2) -> LongRLJob:
    """A finished RL job's rows, written through the job store in the order its API, scheduler and worker write
    them (a step event every iteration, an eval summary every `eval_every`, a checkpoint every `checkpoint_every`
    of which the newest `kept` are left on disk as the trainer prunes them), with its reward, loss and eval
    series: a long job's page without training one."""
    with store.db.tx() as conn:
        job_id = store.insert(conn, kind="rl", training_type="rl_online", model=model, payload={}, files=[],
                              prefix="rljob")
    store.transition(job_id, "queued", event=("job.queued", "Job queued.", None, "info"))
    store.transition(job_id, "running", event=("job.running", "Worker started (attempt 1, pid 4242)",
                                               {"attempt": 1, "resumed": False}, "info"))
    store.add_event(job_id, "rl.rollout_engine", "Rollouts are sampled by the lean engine (no GPU for vllm).",
                    {"engine": "lean"})
    store.add_event(job_id, "rl.train.started", f"GSPO on {model} (local) for {iterations} iterations: 2 seeds x "
                    "4 rollouts, task app http://127.0.0.1:8001 (cpu, float32).", {"iterations": iterations})
    saved: list[int] = []
    points: list[tuple[str, int, float, str]] = []
    for it in range(iterations):
        reward = round(0.2 + 0.6 * it / iterations, 4)
        if it % eval_every == 0:
            store.add_event(job_id, "rl.eval.summary", f"iteration {it}: eval mean return {reward:.4f} on 4 seeds",
                            {"iteration": it, "mean_return": reward})
            points.append(("eval.mean_return", it, reward, "eval"))
        store.add_event(job_id, "rl.train.step", f"iteration {it + 1}/{iterations}: reward {reward:.4f}, "
                        "loss 0.1000, 0 failed rollouts", {"iteration": it, "reward_mean": reward})
        points += [("reward.mean", it, reward, "train"), ("loss", it, 0.1, "train")]
        done = it + 1
        if done % checkpoint_every == 0 and done != iterations:
            path = workdir / "checkpoints" / f"step-{done:06d}"
            store.add_event(job_id, "rl.checkpoint.saved", f"Checkpoint saved after iteration {done}.",
                            {"iteration": done, "path": str(path)})
            saved.append(done)
    for done in saved[-kept:]:
        (workdir / "checkpoints" / f"step-{done:06d}").mkdir(parents=True)
    store.add_metrics(job_id, points)
    fine_tuned = f"rl:{model}:{job_id}"
    store.add_event(job_id, "rl.train.completed", f"GSPO finished: {fine_tuned}", {"fine_tuned_model": fine_tuned})
    store.transition(job_id, "succeeded", fine_tuned_model=fine_tuned,
                     event=("job.completed", f"Job completed: {fine_tuned}", {"fine_tuned_model": fine_tuned}, "info"))
    return LongRLJob(job_id, store.last_event(job_id)["seq"], saved[-kept:], saved[:-kept])
