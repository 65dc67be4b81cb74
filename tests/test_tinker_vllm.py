"""Tinker samplers on vLLM (`SYNTH_AI_ROLLOUT_ENGINE=vllm`, vLLM's CPU build here) driven by the real `tinker` SDK:
vLLM samples with each sampler's LoRA adapter (the PEFT folder its weights are saved as), so what it samples
scores as the trained client's forward scores it, not as the base model's; stops and compute_logprobs hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from vllm_support import TINY_HD64, VLLM_ENV, require_vllm

from backend_support import serve_backend

pytestmark = pytest.mark.slow

_SCRIPT = r"""
import json, sys, tinker
from tinker import types
base_url, model = sys.argv[1], sys.argv[2]
seen = {}
sc = tinker.ServiceClient(base_url=base_url)
tc = sc.create_lora_training_client(base_model=model, rank=4).result()
base = sc.create_lora_training_client(base_model=model, rank=4).result()  # never trained: the base model
ids = tc.get_tokenizer().encode("The sky is blue and the grass is green")
datum = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                    loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)})
for _ in range(3):
    tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=2e-2)).result()
sampler = tc.save_weights_and_get_sampling_client()
prompt = ids[:3]
out = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=2,
                     sampling_params=types.SamplingParams(max_tokens=6, seed=5, stop=[])).result()
seen["samples"] = [{"tokens": s.tokens, "logprobs": s.logprobs, "stop": s.stop_reason} for s in out.sequences]
full = prompt + out.sequences[0].tokens
scored = types.Datum(model_input=types.ModelInput.from_ints(full[:-1]),
                     loss_fn_inputs={"target_tokens": full[1:], "weights": [1.0] * (len(full) - 1)})
seen["trained"] = tc.forward([scored], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()[2:]
seen["base"] = base.forward([scored], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()[2:]
seen["recomputed"] = sampler.compute_logprobs(types.ModelInput.from_ints(full)).result()[3:]
stop_at = out.sequences[0].tokens[2]
stopped = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=1, sampling_params=types.SamplingParams(
    max_tokens=6, seed=5, stop=[stop_at])).result().sequences[0]
seen["stopped"] = {"tokens": stopped.tokens, "stop": stopped.stop_reason, "at": stop_at}
path = tc.save_weights_for_sampler("named").result().path
named = sc.create_sampling_client(model_path=path).sample(
    types.ModelInput.from_ints(prompt), num_samples=2, sampling_params=types.SamplingParams(
        max_tokens=6, seed=5, stop=[])).result()
seen["named"] = [s.tokens for s in named.sequences]
sc.close("success").result()
print("SEEN " + json.dumps(seen))
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    require_vllm()
    yield from serve_backend(tmp_path_factory, "tinker-vllm", tiny=(TINY_HD64,),
                             env={"SYNTH_AI_ROLLOUT_ENGINE": "vllm", **VLLM_ENV})


def test_samplers_sample_through_vllm_with_their_adapters(backend, tmp_path):
    script = tmp_path / "client.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "TINKER_API_KEY": f"tml-{backend.key}", "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-W", "ignore", str(script), backend.url, TINY_HD64],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("SEEN "))[len("SEEN "):])
    first = seen["samples"][0]
    assert [len(s["tokens"]) for s in seen["samples"]] == [6, 6] and {s["stop"] for s in seen["samples"]} == {"length"}
    # vLLM's log-probs of what it sampled are the trained client's, clearly not the base model's
    assert first["logprobs"] == pytest.approx(seen["trained"], abs=2e-3)
    assert max(abs(a - b) for a, b in zip(seen["trained"], seen["base"])) > 0.05
    assert seen["recomputed"] == pytest.approx(seen["trained"], abs=2e-3)
    # a stop token ends the sequence and stays in it; the named sampler's PEFT folder samples as the in-memory one
    stopped = seen["stopped"]
    assert stopped["stop"] == "stop" and stopped["tokens"][-1] == stopped["at"] and len(stopped["tokens"]) <= 3
    assert seen["named"][0] == first["tokens"]
