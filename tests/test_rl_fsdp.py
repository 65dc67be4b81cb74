"""FSDP for RL (`[training] fsdp = true`, `rl.sharded_policy`) on CPU with gloo: GSPO on the tiny Qwen3 over 2
sharded torchrun ranks samples the same rollouts, reports the same rewards and (within float rounding) the same
losses and ends with the same weights as one unsharded process, full and LoRA; a sharded run's checkpoint resumes on
2 sharded ranks and in one process alike.

As in tests/test_rl_data_parallel.py, the rollout engines keep the weights they start from during a run
(`weight_sync_interval` beyond it) so that float rounding in an update cannot tip a sampled token; the weights the
engine is handed on resume (gathered from the shards into its unsharded copy) and the final model (gathered the
same way) are checked instead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backend_support import link_tiny
from rl_support import Recorder, quiz_app, rl_body, run_in_process, saved_weights
from taskapp_support import running_app

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ENV_KEY = "sk_env_rl_fsdp_0123456789abcdef"
TRAINING = {"iterations_per_epoch": 3, "checkpoint_interval": 2, "weight_sync_interval": 100,
            "tables": {"rollout": {"max_concurrent_rollouts": 1}}}

# One RL job on 2 torchrun ranks, run_rl called directly (rank 0 writes what it reported as JSON).
_RANKS = """
import json, os, sys
from pathlib import Path
from synth_ai.backend.store.model_store import ModelStore
from synth_ai.backend.trainers.rl import run_rl
store, work, body, out = sys.argv[1:5]
seen = {"events": [], "metrics": []}
class Reporter:
    def event(self, kind, message, data=None, level="info"):
        seen["events"].append({"type": kind, "data": data or {}})
    def metric(self, name, step, value, phase="train"):
        seen["metrics"].append([name, step, value])
run_rl({"job_id": "rljob_local", **json.loads(body)}, workdir=Path(work), model_store=ModelStore(Path(store)),
       reporter=Reporter(), should_stop=lambda: False)
if os.environ["RANK"] == "0":
    Path(out).write_text(json.dumps(seen))
"""


def _two_ranks(tmp_path: Path, run: Path, store: Path, body: dict) -> Recorder:
    script = tmp_path / "ranks.py"
    script.write_text(_RANKS)
    out = run / "seen.json"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run([*launcher, str(script), str(store), str(run / "work"), json.dumps(body), str(out)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(out.read_text())
    recorder = Recorder()
    recorder.events = seen["events"]
    recorder.metrics = [tuple(m) for m in seen["metrics"]]
    return recorder


def _assert_same_run(two: Recorder, one: Recorder, two_final: Path, one_final: Path) -> None:
    for name in ("reward.mean", "reward.std", "response_tokens.mean", "rollouts.errors"):
        assert two.series(name) == one.series(name), name
    for name in ("loss", "kl", "clip_fraction"):
        assert two.series(name) == pytest.approx(one.series(name), rel=1e-4, abs=1e-6), name
    mine, theirs = saved_weights(two_final), saved_weights(one_final)
    assert mine.keys() == theirs.keys()
    assert max(float((mine[k] - theirs[k]).abs().max()) for k in mine) < 1e-5


def _resume_from(checkpoints: Path, run: Path) -> None:
    shutil.copytree(checkpoints, run / "work" / "checkpoints")


def test_two_sharded_ranks_follow_one_process_and_resume_on_one_or_two(tmp_path: Path, tiny_text_models: list[Path],
                                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    store = tmp_path / "store"
    link_tiny(store, tiny_text_models)
    with running_app(quiz_app()) as app:
        one = Recorder()
        run_in_process(tmp_path / "one", tiny_text_models, app, one, **TRAINING)
        sharded = {**TRAINING, "fsdp": True}
        two = _two_ranks(tmp_path, tmp_path / "two", store, rl_body(app, **sharded))
        started = two.of("rl.train.started")[0]["data"]
        assert (started["world_size"], started["fsdp"]) == (2, "full_shard")
        _assert_same_run(two, one, tmp_path / "two" / "work" / "final", tmp_path / "one" / "work" / "final")
        assert one.series("loss")[-1] != one.series("loss")[0]

        # the sharded checkpoint after iteration 2 (full tensors, name-keyed optimiser state) resumes on 2 sharded
        # ranks and in one process alike: both engines sample from the resumed weights
        checkpoints = tmp_path / "two" / "work" / "checkpoints"
        assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000002"]
        _resume_from(checkpoints, tmp_path / "again2")
        again2 = _two_ranks(tmp_path, tmp_path / "again2", store, rl_body(app, **sharded))
        _resume_from(checkpoints, tmp_path / "again1")
        again1 = Recorder()
        run_in_process(tmp_path / "again1", tiny_text_models, app, again1, **TRAINING)
        for resumed in (again2, again1):
            assert [e["data"]["iteration"] for e in resumed.of("rl.train.resumed")] == [2]
            assert [step for name, step, _v in resumed.metrics if name == "loss"] == [2]
        _assert_same_run(again2, again1, tmp_path / "again2" / "work" / "final", tmp_path / "again1" / "work" / "final")


def test_two_sharded_ranks_train_a_lora_adapter_like_one_process(tmp_path: Path, tiny_text_models: list[Path],
                                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    store = tmp_path / "store"
    link_tiny(store, tiny_text_models)
    # with the KL term: its reference is the policy with the adapter off, a forward through FSDP's root too
    lora = {**TRAINING, "iterations_per_epoch": 2, "kl_coef": 0.05,
            "tables": {**TRAINING["tables"], "model": {"trainer_mode": "lora"}, "lora": {"r": 4, "alpha": 8},
                       "reference": {"placement": "colocated"}}}
    with running_app(quiz_app()) as app:
        one = Recorder()
        run_in_process(tmp_path / "one", tiny_text_models, app, one, **lora)
        two = _two_ranks(tmp_path, tmp_path / "two", store, rl_body(app, **lora, fsdp=True))
        _assert_same_run(two, one, tmp_path / "two" / "work" / "final", tmp_path / "one" / "work" / "final")
        adapter = saved_weights(tmp_path / "two" / "work" / "final")
        assert all("lora_" in name for name in adapter)  # an adapter, trained: LoRA's B starts at zero
        assert max(float(t.abs().max()) for name, t in adapter.items() if "lora_B" in name) > 0
        assert max(two.series("kl")) > 0


def test_sharding_that_cannot_run_is_refused_at_create_time(shared_backend, monkeypatch: pytest.MonkeyPatch):
    """Through the shared backend (the local executor: one process per job): FSDP asks for ranks it would not get;
    a full Qwen3-8B on one H100 does not fit and is told the fix; nothing is created."""
    from taskapp_support import ENV_KEY as APP_KEY

    monkeypatch.setenv("ENVIRONMENT_API_KEY", APP_KEY)
    with running_app(quiz_app()) as app, shared_backend.client() as api:
        before = api.get("/rl/jobs").json()
        answer = api.post("/rl/jobs", json=rl_body(app, fsdp=True))
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "invalid_parallelism" and error["details"]["field"] == "data.config.training.fsdp"
        assert "would run as 1 process" in error["message"] and "--executor torchrun" in error["hint"]

        big = rl_body(app, tables={"compute": {"gpu_type": "H100", "gpu_count": 1},
                                   "topology": {"gpus_for_vllm": 0, "gpus_for_training": 1}})
        big["data"]["base_model"] = "Qwen/Qwen3-8B"
        big["data"]["config"]["model"]["base"] = "Qwen/Qwen3-8B"
        answer = api.post("/rl/jobs", json=big)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert "Qwen/Qwen3-8B (8B, full) needs about 119 GiB on each H100 (80 GiB, 72 usable)" in error["message"]
        assert "Shard it over 3 or more GPUs" in error["hint"] and "LoRA" in error["hint"], error
        assert api.get("/rl/jobs").json() == before


def test_the_memory_plan_names_fsdp_and_an_even_batch() -> None:
    from synth_ai.backend.trainers.rl.sharding_plan import refuse_unrunnable_sharding, refuse_what_cannot_fit
    from synth_ai.errors import InvalidInputError

    h100x4 = {"gpu_type": "H100", "gpu_count": 4}
    with pytest.raises(InvalidInputError, match=r"needs about 119 GiB on each H100.*4 training ranks") as caught:
        refuse_what_cannot_fit("Qwen/Qwen3-8B", "full", False, h100x4, 4)
    assert "fsdp = true: sharded over 4 ranks it needs about 45 GiB each" in caught.value.hint
    refuse_what_cannot_fit("Qwen/Qwen3-8B", "full", True, h100x4, 4)  # 30 + 15 GiB: fits
    refuse_what_cannot_fit("Qwen/Qwen3-8B", "lora", False, h100x4, 1)
    refuse_what_cannot_fit("Qwen/Qwen3-8B", "full", False, {}, 1)  # no GPU type: nothing to say
    with pytest.raises(InvalidInputError, match=r"batch_size = 3 groups cannot be shared evenly by 2") as caught:
        refuse_unrunnable_sharding(3, True, 2)
    assert caught.value.details == {"field": "data.config.training.batch_size"}
    with pytest.raises(InvalidInputError, match=r"optimizer_states = '8bit' does not run with \[training\]\.fsdp"):
        refuse_unrunnable_sharding(4, True, 2, "8bit")
    refuse_unrunnable_sharding(3, False, 2)  # data-parallel ranks take uneven shares
    refuse_unrunnable_sharding(4, True, 2)
