"""What the demo runs: its sizes (`--fast` for CI) and the config files it writes into the run folder.

Every config is a plain TOML file a user could have written; the demo writes them next to the data they
produce so each step can be repeated by hand with the command the demo printed.

Two fresh runs print the same scores: every eval samples from seeds derived from `SAMPLING_SEED` (`[eval]
sampling_seed`), SFT and RL are seeded (SFT's default seed, RL's `[training].seed`), and every model call runs
alone (eval `concurrency = 1`, RL `max_concurrent_rollouts = 1`). Calls that share a decoding batch get log-probs
that differ in the last bits with the batch they land in, which RL turns into slightly different weights and,
some iterations later, different samples; one at a time, the sampled episodes are stored in seed order too, so
the filter writes the SFT data in the same order on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

APP_ID = "color-quiz"
MODEL = "synth-ai/tiny-qwen3"
HELD_OUT_SEEDS = 1000  # held-out seeds start here; sampling for SFT data uses seeds from 0
SAMPLING_SEED = 0
THINGS = 2  # how many of the quiz's things the seeds cycle through (the app's `things` env setting)


@dataclass(frozen=True)
class Sizes:
    held_out: int          # seeds every model is scored on
    sampled: int           # seeds sampled from the base model to make SFT data
    sample_temperature: float
    sft_epochs: int
    rl_iterations: int
    rl_batch: int
    rl_group: int

    @property
    def held_out_seeds(self) -> str:
        return f"{HELD_OUT_SEEDS}-{HELD_OUT_SEEDS + self.held_out - 1}"

    @property
    def sample_seeds(self) -> str:
        return f"0-{self.sampled - 1}"


FULL = Sizes(held_out=32, sampled=128, sample_temperature=1.0, sft_epochs=8, rl_iterations=60, rl_batch=4, rl_group=8)
FAST = Sizes(held_out=16, sampled=128, sample_temperature=1.0, sft_epochs=8, rl_iterations=40, rl_batch=4, rl_group=8)


@dataclass(frozen=True)
class RunFiles:
    root: Path

    @property
    def traces(self) -> Path:
        return self.root / "traces.db"

    @property
    def sampled_traces(self) -> Path:
        return self.root / "sampled_traces.db"

    @property
    def sft_data(self) -> Path:
        return self.root / "sft_data.jsonl"

    def config(self, name: str) -> Path:
        return self.root / "configs" / name


def write_configs(files: RunFiles, sizes: Sizes, task_url: str) -> dict[str, Path]:
    """Write every config the demo uses; returns them by step name."""
    (files.root / "configs").mkdir(parents=True, exist_ok=True)
    texts = {
        "eval_held_out.toml": _eval_toml(task_url, sizes.held_out_seeds, temperature=0.0, split="test"),
        "eval_sample.toml": _eval_toml(task_url, sizes.sample_seeds, temperature=sizes.sample_temperature,
                                       split="train"),
        "filter.toml": _filter_toml(files),
        "sft.toml": _sft_toml(files, sizes),
        "rl.toml": _rl_toml(task_url, sizes),
    }
    paths = {}
    for name, text in texts.items():
        path = files.config(name)
        path.write_text(text, encoding="utf-8")
        paths[name.removesuffix(".toml")] = path
    return paths


def _eval_toml(task_url: str, seeds: str, *, temperature: float, split: str) -> str:
    return f"""# Written by `synth-ai demo`: score a model on the {APP_ID} task app.
[eval]
app_id = "{APP_ID}"
task_app_url = "{task_url}"
model = "{MODEL}"
seeds = "{seeds}"
split = "{split}"
concurrency = 1
sampling_seed = {SAMPLING_SEED}
return_trace = true
trace_format = "structured"

[eval.env_config]
things = {THINGS}

[eval.policy_config]
temperature = {temperature}
max_tokens = 12
"""


def _filter_toml(files: RunFiles) -> str:
    return f"""# Written by `synth-ai demo`: keep the sampled episodes that named the right colour.
[filter]
db = "{files.sampled_traces}"
output = "{files.sft_data}"
splits = ["train"]
min_official_score = 0.7
"""


def _sft_toml(files: RunFiles, sizes: Sizes) -> str:
    return f"""# Written by `synth-ai demo`: fine-tune the tiny model on the filtered episodes.
[algorithm]
type = "offline"
method = "sft"
variety = "fft"

[job]
model = "{MODEL}"
data = "{files.sft_data}"

[training]
mode = "full_finetune"

[hyperparameters]
n_epochs = {sizes.sft_epochs}
per_device_batch = 4
gradient_accumulation_steps = 1
sequence_length = 128
learning_rate = 1e-3
warmup_ratio = 0.1
seed = 42
"""


def _rl_toml(task_url: str, sizes: Sizes) -> str:
    return f"""# Written by `synth-ai demo`: GSPO on the {APP_ID} task app, from the SFT model (--model ft:...).
[algorithm]
type = "online"
method = "policy_gradient"
variety = "gspo"

[services]
task_url = "{task_url}"

[compute]
gpu_type = "cpu"
gpu_count = 1

[topology]
type = "single_node_split"

[model]
base = "{MODEL}"
trainer_mode = "full"
label = "demo-color-quiz"

[rollout]
env_name = "{APP_ID}"
policy_name = "{APP_ID}"
max_turns = 1
episodes_per_batch = {sizes.rl_batch * sizes.rl_group}
max_concurrent_rollouts = 1

[rollout.env_config]
things = {THINGS}

[rollout.policy_config]
temperature = 1.0
max_tokens = 12

[training]
num_epochs = 1
iterations_per_epoch = {sizes.rl_iterations}
max_turns = 1
batch_size = {sizes.rl_batch}
group_size = {sizes.rl_group}
learning_rate = 1e-3
weight_sync_interval = 1
log_interval = 1
seed = 1
"""
