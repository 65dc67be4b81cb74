"""The split topology (issue 39 item 2): the weight transfer's two backends carry the policy version (shared-memory
files, and a broadcast over gloo, the CPU twin of the NCCL path); a real asynchronous GSPO run (tiny Qwen3, the
color-quiz app over HTTP, `run_rl` in this process) whose rollouts are sampled by a separate inference process:
every sample's log-probs are those of the weights of the version it records (published after that optimiser
step), and killing the inference process ends the run at once with `InferenceProcessLost` and the reason; the same
kill in a job of a real backend: the worker exits EXIT_RESUME (70), the job is requeued with the reason and resumes
with a new inference process; the create-time refusal of a topology that leaves no GPU to train on."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from rl_support import Recorder, quiz_app, rl_body, run_in_process
from taskapp_support import running_app

torch = pytest.importorskip("torch")
ENV_KEY = "sk_env_rl_split_0123456789"


@pytest.mark.parametrize("kind", ["files", "gloo"])
def test_a_transfer_delivers_the_weights_with_their_version_and_refuses_another(kind: str) -> None:
    from synth_ai.backend.inference.weight_transfer import TransferMismatch, transfer_for, transfer_from

    sender = transfer_for("cpu", kind)
    receiver = transfer_from(sender.describe())
    weights = [("a.weight", torch.arange(6, dtype=torch.float32).reshape(2, 3)), ("b.bias", torch.ones(4))]
    got: dict[str, Any] = {}

    def notify(ticket: dict[str, Any]) -> dict[str, Any]:
        got["version"], got["weights"] = receiver.receive(ticket)
        return {"version": got["version"]}

    assert sender.send(weights, 7, notify) == {"version": 7}
    assert got["version"] == 7 and set(got["weights"]) == {"a.weight", "b.bias"}
    assert torch.equal(got["weights"]["a.weight"], weights[0][1]) and torch.equal(got["weights"]["b.bias"],
                                                                                  torch.ones(4))

    def lying(ticket: dict[str, Any]) -> Any:  # the ticket announces another version than the transfer carries
        return receiver.receive({**ticket, "version": 6})

    with pytest.raises(TransferMismatch, match="version 8.*says 6"):
        sender.send(weights, 8, lying)
    sender.close()
    receiver.close()
    if kind == "files":
        assert not Path(sender.describe()["folder"]).exists()  # the trainer's end removes its files


class _Watched:
    """The GSPO trainer, keeping its weights after every optimiser step (by version) and every batch it trains;
    after `kill_after` updates it kills the inference process."""

    def __init__(self, inner: Any, kill_after: int, engines: list[Any]) -> None:
        self.inner, self.kill_after, self.engines = inner, kill_after, engines
        self.snapshots = {inner.version: self._weights()}
        self.batches: list[list[Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _weights(self) -> dict[str, Any]:
        return {k: v.detach().clone() for k, v in self.inner.served().model.state_dict().items()}

    def train(self, samples: list[Any], after_step: Any = None) -> Any:
        self.batches.append(list(samples))

        def stepped(version: int) -> None:
            self.snapshots[version] = self._weights()  # what the publish below sends
            if after_step is not None:
                after_step(version)

        stats = self.inner.train(samples, after_step=stepped)
        if len(self.batches) == self.kill_after:
            pid = self.engines[0].pid
            os.kill(pid, signal.SIGKILL)
            self.engines[0].process.wait()
        return stats


def _logprobs(model: Any, sample: Any) -> list[float]:
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(sample.prompt_ids) - 1:-1].float() / sample.temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(sample.completion_ids)[:, None])[:, 0].tolist()


def test_a_split_run_samples_from_the_published_weights_and_ends_when_its_inference_process_dies(
        tmp_path: Path, tiny_text_models: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from synth_ai.backend.inference.split_engine import InferenceProcessLost

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("SYNTH_AI_WEIGHT_TRANSFER", "gloo")  # the broadcast (NCCL's code path); files: the tests below
    engines: list[Any] = []
    watched: list[_Watched] = []
    recorder = Recorder()
    with running_app(quiz_app()) as app, pytest.raises(InferenceProcessLost) as lost:
        run_in_process(tmp_path, tiny_text_models, app, recorder, parts=_watched_parts(watched, engines, 3),
                       tables={"topology": {"separate_inference": True}}, iterations_per_epoch=6, seed=3,
                       max_staleness=1)
    # the end: the loop's own error, naming the process and how it ended; no iteration after the kill trained
    assert f"(pid {engines[0].pid}) was killed by signal 9" in str(lost.value) and lost.value.resume_in_new_worker
    trainer = watched[0]
    assert len(trainer.batches) == 3
    chosen = recorder.of("rl.rollout_engine")[0]["data"]
    assert chosen["inference_process"] == {"pid": engines[0].pid, "devices": ["cpu"], "transfer": "gloo"}
    assert engines[0].pid != os.getpid()

    # every sample's recorded log-probs are those of the weights published as its version, not the version before
    checked, versions, differs = _compare_logprobs(trainer, tolerance=2e-4)
    assert checked >= 8 and len(versions) >= 2, (checked, versions)
    assert differs >= 1  # the check tells one version from the one before


def _compare_logprobs(trainer: _Watched, tolerance: float) -> tuple[int, set[int], int]:
    """Each single-version sample's recorded log-probs against the weights of its version (within `tolerance`):
    how many were checked, their versions, and how many the version before would have failed."""
    from synth_ai.backend.ml.copies import frozen_copy

    model = frozen_copy(trainer.inner.served().model)
    checked, versions, differs = 0, set(), 0
    for batch in trainer.batches:
        for sample in batch:
            if len(set(sample.versions)) != 1 or any(sample.forced):
                continue  # a publish landed mid-row: its tokens were sampled under two versions
            version = sample.versions[0]
            model.load_state_dict(trainer.snapshots[version])
            assert _logprobs(model, sample) == pytest.approx(sample.sampler_logprobs, abs=tolerance)
            if version - 1 in trainer.snapshots:
                model.load_state_dict(trainer.snapshots[version - 1])
                gap = max(abs(a - b) for a, b in zip(_logprobs(model, sample), sample.sampler_logprobs))
                differs += gap > 5 * tolerance
            checked += 1
            versions.add(version)
    return checked, versions, differs


def _watched_parts(watched: list[_Watched], engines: list[Any], kill_after: int) -> Any:
    from synth_ai.backend.trainers.rl.run_parts import RLParts, default_parts

    real = default_parts()

    def make_trainer(*args: Any) -> Any:
        watched.append(_Watched(real.make_trainer(*args), kill_after=kill_after, engines=engines))
        return watched[0]

    def make_engine(*args: Any) -> Any:
        engines.append(real.make_engine(*args))
        return engines[0]

    return RLParts(make_trainer, make_engine)


def test_vllm_in_the_inference_process_samples_from_the_published_weights(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        require_vllm: None) -> None:
    """A `[vllm]` job with the split: vLLM samples in the inference process (its CPU build, the head_dim-64 Qwen3)."""
    from backend_support import link_tiny
    from vllm_support import TINY_HD64, hd64_model

    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl import run_rl

    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    link_tiny(tmp_path / "store", [hd64_model(tmp_path_factory)])
    watched: list[_Watched] = []
    engines: list[Any] = []
    recorder = Recorder()
    with running_app(quiz_app()) as app:
        body = rl_body(app, tables={"topology": {"separate_inference": True, "tensor_parallel": 1},
                                    "vllm": {"tensor_parallel_size": 1, "max_model_len": 256,
                                             "kv_cache_memory_bytes": 64 * 1024 * 1024}},
                       iterations_per_epoch=3, seed=3, max_staleness=1)
        body["data"]["config"]["model"]["base"] = body["data"]["base_model"] = TINY_HD64
        run_rl({"job_id": "rljob_split_vllm", **body}, workdir=tmp_path / "work",
               model_store=ModelStore(tmp_path / "store"), reporter=recorder, should_stop=lambda: False,
               parts=_watched_parts(watched, engines, kill_after=0))
    chosen = recorder.of("rl.rollout_engine")[0]["data"]
    assert chosen["engine"] == "vllm" and chosen["inference_process"]["pid"] == engines[0].pid
    assert chosen["inference_process"]["transfer"] == "files"
    checked, versions, differs = _compare_logprobs(watched[0], tolerance=2e-3)
    assert checked >= 4 and len(versions) >= 2 and differs >= 1, (checked, versions, differs)


def test_a_job_whose_inference_process_is_killed_resumes_with_a_new_one(shared_backend: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a real backend and job worker: the worker exits EXIT_RESUME (70) with the reason, the scheduler
    requeues the job (the reason in `rl.job.requeued`) and a new worker resumes it from its checkpoint with a new
    inference process; the job succeeds."""
    from backend_support import wait_for
    from taskapp_support import ENV_KEY as SHARED_KEY

    monkeypatch.setenv("ENVIRONMENT_API_KEY", SHARED_KEY)
    killed = threading.Event()  # iteration 2's episodes (seeds 4, 5) wait for the kill: the job cannot end first

    def gate(seed: int) -> float:
        if seed >= 4:
            killed.wait(timeout=300)
        return 0.0

    with running_app(quiz_app(delay=gate)) as app, shared_backend.client() as api:
        body = rl_body(app, tables={"topology": {"separate_inference": True}}, iterations_per_epoch=4,
                       checkpoint_interval=1)
        answer = api.post("/rl/jobs", json=body)
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]

        def log() -> list[dict[str, Any]]:
            return api.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 0, "limit": 1000}).json()["events"]

        wait_for(lambda: any(e["type"] == "rl.checkpoint.saved" for e in log()), timeout=300, interval=0.5,
                 what="a checkpoint")
        first = next(e for e in log() if e["type"] == "rl.rollout_engine")["data"]["inference_process"]["pid"]
        os.kill(first, signal.SIGKILL)
        killed.set()
        wait_for(lambda: api.get(f"/rl/jobs/{job_id}").json()["status"] in ("succeeded", "failed", "cancelled"),
                 timeout=300, interval=0.5, what="the job's end")
        job, events = api.get(f"/rl/jobs/{job_id}").json(), log()
    assert job["status"] == "succeeded" and job["attempts"] == 2, (job, events[-5:])
    requeued = next(e for e in events if e["type"] == "rl.job.requeued")
    assert f"the inference process (pid {first}) was killed by signal 9" in requeued["message"]
    assert next(e for e in events if e["type"] == "rl.train.resumed")["data"]["iteration"] >= 1
    pids = [e["data"]["inference_process"]["pid"] for e in events if e["type"] == "rl.rollout_engine"]
    assert len(pids) == 2 and pids[1] != first  # the new worker started its own


def test_a_topology_that_leaves_no_gpu_to_train_on_is_refused_at_create_time_with_its_key_path() -> None:
    """`config validate` says the same (tests/test_config_broken.py, rl-topology-vllm-takes-every-gpu)."""
    from synth_ai.backend.trainers.rl.rl_settings import check_rl_job
    from synth_ai.errors import InvalidInputError

    body = rl_body("http://127.0.0.1:9")
    body["data"]["config"]["topology"].update({"gpus_for_vllm": 2, "gpus_for_training": 0})
    with pytest.raises(InvalidInputError) as refused:
        check_rl_job({"job_id": "rljob_split", **body})
    assert refused.value.message.startswith("[topology].gpus_for_vllm: gives all 2 GPUs of [compute]")
    assert "(found 2)" in refused.value.message and "at most 1" in refused.value.hint
    assert refused.value.details == {"field": "data.config.topology.gpus_for_vllm"}
    body["data"]["config"]["topology"].update({"gpus_for_vllm": 1, "gpus_for_training": 1})
    check_rl_job({"job_id": "rljob_split", **body})  # one GPU each: fine
