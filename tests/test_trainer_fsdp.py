"""FSDP sharding of SFT (`trainers.fsdp`) on CPU: 2 gloo ranks training a LoRA adapter on the tiny model stop at a
step (the sharded state gathered into a checkpoint), resume from it, and end with the same loss curve and adapter
as one unsharded process; and how `[hyperparameters.parallelism]` asks for sharding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, chat_jsonl
from synth_ai.errors import InvalidInputError

STEPS = 3

# One SFT run (this process alone, or one torchrun rank): stops before step `stop_at` when asked to, and writes
# the reported losses and event types (rank 0) as JSON.
_RUN = """
import json, os, sys
from pathlib import Path
from synth_ai.backend.store.model_store import ModelStore
from synth_ai.backend.trainers.sft.trainer import TrainingCancelled, run_sft
store, data, work, stop_at, hyper, out = sys.argv[1:7]
seen = {"loss": {}, "events": []}
class Reporter:
    def event(self, kind, message, data=None, level="info"):
        seen["events"].append(kind)
    def metric(self, name, step, value, phase="train"):
        if name == "train.loss":
            seen["loss"][step] = value
calls = []
def should_stop():
    calls.append(1)
    return len(calls) > int(stop_at)
spec = {"model": sys.argv[7], "job_id": "fsdp", "training_file_path": data, "hyperparameters": json.loads(hyper),
        "metadata": {"effective_config": {}}}
try:
    run_sft(spec, workdir=Path(work), model_store=ModelStore(Path(store)), reporter=Reporter(), should_stop=should_stop)
except TrainingCancelled:
    seen["events"].append("cancelled")
if os.environ.get("RANK", "0") == "0":
    Path(out).write_text(json.dumps(seen))
"""


def _run(tmp_path: Path, store: Path, data: Path, work: Path, hyper: dict, *, ranks: int, stop_at: int) -> dict:
    """The script over `ranks` torchrun processes, or (ranks=1) in this process (one interpreter start less)."""
    script = tmp_path / "run_sft.py"
    script.write_text(_RUN)
    out = tmp_path / f"out-{ranks}-{stop_at}.json"
    args = [str(script), str(store), str(data), str(work), str(stop_at), json.dumps(hyper), str(out), TINY_TEXT]
    if ranks == 1:
        saved = sys.argv
        try:
            sys.argv = args
            exec(compile(_RUN, str(script), "exec"), {"__name__": "__main__"})
        finally:
            sys.argv = saved
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
        done = subprocess.run([*launcher, *args], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    result["loss"] = {int(k): v for k, v in result["loss"].items()}
    return result


@pytest.mark.slow
def test_two_sharded_ranks_stop_resume_and_match_one_process(tmp_path, tiny_text_models):
    from safetensors.torch import load_file

    store = tiny_text_models[0].parents[2]
    data = chat_jsonl(tmp_path / "chat.jsonl", n=12)
    # LoRA without dropout (dropout draws differ between ranks); SHARD_GRAD_OP through the DeepSpeed keys
    hyper = {"total_steps": STEPS, "per_device_batch": 1, "learning_rate": 5e-3, "train_kind": "lora",
             "lora_dropout": 0, "save_steps": 1}
    sharded = {**hyper, "parallelism": {"use_deepspeed": True, "deepspeed_stage": 2}}

    one = _run(tmp_path, store, data, tmp_path / "one", {**sharded, "gradient_accumulation_steps": 2}, ranks=1,
               stop_at=STEPS)
    assert "sft.config.adjusted" in one["events"]  # sharding asked of one process: said, and trained whole

    stopped = _run(tmp_path, store, data, tmp_path / "two", sharded, ranks=2, stop_at=2)
    assert stopped["events"][-2:] == ["sft.training.stopped", "cancelled"] and sorted(stopped["loss"]) == [0, 1]
    resumed = _run(tmp_path, store, data, tmp_path / "two", sharded, ranks=2, stop_at=STEPS)
    assert "sft.training.resumed" in resumed["events"] and sorted(resumed["loss"]) == [2]

    two = {**stopped["loss"], **resumed["loss"]}
    assert sorted(one["loss"]) == sorted(two) == list(range(STEPS))
    for step in one["loss"]:
        assert two[step] == pytest.approx(one["loss"][step], rel=1e-4, abs=1e-5), (one["loss"], two)
    assert one["loss"][STEPS - 1] != one["loss"][0]
    # the saved adapter (gathered whole on rank 0) is the one-process adapter
    mine = load_file(str(tmp_path / "two" / "final" / "adapter_model.safetensors"))
    theirs = load_file(str(tmp_path / "one" / "final" / "adapter_model.safetensors"))
    assert sorted(mine) == sorted(theirs) and mine
    for name in theirs:
        assert mine[name].shape == theirs[name].shape
        assert (mine[name] - theirs[name]).abs().max().item() < 1e-4, name


def _sharding(parallelism: dict) -> tuple[str | None, list[str]]:
    from synth_ai.backend.trainers.sft.sft_settings import resolve_settings

    settings = resolve_settings({"model": "m", "hyperparameters": {"n_epochs": 1, "parallelism": parallelism}})
    return settings.fsdp, settings.notes


def test_parallelism_keys_choose_the_sharding() -> None:
    assert _sharding({}) == (None, [])
    assert _sharding({"fsdp": True}) == ("full_shard", [])
    assert _sharding({"fsdp": True, "fsdp_sharding_strategy": "SHARD_GRAD_OP"})[0] == "shard_grad_op"
    strategy, notes = _sharding({"use_deepspeed": True, "deepspeed_stage": 3})
    assert strategy == "full_shard" and "FSDP" in notes[0]
    strategy, notes = _sharding({"use_deepspeed": True, "deepspeed_stage": 1})
    assert strategy is None and "whole model" in notes[0]
    with pytest.raises(InvalidInputError, match=r"parallelism\.fsdp_sharding_strategy must be FULL_SHARD"):
        _sharding({"fsdp": True, "fsdp_sharding_strategy": "HYBRID"})
    with pytest.raises(InvalidInputError, match=r"parallelism\.fsdp must be true or false"):
        _sharding({"fsdp": "yes"})
    with pytest.raises(InvalidInputError, match=r"deepspeed_stage must be 0, 1, 2 or 3"):
        _sharding({"use_deepspeed": True, "deepspeed_stage": 4})
    # a checkpoint of a sharded run resumes only sharded (its optimizer state is keyed by name)
    from synth_ai.backend.trainers.sft.sft_settings import resolve_settings

    plain = resolve_settings({"model": "m", "hyperparameters": {"n_epochs": 1}}).fingerprint()
    assert "fsdp" not in plain
    assert resolve_settings({"model": "m", "hyperparameters": {"n_epochs": 1, "parallelism": {"fsdp": True}}}
                            ).fingerprint()["fsdp"] == "full_shard"
