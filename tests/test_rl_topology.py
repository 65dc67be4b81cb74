"""`[topology]` -> devices for RL (`rl.topology`): which GPU each torchrun rank trains on, which GPUs its rollout
engine gets, how many ranks the torchrun executor starts, and the refusals that name the key to change. Pure
functions: checked here for machines this one is not (no GPU is needed)."""

from __future__ import annotations

import json

import pytest

from synth_ai.backend.trainers.distributed import DataParallel
from synth_ai.backend.trainers.rl.data_parallel import local_jobs
from synth_ai.backend.trainers.rl.topology import RankDevices, assign_devices, topology_of, training_gpus
from synth_ai.errors import InvalidInputError

SPLIT = {"type": "single_node_split", "gpus_for_vllm": 4, "gpus_for_training": 4}


def test_without_gpus_every_rank_trains_and_samples_on_the_cpu():
    for rank in range(3):
        assert assign_devices(SPLIT, gpus=0, rank=rank, world=3) == RankDevices("cpu", ("cpu",), True)
    assert assign_devices(None, gpus=0) == RankDevices("cpu", ("cpu",), True)
    assert training_gpus(SPLIT, 0, 8) == 1  # on CPU the ranks come from SYNTH_AI_BACKEND_TORCHRUN_NPROC


def test_split_training_ranks_first_then_one_engine_per_rank():
    got = [assign_devices(SPLIT, gpus=8, rank=r, world=4) for r in range(4)]
    assert [d.trainer for d in got] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert [d.rollout for d in got] == [("cuda:4",), ("cuda:5",), ("cuda:6",), ("cuda:7",)]
    assert not any(d.colocated for d in got)
    # tensor-parallel engines: each rank's engine spans its own tensor_parallel GPUs after the training ones
    tp = {"gpus_for_vllm": 4, "gpus_for_training": 2, "tensor_parallel": 2}
    assert assign_devices(tp, gpus=6, rank=0, world=2).rollout == ("cuda:2", "cuda:3")
    assert assign_devices(tp, gpus=6, rank=1, world=2).rollout == ("cuda:4", "cuda:5")
    # fewer ranks than training GPUs: the ranks take the first ones, engines still follow gpus_for_training
    assert assign_devices(SPLIT, gpus=8, rank=1, world=2) == RankDevices("cuda:1", ("cuda:5",), False)
    # gpus_for_training left out: the GPUs not given to vLLM (or the reference) train
    assert assign_devices({"gpus_for_vllm": 1}, gpus=2) == RankDevices("cuda:0", ("cuda:1",), False)
    assert assign_devices({"gpus_for_vllm": 2, "gpus_for_ref": 1}, gpus=5, rank=1, world=2) == \
        RankDevices("cuda:1", ("cuda:3",), False)


def test_colocated_when_no_gpu_goes_to_vllm():
    for topology in ({}, None, {"gpus_for_vllm": 0, "gpus_for_training": 2}, {"type": "colocated"}):
        assert assign_devices(topology, gpus=2, rank=1, world=2) == RankDevices("cuda:1", ("cuda:1",), True)
    # one process with tensor_parallel: the engine spans the first GPUs and the trainer sits on GPU 0 (as before)
    one = assign_devices({"tensor_parallel": 2}, gpus=2)
    assert one == RankDevices("cuda:0", ("cuda:0", "cuda:1"), True)


@pytest.mark.parametrize(("topology", "gpus", "world", "says"), [
    ({"gpus_for_vllm": 4, "gpus_for_training": 4}, 6, 1, "[topology].gpus_for_vllm"),  # 8 GPUs asked of 6
    ({"gpus_for_vllm": 2, "gpus_for_training": 2}, 4, 3, "gpus_for_training is 2"),  # a rank without a GPU
    ({"gpus_for_vllm": 2}, 2, 1, "leaves no GPU"),
    ({"gpus_for_vllm": 3, "gpus_for_training": 2, "tensor_parallel": 2}, 8, 1, "not a multiple"),
    ({"gpus_for_vllm": 2, "gpus_for_training": 2, "tensor_parallel": 2}, 4, 2, "needs its own"),
    ({"tensor_parallel": 2}, 4, 2, "several engines on the same GPUs"),
    ({"gpus_for_training": 3}, 2, 1, "[topology].gpus_for_training"),
    ({"gpus_for_vllm": -1}, 2, 1, "whole number >= 0"),
    ({"tensor_parallel": True}, 2, 1, "[topology].tensor_parallel must be a whole number >= 1"),
])
def test_what_does_not_fit_is_refused_naming_the_key(topology, gpus, world, says):
    with pytest.raises(InvalidInputError) as info:
        assign_devices(topology, gpus=gpus, rank=0, world=world)
    assert says in info.value.message + " " + (info.value.hint or "")


def test_how_many_ranks_the_torchrun_executor_starts_for_rl():
    assert training_gpus(SPLIT, 8, 8) == 4  # gpus_for_training
    assert training_gpus({"gpus_for_vllm": 2}, 8, 8) == 6  # the GPUs left after vLLM
    assert training_gpus({"gpus_for_vllm": 2, "gpus_for_ref": 1}, 8, 8) == 5
    assert training_gpus({}, 4, 2) == 2  # colocated: [compute].gpu_count
    assert training_gpus({}, 1, 4) == 1  # never more than the GPUs present
    assert training_gpus({"gpus_for_vllm": 1, "gpus_for_training": 1}, 1, 2) == 1  # hosted topology on 1 GPU


def test_topology_is_read_from_either_place_in_the_payload():
    assert topology_of({"data": {"config": {"topology": SPLIT}}}) == SPLIT
    assert topology_of({"data": {"config": {"compute": {"topology": {"gpus_for_vllm": 1}}}}}) == {"gpus_for_vllm": 1}
    assert topology_of({"data": {"config": {}}}) == {}


def test_groups_are_dealt_whole_to_the_ranks():
    jobs = [(seed, g, f"it0-s{seed}-g{g}") for seed in (6, 7, 8) for g in range(2)]
    shares = [local_jobs(jobs, DataParallel(rank=r, world=2)) for r in range(2)]
    assert [{seed for seed, _, _ in share} for share in shares] == [{6, 8}, {7}]
    assert sorted(shares[0] + shares[1]) == sorted(jobs)
    assert local_jobs(jobs, DataParallel()) == jobs  # one process runs them all
    assert local_jobs(jobs[:2], DataParallel(rank=1, world=2)) == []  # fewer groups than ranks: an idle rank


def test_the_torchrun_executor_starts_one_rank_per_training_gpu(monkeypatch: pytest.MonkeyPatch):
    from synth_ai.backend.executors import TORCHRUN_NPROC_ENV, executor_for

    monkeypatch.delenv(TORCHRUN_NPROC_ENV, raising=False)
    monkeypatch.setenv("SYNTH_AI_BACKEND_GPUS", "8")
    config = {"compute": {"gpu_type": "H100", "gpu_count": 8}, "topology": SPLIT}
    row = {"id": "rljob_t", "kind": "rl", "model": "synth-ai/tiny-qwen3",
           "payload": json.dumps({"job_type": "rl", "data": {"config": config}})}
    launch = executor_for("torchrun", row).launch(row)
    assert launch.processes == 4 and "--nproc-per-node=4" in launch.argv
    monkeypatch.setenv(TORCHRUN_NPROC_ENV, "2")  # the override wins, as for SFT
    assert executor_for("torchrun", row).launch(row).processes == 2
    assert executor_for("local", row).launch(row).processes == 1


def test_a_data_parallel_job_samples_with_the_builtin_engine():
    from synth_ai.backend.trainers.rl.engine_choice import VllmOptions, choose_engine
    from synth_ai.errors import UnavailableError

    assert choose_engine(VllmOptions(), installed=True, requested="auto")[0] == "vllm"
    name, why = choose_engine(VllmOptions(), installed=True, requested="auto", ranks=2)
    assert name == "builtin" and "2 ranks" in why
    with pytest.raises(UnavailableError) as info:
        choose_engine(VllmOptions(), installed=True, requested="vllm", ranks=2)
    assert "SYNTH_AI_ROLLOUT_ENGINE=builtin" in info.value.hint


def test_which_ranks_sample_in_a_separate_inference_process():
    """The split topology (issue 39 item 2): GPUs of their own for the engines mean a separate inference process on
    them; on the CPU only `separate_inference = true` asks for one; `false` keeps the engine in the trainer's
    process everywhere."""
    from synth_ai.backend.trainers.rl.topology import inference_devices

    assert inference_devices(SPLIT, gpus=0) is None  # the tiny examples' hosted topology stays colocated here
    assert inference_devices({**SPLIT, "separate_inference": True}, gpus=0, rank=1, world=2) == ("cpu",)
    assert inference_devices(SPLIT, gpus=8, rank=2, world=4) == ("cuda:6",)
    assert inference_devices({**SPLIT, "separate_inference": False}, gpus=8) is None
    assert inference_devices({}, gpus=2) is None  # colocated
    assert inference_devices({"separate_inference": True}, gpus=2, rank=1, world=2) == ("cuda:1",)  # its own process
    assert inference_devices(SPLIT, gpus=2) is None  # one process, a topology this machine cannot give: colocated
    with pytest.raises(InvalidInputError, match=r"\[topology\].separate_inference must be true or false"):
        inference_devices({"separate_inference": "yes"}, gpus=0)
