"""The SFT trainer on the tiny models: full and LoRA, Qwen3-VL with images, masking, checkpoints and resume."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from synth_ai.backend.store.model_store import ModelStore
from synth_ai.errors import InvalidInputError

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

WORDS = ["apple", "river", "stone", "cloud", "tiger", "lamp", "rope", "moon"]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="session")
def ml_store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    """Both tiny models, built once per session (the folder is shared with the other ML test modules)."""
    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")
    store.resolve("synth-ai/tiny-qwen3")
    store.resolve("synth-ai/tiny-qwen3-vl")
    return store


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.metrics: list[tuple[str, int, float, str]] = []

    def event(self, type: str, message: str, data: dict[str, Any] | None = None, level: str = "info") -> None:  # noqa: A002
        assert not type.startswith("sft.job."), "terminal job events belong to the server"
        self.events.append({"type": type, "message": message, "data": data or {}, "level": level})

    def metric(self, name: str, step: int, value: float, phase: str = "train") -> None:
        self.metrics.append((name, step, value, phase))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def series(self, name: str) -> dict[int, float]:
        return {step: value for n, step, value, _ in self.metrics if n == name}


def pirate_records(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        word, n = rng.choice(WORDS), rng.randrange(10)
        out.append({"messages": [{"role": "user", "content": f"Translate to pirate: {word} {n}"},
                                 {"role": "assistant", "content": f"Arr, {word} {n} matey!"}]})
    return out


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run(store: ModelStore, workdir: Path, train: Path, *, model: str = "synth-ai/tiny-qwen3",
        validation: Path | None = None, stop_after: int | None = None, recorder: Recorder | None = None,
        **hyper: Any) -> tuple[dict[str, Any], Recorder]:
    from synth_ai.backend.trainers.sft.trainer import run_sft

    recorder = recorder or Recorder()
    spec: dict[str, Any] = {"model": model, "job_id": workdir.name, "training_file_path": str(train),
                            "hyperparameters": hyper, "metadata": {"effective_config": {}}}
    if validation is not None:
        spec["validation_file_path"] = str(validation)
    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return stop_after is not None and calls["n"] > stop_after

    result = run_sft(spec, workdir=workdir, model_store=store, reporter=recorder, should_stop=should_stop)
    return result, recorder


def test_full_finetune_lowers_the_loss_and_registers_the_model(ml_store: ModelStore, tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", pirate_records(48))
    val = write_jsonl(tmp_path / "val.jsonl", pirate_records(8, seed=1))
    result, rec = run(ml_store, tmp_path / "job_full", train, validation=val, n_epochs=4, per_device_batch=8,
                      learning_rate=1e-3, warmup_ratio=0.1, train_kind="full", eval_steps=10)
    assert result["fine_tuned_model"] == "ft:synth-ai/tiny-qwen3:job_full"
    assert result["steps"] == 24
    assert result["train_loss_final"] < result["train_loss_first"] - 2.0
    final = Path(result["checkpoint_dir"])
    assert (final / "model.safetensors").exists() and (final / "tokenizer.json").exists()
    card = json.loads((final / "synth_model.json").read_text())
    assert card["training_kind"] == "full" and card["base_model"] == "synth-ai/tiny-qwen3"
    assert ml_store.resolve(result["fine_tuned_model"]) == final.resolve()

    started = rec.of("sft.training.started")[0]["data"]
    assert started["mode"] == "full" and started["total_steps"] == 24 and started["dtype"] == "fp32"
    assert started["trainable_params"] == started["total_params"]
    for name in ("train.loss", "learning_rate", "tokens_per_second"):
        series = rec.series(name)
        assert sorted(series) == list(range(24)), name  # every step, step 0 included
    assert all(v > 0 for v in rec.series("tokens_per_second").values())
    lr = rec.series("learning_rate")
    assert lr[0] < lr[2] and lr[23] < lr[5]  # warmup, then decay
    assert max(lr.values()) == pytest.approx(1e-3)
    val_loss = rec.series("val.loss")
    assert sorted(val_loss) == [0, 10, 20, 24] and val_loss[24] < val_loss[0]
    summaries = rec.of("sft.validation.summary")
    assert len(summaries) == 4 and summaries[-1]["data"]["best_val_loss"] == pytest.approx(min(val_loss.values()))
    progress = rec.of("sft.progress")
    assert progress and progress[-1]["data"]["step"] == 24 and progress[-1]["data"]["total_steps"] == 24
    assert {"loss", "learning_rate", "tokens_per_second"} <= set(progress[-1]["data"])


def test_lora_lowers_the_loss_with_a_small_adapter(ml_store: ModelStore, tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", pirate_records(48))
    result, rec = run(ml_store, tmp_path / "job_lora", train, n_epochs=4, per_device_batch=8, learning_rate=3e-3,
                      train_kind="peft", lora_rank=8, lora_alpha=16, lora_dropout=0.0,
                      lora_target_modules=["all-linear"], parallelism={"activation_checkpointing": True})
    assert result["train_loss_final"] < result["train_loss_first"] - 2.0
    started = rec.of("sft.training.started")[0]["data"]
    assert started["mode"] == "lora" and started["lora"]["r"] == 8
    assert 0 < started["trainable_params"] < started["total_params"] * 0.25
    final = Path(result["checkpoint_dir"])
    adapter = json.loads((final / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and set(adapter["target_modules"]) >= {"q_proj", "v_proj", "down_proj"}
    assert not (final / "model.safetensors").exists()


def test_training_mode_and_lora_settings_come_from_the_effective_config() -> None:
    from synth_ai.backend.trainers.sft.trainer import resolve_settings

    settings = resolve_settings({
        "model": "synth-ai/tiny-qwen3", "hyperparameters": {"n_epochs": 1, "global_batch": 16, "per_device_batch": 4},
        "metadata": {"effective_config": {"training": {"mode": "lora"},
                                          "lora": {"r": 4, "alpha": 8, "dropout": 0.1,
                                                   "target_modules": ["q_proj", "v_proj"]}}}})
    assert settings.mode == "lora" and settings.lora_r == 4 and settings.lora_alpha == 8
    assert settings.lora_targets == ["q_proj", "v_proj"] and settings.gradient_accumulation_steps == 4
    full = resolve_settings({"model": "m", "hyperparameters": {"total_steps": 7, "train_kind": "fft"}})
    assert full.mode == "full" and full.total_steps == 7 and full.n_epochs is None
    for bad in ({"learning_rate": -1}, {"per_device_batch": 0}, {"warmup_ratio": 2}, {"train_kind": "rlhf"},
                {"steps": "x"}, {"lora_target_modules": 3}):
        with pytest.raises(InvalidInputError):
            resolve_settings({"model": "m", "hyperparameters": {"n_epochs": 1, **bad}})


def test_labels_cover_assistant_tokens_only(ml_store: ModelStore) -> None:
    from synth_ai.backend.ml.loading import load_tokenizer
    from synth_ai.backend.ml.templates import QWEN3_TRAINING_TEMPLATE
    from synth_ai.backend.trainers.sft.data import IGNORE, Encoder

    tokenizer = load_tokenizer(ml_store.resolve("synth-ai/tiny-qwen3"))
    encoder = Encoder(tokenizer, QWEN3_TRAINING_TEMPLATE, sequence_length=512)
    record = {"messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is 2 plus 2?"},
        {"role": "assistant", "content": "The answer is 4."},
        {"role": "user", "content": [{"type": "text", "text": "And 3 plus 3?"}]},
        {"role": "assistant", "content": "The answer is 6.", "reasoning_content": "3 and 3 make 6."},
    ]}
    example = encoder.encode(record, 1, "mem")
    assert example is not None
    labelled = [t for t in example.labels if t != IGNORE]
    spans, current = [], []
    for tok, lab in zip(example.input_ids, example.labels):
        if lab != IGNORE:
            assert lab == tok
            current.append(tok)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    assert spans == ["<think>\n\n</think>\n\nThe answer is 4.<|im_end|>",
                     "<think>\n3 and 3 make 6.\n</think>\n\nThe answer is 6.<|im_end|>"]
    masked_text = tokenizer.decode([t for t, lab in zip(example.input_ids, example.labels) if lab == IGNORE])
    assert "What is 2 plus 2?" in masked_text and "Answer briefly." in masked_text
    assert "The answer is" not in masked_text
    assert len(labelled) < len(example.input_ids)


def test_padded_rows_train_as_they_would_alone(ml_store: ModelStore) -> None:
    """Rows of different lengths in one micro-batch (right-padded, no attention mask: causal attention already
    keeps a real token from the padding after it) give each row the loss and gradient it has alone."""
    from transformers import AutoModelForCausalLM

    from synth_ai.backend.ml.loading import core_parts, load_tokenizer
    from synth_ai.backend.ml.templates import QWEN3_TRAINING_TEMPLATE
    from synth_ai.backend.trainers.sft.data import Encoder, collate
    from synth_ai.backend.trainers.sft.token_loss import SelectedTokenLoss

    folder = ml_store.resolve("synth-ai/tiny-qwen3")
    tokenizer = load_tokenizer(folder)
    encoder = Encoder(tokenizer, QWEN3_TRAINING_TEMPLATE, sequence_length=512)
    examples = [encoder.encode(r, i, "mem") for i, r in enumerate(pirate_records(3, seed=5))]
    examples.append(encoder.encode({"messages": [{"role": "user", "content": "Tell me a long story " * 6},
                                                 {"role": "assistant", "content": "Arr, once a tiger " * 8}]}, 4, "m"))
    assert len({e.length for e in examples}) > 1
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    loss = SelectedTokenLoss(model, *core_parts(model), bf16=False, image_pad=None, vision_dtype=None)

    def loss_and_grad(rows: list[Any]) -> tuple[float, Any]:
        model.zero_grad(set_to_none=True)
        value = loss(collate(rows, tokenizer.pad_token_id))
        value.backward()
        return float(value), model.model.layers[0].self_attn.q_proj.weight.grad.clone()

    batch = collate(examples, tokenizer.pad_token_id)
    assert batch["attention_mask"] is None and batch["input_ids"].shape[1] == max(e.length for e in examples)
    together, grad = loss_and_grad(examples)
    alone = [loss_and_grad([e]) for e in examples]
    assert together == pytest.approx(sum(v for v, _ in alone), rel=1e-5)
    # tolerance on the gradient's scale: float32 sums in another order differ by ~1e-7 of it, near-zero
    # entries included (an absolute 1e-6 failed on them once); padding leaking in would differ by far more
    expected = sum(g for _, g in alone)
    assert (grad - expected).abs().max().item() <= 1e-5 * expected.abs().max().item()


def test_tool_calls_are_rendered_and_learned(ml_store: ModelStore) -> None:
    from synth_ai.backend.ml.loading import load_tokenizer
    from synth_ai.backend.ml.templates import QWEN3_TRAINING_TEMPLATE
    from synth_ai.backend.trainers.sft.data import IGNORE, Encoder, render

    messages = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "snowy"}'},
        {"role": "assistant", "content": "It is snowy in Oslo."},
    ]
    text, spans = render(messages, [WEATHER_TOOL], QWEN3_TRAINING_TEMPLATE)
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert json.dumps(WEATHER_TOOL) in text
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>'
    assert call in text
    assert "<|im_start|>user\n<tool_response>\n{\"sky\": \"snowy\"}\n</tool_response><|im_end|>" in text
    assert any(call in text[s:e] for s, e in spans)  # the call is inside an assistant span
    assert not any("tool_response" in text[s:e] for s, e in spans)

    tokenizer = load_tokenizer(ml_store.resolve("synth-ai/tiny-qwen3"))
    example = Encoder(tokenizer, QWEN3_TRAINING_TEMPLATE).encode({"messages": messages, "tools": [WEATHER_TOOL]},
                                                                 1, "mem")
    learned = tokenizer.decode([t for t in example.labels if t != IGNORE])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in learned
    assert "snowy" in learned and "# Tools" not in learned


def test_sequence_length_truncates_with_an_event(ml_store: ModelStore, tmp_path: Path) -> None:
    records = pirate_records(6)
    records.append({"messages": [{"role": "user", "content": "Tell me a story. " * 60},
                                 {"role": "assistant", "content": "No."}]})  # nothing left to learn after the cut
    records.append({"messages": [{"role": "user", "content": "Hi"},
                                 {"role": "assistant", "content": "Arr, " + "moon " * 80 + "matey!"}]})
    train = write_jsonl(tmp_path / "train.jsonl", records)
    result, rec = run(ml_store, tmp_path / "job_trunc", train, total_steps=2, per_device_batch=4,
                      learning_rate=1e-3, sequence_length=48)
    truncated = rec.of("sft.data.truncated")
    assert len(truncated) == 1 and truncated[0]["data"]["truncated"] == 2
    assert truncated[0]["data"]["lines"] == [7, 8]
    assert rec.of("sft.data.skipped")[0]["data"]["skipped"] == 1
    assert rec.of("sft.training.started")[0]["data"]["examples"] == 7
    assert result["steps"] == 2


def test_stop_then_resume_continues_from_the_checkpoint(ml_store: ModelStore, tmp_path: Path) -> None:
    from synth_ai.backend.trainers.sft.trainer import TrainingCancelled

    train = write_jsonl(tmp_path / "train.jsonl", pirate_records(32))
    hyper = dict(n_epochs=2, per_device_batch=4, learning_rate=1e-3, train_kind="full", lora_dropout=0.0)
    straight, _ = run(ml_store, tmp_path / "job_straight", train, **hyper)

    workdir = tmp_path / "job_resume"
    first = Recorder()
    with pytest.raises(TrainingCancelled) as info:
        run(ml_store, workdir, train, stop_after=5, recorder=first, **hyper)
    assert info.value.step == 5
    assert (workdir / "checkpoints" / "step-000005" / "state.json").exists()
    assert first.of("sft.training.stopped")[0]["data"]["step"] == 5
    assert sorted(first.series("train.loss")) == [0, 1, 2, 3, 4]

    second = Recorder()
    resumed, _ = run(ml_store, workdir, train, recorder=second, **hyper)
    assert second.of("sft.training.resumed")[0]["data"]["step"] == 5
    assert sorted(second.series("train.loss")) == list(range(5, 16))
    assert resumed["steps"] == straight["steps"] == 16
    assert resumed["train_loss_first"] == pytest.approx(straight["train_loss_first"])
    # same data order, optimizer state and RNG: the resumed run ends where the uninterrupted one did
    assert resumed["train_loss_final"] == pytest.approx(straight["train_loss_final"], rel=1e-4)

    changed = dict(hyper, per_device_batch=2)
    with pytest.raises(InvalidInputError, match="other settings"):
        run(ml_store, workdir, train, **changed)


def _pictures(count: int, seed: int, extra_every: int = 0) -> list[dict[str, Any]]:
    from synth_ai.backend.ml.corpus import picture
    from synth_ai.backend.ml.images import png_data_url

    rng = random.Random(seed)
    out = []
    for i in range(count):
        image, caption = picture(rng)
        color = caption.split()[1]
        content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": png_data_url(image)}}]
        if extra_every and i % extra_every == 0:
            other, _ = picture(rng)
            content.append({"type": "image_url", "image_url": {"url": png_data_url(other)}})
        content.append({"type": "text", "text": "Which color is the shape?"})
        out.append({"messages": [{"role": "user", "content": content},
                                 {"role": "assistant", "content": f"The shape is {color}, arr!"}]})
    return out


def test_lora_on_qwen3_vl_with_images(ml_store: ModelStore, tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", _pictures(16, seed=3, extra_every=4))
    result, rec = run(ml_store, tmp_path / "job_vl", train, model="synth-ai/tiny-qwen3-vl", n_epochs=3,
                      per_device_batch=2, learning_rate=3e-3, train_kind="lora", lora_rank=8)
    assert result["train_loss_final"] < result["train_loss_first"] - 2.0
    dropped = rec.of("sft.data.images_dropped")
    assert len(dropped) == 1 and dropped[0]["data"]["images_dropped"] == 4
    assert dropped[0]["data"]["max_images_per_message"] == 1
    adjusted = rec.of("sft.config.adjusted")[0]["data"]
    assert adjusted == {"per_device_batch": 1, "gradient_accumulation_steps": 2}
    started = rec.of("sft.training.started")[0]["data"]
    assert started["vision"] is True and started["mode"] == "lora"
    final = Path(result["checkpoint_dir"])
    adapter = json.loads((final / "adapter_config.json").read_text())
    # the projector (merger) is trained in full, not through LoRA
    assert any(name.endswith("visual.merger") for name in adapter["modules_to_save"])
    from safetensors import safe_open

    with safe_open(str(final / "adapter_model.safetensors"), "pt") as handle:
        keys = list(handle.keys())
    assert any("visual.merger" in k and "lora_" not in k for k in keys)
    assert any("lora_A" in k and "language_model" in k for k in keys)
    assert (final / "preprocessor_config.json").exists()


def test_a_real_model_id_from_a_local_folder_trains_and_serves(ml_store: ModelStore, tmp_path: Path) -> None:
    """The code path for real checkpoints: a registry id resolved to a local HF folder (here a copy of the tiny
    model without its tiny marker), trained with LoRA, then served under `ft:<id>:<job>`."""
    import shutil

    from synth_ai.backend.inference.engine import InferenceEngine

    store = ModelStore(tmp_path / "data")
    local = tmp_path / "data" / "models" / "local" / "Qwen" / "Qwen3-0.6B"
    shutil.copytree(ml_store.resolve("synth-ai/tiny-qwen3"), local)
    (local / "synth_model.json").unlink()
    train = write_jsonl(tmp_path / "train.jsonl", pirate_records(16))
    result, rec = run(store, tmp_path / "job_real", train, model="Qwen/Qwen3-0.6B", total_steps=4,
                      per_device_batch=4, learning_rate=3e-3, train_kind="lora", lora_rank=4)
    assert result["fine_tuned_model"] == "ft:Qwen/Qwen3-0.6B:job_real"
    assert rec.of("sft.training.started")[0]["data"]["threads"] >= 1
    reply = InferenceEngine(store).chat_completion({
        "model": result["fine_tuned_model"], "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0, "max_tokens": 4})
    assert reply["model"] == "ft:Qwen/Qwen3-0.6B:job_real" and reply["usage"]["completion_tokens"] >= 1
