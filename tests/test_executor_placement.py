"""Which executor runs a job, and the Modal app built from a job, checked offline (no token, no network)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from conftest import run_cli
from synth_ai.backend.executors.placement import (
    NoExecutorError,
    check_executor_name,
    choose,
    job_needs,
    parse_params_b,
)
from synth_ai.errors import ExitCode, InvalidInputError


@pytest.fixture(autouse=True)
def no_modal_token(monkeypatch, tmp_path):
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "absent.toml"))


def sft_payload(gpu_type="H100", gpu_count=4, nodes=1):
    return {"metadata": {"effective_config": {"compute": {"gpu_type": gpu_type, "gpu_count": gpu_count,
                                                          "nodes": nodes}}}}


def test_model_sizes_come_from_the_registry():
    assert parse_params_b("32B") == 32 and parse_params_b("30B-A3B") == 30 and parse_params_b("0.14M") == pytest.approx(0.00014)
    assert parse_params_b("") is None
    needs = job_needs("sft", "ft:Qwen/Qwen3-32B:job_1", sft_payload(nodes=2))
    assert (needs.params_b, needs.gpu_count, needs.nodes, needs.gpus, needs.needs_gpu) == (32, 4, 2, 8, True)
    rl = job_needs("rl", "Qwen/Qwen3-4B", {"compute": {"gpu_type": "H100", "gpu_count": 2}})
    assert (rl.gpu_type, rl.gpu_count, rl.nodes) == ("H100", 2, 1)
    assert job_needs("sft", "/some/local/folder", {}).params_b is None


def test_choice_per_job(monkeypatch):
    tiny = job_needs("sft", "synth-ai/tiny-qwen3", sft_payload())
    big = job_needs("sft", "Qwen/Qwen3-32B", sft_payload())
    assert choose("local", tiny, gpus=0) == "local"  # [compute] describes hosted hardware: a tiny model runs here
    assert choose("torchrun", tiny, gpus=0) == "torchrun"
    assert choose("torchrun", big, gpus=4) == "torchrun" and choose("local", big, gpus=8) == "local"
    with pytest.raises(NoExecutorError) as caught:
        choose("local", big, gpus=1)
    assert "Qwen/Qwen3-32B (32B parameters) on 4 x H100" in caught.value.message
    assert "1 GPU and no Modal token" in caught.value.message and "modal token set" in caught.value.hint
    with pytest.raises(NoExecutorError):
        choose("local", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(nodes=2)), gpus=16)  # nodes > 1: never here
    monkeypatch.setenv("SYNTH_AI_BACKEND_TORCHRUN_NNODES", "2")  # `backend serve --executor torchrun --nnodes 2`
    assert choose("torchrun", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(nodes=2)), gpus=4) == "torchrun"
    with pytest.raises(NoExecutorError):
        choose("torchrun", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(nodes=3)), gpus=4)
    monkeypatch.delenv("SYNTH_AI_BACKEND_TORCHRUN_NNODES")
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    assert choose("local", big, gpus=0) == "modal"  # the job asks for GPUs this machine lacks: Modal takes it
    assert choose("modal", tiny, gpus=0) == "modal"


def test_choosing_modal_without_a_token_names_modal_token_set():
    with pytest.raises(InvalidInputError) as caught:
        check_executor_name("modal")
    assert "modal token set" in caught.value.hint
    with pytest.raises(InvalidInputError, match="Unknown executor 'slurm'"):
        check_executor_name("slurm")
    result = run_cli("backend", "serve", "--executor", "modal", "--port", "1")
    assert result.exit_code == ExitCode.INVALID_INPUT, result
    assert "modal token set" in result.stderr


def test_modal_app_built_from_a_job_offline():
    pytest.importorskip("modal")
    from synth_ai.backend.executors.modal_plan import build_app, plan_for

    plan = plan_for("job_abc", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(gpu_type="h100", gpu_count=8,
                                                                              nodes=2)))
    assert (plan.gpu, plan.nodes, plan.app_name, plan.data_dir) == ("H100:8", 2, "synth-ai-job-job_abc",
                                                                    "/vol/job_abc")
    assert any(p.startswith("torch==") for p in plan.pip) and "peft>=0.13" in plan.pip and "httpx>=0.27" in plan.pip
    assert not any(p.startswith(("vllm", "pytest", "modal")) for p in plan.pip)
    assert plan.secrets == ("synth-ai-training",)
    rl_plan = plan_for("rljob_1", job_needs("rl", "Qwen/Qwen3-4B", {"compute": {"gpu_type": "A100-80GB",
                                                                               "gpu_count": 2}}))
    assert rl_plan.gpu == "A100-80GB:2" and any(p.startswith("vllm") for p in rl_plan.pip)
    with pytest.raises(InvalidInputError, match="not a Modal GPU"):
        plan_for("job_x", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(gpu_type="RTX-9090")))
    with pytest.raises(InvalidInputError, match="more than a Modal container"):
        plan_for("job_x", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(gpu_count=16)))
    with pytest.raises(InvalidInputError, match="take all 8 GPUs of their host"):
        plan_for("job_x", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(gpu_count=4, nodes=2)))

    app, function = build_app(plan_for("job_abc", job_needs("sft", "Qwen/Qwen3-32B", sft_payload())))
    assert app.name == "synth-ai-job-job_abc"
    spec = function._spec_  # modal's own record of what the function asks for (private, so checked loosely)
    assert spec.gpus == "H100:4" and list(spec.volumes) == ["/vol"]
    _, clustered = build_app(plan)  # nodes = 2: one clustered function, 2 containers of 8 GPUs
    assert clustered._spec_.gpus == "H100:8"  # modal's private record


def test_modal_ranks_for_four_gpus_and_for_two_nodes(monkeypatch):
    """What each container of a Modal job starts: torchrun over its GPUs, and across nodes with node 0 as the
    rendezvous, its place read from Modal's cluster info; one global rank 0 in all (the one that claims)."""
    from synth_ai.backend.executors.modal_container import cluster_place, place_from_cluster
    from synth_ai.backend.executors.modal_plan import plan_for
    from synth_ai.backend.executors.torchrun import training_ranks
    from synth_ai.backend.executors.torchrun_command import NodePlace, rank_env, torchrun_argv

    worker = ["-m", "synth_ai.backend.jobs.worker"]
    four = plan_for("job_4", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(gpu_count=4)))
    assert (four.gpu, four.nodes, four.world_size) == ("H100:4", 1, 4)
    monkeypatch.setenv("SYNTH_AI_BACKEND_GPUS", "4")  # the container's four GPUs
    monkeypatch.delenv("SYNTH_AI_BACKEND_TORCHRUN_NPROC", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    row = {"id": "job_4", "kind": "sft", "model": "Qwen/Qwen3-32B", "payload": json.dumps(sft_payload(gpu_count=4))}
    assert training_ranks(row) == 4
    assert cluster_place() == NodePlace()  # outside a clustered function: one node
    assert torchrun_argv("job_4", 4, cluster_place())[1:] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", *worker, "job_4"]
    assert rank_env() == {"OMP_NUM_THREADS": "1"}

    two = plan_for("job_2", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(gpu_count=8, nodes=2)))
    assert two.world_size == 16
    ipv6 = ["fd00::a", "fd00::b"]
    claimers = []
    for rank in (0, 1):
        info = SimpleNamespace(rank=rank, container_ips=ipv6, container_ipv4_ips=["10.0.0.7", "10.0.0.9"])
        place = place_from_cluster(info)
        assert torchrun_argv("job_2", 8, place)[3:] == [
            "--nnodes=2", f"--node-rank={rank}", "--master-addr=10.0.0.7", "--master-port=29500",
            "--nproc-per-node=8", *worker, "job_2"]
        claimers += [r for r in place.ranks(8) if r == 0]
        assert list(place.ranks(8)) == list(range(8 * rank, 8 * rank + 8))
    assert claimers == [0]  # one claim for the job, on node 0
    only_v6 = place_from_cluster(SimpleNamespace(rank=1, container_ips=ipv6, container_ipv4_ips=[]))
    assert (only_v6.master_addr, only_v6.nodes, only_v6.node_rank) == ("fd00::a", 2, 1)


def test_the_remote_entry_runs_the_job_worker_through_local(tmp_path):
    pytest.importorskip("modal")
    from synth_ai.backend.executors.modal_plan import build_app, plan_for

    _, function = build_app(plan_for("job_missing", job_needs("sft", "Qwen/Qwen3-32B", sft_payload())))
    data_dir = tmp_path / "vol" / "job_missing"
    data_dir.mkdir(parents=True)
    # no such job in that data dir: the worker says so and fails (exit 1), as it would on Modal
    assert function.local("job_missing", str(data_dir)) == {"exit_code": 1, "status": None,
                                                            "fine_tuned_model": None, "error": None,
                                                            "node_rank": 0}


def test_a_slurm_script_is_rendered_from_compute(tmp_path):
    """`backend slurm`: the allocation from [compute], every node a backend with its SLURM node rank and node 0 as
    the rendezvous, the config trained against node 0; a bad count names its file, line and key."""
    import subprocess

    config = tmp_path / "big.toml"
    config.write_text('[compute]\ngpu_type = "H100"\ngpu_count = 8\nnodes = 2\n')
    script_path = tmp_path / "big.sbatch"
    result = run_cli("backend", "slurm", "--config", str(config), "--output", str(script_path), "--partition", "gpu",
                     "--time", "1-02:00:00", "--data-dir", str(tmp_path / "shared"), "--json")
    assert result.exit_code == 0, result
    doc = json.loads(result.stdout)
    script = script_path.read_text()
    assert doc["script"] == script and (doc["nodes"], doc["gpus_per_node"]) == (2, 8)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --time=1-02:00:00", "#SBATCH --partition=gpu", "#SBATCH --job-name=synth-ai-big",
                 f"export SYNTH_AI_HOME={tmp_path / 'shared'}", "export SYNTH_AI_BACKEND_EXECUTOR=torchrun",
                 'export SYNTH_AI_BACKEND_TORCHRUN_NNODES="$SLURM_JOB_NUM_NODES"',
                 "export SYNTH_AI_BACKEND_TORCHRUN_MASTER_PORT=29500",
                 """    bash -c 'SYNTH_AI_BACKEND_TORCHRUN_NODE_RANK="$SLURM_NODEID" exec synth-ai backend serve' &""",
                 f"synth-ai train --config {config} --poll-timeout 93600 --stream-format cli"):
        assert line in script.splitlines(), line
    assert 'head -n 1)"' in script and "H100" in script
    assert subprocess.run(["bash", "-n", str(script_path)]).returncode == 0  # it parses
    config.write_text("[compute]\ngpu_count = 8\nnodes = 0\n")
    bad = run_cli("backend", "slurm", "--config", str(config))
    assert bad.exit_code == ExitCode.INVALID_INPUT, bad
    assert "big.toml:3: [compute].nodes: expected a whole number of at least 1 (found 0)" in bad.stderr
