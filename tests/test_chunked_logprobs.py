"""Chunked LM-head log-probs (`backend/ml/token_logprobs.py`): the same values, entropies and gradients as the
materialised logits, with no [tokens, vocabulary] tensor kept for backward; and the RL and SFT trainers built on it
(tiny Qwen3 and tiny Qwen3-VL, chunk sizes shrunk so the tiny 1,024-token vocabulary spans several blocks)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from synth_ai.backend.store.model_store import ModelStore

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """7 tokens x 100 vocabulary entries: 1,024 is not a multiple of 100, so the last block is partial."""
    from synth_ai.backend.ml import token_logprobs

    monkeypatch.setattr(token_logprobs, "TOKEN_CHUNK", 7)
    monkeypatch.setattr(token_logprobs, "VOCAB_CHUNK", 100)


def _saved_shapes(run: Callable[[], Any]) -> list[tuple[int, ...]]:
    """The shapes of every tensor autograd keeps for backward while `run()` builds its graph."""
    shapes: list[tuple[int, ...]] = []

    def pack(tensor: Any) -> Any:
        shapes.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return shapes


def _holds_logits(shapes: list[tuple[int, ...]], tokens: int, vocab: int) -> bool:
    return any(len(s) >= 2 and s[-1] == vocab and torch.Size(s).numel() >= tokens * vocab for s in shapes)


def _grads(outputs: Any, inputs: list[Any], weights: tuple[Any, Any] | None) -> list[Any]:
    logp, entropy = outputs
    total = (logp * weights[0]).sum() + ((entropy * weights[1]).sum() if weights[1] is not None else 0)
    return list(torch.autograd.grad(total, inputs))


def _close(got: Any, want: Any, rel: float) -> bool:
    """Equal up to `rel` of the largest entry (gradients span orders of magnitude)."""
    scale = float(want.abs().max()) if want.numel() else 0.0
    return got.shape == want.shape and bool(torch.allclose(got.float(), want.float(), atol=rel * scale + 1e-7, rtol=0))


@pytest.mark.parametrize(("tokens", "vocab", "token_chunk", "vocab_chunk", "temperature", "bias", "entropy_grad"), [
    (37, 101, 8, 13, 1.0, False, True),  # several blocks, the vocabulary's last one partial
    (37, 101, 8, 13, "per-row", True, True),  # each row its own temperature, and a bias
    (5, 101, None, None, 0.7, False, False),  # fewer tokens than a block, one vocabulary block; entropy unused
    (12, 96, 12, 32, "per-row", False, False),  # blocks that divide both exactly
    (0, 50, 4, 16, 1.0, False, True),  # nothing to score (every token forced)
])
def test_values_entropy_and_gradients_match_the_materialised_path(tokens, vocab, token_chunk, vocab_chunk,
                                                                  temperature, bias, entropy_grad):
    from synth_ai.backend.ml.token_logprobs import chunked_scores, materialised_scores

    gen = torch.Generator().manual_seed(tokens + vocab)
    hidden = torch.randn(tokens, 24, generator=gen, requires_grad=True)
    weight = torch.randn(vocab, 24, generator=gen, requires_grad=True)
    b = torch.randn(vocab, generator=gen, requires_grad=True) if bias else None
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    temps = (torch.rand(tokens, generator=gen) + 0.4 if temperature == "per-row"
             else None if temperature == 1.0 else torch.full((tokens,), temperature))
    weights = (torch.randn(tokens, generator=gen), torch.randn(tokens, generator=gen) if entropy_grad else None)
    inputs = [hidden, weight] + ([b] if bias else [])
    got = chunked_scores(hidden, weight, targets, temps, bias=b, token_chunk=token_chunk, vocab_chunk=vocab_chunk)
    logits = hidden @ weight.t() + (b if bias else 0)
    want = materialised_scores(logits, targets, temps, entropy=True)
    assert got.logprobs.shape == got.entropy.shape == (tokens,) and got.logprobs.dtype == torch.float32
    assert torch.allclose(got.logprobs, want.logprobs, atol=1e-5) and torch.allclose(got.entropy, want.entropy,
                                                                                       atol=1e-5)
    for mine, theirs in zip(_grads(got, inputs, weights), _grads(want, inputs, weights)):
        assert mine.shape == theirs.shape and _close(mine, theirs, 1e-5)


def test_a_frozen_weight_gets_no_gradient_and_the_hidden_one_is_unchanged():
    from synth_ai.backend.ml.token_logprobs import chunked_scores, materialised_scores

    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(30, 16, generator=gen, requires_grad=True)
    weight = torch.randn(70, 16, generator=gen)  # frozen (LoRA: the base LM head)
    targets = torch.randint(0, 70, (30,), generator=gen)
    got = chunked_scores(hidden, weight, targets, token_chunk=9, vocab_chunk=16).logprobs.sum()
    (mine,) = torch.autograd.grad(got, [hidden])
    (theirs,) = torch.autograd.grad(materialised_scores(hidden @ weight.t(), targets).logprobs.sum(), [hidden])
    assert weight.grad is None and _close(mine, theirs, 1e-5)


def test_bf16_inputs_and_cpu_autocast_match_loosely():
    from synth_ai.backend.ml.token_logprobs import chunked_scores, lm_head_scores, materialised_scores

    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(40, 32, generator=gen).bfloat16().requires_grad_()
    weight = (torch.randn(300, 32, generator=gen) * 0.3).bfloat16().requires_grad_()
    targets = torch.randint(0, 300, (40,), generator=gen)
    temps = torch.rand(40, generator=gen) + 0.5
    got = chunked_scores(hidden, weight, targets, temps, token_chunk=16, vocab_chunk=64)
    want = materialised_scores(hidden @ weight.t(), targets, temps, entropy=True)
    assert got.logprobs.dtype == torch.float32  # fp32 sums over bf16 blocks
    assert torch.allclose(got.logprobs, want.logprobs, atol=2e-2) and torch.allclose(got.entropy, want.entropy,
                                                                                       atol=2e-2)
    for mine, theirs in zip(_grads(got, [hidden, weight], (temps, None)),
                            _grads(want, [hidden, weight], (temps, None))):
        error = (mine.float() - theirs.float()).norm() / theirs.float().norm()
        assert mine.dtype == torch.bfloat16 and float(error) < 2e-2

    # fp32 weights under autocast: the blocks multiply in bf16, as `lm_head(hidden)` would
    head = torch.nn.Linear(32, 300, bias=False)
    full = hidden.detach().float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = lm_head_scores(head, full, targets).logprobs
        materialised = lm_head_scores(head, full, targets, chunked=False).logprobs
    exact = materialised_scores(head(full), targets).logprobs
    assert torch.allclose(auto, materialised, atol=2e-2) and not torch.equal(auto, exact)


def test_no_tokens_by_vocabulary_tensor_is_saved_for_backward_on_the_chunked_path():
    from synth_ai.backend.ml.token_logprobs import lm_head_scores

    head = torch.nn.Linear(16, 500, bias=False)
    hidden = torch.randn(200, 16, requires_grad=True)
    targets = torch.randint(0, 500, (200,))
    chunked = _saved_shapes(lambda: lm_head_scores(head, hidden, targets))
    materialised = _saved_shapes(lambda: lm_head_scores(head, hidden, targets, chunked=False))
    assert _holds_logits(materialised, 200, 500) and not _holds_logits(chunked, 200, 500)
    assert max(torch.Size(s).numel() for s in chunked) == 500 * 16  # the weight itself is the largest


def test_a_peft_wrapped_or_hooked_lm_head_takes_the_materialised_path():
    """LoRA on the LM head (or a forward hook) changes its output: scoring the weight in blocks would drop it."""
    from peft import LoraConfig, get_peft_model

    from synth_ai.backend.ml.token_logprobs import chunked_scores, lm_head_scores, materialised_scores

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(16, 90, bias=False)

    wrapped = get_peft_model(Head(), LoraConfig(r=4, target_modules=["head"], init_lora_weights=False)).base_model.model
    lora_head = wrapped.head
    hidden, targets = torch.randn(10, 16), torch.randint(0, 90, (10,))
    got = lm_head_scores(lora_head, hidden, targets).logprobs
    assert torch.equal(got, materialised_scores(lora_head(hidden), targets).logprobs)
    assert not torch.allclose(got, chunked_scores(hidden, lora_head.base_layer.weight, targets).logprobs, atol=1e-3)
    hooked = torch.nn.Linear(16, 90, bias=False)
    hooked.register_forward_hook(lambda _module, _inputs, out: out * 2)
    got = lm_head_scores(hooked, hidden, targets).logprobs
    assert torch.equal(got, materialised_scores(hooked(hidden), targets).logprobs)
    assert not torch.allclose(got, chunked_scores(hidden, hooked.weight, targets).logprobs, atol=1e-3)


# Real models ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    return ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")


@pytest.fixture(scope="module")
def tiny_qwen3(store: ModelStore) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(store.resolve("synth-ai/tiny-qwen3")), dtype=torch.float32).eval()


def _rows(shared: bool) -> list[Any]:
    """Rows with prompts shared (or not), completions of different lengths, a forced token, per-row temperatures."""
    import random

    from synth_ai.backend.trainers.rl.types import Sample

    rng = random.Random(11)
    prompts = [[rng.randrange(5, 1000) for _ in range(n)] for n in (6, 11, 4)]
    samples = []
    for i in range(6):
        completion = [rng.randrange(5, 1000) for _ in range(rng.randrange(2, 9))]
        prompt = prompts[i % 3] if shared else prompts[i % 3] + [i]
        samples.append(Sample(prompt_ids=prompt, completion_ids=completion, old_logprobs=[0.0] * len(completion),
                              advantage=rng.uniform(-1, 1), temperature=(1.0, 0.7, 1.3)[i % 3],
                              forced=[j == 1 for j in range(len(completion))]))
    return samples


def _gspo_logprobs_and_grads(model: Any, batch: dict[str, Any], chunked: bool, **kwargs: Any) -> tuple[Any, dict]:
    """The log-probs and the gradient of a GSPO loss (old log-probs: the materialised path's, so ratio 1)."""
    from synth_ai.backend.ml.loading import core_parts
    from synth_ai.backend.trainers.rl.batches import completion_logprobs
    from synth_ai.backend.trainers.rl.gspo import gspo_loss

    decoder, lm_head = core_parts(model)
    model.zero_grad(set_to_none=True)
    logp = completion_logprobs(decoder, lm_head, batch, chunked=chunked, **kwargs)
    loss, _ = gspo_loss(logp, batch["old_logprobs"], batch["mask"], batch["advantages"], eps_low=3e-4, eps_high=4e-4)
    loss.backward()
    return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _check_paths_agree(model: Any, batch: dict[str, Any], **kwargs: Any) -> None:
    want, want_grads = _gspo_logprobs_and_grads(model, batch, False, **kwargs)
    batch["old_logprobs"] = want.clone()
    want, want_grads = _gspo_logprobs_and_grads(model, batch, False, **kwargs)
    got, got_grads = _gspo_logprobs_and_grads(model, batch, True, **kwargs)
    trained = batch["mask"] > 0
    assert not bool(trained.all()) and bool((got[~trained] == 0).all())
    assert torch.allclose(got, want, atol=1e-5, rtol=0)
    assert got_grads.keys() == want_grads.keys() and want_grads
    for name, grad in want_grads.items():
        assert _close(got_grads[name], grad, 1e-4), name


@pytest.mark.parametrize("shared", [False, True])
def test_completion_logprobs_and_gspo_gradients_match_on_tiny_qwen3(tiny_qwen3, small_chunks, shared: bool):
    from synth_ai.backend.trainers.rl.batches import collate

    batch = collate(_rows(shared), 0, "cpu")
    assert ("prefix_ids" in batch) is shared and len(set(batch["temperature"].tolist())) == 3
    _check_paths_agree(tiny_qwen3, batch)  # includes the tied embeddings' gradient (LM head and input embedding)


def test_lora_policy_matches_and_leaves_the_frozen_head_without_gradient(tiny_qwen3, small_chunks):
    import copy

    from peft import LoraConfig, get_peft_model

    from synth_ai.backend.trainers.rl.batches import collate

    lora = get_peft_model(copy.deepcopy(tiny_qwen3), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                 init_lora_weights=False))
    batch = collate(_rows(True), 0, "cpu")
    _check_paths_agree(lora, batch)
    assert all("lora_" in n for n, p in lora.named_parameters() if p.grad is not None)


def test_a_qwen3_vl_row_matches(store: ModelStore, small_chunks):
    from PIL import Image

    from synth_ai.backend.ml import loading
    from synth_ai.backend.trainers.rl.batches import collate
    from synth_ai.backend.trainers.rl.types import Sample

    path = store.resolve("synth-ai/tiny-qwen3-vl")
    model = loading.load_model(path, loading.Placement("cpu", torch.float32))
    tokenizer = loading.load_tokenizer(path)
    processor = loading.build_processor(tokenizer, loading.load_image_processor(path))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour is it?"}]}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[prompt], images=[Image.new("RGB", (64, 64), (200, 30, 30))], return_tensors="pt")
    sample = Sample(prompt_ids=inputs["input_ids"][0].tolist(), completion_ids=[300, 301, 302, 17, 5],
                    old_logprobs=[0.0] * 5, advantage=0.8, temperature=0.7, forced=[False, True],
                    vision_inputs={k: inputs[k] for k in ("pixel_values", "image_grid_thw")})
    batch = collate([sample], tokenizer.pad_token_id or 0, "cpu")
    image_pad = loading.special_token_id(tokenizer, "<|image_pad|>")
    assert "pixel_values" in batch and bool((batch["input_ids"] == image_pad).any())
    decoder, _ = loading.core_parts(model)
    _check_paths_agree(model, batch, image_pad=image_pad, vision_dtype=next(decoder.visual.parameters()).dtype)


def test_the_update_honours_the_key_same_gradients_without_logits_kept(tmp_path: Path, tiny_text_models, small_chunks,
                                                                       monkeypatch: pytest.MonkeyPatch):
    """`GSPOTrainer.train` (the whole update: old-log-prob recompute, policy pass, KL reference) with the key on and
    off: every pass goes through the chunked function when on, none when off, and the step's gradient is the same."""
    import dataclasses

    from backend_support import link_tiny
    from rl_support import rl_body

    from synth_ai.backend.ml import token_logprobs
    from synth_ai.backend.trainers.rl.rl_settings import resolve_rl_settings
    from synth_ai.backend.trainers.rl.step import GSPOTrainer

    link_tiny(tmp_path / "store", tiny_text_models)
    body = rl_body("http://127.0.0.1:9", max_grad_norm=0.0, kl_coef=0.05,
                   tables={"reference": {"placement": "colocated"}})
    settings = resolve_rl_settings({"job_id": "rljob_chunked", **body})
    assert settings.chunked_logprobs is True and settings.reference  # the default; a KL reference pass too
    calls: list[bool] = []
    counted = token_logprobs.chunked_scores
    monkeypatch.setattr(token_logprobs, "chunked_scores", lambda *a, **k: calls.append(True) or counted(*a, **k))
    off = resolve_rl_settings({"job_id": "rljob_chunked", **rl_body("http://127.0.0.1:9", chunked_logprobs=False)})
    assert off.chunked_logprobs is False
    trainer = GSPOTrainer(settings, ModelStore(tmp_path / "store"), tmp_path / "work")
    samples = _rows(True)
    trainer.recompute_old = True  # the old log-probs from this path too (what bf16 runs do)
    taken: list[dict[str, Any]] = []
    trainer.optimizer.step = lambda: taken.append({n: p.grad.clone() for n, p in trainer.trainable.items()
                                                   if p.grad is not None})  # record, keep the weights
    tokens = sum(len(s.completion_ids) - sum(s.forced) for s in samples)
    vocab = trainer.lm_head.weight.shape[0]
    shapes = {}
    passes = {}
    for chunked in (True, False):
        trainer.settings = dataclasses.replace(settings, chunked_logprobs=chunked)
        calls.clear()
        shapes[chunked] = _saved_shapes(lambda: trainer.train(samples))
        passes[chunked] = len(calls)
    assert passes == {True: 3, False: 0}  # one micro-batch: the old log-probs, the policy, the reference
    assert _holds_logits(shapes[False], tokens, vocab) and not _holds_logits(shapes[True], tokens, vocab)
    assert len(taken) == 2 and taken[0].keys() == taken[1].keys()
    for name, grad in taken[1].items():
        assert _close(taken[0][name], grad, 1e-4), name


def test_the_sft_loss_is_the_summed_cross_entropy_of_the_full_logits(tiny_qwen3, small_chunks):
    from synth_ai.backend.ml.loading import core_parts
    from synth_ai.backend.trainers.sft.token_loss import SelectedTokenLoss

    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(5, 1000, (3, 19), generator=gen)
    labels = ids.clone()
    labels[:, :6] = -100  # the prompt
    labels[2, 15:] = -100
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    loss_module = SelectedTokenLoss(tiny_qwen3, *core_parts(tiny_qwen3), bf16=False, image_pad=None, vision_dtype=None)
    results = []
    for compute in (lambda: loss_module(batch),
                    lambda: torch.nn.functional.cross_entropy(tiny_qwen3(input_ids=ids).logits[:, :-1].flatten(0, 1),
                                                              labels[:, 1:].flatten(), reduction="sum")):
        tiny_qwen3.zero_grad(set_to_none=True)
        value = compute()
        value.backward()
        results.append((float(value.detach()), {n: p.grad.clone() for n, p in tiny_qwen3.named_parameters()}))
    (got, got_grads), (want, want_grads) = results
    assert got == pytest.approx(want, rel=1e-5)
    for name, grad in want_grads.items():
        assert _close(got_grads[name], grad, 1e-4), name


@pytest.mark.parametrize("value", ["often", 3])
def test_a_bad_chunked_logprobs_value_is_refused_with_its_key(value: Any):
    from rl_support import rl_body

    from synth_ai.backend.trainers.rl.rl_settings import check_rl_job
    from synth_ai.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as caught:
        check_rl_job({"job_id": "rljob_bad", **rl_body("http://127.0.0.1:9", chunked_logprobs=value)})
    assert "[training].chunked_logprobs" in caught.value.message + str(caught.value.details)
