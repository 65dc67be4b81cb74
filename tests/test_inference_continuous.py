"""Continuous batching: a request joins a batch that is already decoding, is answered as soon as its own rows
end, and every row decodes exactly as it would alone (greedy text, seeded tokens and log-probs)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from synth_ai.backend.store.model_store import ModelStore

torch = pytest.importorskip("torch")

TEXT = "synth-ai/tiny-qwen3"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from synth_ai.backend.inference.engine import InferenceEngine

    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")  # shared with the other ML test modules
    store.resolve(TEXT)
    return InferenceEngine(store, max_loaded=1)


def _body(prompt: str, **params: Any) -> dict[str, Any]:
    return {"model": TEXT, "messages": [{"role": "user", "content": prompt}], **params}


def _wait_for_steps(engine: Any, count: int) -> None:
    event = threading.Event()
    while engine.batcher.steps < count:
        event.wait(0.001)


def test_a_request_joins_a_running_batch_and_answers_before_the_batch_ends(engine: Any) -> None:
    # a long seeded, hot sample (the first seed whose reply alone is 40+ tokens) and short greedy requests with
    # other prompt lengths
    for seed in range(64):
        long = _body("Tell me a short story about a fox.", temperature=2.0, seed=seed, max_tokens=96)
        long_alone = engine.chat_completion_with_tokens(long)
        if long_alone[0]["usage"]["completion_tokens"] >= 40:
            break
    else:
        pytest.fail("no seed gave a reply of 40 tokens or more")
    shorts = [_body("What is 3 plus 4?", temperature=0, max_tokens=12),
              _body("Count: one two three four five six seven eight nine ten", temperature=0, max_tokens=6)]
    shorts_alone = [engine.chat_completion(b) for b in shorts]

    result: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: result.update(long=engine.chat_completion_with_tokens(long)))
    steps, joined = engine.batcher.steps, engine.batcher.joined
    runner.start()
    _wait_for_steps(engine, steps + 3)  # the long row is decoding
    shorts_joined = []
    for body in shorts:
        shorts_joined.append(engine.chat_completion(body))
        assert runner.is_alive()  # answered while the long row still decodes
    runner.join()
    assert engine.batcher.joined == joined + len(shorts)

    for one, other in zip(shorts_alone, shorts_joined):
        assert one["choices"][0]["message"] == other["choices"][0]["message"]
        assert one["usage"] == other["usage"]
        assert one["choices"][0]["finish_reason"] == other["choices"][0]["finish_reason"]
    (completion, sampled), (completion_alone, sampled_alone) = result["long"], long_alone
    assert completion["choices"][0]["message"] == completion_alone["choices"][0]["message"]
    assert sampled[0].completion_ids == sampled_alone[0].completion_ids
    assert sampled[0].logprobs == pytest.approx(sampled_alone[0].logprobs, abs=1e-4)


def test_rows_with_their_own_limits_leave_a_batch_and_the_rest_decode_on(engine: Any) -> None:
    """n choices, max_tokens, stop strings and seeds are per row; rows leaving mid-batch change no other row."""
    free = engine.chat_completion(_body("Tell me a short story about a fox.", temperature=0, max_tokens=40))
    words = free["choices"][0]["message"]["content"].split()
    bodies = [_body("Tell me a short story about a fox.", temperature=0, max_tokens=3),
              _body("Tell me a short story about a fox.", temperature=0, max_tokens=40, stop=[words[2]]),
              _body("Name a city in France.", temperature=1.0, seed=11, n=3, max_tokens=20),
              _body("Tell me a short story about a fox.", temperature=0, max_tokens=40)]
    alone = [engine.chat_completion(b) for b in bodies]
    together: list[Any] = [None] * len(bodies)
    threads = [threading.Thread(target=lambda i=i: together.__setitem__(i, engine.chat_completion(bodies[i])))
               for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for one, other in zip(alone, together):
        assert [c["message"] for c in one["choices"]] == [c["message"] for c in other["choices"]]
        assert [c["finish_reason"] for c in one["choices"]] == [c["finish_reason"] for c in other["choices"]]
        assert one["usage"] == other["usage"]
    assert together[0]["usage"]["completion_tokens"] == 3 and together[0]["choices"][0]["finish_reason"] == "length"
    assert words[2] not in together[1]["choices"][0]["message"]["content"]
    assert together[3]["choices"][0]["message"] == free["choices"][0]["message"]
    assert len(together[2]["choices"]) == 3


def test_a_repeated_prompt_is_rendered_once_and_samples_as_a_fresh_one(engine: Any) -> None:
    # an RL group sends the same prompt group_size times: the second render comes from the model's prompt cache
    loaded = engine.get(TEXT)
    body = _body("Name a colour, any colour.", temperature=1.0, seed=11, max_tokens=8)
    hits = loaded.prompts.hits
    first = engine.chat_completion_with_tokens(body)
    again = engine.chat_completion_with_tokens(body)
    other = engine.chat_completion_with_tokens(_body("Name a fruit.", temperature=1.0, seed=11, max_tokens=8))
    thinking = engine.chat_completion_with_tokens({**body, "thinking_mode": "no_think"})
    assert loaded.prompts.hits == hits + 1  # only the identical request hit
    assert again[1][0].prompt_ids == first[1][0].prompt_ids and again[1][0].prompt_ids is not first[1][0].prompt_ids
    assert again[1][0].completion_ids == first[1][0].completion_ids  # same seed, same prompt: same sample
    assert other[1][0].prompt_ids != first[1][0].prompt_ids
    assert thinking[1][0].prompt_ids != first[1][0].prompt_ids  # the template's thinking switch is in the key
    cache = loaded.prompts
    assert cache.key(loaded, {"tools": None, "tool_choice": "auto", "thinking_mode": None}, [], ["an image"]) is None
