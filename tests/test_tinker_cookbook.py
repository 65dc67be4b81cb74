"""tinker-cookbook 0.5.8's own training loops, unchanged, against `synth-ai backend serve`: its supervised loop on a
small local chat file (its `FromConversationFileBuilder`) and its RL loop on its arithmetic environment
(`ArithmeticDatasetBuilder`, no Hub) and on a small environment written with its classes, whose reward rises, each a
few steps on the tiny Qwen3, with only `base_url` and the model set.
The cookbook runs from its own venv (bench/cookbook_env.py, built by test.sh in the background), as a user's
script would; their training clients are then jobs of the backend, with registered models."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from backend_support import TINY_TEXT, serve_backend, wait_for
from reference_support import REPO_ROOT, wait_for_build

COOKBOOK_PYTHON = REPO_ROOT / "bench" / ".cache" / "cookbook-venv" / "bin" / "python"

_SCRIPT = r"""
import asyncio, json, os, sys
from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder
from tinker_cookbook.renderers import TrainOnWhat
from tinker_cookbook.rl import train as rl_train
from tinker_cookbook.supervised import train as sl_train
from tinker_cookbook.supervised.data import FromConversationFileBuilder
from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

base_url, model, out, which = sys.argv[1:5]
options = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
renderer = "qwen3_disable_thinking"


class Interrupted(Exception):
    pass


if options.get("interrupt"):  # the run dies before its final checkpoint, as a killed one does
    from tinker_cookbook.checkpoint_utils import CheckpointManager

    async def _die(self, loop_state):
        raise Interrupted()

    CheckpointManager.save_final_async = _die
# the reward loop's environment, written with the cookbook's classes as its arithmetic_env.py is: to "Say
# something, <name>." a reply earns 1 when it opens with the word "The" (about a third of the tiny model's replies
# do at first, so every group of 8 mixes rewards and its advantages carry signal)
import random, re
from functools import partial
import chz
from tinker_cookbook import renderers
from tinker_cookbook.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from tinker_cookbook.rl.types import RLDataset, RLDatasetBuilder
from tinker_cookbook.tokenizer_utils import get_tokenizer

NAMES = ["Ada", "Bob", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivy", "Jon", "Kai", "Lea"]


class OpensWithThe(ProblemEnv):
    def __init__(self, name, renderer):
        super().__init__(renderer, convo_prefix=None, format_coef=0.0)
        self.name = name

    def get_question(self):
        return f"Say something, {self.name}."

    def check_answer(self, sample_str):
        match = re.match(r"\s*([A-Za-z]+)", sample_str)
        return bool(match) and match.group(1) == "The"

    def check_format(self, sample_str):
        return True

    def get_reference_answer(self):
        return "The ..."


class OpensWithTheDataset(RLDataset):
    def __init__(self, groups, group_size, batches, renderer):
        self.groups, self.group_size, self.batches, self.renderer = groups, group_size, batches, renderer

    def get_batch(self, index):
        rng = random.Random(index)
        return [ProblemGroupBuilder(env_thunk=partial(OpensWithThe, rng.choice(NAMES), self.renderer),
                                    num_envs=self.group_size, dataset_name="opens_with_the")
                for _ in range(self.groups)]

    def __len__(self):
        return self.batches


@chz.chz
class OpensWithTheBuilder(RLDatasetBuilder):
    groups: int
    group_size: int
    batches: int
    model_name_for_tokenizer: str
    renderer_name: str

    async def __call__(self):
        renderer = renderers.get_renderer(self.renderer_name, tokenizer=get_tokenizer(self.model_name_for_tokenizer))
        return OpensWithTheDataset(self.groups, self.group_size, self.batches, renderer), None


if which == "sl":
    rows = os.path.join(out, "chat.jsonl")
    with open(rows, "w") as f:
        for i in range(8):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                                             {"role": "assistant", "content": str(2 * i)}]}) + "\n")
    config = sl_train.Config(
        log_path=os.path.join(out, "sl"), model_name=model, recipe_name="sl", renderer_name=renderer,
        dataset_builder=FromConversationFileBuilder(
            common_config=ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=model, renderer_name=renderer,
                                                         max_length=256, batch_size=2,
                                                         train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES),
            file_path=rows, test_size=2),
        learning_rate=1e-3, lora_rank=8, max_steps=options.get("max_steps", 3),
        save_every=options.get("save_every", 2), eval_every=2, base_url=base_url)
    try:
        asyncio.run(sl_train.main(config))
    except Interrupted:
        print("INTERRUPTED before the final checkpoint")
elif which == "reward":
    config = rl_train.Config(
        log_path=os.path.join(out, "reward"), model_name=model, recipe_name="reward", renderer_name=renderer,
        dataset_builder=OpensWithTheBuilder(groups=4, group_size=8, batches=8, model_name_for_tokenizer=model,
                                            renderer_name=renderer),
        learning_rate=1e-3, max_tokens=2, lora_rank=8, save_every=0, eval_every=0,
        loss_fn="importance_sampling", base_url=base_url)
    asyncio.run(rl_train.main(config))
else:
    config = rl_train.Config(
        log_path=os.path.join(out, "rl"), model_name=model, recipe_name="rl", renderer_name=renderer,
        dataset_builder=ArithmeticDatasetBuilder(batch_size=2, group_size=2, n_batches=3,
                                                 model_name_for_tokenizer=model, renderer_name=renderer),
        learning_rate=1e-4, max_tokens=8, lora_rank=8, max_steps=2, save_every=1, eval_every=0,
        loss_fn="importance_sampling", base_url=base_url)
    asyncio.run(rl_train.main(config))
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    # the cookbook never closes its session: its clients' jobs end this long after its process does
    yield from serve_backend(tmp_path_factory, "cookbook", tiny=(TINY_TEXT,),
                             env={"SYNTH_AI_TINKER_SESSION_TIMEOUT_S": "30"})  # > the SDK's 10 s heartbeat


def _run(backend, tmp_path: Path, which: str, **options) -> Path:
    """Run the cookbook's `which` loop ("sl", "rl", or "reward": RL on the script's own environment); its log folder. `options` (the supervised loop's): `max_steps`,
    `save_every`, and `interrupt`, which makes the run stop before its final checkpoint."""
    wait_for_build("SYNTH_COOKBOOK_BUILD_STATUS", COOKBOOK_PYTHON, "the tinker-cookbook venv",
                   "python bench/cookbook_env.py")
    from synth_ai.backend.store.model_store import ModelStore

    model = ModelStore(backend.data_dir).resolve(TINY_TEXT)  # a local folder: the cookbook's tokenizer and model
    script = tmp_path / "loop.py"
    script.write_text(_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"TINKER_API_KEY": f"tml-{backend.key}", "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1",
                "OMP_NUM_THREADS": "1"})
    done = subprocess.run([str(COOKBOOK_PYTHON), "-W", "ignore", str(script), backend.url, str(model),
                           str(tmp_path), which, json.dumps(options)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert ("INTERRUPTED" in done.stdout) == bool(options.get("interrupt")), done.stdout[-3000:]
    return tmp_path / which


def _metrics(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _checkpoints(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_the_cookbooks_supervised_loop_trains_here(backend, tmp_path):
    log_path = _run(backend, tmp_path, "sl")
    metrics = _metrics(log_path)
    losses = [m["train_mean_nll"] for m in metrics if "train_mean_nll" in m]
    assert len(losses) == 3 and all(loss > 0 for loss in losses)
    assert any("test/nll" in m for m in metrics)  # its evaluator sampled from saved weights
    final = [c for c in _checkpoints(log_path) if c.get("name") == "final"]
    assert final and final[0]["state_path"].startswith("tinker://") and "/weights/final" in final[0]["state_path"]
    _client_jobs_succeed(backend, 1)


@pytest.mark.slow
def test_the_cookbooks_rl_loop_trains_here(backend, tmp_path):
    log_path = _run(backend, tmp_path, "rl")
    metrics = _metrics(log_path)
    assert len(metrics) == 2  # two steps, each with its sampled groups' rewards
    assert all(any(key.startswith("env/all/") for key in m) for m in metrics)
    # the sampler's log-probs of what it sampled are the trainer's (the cookbook's own check of the two paths)
    assert all(abs(m["optim/kl_sample_train_v1"]) < 1e-3 for m in metrics)
    assert any(c.get("sampler_path", "").startswith("tinker://") for c in _checkpoints(log_path))
    _client_jobs_succeed(backend, 2)


@pytest.mark.slow
def test_the_cookbooks_rl_loop_raises_the_reward_of_its_environment(backend, tmp_path):
    rewards = [m["env/all/reward/total"] for m in _metrics(_run(backend, tmp_path, "reward"))]
    assert len(rewards) == 8, rewards
    # about 0.35 before any update; about 0.95 at the end in 20 runs measured. Learning by chance (last two steps
    # >= 0.75 with the first step's policy) has a probability near 1e-11; a wrong loss sign drives it to 0, and
    # updates or sampler weights that never take effect keep it near 0.35
    last = sum(rewards[-2:]) / 2
    assert last >= 0.75 and last - rewards[0] >= 0.2, rewards


@pytest.mark.slow
def test_the_cookbooks_supervised_loop_resumes_from_its_checkpoints(backend, tmp_path):
    # a run stopped after step 1 (its checkpoints at step 1, no final one) ...
    log_path = _run(backend, tmp_path, "sl", max_steps=2, save_every=1, interrupt=True)
    first = _checkpoints(log_path)
    assert [c["name"] for c in first] == ["000001"]
    # ... then the same command with a higher max_steps, in the same log folder: it resumes there
    assert _run(backend, tmp_path, "sl", max_steps=3, save_every=1) == log_path
    log = (log_path / "logs.log").read_text()
    assert f"Resumed training from {first[0]['state_path']}" in log
    # its RestClient read the run's renderer back (user_metadata), rather than warning that it could not
    assert f"Renderer metadata matches for checkpoint {first[0]['state_path']}: qwen3_disable_thinking" in log
    steps = [m["step"] for m in _metrics(log_path) if "train_mean_nll" in m]
    # the cookbook resumes at the batch its checkpoint names (it saves a step's state under that step's batch, so
    # that batch runs again) and goes on to max_steps
    assert steps == [0, 1, 1, 2]
    last = _checkpoints(log_path)[-1]
    assert last["name"] == "final" and last["state_path"] != first[0]["state_path"]


def _client_jobs_succeed(backend, count: int) -> None:
    """Each loop's training client is a job that ends with a registered model once its session goes quiet."""
    api = backend.client()

    def finished():
        jobs = [j for j in api.get("/learning/jobs", params={"limit": 100}).json()["data"]
                if j["id"].startswith("tinkerjob_") and j["status"] in ("succeeded", "failed", "cancelled")]
        return jobs if len(jobs) >= count else None

    jobs = wait_for(finished, timeout=120, what="the cookbook's training clients to end")
    assert {j["status"] for j in jobs} == {"succeeded"}
    listed = {m["id"] for m in api.get("/learning/models").json()["data"]}
    assert {j["fine_tuned_model"] for j in jobs} <= listed
