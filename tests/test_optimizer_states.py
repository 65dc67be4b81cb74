"""`[training].optimizer_states` (`trainers/optimizer.py`, the AdamW builder SFT and RL share): the default is torch's
fused AdamW; "8bit" trains the tiny Qwen3 with bitsandbytes' 8-bit states on this CPU; a choice that cannot run
here is refused with the reason and the fix — by the builder in a worker, and at create time by the backend (a
400, nothing created)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from backend_support import BackendProcess
from rl_support import quiz_app, rl_body
from taskapp_support import ENV_KEY, running_app
from test_rl_minibatches import _samples, _trainer

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("optim_extra")



def test_the_default_is_torchs_fused_adamw(tmp_path: Path, tiny_text_models: list[Path]):
    trainer = _trainer(tmp_path, tiny_text_models)
    assert type(trainer.optimizer) is torch.optim.AdamW and trainer.optimizer.defaults["fused"] is True


def test_8bit_states_train_the_tiny_model_on_the_cpu(tmp_path: Path, tiny_text_models: list[Path]):
    import bitsandbytes

    trainer = _trainer(tmp_path, tiny_text_models, optimizer_states="8bit", learning_rate=1e-2)
    assert isinstance(trainer.optimizer, bitsandbytes.optim.AdamW8bit)
    before = {name: p.detach().clone() for name, p in trainer.trainable.items()}
    samples = _samples(trainer, 6)
    first = trainer.train(samples)
    moved = [name for name, p in trainer.trainable.items() if not torch.equal(p, before[name])]
    assert len(moved) == len(before)  # every tensor stepped
    states = [s for s in trainer.optimizer.state.values() if "state1" in s]
    assert states and all(s["state1"].dtype == torch.uint8 and s["state2"].dtype == torch.uint8 for s in states)
    second = trainer.train(samples)
    assert second.loss != pytest.approx(first.loss, abs=1e-6)


def test_what_cannot_run_here_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch):
    from synth_ai.backend.trainers.optimizer import build_adamw, optimizer_refusal
    from synth_ai.errors import UnavailableError

    weight = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(UnavailableError) as offload:
        build_adamw([weight], lr=1e-3, weight_decay=0.0, device="cpu", states="cpu_offload")
    assert '"cpu_offload"' in offload.value.message and "CPU" in offload.value.message
    assert '"8bit"' in offload.value.hint
    assert optimizer_refusal("8bit", cuda=False) is None  # installed here, and it runs on the CPU
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # as where the package is not installed
    message, fix = optimizer_refusal("8bit", cuda=True)
    assert "bitsandbytes package is not installed" in message
    assert "pip install" in fix and "[optim]" in fix and '"fp32"' in fix
    assert optimizer_refusal("fp32", cuda=False) is None


@pytest.fixture
def backend(shared_backend: BackendProcess) -> BackendProcess:
    """The worker's shared backend: these tests only post RL jobs it refuses (and compare its RL job list before
    and after their own request)."""
    return shared_backend


@pytest.mark.parametrize(("states", "status", "code", "words"), [
    ("cpu_offload", 400, "optimizer_unavailable", ["cpu_offload", "trains on the CPU", '"8bit"']),
    ("16bit", 400, None, ["optimizer_states", "16bit"]),
])
def test_an_optimizer_state_mode_this_backend_cannot_run_is_refused_at_create_time(
        backend: BackendProcess, monkeypatch: pytest.MonkeyPatch, states: str, status: int, code: str | None,
        words: list[str]):
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    with running_app(quiz_app()) as app, backend.client() as api:
        before = api.get("/rl/jobs").json()
        answer = api.post("/rl/jobs", json=rl_body(app, optimizer_states=states))
        assert answer.status_code == status, answer.text
        error = answer.json()["error"]
        assert code is None or error["code"] == code
        for word in words:
            assert word in error["message"] + (error.get("hint") or "") + str(error.get("details")), error
        assert api.get("/rl/jobs").json() == before  # nothing was created
