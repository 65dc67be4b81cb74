"""A corpus of broken configs (RL, SFT, eval, filter): every case names the TOML key path of the error, the line
the locator finds it on, a fragment of the message, and fails `synth-ai config validate` with exit code 3.

Each case starts from a valid base config in `tests/data/broken_configs/` and changes one thing. The line the
error must point at carries a trailing `#<` comment; cases whose key is absent from the file expect no line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from synth_ai.config.common import ResolveContext
from synth_ai.config.loader import load_config
from synth_ai.errors import ConfigError, ConfigIssue

DATA = Path(__file__).parent / "data" / "broken_configs"
BASE = {kind: (DATA / f"{kind}_base.toml").read_text() for kind in ("rl", "sft", "eval", "filter")}
MARK = "#<"
AT_MARK = object()  # the expected line is the one carrying the `#<` marker


def edit(kind: str, *changes: tuple[str, str], append: str = "") -> str:
    """The base config of `kind` with each (old, new) snippet replaced exactly once."""
    text = BASE[kind]
    for old, new in changes:
        assert text.count(old) == 1, f"snippet {old!r} must occur once in {kind}_base.toml"
        text = text.replace(old, new)
    return text + append


@dataclass
class Case:
    id: str
    kind: str
    text: str
    key: str
    fragment: str
    line: Any = AT_MARK
    ctx: dict[str, Any] = field(default_factory=dict)
    cli: bool = True  # also check through `synth-ai config validate` (cases needing a ResolveContext can't)
    single: bool = True  # the one mistake is reported once (no echo from a second rule)

    def expected_line(self) -> int | None:
        if self.line is not AT_MARK:
            return self.line
        marked = [n for n, text in enumerate(self.text.splitlines(), start=1) if text.rstrip().endswith(MARK)]
        assert len(marked) == 1, f"case {self.id} must mark exactly one line with {MARK}"
        return marked[0]


VL = ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-VL-4B-Instruct"')
NO_ALGORITHM = ('[algorithm]\ntype = "offline"\nmethod = "sft"\nvariety = "fft"\n', "")
VL_SFT = ('model = "Qwen/Qwen3-4B"', 'model = "Qwen/Qwen3-VL-4B-Instruct"')

CASES: list[Case] = [
    # ---------------------------------------------------------------- RL: algorithm and model choice
    Case("rl-algorithm-missing", "rl",
         edit("rl", ('[algorithm]\ntype = "online"\nmethod = "policy_gradient"\nvariety = "gspo"\n', "")),
         "[algorithm]", "required table is missing", line=None),
    Case("rl-algorithm-unsupported-variety", "rl",
         edit("rl", ("[algorithm]\n", "[algorithm] #<\n"), ('variety = "gspo"', 'variety = "ppo"')),
         "[algorithm]", "unsupported algorithm configuration"),
    Case("rl-algorithm-variety-missing", "rl",
         edit("rl", ("[algorithm]\n", "[algorithm] #<\n"), ('variety = "gspo"\n', "")),
         "[algorithm].variety", "required key is missing"),
    Case("rl-given-sft-algorithm", "rl",
         edit("rl", ("[algorithm]\n", "[algorithm] #<\n"),
              ('type = "online"\nmethod = "policy_gradient"\nvariety = "gspo"',
               'type = "offline"\nmethod = "sft"\nvariety = "fft"')),
         "[algorithm]", "but this command expects RL"),
    Case("rl-model-source-and-base", "rl",
         edit("rl", ("[model]\n", "[model] #<\n"),
              ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-4B"\nsource = "ft:Qwen/Qwen3-4B:job_1"')),
         "[model]", "exactly one of [model].source or [model].base is required, found both"),
    Case("rl-model-neither-source-nor-base", "rl",
         edit("rl", ("[model]\n", "[model] #<\n"), ('base = "Qwen/Qwen3-4B"\n', "")),
         "[model]", "found neither"),
    Case("rl-model-trainer-mode-missing", "rl",
         edit("rl", ("[model]\n", "[model] #<\n"), ('trainer_mode = "full"\n', "")),
         "[model].trainer_mode", "required key is missing"),
    Case("rl-model-label-missing", "rl",
         edit("rl", ("[model]\n", "[model] #<\n"), ('label = "base-rl"\n', "")),
         "[model].label", "required key is missing"),
    Case("rl-model-label-empty", "rl",
         edit("rl", ('label = "base-rl"', 'label = "  " #<')),
         "[model].label", "non-empty string"),
    Case("rl-policy-variant-label-missing", "rl",
         edit("rl", ('[model]\nbase = "Qwen/Qwen3-4B"\ntrainer_mode = "full"\nlabel = "base-rl"\n',
                     '[policy] #<\nmodel_name = "Qwen/Qwen3-4B"\ntrainer_mode = "full"\n')),
         "[policy].label", "required key is missing"),
    Case("rl-policy-variant-both", "rl",
         edit("rl", ('[model]\nbase = "Qwen/Qwen3-4B"\n',
                     '[policy] #<\nmodel_name = "Qwen/Qwen3-4B"\nsource = "rl:Qwen/Qwen3-4B:job_2"\n')),
         "[policy]", "exactly one of [policy].source or [policy].model_name"),
    Case("rl-no-model-section", "rl",
         edit("rl", ('[model]\nbase = "Qwen/Qwen3-4B"\ntrainer_mode = "full"\nlabel = "base-rl"\n', "")),
         "[model]", "needs a [model] (or [policy]) section", line=None),
    # ---------------------------------------------------------------- RL: numbers
    Case("rl-batch-size-bool", "rl", edit("rl", ("batch_size = 8", "batch_size = true #<")),
         "[training].batch_size", "not a boolean"),
    Case("rl-batch-size-string", "rl", edit("rl", ("batch_size = 8", 'batch_size = "eight" #<')),
         "[training].batch_size", "expected a positive integer"),
    Case("rl-batch-size-float", "rl", edit("rl", ("batch_size = 8", "batch_size = 2.5 #<")),
         "[training].batch_size", "expected a positive integer"),
    Case("rl-group-size-zero", "rl", edit("rl", ("group_size = 4", "group_size = 0 #<")),
         "[training].group_size", "greater than zero"),
    Case("rl-rollout-max-turns-negative", "rl",
         edit("rl", ("max_turns = 1\nepisodes_per_batch", "max_turns = -1 #<\nepisodes_per_batch")),
         "[rollout].max_turns", "greater than zero"),
    Case("rl-learning-rate-zero", "rl", edit("rl", ("learning_rate = 5e-6", "learning_rate = 0 #<")),
         "[training].learning_rate", "greater than zero"),
    Case("rl-learning-rate-negative", "rl", edit("rl", ("learning_rate = 5e-6", "learning_rate = -1e-5 #<")),
         "[training].learning_rate", "greater than zero"),
    Case("rl-training-required-key-missing", "rl",
         edit("rl", ("[training]\n", "[training] #<\n"), ("log_interval = 1\n", "")),
         "[training].log_interval", "required key is missing"),
    Case("rl-evaluation-missing-fields", "rl",
         edit("rl", ("[evaluation]\n", "[evaluation] #<\n"), ("every_n_iters = 2\nseeds = [0, 1, 2, 3]\n", "")),
         "[evaluation].seeds", "required key is missing", single=False),  # two keys removed
    Case("rl-evaluation-bad-seed", "rl", edit("rl", ("seeds = [0, 1, 2, 3]", 'seeds = ["x"] #<')),
         "[evaluation].seeds", "cannot read seed 'x'"),
    # ---------------------------------------------------------------- RL: sections, topology, weight sync
    Case("rl-compute-missing", "rl", edit("rl", ('[compute]\ngpu_type = "H100"\ngpu_count = 2\n', "")),
         "[compute]", "needs a [compute] section", line=None),
    Case("rl-compute-gpu-count-missing", "rl",
         edit("rl", ("[compute]\n", "[compute] #<\n"), ("gpu_count = 2\n", "")),
         "[compute].gpu_count", "required key is missing"),
    Case("rl-rollout-missing", "rl",
         edit("rl", ('[rollout]\nenv_name = "math"\npolicy_name = "math-single-step"\nmax_turns = 1\n'
                     'episodes_per_batch = 4\nmax_concurrent_rollouts = 2\n\n'
                     '[rollout.policy_config]\ntemperature = 0.7\nmax_tokens = 256\n', "")),
         "[rollout]", "needs a [rollout] section", line=None),
    Case("rl-topology-missing", "rl",
         edit("rl", ("[compute]\n", "[compute] #<\n"),
              ('[topology]\ntype = "single_node_split"\ngpus_for_vllm = 1\ngpus_for_training = 1\n', "")),
         "[compute].topology", "needs a topology"),
    Case("rl-tensor-parallel-only-in-topology", "rl",
         edit("rl", ("gpus_for_training = 1\n", "gpus_for_training = 1\ntensor_parallel = 1\n"),
              ("[vllm]\n", "[vllm] #<\n")),
         "[vllm].tensor_parallel_size", "must be set in both the topology and [vllm]"),
    Case("rl-tensor-parallel-only-in-vllm", "rl",
         edit("rl", ("[topology]\n", "[topology] #<\n"),
              ("max_model_len = 4096", "max_model_len = 4096\ntensor_parallel_size = 1")),
         "[topology].tensor_parallel", "must be set in both the topology and [vllm]"),
    Case("rl-tensor-parallel-different", "rl",
         edit("rl", ("gpu_count = 2", "gpu_count = 4"), ("gpus_for_vllm = 1", "gpus_for_vllm = 2"),
              ("gpus_for_training = 1\n", "gpus_for_training = 1\ntensor_parallel = 1\n"),
              ("max_model_len = 4096", "max_model_len = 4096\ntensor_parallel_size = 2 #<")),
         "[vllm].tensor_parallel_size", "disagrees with the topology's tensor_parallel (1)"),
    Case("rl-tensor-parallel-zero-in-vllm", "rl",
         edit("rl", ("gpus_for_training = 1\n", "gpus_for_training = 1\ntensor_parallel = 0\n"),
              ("max_model_len = 4096", "max_model_len = 4096\ntensor_parallel_size = 0 #<")),
         "[vllm].tensor_parallel_size", "greater than zero", single=False),
    Case("rl-topology-more-gpus-than-compute", "rl",
         edit("rl", ("gpus_for_training = 1", "gpus_for_training = 4 #<")),
         "[topology].gpus_for_training", "the topology uses 5 GPUs but [compute] provides 2"),
    Case("rl-compute-topology-more-gpus", "rl",
         edit("rl", ("[topology]\n", "[compute.topology]\n"), ("gpus_for_vllm = 1", "gpus_for_vllm = 3"),
              ("gpus_for_training = 1", "gpus_for_training = 1 #<")),
         "[compute.topology].gpus_for_training", "the topology uses 4 GPUs but [compute] provides 2"),
    Case("rl-topology-vllm-takes-every-gpu", "rl",
         edit("rl", ("gpus_for_vllm = 1", "gpus_for_vllm = 2 #<"), ("gpus_for_training = 1\n", "")),
         "[topology].gpus_for_vllm", "leaves no GPU to train on"),
    Case("rl-weight-sync-disabled", "rl",
         BASE["rl"].replace("[evaluation]", "[training.weight_sync]\nenable = false #<\n\n[evaluation]"),
         "[training.weight_sync].enable", "weight sync cannot be disabled"),
    Case("rl-weight-sync-without-policy-target", "rl",
         BASE["rl"].replace("[evaluation]", '[training.weight_sync]\ntargets = ["reference"] #<\n\n[evaluation]'),
         "[training.weight_sync].targets", 'must include "policy"'),
    Case("rl-weight-sync-interval-zero", "rl",
         edit("rl", ("weight_sync_interval = 1", "weight_sync_interval = 0 #<")),
         "[training].weight_sync_interval", "greater than zero"),
    # ---------------------------------------------------------------- RL: judge and rubric
    Case("rl-judge-without-options", "rl", edit("rl", append='\n[judge] #<\ntype = "groq"\ntimeout_s = 30\n'),
         "[judge].options", "needs a [judge.options] table"),
    Case("rl-judge-bad-provider", "rl",
         edit("rl", append='\n[judge]\ntype = "x"\n\n[judge.options]\nprovider = "anthropic" #<\nmodel = "m"\n'),
         "[judge.options].provider", "expected one of openai, groq, gemini"),
    Case("rl-judge-empty-model", "rl",
         edit("rl", append='\n[judge]\ntype = "x"\n\n[judge.options]\nprovider = "openai"\nmodel = "" #<\n'),
         "[judge.options].model", "non-empty judge model name"),
    Case("rl-judge-event-and-outcome-off", "rl",
         edit("rl", append='\n[judge]\n\n[judge.options] #<\nprovider = "groq"\nmodel = "m"\n'
                           'event = false\noutcome = false\n'),
         "[judge].options", "at least one of event or outcome"),
    Case("rl-judge-timeout-zero", "rl",
         edit("rl", append='\n[judge]\ntimeout_s = 0 #<\n\n[judge.options]\nprovider = "groq"\nmodel = "m"\n'),
         "[judge].timeout_s", "greater than zero"),
    Case("rl-rubric-weights-all-zero", "rl",
         edit("rl", append="\n[rubric]\nenabled = true\n\n[rubric.weights] #<\nenv = 0\nevent = 0\noutcome = 0\n"),
         "[rubric].weights", "rubric weights are all zero"),
    Case("rl-rubric-weight-negative", "rl",
         edit("rl", append="\n[rubric.weights]\nenv = -1 #<\n"),
         "[rubric.weights].env", "expected a number >= 0"),
    # ---------------------------------------------------------------- RL: models
    Case("rl-unknown-model", "rl", edit("rl", ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-5B" #<')),
         "[model].base", "Model 'Qwen/Qwen3-5B' is not supported"),
    Case("rl-model-not-rl-capable", "rl", edit("rl", ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-32B" #<')),
         "[model].base", "does not support RL training"),
    Case("rl-vl-model-not-rl-capable", "rl",
         edit("rl", ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-VL-32B-Instruct" #<')),
         "[model].base", "does not support RL training"),
    Case("rl-experimental-model", "rl",
         edit("rl", ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-4B-Thinking-2507" #<')),
         "[model].base", "is experimental and disabled"),
    Case("rl-experimental-via-sdk-experimental-models", "rl",
         edit("rl", ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-4B" #<')),
         "[model].base", "Model 'Qwen/Qwen3-4B' is experimental and disabled",
         ctx={"environ": {"SDK_EXPERIMENTAL_MODELS": "qwen/qwen3-4b, Qwen/Qwen3-8B"}}, cli=False),
    Case("rl-fine-tuned-id-as-base", "rl",
         edit("rl", ('base = "Qwen/Qwen3-4B"', 'base = "ft:Qwen/Qwen3-4B:job_1" #<')),
         "[model].base", "a fine-tuned id cannot be a base model"),
    Case("rl-fine-tuned-source-unknown-base", "rl",
         edit("rl", ('base = "Qwen/Qwen3-4B"', 'source = "ft:Qwen/Qwen9-4B:job_1" #<')),
         "[model].source", "is not supported"),
    # ---------------------------------------------------------------- RL: task URL
    Case("rl-no-task-url", "rl", edit("rl", ('[services]\ntask_url = "http://127.0.0.1:8001"\n', "")),
         "[services].task_url", "a task app URL is required", line=None),
    Case("rl-task-url-not-http", "rl",
         edit("rl", ('task_url = "http://127.0.0.1:8001"', 'task_url = "127.0.0.1:8001" #<')),
         "[services].task_url", "must start with http:// or https://"),
    # ---------------------------------------------------------------- RL: vision on a text-only model
    Case("rl-text-model-supports-vision", "rl",
         edit("rl", ('label = "base-rl"', 'label = "base-rl"\nsupports_vision = true #<')),
         "[model].supports_vision", "is text-only; vision settings are not allowed"),
    Case("rl-text-model-max-images-per-message", "rl",
         edit("rl", ('label = "base-rl"', 'label = "base-rl"\nmax_images_per_message = 1 #<')),
         "[model].max_images_per_message", "is text-only"),
    Case("rl-text-model-rollout-use-vision", "rl",
         edit("rl", ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nuse_vision = true #<")),
         "[rollout].use_vision", "is text-only"),
    Case("rl-text-model-policy-config-use-vision", "rl",
         edit("rl", ("temperature = 0.7", "temperature = 0.7\nuse_vision = true #<")),
         "[rollout.policy_config].use_vision", "is text-only"),
    Case("rl-text-model-vllm-limit-mm", "rl",
         edit("rl", ("max_model_len = 4096", "max_model_len = 4096\nlimit_mm_per_prompt = { image = 1 } #<")),
         "[vllm].limit_mm_per_prompt", "is text-only"),
    Case("rl-text-model-training-supports-vision", "rl",
         edit("rl", ("log_interval = 1", "log_interval = 1\nsupports_vision = true #<")),
         "[training].supports_vision", "is text-only"),
    Case("rl-text-model-max-images-per-step", "rl",
         edit("rl", ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nmax_images_per_step = 1 #<")),
         "[rollout].max_images_per_step", "is text-only"),
    # ---------------------------------------------------------------- RL: Qwen3-VL and thinking rules
    Case("rl-vl-max-images-per-step-over-limit", "rl",
         edit("rl", VL, ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nmax_images_per_step = 2 #<")),
         "[rollout].max_images_per_step", "more images per step than the model accepts (limit 1)"),
    Case("rl-vl-image-only-without-vision", "rl",
         edit("rl", VL, ("max_concurrent_rollouts = 2",
                         "max_concurrent_rollouts = 2\nuse_vision = false\nimage_only_mode = true #<")),
         "[rollout].image_only_mode", "image_only_mode needs use_vision = true"),
    Case("rl-vl-policy-image-only-without-vision", "rl",
         edit("rl", VL, ("temperature = 0.7", "temperature = 0.7\nuse_vision = false\nimage_only_mode = true #<")),
         "[rollout.policy_config].image_only_mode", "image_only_mode needs use_vision = true"),
    Case("rl-vl-vision-off-but-rollout-uses-it", "rl",
         edit("rl", VL, ('label = "base-rl"', 'label = "base-rl"\nsupports_vision = false'),
              ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nuse_vision = true #<")),
         "[rollout].use_vision", "vision is off"),
    Case("rl-thinking-mode-invalid", "rl",
         edit("rl", ("temperature = 0.7", 'temperature = 0.7\nthinking_mode = "deep" #<')),
         "[rollout.policy_config].thinking_mode", "expected 'think' or 'no_think'"),
    Case("rl-thinking-budget-zero", "rl",
         edit("rl", ("max_concurrent_rollouts = 2", "max_concurrent_rollouts = 2\nthinking_budget = 0 #<")),
         "[rollout].thinking_budget", "greater than zero"),
    Case("rl-thinking-budget-bool", "rl",
         edit("rl", ("temperature = 0.7", "temperature = 0.7\nthinking_budget = true #<")),
         "[rollout.policy_config].thinking_budget", "not a boolean"),
    # ---------------------------------------------------------------- SFT
    Case("sft-given-rl-algorithm", "sft",
         edit("sft", ("[algorithm]\n", "[algorithm] #<\n"),
              ('type = "offline"\nmethod = "sft"\nvariety = "fft"',
               'type = "online"\nmethod = "policy_gradient"\nvariety = "gspo"')),
         "[algorithm]", "but this command expects SFT"),
    # Shaped as the product docs show SFT configs (no [algorithm]): the mistake is reported at its own key.
    Case("sft-docs-shape-negative-batch", "sft",
         edit("sft", NO_ALGORITHM, ("per_device_batch = 2", "per_device_batch = -2 #<")),
         "[hyperparameters].per_device_batch", "greater than zero"),
    Case("sft-docs-shape-warmup-ratio-above-one", "sft",
         edit("sft", NO_ALGORITHM, ("warmup_ratio = 0.05", "warmup_ratio = 1.5 #<")),
         "[hyperparameters].warmup_ratio", "between 0 and 1"),
    Case("sft-docs-shape-no-step-count", "sft",
         edit("sft", NO_ALGORITHM, ("[hyperparameters]\n", "[hyperparameters] #<\n"), ("n_epochs = 1\n", "")),
         "[hyperparameters]", "include at least one of n_epochs, total_steps, train_steps, steps"),
    Case("sft-step-count-missing", "sft",
         edit("sft", ("[hyperparameters]\n", "[hyperparameters] #<\n"), ("n_epochs = 1\n", "")),
         "[hyperparameters]", "no training length"),
    Case("sft-docs-shape-mode-typo", "sft", edit("sft", NO_ALGORITHM, ('mode = "full_finetune"', 'mode = "lroa" #<')),
         "[training].mode", "unknown training mode"),
    Case("sft-qlora-with-full-mode", "sft", edit("sft", ("use_qlora = false", "use_qlora = true #<")),
         "[training].use_qlora", "QLoRA with a full fine-tune mode"),
    Case("sft-algorithm-unsupported", "sft",
         edit("sft", ("[algorithm]\n", "[algorithm] #<\n"), ('variety = "fft"', 'variety = "qlora"')),
         "[algorithm]", "unsupported algorithm configuration"),
    Case("sft-job-model-missing", "sft", edit("sft", ("[job]\n", "[job] #<\n"), ('model = "Qwen/Qwen3-4B"\n', "")),
         "[job].model", "no model to fine-tune"),
    Case("sft-job-missing", "sft", edit("sft", ('[job]\nmodel = "Qwen/Qwen3-4B"\ndata = "train.jsonl"\n', "")),
         "[job]", "required table is missing", line=None),
    Case("sft-fine-tuned-model-of-unknown-base", "sft",
         edit("sft", ('model = "Qwen/Qwen3-4B"', 'model = "ft:Llama-3-8B:job_9" #<')),
         "[job].model", "Model 'ft:Llama-3-8B:job_9' is not supported"),
    Case("sft-unknown-model", "sft", edit("sft", ('model = "Qwen/Qwen3-4B"', 'model = "Llama-3-8B" #<')),
         "[job].model", "Model 'Llama-3-8B' is not supported"),
    Case("sft-experimental-model", "sft",
         edit("sft", ('model = "Qwen/Qwen3-4B"', 'model = "Qwen/Qwen3-Coder-480B-A35B-Instruct" #<')),
         "[job].model", "is experimental and disabled"),
    Case("sft-lora-mode-with-fft-variety", "sft", edit("sft", ('mode = "full_finetune"', 'mode = "lora" #<')),
         "[training].mode", "LoRA mode with a full fine-tune algorithm"),
    Case("sft-full-mode-with-lora-variety", "sft",
         edit("sft", ('variety = "fft"', 'variety = "lora"'), ('mode = "full_finetune"', 'mode = "full_finetune" #<')),
         "[training].mode", "full fine-tune mode with a LoRA algorithm"),
    Case("sft-bf16-and-fp16", "sft", edit("sft", ("bf16 = true", "bf16 = true\nfp16 = true #<")),
         "[hyperparameters.parallelism].fp16", "bf16 and fp16 cannot both be on"),
    Case("sft-deepspeed-stage-4", "sft", edit("sft", ("deepspeed_stage = 2", "deepspeed_stage = 4 #<")),
         "[hyperparameters.parallelism].deepspeed_stage", "expected 0, 1, 2 or 3"),
    Case("sft-parallel-degrees-above-gpus", "sft",
         edit("sft", ("bf16 = true", "bf16 = true\ntensor_parallel_size = 2 #<\npipeline_parallel_size = 2")),
         "[hyperparameters.parallelism].tensor_parallel_size", "needs 4 GPUs but [compute] provides 2"),
    Case("sft-warmup-ratio-above-one", "sft", edit("sft", ("warmup_ratio = 0.05", "warmup_ratio = 1.5 #<")),
         "[hyperparameters].warmup_ratio", "between 0 and 1"),
    Case("sft-warmup-ratio-negative", "sft", edit("sft", ("warmup_ratio = 0.05", "warmup_ratio = -0.1 #<")),
         "[hyperparameters].warmup_ratio", "between 0 and 1"),
    Case("sft-learning-rate-zero", "sft", edit("sft", ("learning_rate = 1e-5", "learning_rate = 0.0 #<")),
         "[hyperparameters].learning_rate", "greater than zero"),
    Case("sft-per-device-batch-bool", "sft", edit("sft", ("per_device_batch = 2", "per_device_batch = false #<")),
         "[hyperparameters].per_device_batch", "not a boolean"),
    Case("sft-n-epochs-zero", "sft", edit("sft", ("n_epochs = 1", "n_epochs = 0 #<")),
         "[hyperparameters].n_epochs", "greater than zero"),
    Case("sft-sequence-length-string", "sft", edit("sft", ("sequence_length = 2048", 'sequence_length = "long" #<')),
         "[hyperparameters].sequence_length", "expected a positive integer"),
    Case("sft-gpu-count-zero", "sft", edit("sft", ("gpu_count = 2", "gpu_count = 0 #<")),
         "[compute].gpu_count", "greater than zero"),
    Case("sft-dataset-required-but-unset", "sft",
         edit("sft", ("[job]\n", "[job] #<\n"), ('data = "train.jsonl"\n', "")),
         "[job].data", "no training dataset", ctx={"require_dataset": True}, cli=False),
    Case("sft-dataset-required-but-missing", "sft", edit("sft", ('data = "train.jsonl"', 'data = "nope.jsonl" #<')),
         "[job].data", "dataset not found: nope.jsonl", ctx={"require_dataset": True}, cli=False),
    Case("sft-text-model-supports-vision", "sft", edit("sft", append="\n[model_config]\nsupports_vision = true #<\n"),
         "[model_config].supports_vision", "is text-only; vision settings are not allowed"),
    Case("sft-text-model-max-images", "sft", edit("sft", append="\n[model_config]\nmax_images_per_message = 2 #<\n"),
         "[model_config].max_images_per_message", "is text-only"),
    Case("sft-vl-bad-max-images", "sft",
         edit("sft", VL_SFT, append="\n[model_config]\nmax_images_per_message = 0 #<\n"),
         "[model_config].max_images_per_message", "greater than zero"),
    # ---------------------------------------------------------------- eval
    Case("eval-app-id-missing", "eval",
         edit("eval", ("[eval]\n", "[eval] #<\n"), ('app_id = "math-single-step"\n', "")),
         "[eval].app_id", "required key is missing"),
    Case("eval-model-missing", "eval", edit("eval", ("[eval]\n", "[eval] #<\n"), ('model = "Qwen/Qwen3-4B"\n', "")),
         "[eval].model", "required key is missing"),
    Case("eval-seeds-not-numbers", "eval", edit("eval", ("seeds = [0, 1, 2]", 'seeds = "a-b" #<')),
         "[eval].seeds", "cannot read seed 'a-b'"),
    Case("eval-seeds-backwards-range", "eval", edit("eval", ("seeds = [0, 1, 2]", 'seeds = "3-1" #<')),
         "[eval].seeds", "seed range '3-1' ends before it starts"),
    Case("eval-seeds-empty", "eval", edit("eval", ("seeds = [0, 1, 2]", "seeds = [] #<")),
         "[eval].seeds", "expected at least one seed"),
    Case("eval-seeds-bool", "eval", edit("eval", ("seeds = [0, 1, 2]", "seeds = [true] #<")),
         "[eval].seeds", "not a boolean"),
    Case("eval-concurrency-zero", "eval", edit("eval", ("concurrency = 2", "concurrency = 0 #<")),
         "[eval].concurrency", "greater than zero"),
    Case("eval-max-llm-calls-zero", "eval", edit("eval", ("max_llm_calls = 4", "max_llm_calls = 0 #<")),
         "[eval].max_llm_calls", "greater than zero"),
    Case("eval-bad-trace-format", "eval", edit("eval", ('trace_format = "structured"', 'trace_format = "xml" #<')),
         "[eval].trace_format", "expected 'compact', 'full' or 'structured'"),
    Case("eval-judge-module-and-path", "eval",
         edit("eval", append='\n[eval.judge] #<\nmodule = "judges"\npath = "judges.py"\n'),
         "[eval].judge", "exactly one of `module` or `path`"),
    Case("eval-named-judge-without-module", "eval",
         edit("eval", append='\n[eval.judge.quality] #<\ncallable = "score"\n'),
         "[eval.judge].quality", "exactly one of `module` or `path`"),
    Case("eval-judge-without-module-or-path", "eval",
         edit("eval", append='\n[eval.judge] #<\ncallable = "score"\nthreshold = 0.5\n'),
         "[eval].judge", "exactly one of `module` or `path`"),
    Case("eval-judges-list-entry-without-module", "eval",
         edit("eval", append='\n[[eval.judges]] #<\nname = "q"\n'),
         "[eval].judges[0]", "exactly one of `module` or `path`"),
    Case("eval-text-model-use-vision", "eval",
         edit("eval", ("temperature = 0.0", "temperature = 0.0\nuse_vision = true #<")),
         "[eval.policy_config].use_vision", "is text-only"),
    Case("eval-thinking-mode-invalid", "eval",
         edit("eval", ("temperature = 0.0", 'temperature = 0.0\nthinking_mode = "always" #<')),
         "[eval.policy_config].thinking_mode", "expected 'think' or 'no_think'"),
    Case("eval-tool-choice-number", "eval", edit("eval", ("concurrency = 2", "concurrency = 2\ntool_choice = 3 #<")),
         "[eval].tool_choice", "expected a string or a table"),
    # ---------------------------------------------------------------- filter
    Case("filter-table-missing", "filter", 'db = "traces.db"\noutput = "out.jsonl"\n',
         "[filter]", "needs a [filter] table", line=None),
    Case("filter-db-missing", "filter",
         edit("filter", ("[filter]\n", "[filter] #<\n"), ('db = "traces/v3/synth_ai.db"\n', "")),
         "[filter].db", "required key is missing"),
    Case("filter-output-extension", "filter",
         edit("filter", ('output = "ft_data/out.jsonl"', 'output = "ft_data/out.csv" #<')),
         "[filter].output", "must end in .jsonl or .json"),
    Case("filter-min-above-max-official", "filter",
         edit("filter", ("min_official_score = 0.5", "min_official_score = 0.9 #<"),
              ("max_official_score = 1.0", "max_official_score = 0.1")),
         "[filter].min_official_score", "min_official_score (0.9) is above max_official_score (0.1)"),
    Case("filter-min-judge-above-max", "filter",
         edit("filter", append="min_judge_scores = { quality = 0.8 } #<\nmax_judge_scores = { quality = 0.2 }\n"),
         "[filter.min_judge_scores].quality", "minimum 0.8 is above the maximum 0.2 for judge 'quality'"),
    Case("filter-judge-score-not-number", "filter",
         edit("filter", append='min_judge_scores = { quality = "high" } #<\n'),
         "[filter.min_judge_scores].quality", "expected a number"),
    Case("filter-shuffle-seed-without-shuffle", "filter", edit("filter", append="shuffle_seed = 7 #<\n"),
         "[filter].shuffle_seed", "shuffle_seed needs shuffle = true"),
    Case("filter-bad-created-at", "filter", edit("filter", append='min_created_at = "last tuesday" #<\n'),
         "[filter].min_created_at", "expected an ISO-8601 date/time or epoch seconds"),
    Case("filter-created-window-inverted", "filter",
         edit("filter", append='min_created_at = "2026-02-01T00:00:00Z" #<\nmax_created_at = 2026-01-01\n'),
         "[filter].min_created_at", "min_created_at is after max_created_at"),
    Case("filter-created-at-list", "filter", edit("filter", append="max_created_at = [1] #<\n"),
         "[filter].max_created_at", "expected a string, an integer, a number"),
    Case("filter-limit-zero", "filter", edit("filter", ("limit = 100", "limit = 0 #<")),
         "[filter].limit", "greater than zero"),
    Case("filter-offset-negative", "filter", edit("filter", append="offset = -1 #<\n"),
         "[filter].offset", "expected an integer >= 0"),
    Case("filter-splits-not-strings", "filter", edit("filter", ('splits = ["train"]', "splits = [1, 2] #<")),
         "[filter].splits", "expected a list of strings"),
    # ---------------------------------------------------------------- values written as strings are still checked
    Case("rl-weight-sync-disabled-as-string", "rl",
         BASE["rl"].replace("[evaluation]", '[training.weight_sync]\nenable = "false" #<\n\n[evaluation]'),
         "[training.weight_sync].enable", "weight sync cannot be disabled"),
    Case("rl-gpu-count-as-string", "rl",
         edit("rl", ("gpu_count = 2", 'gpu_count = "2"'), ("gpus_for_training = 1", "gpus_for_training = 4 #<")),
         "[topology].gpus_for_training", "the topology uses 5 GPUs but [compute] provides 2"),
    Case("rl-tensor-parallel-as-string", "rl",
         edit("rl", ("gpus_for_training = 1\n", 'gpus_for_training = 1\ntensor_parallel = "1"\n'),
              ("max_model_len = 4096", 'max_model_len = 4096\ntensor_parallel_size = "3" #<'),
              ("gpu_count = 2", "gpu_count = 8"), ("gpus_for_vllm = 1", "gpus_for_vllm = 3")),
         "[vllm].tensor_parallel_size", "disagrees with the topology's tensor_parallel (1)"),
    Case("rl-rubric-weights-zero-as-strings", "rl",
         edit("rl", append='\n[rubric.weights] #<\nenv = "0"\nevent = "0.0"\n'),
         "[rubric].weights", "rubric weights are all zero"),
    Case("rl-judge-flags-off-as-strings", "rl",
         edit("rl", append='\n[judge.options] #<\nprovider = "openai"\nmodel = "m"\nevent = "false"\n'
                           'outcome = "no"\n'),
         "[judge].options", "at least one of event or outcome"),
    Case("rl-text-model-vision-as-string", "rl",
         edit("rl", ("max_concurrent_rollouts = 2", 'max_concurrent_rollouts = 2\nuse_vision = "true" #<')),
         "[rollout].use_vision", "is text-only"),
    Case("sft-deepspeed-stage-as-string", "sft", edit("sft", ("deepspeed_stage = 2", 'deepspeed_stage = "4" #<')),
         "[hyperparameters.parallelism].deepspeed_stage", "expected 0, 1, 2 or 3"),
    Case("sft-bf16-and-fp16-as-strings", "sft", edit("sft", ("bf16 = true", 'bf16 = "true"\nfp16 = "yes" #<')),
         "[hyperparameters.parallelism].fp16", "bf16 and fp16 cannot both be on"),
    Case("sft-parallel-degrees-as-strings", "sft",
         edit("sft", ("gpu_count = 2", 'gpu_count = "1"'),
              ("bf16 = true", 'bf16 = true\ntensor_parallel_size = "2" #<')),
         "[hyperparameters.parallelism].tensor_parallel_size", "needs 2 GPUs but [compute] provides 1"),
    Case("eval-text-model-use-vision-as-string", "eval",
         edit("eval", ("temperature = 0.0", 'temperature = 0.0\nuse_vision = "on" #<')),
         "[eval.policy_config].use_vision", "is text-only"),
    Case("filter-scores-as-strings", "filter",
         edit("filter", ("min_official_score = 0.5", 'min_official_score = "0.9" #<'),
              ("max_official_score = 1.0", 'max_official_score = "0.1"')),
         "[filter].min_official_score", "min_official_score (0.9) is above max_official_score (0.1)"),
    Case("filter-created-at-bool", "filter", edit("filter", append="min_created_at = true #<\n"),
         "[filter].min_created_at", "expected an ISO-8601 date/time or epoch seconds"),
]


def _write(tmp_path: Path, case: Case) -> Path:
    (tmp_path / "work").mkdir(exist_ok=True)
    path = tmp_path / "work" / f"{case.id}.toml"
    path.write_text(case.text)
    return path


@pytest.fixture
def dataset(isolated_home: Path) -> Path:
    """The training file the SFT base config names (relative to the working directory)."""
    path = isolated_home / "train.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n')
    return path


def _errors(case: Case, path: Path) -> list[ConfigIssue]:
    ctx = ResolveContext(**{"environ": {}, **case.ctx})
    with pytest.raises(ConfigError) as info:
        load_config(path, case.kind, ctx)
    return [i for i in info.value.issues if i.severity == "error"]


def test_corpus_is_large_and_covers_every_kind():
    assert len(CASES) >= 40
    assert {c.kind for c in CASES} == {"rl", "sft", "eval", "filter"}
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_broken_config_is_located(case: Case, tmp_path: Path, dataset: Path):
    path = _write(tmp_path, case)
    errors = _errors(case, path)
    matching = [i for i in errors if i.key == case.key]
    assert matching, f"no error at {case.key}; got {[(i.key, i.message) for i in errors]}"
    issue = next((i for i in matching if case.fragment in i.message), None)
    assert issue is not None, f"no message with {case.fragment!r} at {case.key}: {[i.message for i in matching]}"
    assert issue.line == case.expected_line(), issue.render()
    assert issue.file == f"{case.id}.toml"  # relative to the working directory
    if case.single:
        assert len(errors) == 1, [(i.key, i.message) for i in errors]
    rendered = issue.render()
    assert case.key in rendered and case.fragment in rendered
    if issue.line is not None:
        assert rendered.startswith(f"{case.id}.toml:{issue.line}: {case.key}: ")


@pytest.mark.parametrize("case", [c for c in CASES if c.cli], ids=lambda c: c.id)
def test_broken_config_fails_config_validate_with_exit_3(case: Case, tmp_path: Path, dataset: Path):
    path = _write(tmp_path, case)
    result = run_cli("config", "validate", "--kind", case.kind, str(path))
    assert result.exit_code == 3, result.stdout + result.stderr
    assert case.key in result.stdout and case.fragment in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("case_id", ["rl-batch-size-bool", "sft-deepspeed-stage-4", "eval-seeds-not-numbers",
                                     "filter-output-extension"])
def test_broken_config_json_report(case_id: str, tmp_path: Path, dataset: Path):
    case = next(c for c in CASES if c.id == case_id)
    path = _write(tmp_path, case)
    result = run_cli("--json", "config", "validate", "--kind", case.kind, str(path))
    assert result.exit_code == 3
    doc = json.loads(result.stdout)  # exactly one JSON document
    assert doc["valid"] is False
    (report,) = doc["files"]
    issue = next(i for i in report["issues"] if i["key"] == case.key)
    assert issue["severity"] == "error" and case.fragment in issue["message"]
    assert issue["line"] == case.expected_line()
    assert "found" in issue


def test_unknown_model_error_lists_close_matches(tmp_path: Path):
    case = next(c for c in CASES if c.id == "rl-unknown-model")
    (issue,) = [i for i in _errors(case, _write(tmp_path, case)) if i.key == "[model].base"]
    assert issue.fix and "Did you mean" in issue.fix and "Qwen/Qwen3-4B" in issue.fix


def test_rl_training_error_through_train_exits_3(tmp_path: Path):
    case = next(c for c in CASES if c.id == "rl-batch-size-bool")
    path = _write(tmp_path, case)
    result = run_cli("train", "--dry-run", "--config", str(path))
    assert result.exit_code == 3
    assert "[training].batch_size" in result.stderr and "not a boolean" in result.stderr
    assert "Traceback" not in result.stderr


def test_family_mismatch_through_train_type_flag(tmp_path: Path, dataset: Path):
    sft = tmp_path / "sft.toml"
    sft.write_text(BASE["sft"])
    result = run_cli("train", "--dry-run", "--type", "rl", "--config", str(sft))
    assert result.exit_code == 3
    assert "but this command expects RL" in result.stderr
    rl = tmp_path / "rl.toml"
    rl.write_text(BASE["rl"])
    result = run_cli("train", "--dry-run", "--type", "sft", "--config", str(rl))
    assert result.exit_code == 3
    assert "but this command expects SFT" in result.stderr


# ---------------------------------------------------------------------------- the base configs are valid


@pytest.mark.parametrize("kind", ["rl", "sft", "eval", "filter"])
def test_base_configs_are_valid(kind: str, tmp_path: Path, dataset: Path):
    path = tmp_path / f"{kind}.toml"
    path.write_text(BASE[kind])
    loaded = load_config(path, None, ResolveContext(environ={}))
    assert loaded.kind == kind
    assert not loaded.warnings


# ---------------------------------------------------------------------------- experimental gates


EXPERIMENTAL = edit("rl", ('base = "Qwen/Qwen3-4B"', 'base = "Qwen/Qwen3-4B-Thinking-2507"'))


@pytest.mark.parametrize("ctx", [{"allow_experimental": True}, {"environ": {"SDK_EXPERIMENTAL": "1"}}],
                         ids=["allow_experimental", "SDK_EXPERIMENTAL"])
def test_experimental_model_accepted_when_allowed(ctx: dict, tmp_path: Path):
    path = tmp_path / "exp.toml"
    path.write_text(EXPERIMENTAL)
    loaded = load_config(path, "rl", ResolveContext(**{"environ": {}, **ctx}))
    assert loaded.resolved["model"]["base"] == "Qwen/Qwen3-4B-Thinking-2507"


def test_no_allow_experimental_beats_sdk_experimental(tmp_path: Path):
    path = tmp_path / "exp.toml"
    path.write_text(EXPERIMENTAL)
    with pytest.raises(ConfigError, match="experimental and disabled"):
        load_config(path, "rl", ResolveContext(environ={"SDK_EXPERIMENTAL": "1"}, allow_experimental=False))


def test_experimental_gate_through_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "exp.toml"
    path.write_text(EXPERIMENTAL)
    assert run_cli("config", "validate", str(path)).exit_code == 3
    assert run_cli("config", "validate", "--allow-experimental", str(path)).exit_code == 0
    monkeypatch.setenv("SDK_EXPERIMENTAL", "1")
    assert run_cli("config", "validate", str(path)).exit_code == 0
    assert run_cli("config", "validate", "--no-allow-experimental", str(path)).exit_code == 3


def test_model_listed_in_sdk_experimental_models_is_gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "rl.toml"
    path.write_text(BASE["rl"])
    monkeypatch.setenv("SDK_EXPERIMENTAL_MODELS", "Qwen/Qwen3-4B")
    result = run_cli("config", "validate", str(path))
    assert result.exit_code == 3 and "is experimental and disabled" in result.stdout
    assert run_cli("config", "validate", "--allow-experimental", str(path)).exit_code == 0


# ---------------------------------------------------------------------------- warnings, not errors


def test_booleans_written_as_strings_are_read_as_booleans(tmp_path: Path):
    path = tmp_path / "work" / "filter.toml"
    path.write_text(edit("filter", append='shuffle = "true"\nshuffle_seed = 3\n'))
    loaded = load_config(path, "filter", ResolveContext(environ={}))
    assert loaded.resolved["filter"]["shuffle"] is True and loaded.resolved["filter"]["shuffle_seed"] == 3


def test_numbers_written_as_strings_are_normalised(tmp_path: Path):
    path = tmp_path / "work" / "rl.toml"
    path.write_text(edit("rl", ("gpu_count = 2", 'gpu_count = "2"'), ("batch_size = 8", 'batch_size = "8"'),
                         ("learning_rate = 5e-6", 'learning_rate = "5e-6"')))
    resolved = load_config(path, "rl", ResolveContext(environ={})).resolved
    assert resolved["compute"]["gpu_count"] == 2 and resolved["training"]["batch_size"] == 8
    assert resolved["training"]["learning_rate"] == 5e-6


def test_dataset_missing_is_a_warning_unless_required(tmp_path: Path):
    path = tmp_path / "sft.toml"
    path.write_text(edit("sft", ('data = "train.jsonl"', 'data = "nope.jsonl"')))
    loaded = load_config(path, "sft", ResolveContext(environ={}))
    (warning,) = loaded.warnings
    assert warning.key == "[job].data" and "dataset not found" in warning.message and warning.line == 9
    assert loaded.dataset is None
    with pytest.raises(ConfigError, match="dataset not found"):
        load_config(path, "sft", ResolveContext(environ={}, require_dataset=True))


def test_dataset_flag_missing_file_is_an_error_when_required(tmp_path: Path, dataset: Path):
    path = tmp_path / "sft.toml"
    path.write_text(BASE["sft"])
    with pytest.raises(ConfigError) as info:
        load_config(path, "sft", ResolveContext(environ={}, dataset="missing.jsonl", require_dataset=True))
    (issue,) = info.value.issues
    assert issue.key == "[job].data" and "(from --dataset)" in issue.message


def test_validation_path_missing_is_a_warning(tmp_path: Path, dataset: Path):
    path = tmp_path / "sft.toml"
    path.write_text(edit("sft", append='\n[data]\nvalidation_path = "val.jsonl"\n'))
    loaded = load_config(path, "sft", ResolveContext(environ={}, require_dataset=True))
    (warning,) = loaded.warnings
    assert warning.key == "[data].validation_path" and "not found" in warning.message
    assert warning.line == len(loaded.source.path.read_text().splitlines())
    assert loaded.validation_dataset is None and loaded.dataset == dataset.resolve()
    result = run_cli("config", "validate", str(path))
    assert result.exit_code == 0 and "[data].validation_path" in result.stderr


# ---------------------------------------------------------------------------- all errors, not the first


def test_all_errors_of_a_file_are_collected(tmp_path: Path):
    text = edit(
        "rl",
        ("batch_size = 8", "batch_size = true"),
        ("learning_rate = 5e-6", "learning_rate = 0"),
        ('label = "base-rl"\n', ""),
        ("gpus_for_training = 1\n", "gpus_for_training = 1\ntensor_parallel = 1\n"),
        append="\n[rubric.weights]\nenv = 0\n",
    )
    path = tmp_path / "work" / "five.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, "rl", ResolveContext(environ={}))
    errors = [i for i in info.value.issues if i.severity == "error"]
    assert sorted(i.key for i in errors) == sorted([
        "[training].batch_size", "[training].learning_rate", "[model].label", "[vllm].tensor_parallel_size",
        "[rubric].weights",
    ])
    assert info.value.message.startswith("five.toml: 5 problems found:")
    result = run_cli("--json", "config", "validate", str(path))
    assert result.exit_code == 3
    assert len([i for i in result.json()["files"][0]["issues"] if i["severity"] == "error"]) == 5


def test_all_errors_collected_across_sft_eval_filter(tmp_path: Path):
    sft = tmp_path / "sft.toml"
    sft.write_text(edit("sft", ("n_epochs = 1", "n_epochs = 0"), ("warmup_ratio = 0.05", "warmup_ratio = 2"),
                        ("bf16 = true", "bf16 = true\nfp16 = true"), ("deepspeed_stage = 2", "deepspeed_stage = 5")))
    ev = tmp_path / "eval.toml"
    ev.write_text(edit("eval", ("seeds = [0, 1, 2]", 'seeds = "x"'), ("concurrency = 2", "concurrency = 0"),
                       ('trace_format = "structured"', 'trace_format = "raw"')))
    flt = tmp_path / "filter.toml"
    flt.write_text(edit("filter", ("limit = 100", "limit = 0"), ('output = "ft_data/out.jsonl"', 'output = "o.txt"'),
                        append="offset = -2\nshuffle_seed = 1\n"))
    counts = {}
    for path, kind in ((sft, "sft"), (ev, "eval"), (flt, "filter")):
        with pytest.raises(ConfigError) as info:
            load_config(path, kind, ResolveContext(environ={}))
        counts[kind] = len([i for i in info.value.issues if i.severity == "error"])
    assert counts == {"sft": 4, "eval": 3, "filter": 4}


# ---------------------------------------------------------------------------- TOML syntax and empty files


SYNTAX_CASES = [
    ("unterminated-string", '[algorithm]\ntype = "online\n', 2, 15, "TOML syntax error"),
    ("missing-value", "[training]\nbatch_size =\n", 2, 13, "TOML syntax error"),
    ("duplicate-key", "[training]\nbatch_size = 1\nbatch_size = 2\n", 3, 15, "TOML syntax error"),
    ("bad-header", "[training\nbatch_size = 1\n", 1, 10, "TOML syntax error"),
    ("duplicate-table", "[a]\nx = 1\n[a]\ny = 2\n", 3, 3, "TOML syntax error"),
]


@pytest.mark.parametrize("name,text,line,column,fragment", SYNTAX_CASES, ids=[c[0] for c in SYNTAX_CASES])
@pytest.mark.parametrize("kind", [None, "rl", "sft", "eval", "filter"])
def test_toml_syntax_error_has_line_and_column(name, text, line, column, fragment, kind, tmp_path: Path):
    path = tmp_path / "work" / f"{name}.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:  # never an empty config
        load_config(path, kind, ResolveContext(environ={}))
    (issue,) = info.value.issues
    assert (issue.line, issue.column) == (line, column)
    assert issue.message.startswith(fragment) and issue.file == f"{name}.toml"
    assert issue.fix and f"check line {line}" in issue.fix
    assert issue.render().startswith(f"{name}.toml:{line}:{column}: TOML syntax error")


def test_toml_syntax_error_through_cli(tmp_path: Path):
    path = tmp_path / "work" / "bad.toml"
    path.write_text('[algorithm]\ntype = "online\n')
    result = run_cli("config", "validate", str(path))
    assert result.exit_code == 3 and "bad.toml:2:15: TOML syntax error" in result.stdout
    result = run_cli("train", "--dry-run", "--config", str(path))
    assert result.exit_code == 3 and "bad.toml:2:15" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("--json", "train", "--dry-run", "--config", str(path))
    assert result.exit_code == 3
    error = result.json()["error"]
    assert error["code"] == "invalid_config" and error["exit_code"] == 3
    assert error["details"]["issues"][0]["line"] == 2 and error["details"]["issues"][0]["column"] == 15


def test_empty_file_is_never_an_empty_config(tmp_path: Path):
    path = tmp_path / "work" / "empty.toml"
    path.write_text("")
    with pytest.raises(ConfigError, match="cannot tell what kind of config this is"):
        load_config(path, None, ResolveContext(environ={}))
    expected = {
        "rl": {"[algorithm]", "[model]", "[compute]", "[rollout]", "[services].task_url"},
        "sft": {"[job]", "[hyperparameters]"},  # [algorithm] defaults to offline/sft (the docs' shape has none)
        "eval": {"app_id", "seeds"},
        "filter": {"[filter]"},
    }
    for kind, keys in expected.items():
        with pytest.raises(ConfigError) as info:
            load_config(path, kind, ResolveContext(environ={}))
        found = {i.key for i in info.value.issues if i.severity == "error"}
        assert keys <= found, (kind, found)
    result = run_cli("config", "validate", str(path))
    assert result.exit_code == 3 and "cannot tell what kind of config this is" in result.stdout
    result = run_cli("train", "--dry-run", "--config", str(path))
    assert result.exit_code == 3 and "cannot tell whether this is an RL or an SFT config" in result.stderr


def test_a_missing_config_file_is_exit_8_in_every_command(tmp_path: Path):
    """One cause, one code: config validate, train, eval and filter all say the file is not found, with 8."""
    missing = str(tmp_path / "nope.toml")
    result = run_cli("train", "--dry-run", "--config", missing)
    assert result.exit_code == 8 and "Config not found" in result.stderr
    result = run_cli("--json", "config", "validate", missing)
    assert result.exit_code == 8, result.stdout
    assert "Config not found" in result.json()["files"][0]["error"]
    human = run_cli("config", "validate", missing)
    assert human.exit_code == 8 and "Config not found" in human.stdout
    result = run_cli("filter", "--config", missing)
    assert result.exit_code == 8 and "Config not found" in result.stderr
    result = run_cli("--json", "eval", "math-single-step", "--config", missing, "--model", "synth-ai/tiny-qwen3")
    assert result.exit_code == 8 and "config not found" in result.json()["error"]["message"]


def test_config_validate_exits_with_the_first_failing_files_code(tmp_path: Path):
    broken = tmp_path / "work" / "broken.toml"
    broken.write_text("[eval]\napp_id = 3\n")
    missing = str(tmp_path / "nope.toml")
    assert run_cli("config", "validate", str(broken), missing).exit_code == 3
    assert run_cli("config", "validate", missing, str(broken)).exit_code == 8


def test_non_utf8_file(tmp_path: Path):
    path = tmp_path / "work" / "latin1.toml"
    path.write_bytes('[eval]\napp_id = "caf\xe9"\n'.encode("latin-1"))
    result = run_cli("config", "validate", str(path))
    assert result.exit_code == 3 and "not valid UTF-8" in result.stdout
