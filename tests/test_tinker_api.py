"""The Tinker API on the embedded backend, driven by the real `tinker` SDK (0.38.0) in a client process of its own,
as a user's script: a LoRA training client on the tiny Qwen3 trains, samples, saves and resumes; its results
are a job and a registered model; bad input comes back as the SDK's own errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from backend_support import TINY_TEXT, events, serve_backend, wait_for

# One client session: trains 3 steps, samples, checks compute_logprobs, saves and resumes on a second client,
# then closes the session. Prints one JSON line of what it saw.
_TRAIN = r"""
import json, sys, tinker
from tinker import types
base_url, model = sys.argv[1], sys.argv[2]
seen = {}
sc = tinker.ServiceClient(base_url=base_url)
tc = sc.create_lora_training_client(base_model=model, rank=4).result()
tok = tc.get_tokenizer()
ids = tok.encode("The quick brown fox jumps over the lazy dog. The quick brown fox jumps")
seen["tokens"] = ids
datum = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                    loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)})
first = tc.forward([datum], "cross_entropy").result()
seen["first_logprobs"] = first.loss_fn_outputs[0]["logprobs"].tolist()
losses = []
for _ in range(3):
    fb = tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=5e-3)).result()
    losses.append(fb.metrics["loss:sum"])
seen["losses"] = losses
sampler = tc.save_weights_and_get_sampling_client("now")
prompt = types.ModelInput.from_ints(ids[:5])
out = sampler.sample(prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=6, seed=3)).result()
seen["samples"] = [{"tokens": s.tokens, "logprobs": s.logprobs, "stop": s.stop_reason} for s in out.sequences]
again = sampler.compute_logprobs(types.ModelInput.from_ints(ids[:5] + out.sequences[0].tokens)).result()
seen["recomputed"] = again[5:]
seen["prompt_first"] = again[0]
stopped = sampler.sample(prompt, num_samples=1, sampling_params=types.SamplingParams(
    max_tokens=40, seed=3, stop=[out.sequences[0].tokens[1]])).result().sequences[0]
seen["stopped"] = {"tokens": stopped.tokens, "stop": stopped.stop_reason}
path = tc.save_state("after-3").result().path
seen["path"] = path
seen["next"] = tc.forward([datum], "cross_entropy").result().metrics["loss:sum"]
resumed = sc.create_training_client_from_state_with_optimizer(path)
seen["resumed_next"] = resumed.forward([datum], "cross_entropy").result().metrics["loss:sum"]
# one more identical step on each: the same Adam state gives the same next loss
for client, key in ((tc, "after_step"), (resumed, "resumed_after_step")):
    client.forward_backward([datum], "cross_entropy").result()
    client.optim_step(types.AdamParams(learning_rate=5e-3)).result()
    seen[key] = client.forward([datum], "cross_entropy").result().metrics["loss:sum"]
named = tc.save_weights_for_sampler("final-sampler").result().path
seen["sampler_path"] = named
seen["named_sample"] = sc.create_sampling_client(model_path=named).sample(
    prompt, num_samples=1, sampling_params=types.SamplingParams(max_tokens=3, seed=1)).result().sequences[0].tokens
seen["model_id"] = tc.model_id
sc.close("success").result()
print("SEEN " + json.dumps(seen))
"""

# Every RL loss through the wire, a client-side custom loss, and sampling: concurrent sample calls (batched
# together in the worker) against the same calls one by one, and an old sampler after its client trained on.
_LOSSES_AND_SAMPLING = r"""
import json, sys, tinker, torch
from tinker import types
base_url, model = sys.argv[1], sys.argv[2]
seen = {}
sc = tinker.ServiceClient(base_url=base_url)
tc = sc.create_lora_training_client(base_model=model, rank=4).result()
ids = tc.get_tokenizer().encode("One two three four five six seven eight nine ten")
n = len(ids) - 1
current = tc.forward([types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                                  loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * n})],
                     "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
seen["current"] = current
sampled = [lp + (0.3 if i % 2 else -0.4) for i, lp in enumerate(current)]  # a sampler a little off
advantages = [(-1.0) ** i * (1 + i % 3) for i in range(n)]
seen["sampled"], seen["advantages"] = sampled, advantages
rl = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                 loss_fn_inputs={"target_tokens": ids[1:], "logprobs": sampled, "advantages": advantages})
seen["losses"] = {name: tc.forward([rl], name, config).result().metrics["loss:sum"] for name, config in
                  (("importance_sampling", None), ("ppo", None), ("cispo", None), ("dro", {"beta": 0.5}),
                   ("gspo", {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0}))}
# a custom loss computed here, -sum(lp * A), steps exactly as cross_entropy with weights A on a twin client
def custom(data, logprobs):
    loss = sum(-(lp * torch.tensor(d.loss_fn_inputs["advantages"].tolist())).sum() for d, lp in zip(data, logprobs))
    return loss, {"custom/adv:sum": float(loss)}
out = tc.forward_backward_custom([rl], custom).result()
seen["custom_metrics"] = out.metrics
tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
twin = sc.create_lora_training_client(base_model=model, rank=4).result()
twin.forward_backward([types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                                   loss_fn_inputs={"target_tokens": ids[1:], "weights": advantages})],
                      "cross_entropy").result()
twin.optim_step(types.AdamParams(learning_rate=1e-2)).result()
probe = [types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                     loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * n})]
seen["after_custom"] = tc.forward(probe, "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
seen["after_twin"] = twin.forward(probe, "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
# sampling: four calls in flight at once, then the same calls one at a time
sampler = tc.save_weights_and_get_sampling_client()
prompt = types.ModelInput.from_ints(ids[:4])
def params(seed):
    return types.SamplingParams(max_tokens=5 + seed, seed=seed, temperature=0.9 if seed else 1.0)
together = [sampler.sample(prompt, num_samples=2, sampling_params=params(s)) for s in range(4)]
seen["together"] = [[(q.tokens, q.logprobs) for q in f.result().sequences] for f in together]
seen["alone"] = [[(q.tokens, q.logprobs) for q in sampler.sample(prompt, num_samples=2, sampling_params=params(s))
                  .result().sequences] for s in range(4)]
# the client trains on; its earlier sampler still samples the weights it saved
for _ in range(2):
    tc.forward_backward(probe, "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=5e-2)).result()
seen["old_again"] = [(q.tokens, q.logprobs) for q in sampler.sample(prompt, num_samples=2,
                                                                    sampling_params=params(0)).result().sequences]
newer = tc.save_weights_and_get_sampling_client()
sequence = types.ModelInput.from_ints(ids[:4] + seen["alone"][0][0][0])
seen["old_scores"] = sampler.compute_logprobs(sequence).result()[4:]
seen["new_scores"] = newer.compute_logprobs(sequence).result()[4:]
sc.close("success").result()
print("SEEN " + json.dumps(seen))
"""

# Each refusal the SDK raises, by name and message.
_BAD = r"""
import json, sys, tinker
from tinker import types
base_url, model = sys.argv[1], sys.argv[2]
seen = {}
def attempt(name, call):
    try:
        call()
        seen[name] = "no error"
    except Exception as exc:
        seen[name] = f"{type(exc).__name__}: {exc}"
sc = tinker.ServiceClient(base_url=base_url)
attempt("unknown_model", lambda: sc.create_lora_training_client(base_model="nobody/no-such-model", rank=4).result())
tc = sc.create_lora_training_client(base_model=model, rank=2).result()
good = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                   loss_fn_inputs={"target_tokens": [2, 3, 4], "logprobs": [0.0] * 3, "advantages": [1.0] * 3})
attempt("unsupported_loss", lambda: tc.forward_backward([good], "stable_reinforce").result())
attempt("unread_config", lambda: tc.forward_backward([good], "ppo", {"beta": 0.1}).result())
short = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                    loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0]})
attempt("mismatched_weights", lambda: tc.forward_backward([short], "cross_entropy").result())
attempt("missing_advantages", lambda: tc.forward_backward(
    [types.Datum(model_input=good.model_input, loss_fn_inputs={"target_tokens": [2, 3, 4]})],
    "importance_sampling").result())
attempt("bad_path", lambda: sc.create_training_client_from_state("tinker://nobody/weights/x").result())
sampler = tc.save_weights_and_get_sampling_client()
attempt("bad_top_k", lambda: sampler.sample(types.ModelInput.from_ints([1, 2]), num_samples=1,
                                            sampling_params=types.SamplingParams(max_tokens=2, top_k=0)).result())
# the client goes on after refusals (their numbers used, nothing stored): an importance-sampling step works
seen["is_loss"] = tc.forward_backward([good], "importance_sampling").result().metrics["loss:sum"]
sc.close("success").result()
print("SEEN " + json.dumps(seen))
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    yield from serve_backend(tmp_path_factory, "tinker", tiny=(TINY_TEXT,))


def _client(backend, script: str, tmp_path: Path, *, key: str | None = None) -> dict:
    path = tmp_path / "client.py"
    path.write_text(script)
    env = {**os.environ, "TINKER_API_KEY": key or f"tml-{backend.key}", "TINKER_TELEMETRY": "0",
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-W", "ignore", str(path), backend.url, TINY_TEXT], capture_output=True,
                          text=True, env=env, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("SEEN "))
    return json.loads(line[len("SEEN "):])


@pytest.mark.slow
def test_a_training_client_trains_samples_saves_and_resumes(backend, tmp_path):
    seen = _client(backend, _TRAIN, tmp_path)
    losses = seen["losses"]
    assert losses[2] < losses[0]  # three steps on one datum lower its loss
    # the first forward is the base model's (LoRA starts at zero): its log-probs are the SFT trainer's
    ours = _sft_logprobs(backend, seen["tokens"])
    assert seen["first_logprobs"] == pytest.approx(ours, abs=1e-4)
    assert losses[0] == pytest.approx(-sum(ours), rel=1e-5)
    # sampling: two sequences of 6 tokens, and compute_logprobs reproduces the sampled tokens' log-probs
    assert [len(s["tokens"]) for s in seen["samples"]] == [6, 6] and all(s["stop"] == "length" for s in seen["samples"])
    assert seen["recomputed"] == pytest.approx(seen["samples"][0]["logprobs"], abs=1e-4)
    assert seen["prompt_first"] is None
    # a stop token ends the sequence, and stays in it
    stopped = seen["stopped"]
    assert stopped["stop"] == "stop" and stopped["tokens"][-1] == seen["samples"][0]["tokens"][1]
    # save_state -> a new client from it: the same next loss, and the same loss after one more identical step
    assert seen["path"].startswith(f"tinker://{seen['model_id']}/weights/")
    assert seen["resumed_next"] == pytest.approx(seen["next"], rel=1e-6)
    assert seen["resumed_after_step"] == pytest.approx(seen["after_step"], rel=1e-5)
    assert seen["next"] < losses[0]
    assert seen["sampler_path"].endswith("/sampler_weights/final-sampler") and len(seen["named_sample"]) == 3
    # the session closed: both clients' jobs succeed, each a registered LoRA model
    api = backend.client()
    jobs = wait_for(lambda: _finished_tinker_jobs(api, 2), timeout=60, what="the tinker jobs to finish")
    assert {j["status"] for j in jobs} == {"succeeded"}
    listed = {m["id"] for m in api.get("/learning/models").json()["data"]}
    assert {j["fine_tuned_model"] for j in jobs} <= listed
    _loads_in_peft(backend, min(jobs, key=lambda j: j["created_at"])["fine_tuned_model"])
    # each named checkpoint is a model of the store under its tinker:// path: exported, served, loaded in peft
    assert {seen["path"], seen["sampler_path"]} <= listed
    exported = api.post("/exports", json={"model": seen["path"], "merge": False}, timeout=120)
    assert exported.status_code == 200, exported.text
    assert any(f["path"] == "adapter_model.safetensors" for f in exported.json()["files"])
    answer = api.post("/inference/v1/chat/completions", timeout=120, json={
        "model": seen["sampler_path"], "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == seen["sampler_path"]
    _loads_in_peft(backend, seen["sampler_path"])
    first = min(jobs, key=lambda j: j["created_at"])  # the client that trained 4 steps
    kinds = [e["type"] for e in events(api, first["id"])]
    assert "tinker.client.ready" in kinds and "tinker.client.stopped" in kinds
    points = api.get(f"/learning/jobs/{first['id']}/metrics", params={"name": "tinker.loss"}).json()
    assert [p["value"] for p in points["points"]][:3] == pytest.approx(losses)


@pytest.mark.slow
def test_losses_custom_losses_and_batched_sampling_through_the_sdk(backend, tmp_path):
    import math

    seen = _client(backend, _LOSSES_AND_SAMPLING, tmp_path)
    lp, q, adv = seen["current"], seen["sampled"], seen["advantages"]
    ratio = [math.exp(a - b) for a, b in zip(lp, q)]

    def clipped(low, high):
        return [min(max(r, low), high) for r in ratio]

    expected = {
        "importance_sampling": -sum(r * a for r, a in zip(ratio, adv)),
        "ppo": -sum(min(r * a, c * a) for r, c, a in zip(ratio, clipped(0.8, 1.2), adv)),
        "cispo": -sum(c * x * a for c, x, a in zip(clipped(0.0, 4.0), lp, adv)),
        "dro": -sum(x * a - 0.25 * (x - y) ** 2 for x, y, a in zip(lp, q, adv)),
    }
    s = math.exp(sum(a - b for a, b in zip(lp, q)) / len(lp))  # every token is sampled-from here: all in the mask
    expected["gspo"] = -sum(min(s * a, min(max(s, 0.5), 2.0) * a) for a in adv)
    for name, value in expected.items():
        assert seen["losses"][name] == pytest.approx(value, rel=1e-4, abs=1e-4), name
    # the custom loss's value is the client's own; its gradient stepped the weights as its cross_entropy twin
    assert seen["custom_metrics"]["loss:sum"] == pytest.approx(-sum(x * a for x, a in zip(lp, adv)), rel=1e-4)
    assert seen["after_custom"] == pytest.approx(seen["after_twin"], abs=1e-5)
    assert seen["after_custom"] != pytest.approx(lp, abs=1e-3)
    # batched sampling gives every call what it gets alone (each row draws from its own seeded generator)
    for together, alone in zip(seen["together"], seen["alone"]):
        assert [t for t, _ in together] == [t for t, _ in alone]
        for (_, a), (_, b) in zip(together, alone):
            assert a == pytest.approx(b, abs=1e-4)
    assert [len(t) for t, _ in seen["alone"][3]] == [8, 8]  # max_tokens = 5 + seed
    # an old sampler samples the weights it saved, whatever its client trained since; a new one the new weights
    assert [t for t, _ in seen["old_again"]] == [t for t, _ in seen["alone"][0]]
    assert seen["old_scores"] == pytest.approx(seen["alone"][0][0][1], abs=1e-4)  # seed 0 sampled at temperature 1
    assert seen["new_scores"] != pytest.approx(seen["old_scores"], abs=1e-3)


def _finished_tinker_jobs(api: httpx.Client, count: int) -> list[dict] | None:
    jobs = [j for j in api.get("/learning/jobs", params={"limit": 100}).json()["data"]
            if j["id"].startswith("tinkerjob_")]
    done = [j for j in jobs if j["status"] in ("succeeded", "failed", "cancelled")]
    return done if len(done) >= count else None


def _loads_in_peft(backend, model_id: str) -> None:
    """The registered model is a PEFT adapter over the tiny base (what `models export` and vLLM take)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from synth_ai.backend.store.model_store import ModelStore

    store = ModelStore(backend.data_dir)
    entry = store.get_model(model_id)
    assert entry["base_model"] == TINY_TEXT
    base = AutoModelForCausalLM.from_pretrained(str(store.resolve(TINY_TEXT)), dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, entry["path"])
    trained = [p for n, p in adapted.named_parameters() if "lora_B" in n]
    assert trained and any(p.abs().sum().item() > 0 for p in trained)  # trained away from LoRA's zero start


def _sft_logprobs(backend, tokens: list[int]) -> list[float]:
    """The base model's log-probs of each next token, through the SFT trainer's own scoring path."""
    import torch

    from synth_ai.backend.ml.loading import core_parts
    from synth_ai.backend.ml.token_logprobs import lm_head_scores
    from synth_ai.backend.store.model_store import ModelStore
    from transformers import AutoModelForCausalLM

    folder = ModelStore(backend.data_dir).resolve(TINY_TEXT)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    decoder, head = core_parts(model)
    with torch.no_grad():
        hidden = decoder(input_ids=torch.tensor([tokens[:-1]])).last_hidden_state[0]
        return lm_head_scores(head, hidden, torch.tensor(tokens[1:])).logprobs.tolist()


@pytest.mark.slow
def test_bad_input_comes_back_as_the_sdks_errors(backend, tmp_path):
    seen = _client(backend, _BAD, tmp_path)
    assert seen["unknown_model"].startswith("NotFoundError") and "nobody/no-such-model" in seen["unknown_model"]
    assert "loss_fn 'stable_reinforce' is not supported" in seen["unsupported_loss"]
    assert "loss_fn_config.beta is not read by loss_fn 'ppo'" in seen["unread_config"]
    assert "weights has 1 rows but the model input has 3 tokens" in seen["mismatched_weights"]
    assert "top_k must be -1 (no limit) or a whole number >= 1" in seen["bad_top_k"]
    assert "lacks logprobs, advantages" in seen["missing_advantages"]
    assert "NotFoundError" in seen["bad_path"] and "nobody" in seen["bad_path"]
    assert isinstance(seen["is_loss"], float)


def test_wrong_key_and_unknown_future_are_refused(backend):
    wrong = httpx.post(f"{backend.url}/api/v1/create_session", json={}, headers={"X-API-Key": "tml-not-a-key"})
    assert wrong.status_code == 401 and "TINKER_API_KEY" in wrong.json()["error"]["hint"]
    missing = httpx.post(f"{backend.url}/api/v1/create_session", json={})
    assert missing.status_code == 401
    headers = {"X-API-Key": f"tml-{backend.key}"}
    unknown = httpx.post(f"{backend.url}/api/v1/retrieve_future", json={"request_id": "req-nothing"},
                         headers=headers)
    assert unknown.status_code == 404 and "req-nothing" in unknown.json()["detail"]
    # nothing was stored for them: an unknown training client's calls are 404s too
    step = httpx.post(f"{backend.url}/api/v1/optim_step", json={"model_id": "sess-x:train:0", "seq_id": 1},
                      headers=headers)
    assert step.status_code == 404 and "sess-x:train:0" in step.json()["detail"]
