"""Batched inference: concurrent chat completions share one `generate` and answer as if each ran alone."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from backend_support import TINY_TEXT, BackendProcess, serve_backend

torch = pytest.importorskip("torch")

PROMPTS = ["What is 3 plus 4?", "Tell me a short story about a fox.", "Count: one two three",
           "What color is the sky?", "Name a city in France.", "What is 10 minus 2?"]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    # a long window: requests sent together surely meet in one batch
    yield from serve_backend(tmp_path_factory, "batching", tiny=(TINY_TEXT,),
                             env={"SYNTH_INFERENCE_BATCH_WINDOW_MS": "300"})


@pytest.fixture
def busy_backend(tmp_path_factory: pytest.TempPathFactory):
    """A queue of one and a long batch window: the second request waiting is one too many."""
    yield from serve_backend(tmp_path_factory, "busy", tiny=(TINY_TEXT,),
                             env={"SYNTH_INFERENCE_MAX_QUEUE": "1", "SYNTH_INFERENCE_BATCH_WINDOW_MS": "1000"})


def _post(backend: BackendProcess, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{backend.url}/api/inference/v1/chat/completions", json=body, timeout=300,
                      headers={"Authorization": f"Bearer {backend.key}"})


def _together(call: Any, bodies: list[dict[str, Any]]) -> list[Any]:
    """`call(body)` for every body at once, from one thread each; results in the order given."""
    results: list[Any] = [None] * len(bodies)

    def run(i: int) -> None:
        results[i] = call(bodies[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _body(prompt: str, **params: Any) -> dict[str, Any]:
    return {"model": TINY_TEXT, "messages": [{"role": "user", "content": prompt}], "temperature": 0, **params}


def test_concurrent_greedy_requests_answer_like_sequential_ones(backend: BackendProcess) -> None:
    bodies = [_body(p, max_tokens=16) for p in PROMPTS]
    alone = [_post(backend, b).json() for b in bodies]
    together = [r.json() for r in _together(lambda b: _post(backend, b), bodies)]
    for one, other in zip(alone, together):
        assert one["choices"][0]["message"] == other["choices"][0]["message"]
        assert one["usage"] == other["usage"]
        assert one["choices"][0]["finish_reason"] == other["choices"][0]["finish_reason"]


def test_each_request_keeps_its_own_max_tokens_and_stop_within_a_batch(backend: BackendProcess) -> None:
    free = _post(backend, _body(PROMPTS[1], max_tokens=40)).json()["choices"][0]["message"]["content"]
    words = free.split()
    assert len(words) >= 4, free
    stop = words[2]  # a word from the middle of the free answer
    bodies = [_body(PROMPTS[1], max_tokens=3), _body(PROMPTS[1], max_tokens=7),
              _body(PROMPTS[1], max_tokens=40, stop=[stop]), _body(PROMPTS[1], max_tokens=40), _body(PROMPTS[0])]
    short, medium, stopped, full, other = [r.json() for r in _together(lambda b: _post(backend, b), bodies)]
    assert short["usage"]["completion_tokens"] == 3 and short["choices"][0]["finish_reason"] == "length"
    assert medium["usage"]["completion_tokens"] == 7 and medium["choices"][0]["finish_reason"] == "length"
    assert free.startswith(short["choices"][0]["message"]["content"])
    assert free.startswith(medium["choices"][0]["message"]["content"])
    text = stopped["choices"][0]["message"]["content"]
    assert stopped["choices"][0]["finish_reason"] == "stop" and stop not in text and free.startswith(text)
    assert stopped["usage"]["completion_tokens"] < full["usage"]["completion_tokens"]
    assert full["choices"][0]["message"]["content"] == free
    assert other["choices"][0]["message"]["content"] == _post(backend, bodies[-1]).json()["choices"][0]["message"][
        "content"]


def test_a_batched_row_samples_and_scores_like_the_same_request_alone(tmp_path_factory) -> None:
    """Seeded sampling (the RL policy server derives a seed per cid) gives the same tokens and log-probs whether
    a call runs in a batch or alone; and the calls did share batches."""
    from synth_ai.backend.inference.engine import InferenceEngine
    from synth_ai.backend.inference.policy_server import LocalPolicyServer
    from synth_ai.backend.store.model_store import ModelStore

    store = ModelStore(tmp_path_factory.getbasetemp() / "ml-core-data")
    loaded = InferenceEngine(store).get(TINY_TEXT)

    def serve(cids: list[str], together: bool) -> tuple[list[Any], LocalPolicyServer]:
        server = LocalPolicyServer(loaded, seed=3)
        server.engine.batcher.window_s = 0.3 if together else 0.0
        url = server.start()
        try:
            bodies = [{"cid": cid, **_body(PROMPTS[i % len(PROMPTS)], temperature=0.9, top_p=0.95,
                                           max_tokens=6 + 3 * i)} for i, cid in enumerate(cids)]

            def call(body: dict[str, Any]) -> Any:
                cid = body.pop("cid")
                httpx.post(f"{url}?cid={cid}", json=body, timeout=300).raise_for_status()
                return server.take_calls(cid)[0].samples[0]

            samples = _together(call, bodies) if together else [call(b) for b in bodies]
            return samples, server
        finally:
            server.stop()

    cids = [f"it0-s{i}-g0" for i in range(5)]
    batched, server = serve(cids, together=True)
    assert server.engine.batcher.batches < len(cids)  # some calls shared a generate
    alone, server = serve(cids, together=False)
    assert server.engine.batcher.batches == len(cids)
    for one, other in zip(batched, alone):
        assert one.prompt_ids == other.prompt_ids
        assert one.completion_ids == other.completion_ids
        assert len(one.logprobs) == len(one.completion_ids)
        assert one.logprobs == pytest.approx(other.logprobs, abs=1e-4)
        assert all(lp <= 0 for lp in one.logprobs)


def test_a_full_queue_answers_429_with_retry_after(busy_backend: BackendProcess) -> None:
    _post(busy_backend, _body(PROMPTS[0], max_tokens=2)).raise_for_status()  # the model is loaded
    answers = _together(lambda b: _post(busy_backend, b), [_body(p, max_tokens=8) for p in PROMPTS])
    codes = sorted(r.status_code for r in answers)
    assert codes[0] == 200 and codes[-1] == 429, codes
    busy = next(r for r in answers if r.status_code == 429)
    assert int(busy.headers["retry-after"]) >= 1
    assert busy.json()["error"]["code"] == "rate_limited" and "queue is full" in busy.json()["error"]["message"]


def test_task_apps_retry_a_busy_model_server_after_its_retry_after() -> None:
    """The 429 is injected by a transport fault; the client must wait and retry, then give up after its limit."""
    import asyncio

    from synth_ai.taskapp import inference
    from synth_ai.taskapp.errors import InferenceError

    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}

    def client_answering(busy: int) -> tuple[httpx.AsyncClient, list[int]]:
        seen: list[int] = []

        def answer(request: httpx.Request) -> httpx.Response:
            seen.append(1)
            if len(seen) <= busy:
                return httpx.Response(429, headers={"Retry-After": "0"}, json={"error": {"code": "rate_limited"}})
            return httpx.Response(200, json=completion)

        return httpx.AsyncClient(transport=httpx.MockTransport(answer)), seen

    async def call(client: httpx.AsyncClient) -> dict[str, Any]:
        async with client:
            return await inference.chat_completion("http://model.test/v1", {"model": "m", "messages": []},
                                                   client=client, record=False)

    client, seen = client_answering(busy=2)
    assert asyncio.run(call(client))["choices"][0]["message"]["content"] == "hi" and len(seen) == 3
    client, seen = client_answering(busy=inference.BUSY_RETRIES + 1)
    with pytest.raises(InferenceError, match="429"):
        asyncio.run(call(client))
    assert len(seen) == inference.BUSY_RETRIES + 1
