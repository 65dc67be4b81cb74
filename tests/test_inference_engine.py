"""The inference engine: OpenAI-shaped chat completions on base and fine-tuned tiny models."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from synth_ai.backend.inference.parsing import apply_stop, parse_output, split_reasoning
from synth_ai.backend.store.model_store import ModelStore
from synth_ai.errors import InvalidInputError, NotFoundError

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

TEXT = "synth-ai/tiny-qwen3"
VL = "synth-ai/tiny-qwen3-vl"
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Delhi", "Rome", "Quito"]
ANIMALS = ["cat", "dog", "fox", "owl", "bear", "fish", "frog", "wolf"]
LOOKUP_TOOL = {"type": "function", "function": {
    "name": "lookup_city", "description": "Look a city up in the atlas.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="session")
def ml_store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    """Both tiny models, built once per session (the folder is shared with the other ML test modules)."""
    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")
    store.resolve(TEXT)
    store.resolve(VL)
    return store


class _Quiet:
    def event(self, type: str, message: str, data: Any = None, level: str = "info") -> None:  # noqa: A002
        pass

    def metric(self, name: str, step: int, value: float, phase: str = "train") -> None:
        pass


def _train_data(path: Path) -> Path:
    """A reply pattern the base model has never seen (in words it knows, so a LoRA on the frozen tied embeddings
    can reach them), and calls to a tool it has never seen."""
    rng = random.Random(11)
    lines = []
    for _ in range(48):
        animal, n = rng.choice(ANIMALS), rng.randrange(10)
        lines.append({"messages": [{"role": "user", "content": f"Pirate talk about the {animal}, {n}."},
                                   {"role": "assistant", "content": f"Nice, the {animal} sings {n} times!"}]})
        city = rng.choice(CITIES)
        lines.append({"tools": [LOOKUP_TOOL], "messages": [
            {"role": "user", "content": f"Find {city} in the atlas."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup_city",
                                                              "arguments": json.dumps({"city": city})}}]}]})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


@pytest.fixture(scope="session")
def fine_tuned(ml_store: ModelStore, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One full fine-tune and one LoRA fine-tune of tiny-qwen3 on the same data."""
    from synth_ai.backend.trainers.sft.trainer import run_sft

    root = tmp_path_factory.mktemp("inference-ft")
    data = _train_data(root / "train.jsonl")
    out = {}
    for kind, lr, epochs in (("full", 2e-3, 6), ("lora", 4e-3, 6)):
        spec = {"model": TEXT, "job_id": f"job_{kind}", "training_file_path": str(data),
                "hyperparameters": {"n_epochs": epochs, "per_device_batch": 8, "learning_rate": lr,
                                    "warmup_ratio": 0.05, "train_kind": kind, "lora_rank": 16, "lora_dropout": 0.0}}
        result = run_sft(spec, workdir=root / kind, model_store=ml_store, reporter=_Quiet(),
                         should_stop=lambda: False)
        out[kind] = result["fine_tuned_model"]
    return out


@pytest.fixture(scope="session")
def engine(ml_store: ModelStore) -> Any:
    from synth_ai.backend.inference.engine import InferenceEngine

    return InferenceEngine(ml_store, max_loaded=2)


def ask(engine: Any, model: str, content: Any, **params: Any) -> dict[str, Any]:
    messages = content if isinstance(content, list) and content and "role" in content[0] else \
        [{"role": "user", "content": content}]
    return engine.chat_completion({"model": model, "messages": messages, **params})


def test_greedy_completion_is_deterministic_and_openai_shaped(engine: Any) -> None:
    first = ask(engine, TEXT, "What is 3 plus 4?", temperature=0, max_tokens=24)
    second = ask(engine, TEXT, "What is 3 plus 4?", temperature=0, max_tokens=24)
    assert first["object"] == "chat.completion" and first["id"].startswith("chatcmpl-")
    assert first["model"] == TEXT and isinstance(first["created"], int)
    choice = first["choices"][0]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == second["choices"][0]["message"]["content"]
    assert choice["message"]["content"].startswith("The answer is")  # the pretraining taught the format
    assert choice["finish_reason"] == "stop"
    usage = first["usage"]
    assert usage["prompt_tokens"] > 5 and 0 < usage["completion_tokens"] <= 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_max_tokens_gives_finish_reason_length(engine: Any) -> None:
    out = ask(engine, TEXT, "Tell me a short story about a fox.", temperature=0, max_tokens=3)
    assert out["choices"][0]["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 3


def _answer_nll(engine: Any, model: str, prompt: str, answer: str) -> float:
    """Mean negative log-likelihood of `answer` after `prompt`, under the loaded model (teacher forcing)."""
    loaded = engine.get(model)
    tokenizer = loaded.tokenizer
    messages = [{"role": "user", "content": prompt}]
    head = tokenizer.apply_chat_template(messages, chat_template=loaded.template, add_generation_prompt=True,
                                         tokenize=False, enable_thinking=False)
    head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
    ids = tokenizer(head + answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = loaded.model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    targets = torch.tensor(ids[1:])
    losses = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    return float(losses[len(head_ids) - 1:].mean())


def test_fine_tuned_models_learned_the_pattern(engine: Any, fine_tuned: dict[str, str]) -> None:
    prompt, answer = "Pirate talk about the owl, 3.", "Nice, the owl sings 3 times!"
    base = ask(engine, TEXT, prompt, temperature=0, max_tokens=16)["choices"][0]["message"]["content"]
    assert not base.startswith("Nice, the")
    base_nll = _answer_nll(engine, TEXT, prompt, answer)
    for kind in ("full", "lora"):
        reply = ask(engine, fine_tuned[kind], prompt, temperature=0, max_tokens=16)
        text = reply["choices"][0]["message"]["content"]
        assert text.startswith("Nice, the "), (kind, text)
        assert reply["model"] == fine_tuned[kind]
        # the training answer is far more likely under the fine-tuned model than under the base
        assert _answer_nll(engine, fine_tuned[kind], prompt, answer) < base_nll - 1.0


def test_tool_calls_are_parsed_into_openai_tool_calls(engine: Any, fine_tuned: dict[str, str]) -> None:
    out = ask(engine, fine_tuned["full"], "Find Oslo in the atlas.", tools=[LOOKUP_TOOL], temperature=0,
              max_tokens=48)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "lookup_city"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    assert choice["message"]["content"] is None

    # the tool result goes back in as history; the call is rendered from `tool_calls` again
    follow = ask(engine, fine_tuned["full"], [
        {"role": "user", "content": "Find Oslo in the atlas."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "Oslo is in Norway."},
    ], tools=[LOOKUP_TOOL], temperature=0, max_tokens=8)
    assert follow["usage"]["prompt_tokens"] > out["usage"]["prompt_tokens"]
    assert follow["choices"][0]["finish_reason"] in {"stop", "length", "tool_calls"}


def test_output_parsing_rules() -> None:
    message = parse_output('<think>\nplan\n</think>\n\nSure.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}'
                           "\n</tool_call>\n<tool_call>{bad json}</tool_call>", tools_enabled=True)
    assert message["reasoning_content"] == "plan"
    assert [c["function"] for c in message["tool_calls"]] == [{"name": "f", "arguments": '{"x": 1}'}]
    assert message["content"] == "Sure.\n\n<tool_call>{bad json}</tool_call>"
    assert parse_output("<tool_call>{\"name\": \"f\"}</tool_call>", tools_enabled=False)["content"].startswith(
        "<tool_call>")
    assert split_reasoning("<think>\nunfinished") == ("unfinished", "")
    assert apply_stop("abc STOP def", ["STOP", "d"]) == ("abc ", True)
    assert apply_stop("abc", ["x"]) == ("abc", False)


def test_stop_sequences_cut_the_output(engine: Any) -> None:
    full = ask(engine, TEXT, "Tell me a short story about a cat.", temperature=0, max_tokens=40)
    text = full["choices"][0]["message"]["content"]
    words = text.split()
    assert len(words) >= 3, text
    stop = " " + words[2]
    cut = ask(engine, TEXT, "Tell me a short story about a cat.", temperature=0, max_tokens=40, stop=[stop, "zzz"])
    choice = cut["choices"][0]
    assert choice["message"]["content"] == text[:text.index(stop)].strip()
    assert choice["finish_reason"] == "stop"
    assert cut["usage"]["completion_tokens"] <= full["usage"]["completion_tokens"]


def test_n_choices_and_seed(engine: Any) -> None:
    params = dict(temperature=1.0, top_p=0.95, max_tokens=20, n=3, seed=123)
    first = ask(engine, TEXT, "Tell me a short story about a dog.", **params)
    second = ask(engine, TEXT, "Tell me a short story about a dog.", **params)
    texts = [c["message"]["content"] for c in first["choices"]]
    assert [c["index"] for c in first["choices"]] == [0, 1, 2]
    assert texts == [c["message"]["content"] for c in second["choices"]]  # same seed, same samples
    assert len(set(texts)) > 1  # sampling: the choices differ
    greedy = ask(engine, TEXT, "Tell me a short story about a dog.", temperature=0, max_tokens=12, n=2)
    assert len({c["message"]["content"] for c in greedy["choices"]}) == 1
    assert greedy["usage"]["completion_tokens"] == 2 * ask(
        engine, TEXT, "Tell me a short story about a dog.", temperature=0, max_tokens=12)["usage"]["completion_tokens"]


def test_thinking_mode_and_budget(engine: Any, ml_store: ModelStore) -> None:
    question = "Think first: what is 3 times 4?"
    no_think = ask(engine, TEXT, question, temperature=0, max_tokens=24, thinking_mode="no_think")
    message = no_think["choices"][0]["message"]
    assert "reasoning_content" not in message and "<think>" not in (message["content"] or "")
    think = ask(engine, TEXT, question, temperature=0, max_tokens=48, thinking_mode="think")
    reasoning = think["choices"][0]["message"].get("reasoning_content")
    assert reasoning and "times" in reasoning
    capped = ask(engine, TEXT, question, temperature=0, max_tokens=48, thinking_mode="think", thinking_budget=3)
    short = capped["choices"][0]["message"].get("reasoning_content") or ""
    from synth_ai.backend.ml.loading import load_tokenizer

    tokenizer = load_tokenizer(ml_store.resolve(TEXT))
    assert len(tokenizer.encode(short, add_special_tokens=False)) <= 3
    assert len(short) < len(reasoning)
    assert capped["choices"][0]["message"]["content"]  # the answer still comes after the forced </think>


def test_image_input_to_the_vl_model(engine: Any) -> None:
    from synth_ai.backend.ml.corpus import picture
    from synth_ai.backend.ml.images import png_data_url

    image, _caption = picture(random.Random(5))
    parts = [{"type": "image_url", "image_url": {"url": png_data_url(image)}},
             {"type": "text", "text": "What is in the picture?"}]
    with_image = ask(engine, VL, parts, temperature=0, max_tokens=16)
    text_only = ask(engine, VL, "What is in the picture?", temperature=0, max_tokens=16)
    assert with_image["usage"]["prompt_tokens"] >= text_only["usage"]["prompt_tokens"] + 4  # 4 patch tokens + markers
    assert isinstance(with_image["choices"][0]["message"]["content"], str)
    with pytest.raises(InvalidInputError, match="accepts text only"):
        ask(engine, TEXT, parts, temperature=0)
    # pictures that decode to more pixels than a request may hold are refused before decoding (memory stays flat)
    from PIL import Image

    from synth_ai.backend.inference.engine import MAX_REQUEST_PIXELS

    big = png_data_url(Image.new("RGB", (8192, 4096)))  # a few hundred KB that decode to 32M pixels
    many = [{"type": "image_url", "image_url": {"url": big}}] * (MAX_REQUEST_PIXELS // (8192 * 4096) + 1)
    with pytest.raises(InvalidInputError, match="pixels"):
        ask(engine, VL, [*many, {"type": "text", "text": "hi"}], max_tokens=1)
    remote = [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]
    with pytest.raises(InvalidInputError, match="remote image URLs are refused"):
        ask(engine, VL, remote)


def test_bad_requests_and_unknown_models(engine: Any) -> None:
    with pytest.raises(NotFoundError):
        ask(engine, "ft:synth-ai/tiny-qwen3:job_missing", "hi")
    with pytest.raises(NotFoundError, match="not available offline"):
        ask(engine, "Qwen/Qwen3-32B", "hi")
    for long_id in ("x" * 5000, "/" + "y" * 5000):  # longer than a file name may be: still just "not found"
        with pytest.raises(NotFoundError):
            ask(engine, long_id, "hi")
    # ids that failed to load leave nothing behind (a stream of unknown ids must not grow the server's memory)
    assert not {"Qwen/Qwen3-32B", "x" * 5000, "ft:synth-ai/tiny-qwen3:job_missing"} & set(engine._load_locks)
    bad = [{"messages": []}, {"temperature": 5}, {"n": 0}, {"stop": [1]}, {"stop": "ab" * 600},
           {"thinking_mode": "maybe"},
           {"max_tokens": 0}, {"stream": True}, {"tools": "x"}, {"seed": "s"}]
    for fields in bad:
        request = {"model": TEXT, "messages": [{"role": "user", "content": "hi"}], **fields}
        with pytest.raises(InvalidInputError):
            engine.chat_completion(request)
    with pytest.raises(InvalidInputError):
        engine.chat_completion({"model": TEXT, "messages": [{"role": "robot", "content": "hi"}]})
    # a prompt longer than the model's context is refused before generating (it would run for minutes, or hours)
    for model in (TEXT, VL):
        with pytest.raises(InvalidInputError, match="context of 4096 tokens"):
            ask(engine, model, "hello world " * 1000, max_tokens=1)


def test_concurrent_requests_from_threads(engine: Any) -> None:
    errors: list[BaseException] = []
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            model = VL if i % 3 == 0 else TEXT
            out = ask(engine, model, f"What is {i} plus {i}?", temperature=0.7, max_tokens=12, seed=i)
            with lock:
                results.append(out)
        except BaseException as exc:  # pragma: no cover - reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert len(results) == 9 and all(r["choices"][0]["message"]["role"] == "assistant" for r in results)


def test_models_stay_loaded_in_a_bounded_cache(engine: Any, fine_tuned: dict[str, str]) -> None:
    for model in (TEXT, VL, fine_tuned["full"]):
        ask(engine, model, "Hello, I am Ada.", temperature=0, max_tokens=4)
    loaded = engine.loaded_models()
    assert len(loaded) == 2 and loaded[-1] == fine_tuned["full"] and TEXT not in loaded
    listing = engine.list_models()
    ids = {m["id"] for m in listing["data"]}
    assert listing["object"] == "list" and {TEXT, VL, fine_tuned["full"], fine_tuned["lora"]} <= ids


def test_an_image_declaring_a_huge_size_is_a_bad_request() -> None:
    import base64
    import struct
    import zlib

    from synth_ai.backend.ml.images import load_image

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)  # 10^10 pixels declared, a few bytes sent
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 100))
           + chunk(b"IEND", b""))
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    with pytest.raises(InvalidInputError, match="too large"):
        load_image(url, allow_remote=False, where="messages[0].content[0]")
