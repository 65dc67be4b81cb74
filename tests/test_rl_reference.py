"""The KL term's reference policy without a second fp32 model (`trainers/rl/reference.py`), on the tiny Qwen3: LoRA's
reference is the base with the adapter switched off (a separately loaded base gives the same log-probs, and no
tensor is allocated for it); a continued imported adapter's is its starting weights (adapter-sized, swapped in and
back without touching the update's gradient); a full fine-tune's is a frozen copy in the update's dtype, built
without a full-precision copy first, on the device `reference_placement` names."""

from __future__ import annotations

import gc
import random
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, link_tiny
from rl_support import rl_body
from test_rl_imported_adapter import outside_adapter

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

REFERENCE_ON = {"reference": {"placement": "colocated"}}


def _policy(store_dir: Path, model_id: str = TINY_TEXT, *, mode: str = "full", kl_coef: float = 0.05):
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl.policy import RLPolicy
    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings

    body = rl_body("http://127.0.0.1:9", tables={"model": {"trainer_mode": mode}, **REFERENCE_ON}, kl_coef=kl_coef)
    body["data"]["model"] = model_id
    return RLPolicy(resolve_rl_settings({"job_id": "rljob_ref", **body}), ModelStore(store_dir))


def _batch(pad_id: int):
    from synth_ai.backend.trainers.rl.batches import collate
    from synth_ai.backend.trainers.rl.types import Sample

    rng = random.Random(11)
    samples = [Sample(prompt_ids=[rng.randrange(900) for _ in range(rng.randint(3, 8))],
                      completion_ids=[rng.randrange(900) for _ in range(rng.randint(2, 6))], old_logprobs=[0.0] * 6,
                      advantage=rng.choice([-1.0, 1.0]), temperature=0.7) for _ in range(6)]
    return collate(samples, pad_id, "cpu")


def _logprobs(model, batch):
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.rl.batches import completion_logprobs

    decoder, lm_head = loading.core_parts(model)
    with torch.no_grad():
        return completion_logprobs(decoder, lm_head, batch)


def _live_tensor_bytes() -> int:
    """Bytes of every distinct storage held by a live tensor of this process."""
    gc.collect()
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        try:
            if issubclass(type(obj), torch.Tensor) and obj.device.type == "cpu" and not obj.is_meta:
                storage = obj.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, ReferenceError):
            continue
    return sum(seen.values())


@pytest.fixture
def store(tmp_path: Path, tiny_text_models: list[Path]) -> Path:
    link_tiny(tmp_path / "store", tiny_text_models)
    return tmp_path / "store"


def test_lora_reference_is_the_base_with_the_adapter_off_and_allocates_nothing(store: Path,
                                                                               tiny_text_models: list[Path]):
    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.rl.reference import build_reference

    policy = _policy(store, mode="lora")
    assert policy.reference.kind == "adapter_off" and policy.reference.model is None
    # no parameter, and no tensor at all, is made for the reference
    parameters = sum(p.numel() for p in policy.model.parameters())
    before = _live_tensor_bytes()
    again = build_reference(policy.model, mode="lora", continued_adapter=False, policy_device="cpu", use_bf16=False,
                            reference_device="auto")
    assert _live_tensor_bytes() == before and sum(p.numel() for p in policy.model.parameters()) == parameters
    assert again.kind == "adapter_off" and not again.start_weights

    with torch.no_grad():  # a trained adapter: the policy now differs from its base
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    batch = _batch(policy.pad_id)
    trained = _logprobs(policy.model, batch)
    reference = policy.reference.logprobs(policy, batch, None)
    base = loading.load_model(tiny_text_models[0], loading.Placement("cpu", torch.float32)).eval()
    expected = _logprobs(base, batch)
    assert torch.allclose(reference, expected, atol=1e-5), (reference - expected).abs().max()
    assert (trained - expected).abs().max() > 1e-2  # the adapter was really off for the reference
    assert torch.equal(_logprobs(policy.model, batch), trained)  # and is on again after it


def test_full_reference_on_the_cpu_is_an_fp32_copy_whose_kl_starts_at_zero(store: Path):
    from synth_ai.backend.trainers.rl.batches import completion_logprobs
    from synth_ai.backend.trainers.rl.gspo import gspo_loss

    policy = _policy(store)
    copy = policy.reference.model
    assert policy.reference.kind == "copy"
    assert {p.dtype for p in copy.parameters()} == {torch.float32} and not any(p.requires_grad for p in copy.parameters())
    assert not {p.data_ptr() for p in copy.parameters()} & {p.data_ptr() for p in policy.model.parameters()}
    assert copy.lm_head.weight is copy.model.embed_tokens.weight  # tied as in the policy

    batch = _batch(policy.pad_id)
    logp = completion_logprobs(policy.decoder, policy.lm_head, batch)
    start = policy.reference.logprobs(policy, batch, None)
    assert torch.equal(start, logp.detach())  # the starting policy, bit for bit as the former deep copy gave
    _, stats = gspo_loss(logp, logp.detach(), batch["mask"], batch["advantages"], eps_low=3e-4, eps_high=4e-4,
                         ref_logp=start, kl_coef=0.05)
    assert stats.ref_kl_sum == pytest.approx(0.0, abs=1e-7)
    with torch.no_grad():  # an update moves the policy, not its reference
        for param in policy.trainable.values():
            param.add_(torch.randn_like(param) * 0.05)
    assert torch.equal(policy.reference.logprobs(policy, batch, None), start)


def test_a_bf16_reference_copy_is_made_without_a_second_fp32_model(store: Path):
    from synth_ai.backend.trainers.rl.reference import build_reference, reference_placement

    # the rule: the update's dtype (bf16 where it runs under CUDA autocast), beside the policy unless asked for the CPU
    assert reference_placement("cuda", True, "auto") == ("cuda", torch.bfloat16)
    assert reference_placement("cuda", True, "cpu") == ("cpu", torch.bfloat16)
    assert reference_placement("cpu", False, "auto") == ("cpu", torch.float32)

    policy = _policy(store, kl_coef=0.0)
    assert policy.reference is None
    weights = {p.data_ptr(): p.numel() for p in policy.model.parameters()}
    before = _live_tensor_bytes()
    # a GPU job's reference kept on the CPU: bf16, as its update computes
    reference = build_reference(policy.model, mode="full", continued_adapter=False, policy_device="cpu",
                                use_bf16=True, reference_device="cpu")
    grown = _live_tensor_bytes() - before
    copy = reference.model
    buffers = sum(b.numel() * b.element_size() for b in copy.buffers())
    assert grown == 2 * sum(weights.values()) + buffers  # bf16 weights and the buffers, nothing more held
    assert {p.dtype for p in copy.parameters()} == {torch.bfloat16}

    batch = _batch(policy.pad_id)
    bf16 = reference.logprobs(policy, batch, None)
    fp32 = _logprobs(policy.model, batch)
    assert bf16.dtype == torch.float32 and bf16.device == fp32.device
    assert (bf16 - fp32).abs().max() < 0.25 and (bf16 - fp32).abs().mean() < 0.05  # bf16 rounding, no more


def test_a_continued_adapter_is_its_own_reference_swapped_in_and_back(store: Path, tmp_path: Path,
                                                                      tiny_text_models: list[Path]):
    from synth_ai.backend.store.model_import import import_model
    from synth_ai.backend.store.model_store import ModelStore
    from synth_ai.backend.trainers.rl.batches import completion_logprobs
    from synth_ai.backend.trainers.rl.reference import build_reference

    outside_adapter(tiny_text_models[0], tmp_path / "adapter")
    model_id = import_model(ModelStore(store), tmp_path / "adapter", name="pirate", base=TINY_TEXT)["id"]
    policy = _policy(store, model_id, mode="lora")
    assert policy.reference.kind == "adapter_start" and policy.reference.model is None
    assert set(policy.reference.start_weights) == set(policy.trainable)
    adapter = sum(p.numel() * p.element_size() for p in policy.trainable.values())
    before = _live_tensor_bytes()
    again = build_reference(policy.model, mode="lora", continued_adapter=True, policy_device="cpu", use_bf16=False,
                            reference_device="auto")
    assert _live_tensor_bytes() - before == adapter  # the adapter's starting tensors, not a model
    assert again.kind == "adapter_start"

    batch = _batch(policy.pad_id)
    start = _logprobs(policy.model, batch)
    with torch.no_grad():
        for name, param in policy.trainable.items():
            param.add_(torch.randn_like(param) * 0.2)

    def loss_and_grads(with_reference: bool):
        policy.model.zero_grad(set_to_none=True)
        logp = completion_logprobs(policy.decoder, policy.lm_head, batch)
        ref = policy.reference.logprobs(policy, batch, None) if with_reference else None
        (logp * batch["mask"]).sum().backward()
        return logp.detach(), ref, {n: p.grad.clone() for n, p in policy.trainable.items()}

    plain_logp, _, plain_grads = loss_and_grads(False)
    logp, ref, grads = loss_and_grads(True)
    assert torch.allclose(ref, start, atol=1e-6)  # the imported adapter as it was when the job started
    assert (logp - start).abs().max() > 1e-2
    assert torch.equal(logp, plain_logp) and all(torch.equal(grads[n], plain_grads[n]) for n in grads)
