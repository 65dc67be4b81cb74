"""Activation checkpointing in the RL update (`trainers/activation_checkpointing.py` `in_eval_mode`,
`[training].activation_checkpointing`): the policy stays in eval mode, the log-probs and gradients equal the
un-checkpointed update's (full and LoRA, plain and shared-prompt layouts), passes under `no_grad` skip the
checkpoint, and at the `mid` size the update keeps several times fewer bytes for backward."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest

from synth_ai.backend.store.model_store import ModelStore

torch = pytest.importorskip("torch")
BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoModelForCausalLM

    folder = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data").resolve("synth-ai/tiny-qwen3")
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def _with_lora(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                           target_modules="all-linear"))
    torch.manual_seed(1)
    for name, p in lora.named_parameters():
        if "lora_B" in name:  # B starts at zero: move it, so that A's gradients are not all zero
            torch.nn.init.normal_(p, std=0.05)
    return lora.eval()


def samples(groups: int, per_group: int, prompt: tuple[int, ...] = (9, 14, 3), completion: int = 8) -> list[Any]:
    """`groups` prompts (lengths from `prompt`), `per_group` completions of up to `completion` tokens each, one
    forced token per completion (context, no loss)."""
    from synth_ai.backend.trainers.rl.types import Sample

    rng = random.Random(3)
    prompts = [[rng.randrange(5, 1000) for _ in range(prompt[i % len(prompt)])] for i in range(groups)]
    out = []
    for i in range(groups * per_group):
        ids = [rng.randrange(5, 1000) for _ in range(rng.randrange(max(1, completion // 4), completion + 1))]
        out.append(Sample(prompt_ids=prompts[i % groups], completion_ids=ids, old_logprobs=[-1.0] * len(ids),
                          advantage=rng.uniform(-1, 1), forced=[j == 1 for j in range(len(ids))]))
    return out


def _saved_bytes_counter(model: Any) -> Any:
    """`bench/rl_memory.py`'s counter: each saved storage once, parameters left out, a checkpoint's kept inputs in."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rl_memory", BENCH / "rl_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SavedBytes(model)


def update_pass(model: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, Any], int]:
    """(log-probs, gradients, bytes held for backward) of one forward/backward as the update runs it."""
    from synth_ai.backend.ml.loading import core_parts
    from synth_ai.backend.trainers.rl.batches import completion_logprobs

    decoder, lm_head = core_parts(model)
    model.zero_grad(set_to_none=True)
    with _saved_bytes_counter(model).active() as saved:
        logp = completion_logprobs(decoder, lm_head, batch)
    (logp * batch["advantages"][:, None]).sum().backward()
    return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, saved.bytes


def checkpointed(model: Any) -> Any:
    from synth_ai.backend.ml.loading import core_parts
    from synth_ai.backend.trainers.activation_checkpointing import in_eval_mode

    copied = copy.deepcopy(model)
    assert in_eval_mode(core_parts(copied)[0]) == copied.config.get_text_config().num_hidden_layers
    return copied


@pytest.mark.parametrize("mode", ["full", "lora"])
@pytest.mark.parametrize("share_prompts", [True, False], ids=["shared-prompts", "one-row-per-sample"])
def test_checkpointing_gives_the_same_logprobs_and_gradients(tiny: Any, mode: str, share_prompts: bool) -> None:
    from synth_ai.backend.trainers.rl.batches import collate

    model = _with_lora(tiny) if mode == "lora" else tiny
    batch = collate(samples(groups=3, per_group=3), 0, "cpu", share_prompts=share_prompts)
    assert ("prefix_ids" in batch) == share_prompts
    want, want_grads, plain = update_pass(model, batch)
    ckpt = checkpointed(model)
    got, got_grads, saved = update_pass(ckpt, batch)
    assert not ckpt.training  # still eval mode: no dropout anywhere
    assert torch.equal(got, want)
    assert got_grads.keys() == want_grads.keys() and len(got_grads) > (20 if mode == "lora" else 10)
    for name, grad in want_grads.items():
        assert float(grad.abs().max()) > 0 or "lora_A" not in name, name
        assert torch.allclose(got_grads[name], grad, atol=1e-6 * float(grad.abs().max()) + 1e-9), name
    assert saved * 2 < plain  # the layers kept only their inputs


def test_transformers_own_switch_does_nothing_in_eval_mode(tiny: Any) -> None:
    """Why the RL update does not call `gradient_checkpointing_enable`: it acts only in train mode."""
    from synth_ai.backend.trainers.rl.batches import collate

    batch = collate(samples(groups=2, per_group=2), 0, "cpu", share_prompts=False)
    _, _, plain = update_pass(tiny, batch)
    switched = copy.deepcopy(tiny)
    switched.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    _, _, saved = update_pass(switched.eval(), batch)
    assert saved == plain


def test_passes_without_gradient_skip_the_checkpoint(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old / behaviour recompute and the reference run under no_grad: nothing to recompute, nothing paid."""
    import torch.utils.checkpoint as torch_checkpoint

    from synth_ai.backend.ml.loading import core_parts
    from synth_ai.backend.trainers.rl.batches import collate, completion_logprobs

    real = torch_checkpoint.checkpoint
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_checkpoint, "checkpoint", counted)
    model = checkpointed(tiny)
    decoder, lm_head = core_parts(model)
    batch = collate(samples(groups=2, per_group=2), 0, "cpu")
    with torch.no_grad():
        without = completion_logprobs(decoder, lm_head, batch)
    assert calls == []
    with_grad = completion_logprobs(decoder, lm_head, batch)
    assert len(calls) == 2 * model.config.num_hidden_layers  # the prompt's pass and the completions'
    assert torch.equal(with_grad.detach(), without)


def test_at_the_mid_size_checkpointing_saves_several_times_fewer_bytes() -> None:
    """The `mid` model's shapes (random weights, `ml/mid.py`), 4 samples of a 16-token prompt + 192 tokens."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from synth_ai.backend.ml.mid import DEFAULT_MID_RECIPE as mid
    from synth_ai.backend.trainers.rl.batches import collate

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=mid.vocab_size, hidden_size=mid.hidden_size, intermediate_size=mid.intermediate_size,
        num_hidden_layers=mid.layers, num_attention_heads=mid.heads, num_key_value_heads=mid.kv_heads,
        head_dim=mid.head_dim, tie_word_embeddings=True)).eval()
    batch = collate(samples(groups=1, per_group=4, prompt=(16,), completion=192), 0, "cpu")
    _, want_grads, plain = update_pass(model, batch)
    ckpt = checkpointed(model)
    _, got_grads, saved = update_pass(ckpt, batch)
    assert plain >= 4 * saved, (plain, saved)  # the LM head's full log-softmax included (chunked: item 1)
    for name, grad in want_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-5 * float(grad.abs().max())), name


def test_qwen3_vl_rows_with_an_image_give_the_same_gradients(tmp_path_factory: pytest.TempPathFactory,
                                                              tiny_models: list[Path]) -> None:
    """The tiny Qwen3-VL: its text layers are checkpointed (the vision tower is not), one row with its picture."""
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.rl.batches import collate, completion_logprobs
    from synth_ai.backend.trainers.rl.types import Sample

    folder = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data").resolve("synth-ai/tiny-qwen3-vl")
    model = AutoModelForImageTextToText.from_pretrained(str(folder), dtype=torch.float32).eval()
    tokenizer = loading.load_tokenizer(str(folder))
    processor = loading.build_processor(tokenizer, loading.load_image_processor(str(folder)))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What color is it?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    encoded = processor(text=[text], images=[Image.new("RGB", (64, 64), (200, 30, 30))], return_tensors="pt")
    sample = Sample(prompt_ids=encoded["input_ids"][0].tolist(), completion_ids=[40, 41, 42, 43],
                    old_logprobs=[0.0] * 4, advantage=1.0,
                    vision_inputs={k: encoded[k] for k in ("pixel_values", "image_grid_thw")})
    batch = collate([sample], 0, "cpu")
    image_pad = loading.special_token_id(tokenizer, "<|image_pad|>")

    def logprobs_and_grads(policy: Any) -> tuple[Any, dict[str, Any]]:
        decoder, lm_head = loading.core_parts(policy)
        logp = completion_logprobs(decoder, lm_head, batch, image_pad=image_pad, vision_dtype=torch.float32)
        logp.sum().backward()
        return logp.detach(), {n: p.grad for n, p in policy.named_parameters() if p.grad is not None}

    want, want_grads = logprobs_and_grads(model)
    got, got_grads = logprobs_and_grads(checkpointed(model))
    assert torch.equal(got, want) and got_grads.keys() == want_grads.keys()
    assert any(name.startswith("model.visual") for name in got_grads)  # the picture's tower was trained through
    for name, grad in want_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-6 * float(grad.abs().max()) + 1e-9), name
