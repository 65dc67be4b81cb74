"""Which executor runs a job, and the Modal app built from a job, checked offline (no token, no network)."""

from __future__ import annotations

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

    plan = plan_for("job_abc", job_needs("sft", "Qwen/Qwen3-32B", sft_payload(gpu_type="h100", nodes=2)))
    assert (plan.gpu, plan.nodes, plan.app_name, plan.data_dir) == ("H100:4", 2, "synth-ai-job-job_abc",
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

    app, function = build_app(plan_for("job_abc", job_needs("sft", "Qwen/Qwen3-32B", sft_payload())))
    assert app.name == "synth-ai-job-job_abc"
    spec = function._spec_  # modal's own record of what the function asks for (private, so checked loosely)
    assert spec.gpus == "H100:4" and list(spec.volumes) == ["/vol"]
    build_app(plan)  # clustered (nodes = 2) builds too


def test_the_remote_entry_runs_the_job_worker_through_local(tmp_path):
    pytest.importorskip("modal")
    from synth_ai.backend.executors.modal_plan import build_app, plan_for

    _, function = build_app(plan_for("job_missing", job_needs("sft", "Qwen/Qwen3-32B", sft_payload())))
    data_dir = tmp_path / "vol" / "job_missing"
    data_dir.mkdir(parents=True)
    # no such job in that data dir: the worker says so and fails (exit 1), as it would on Modal
    assert function.local("job_missing", str(data_dir)) == {"exit_code": 1, "status": None,
                                                            "fine_tuned_model": None, "error": None}
