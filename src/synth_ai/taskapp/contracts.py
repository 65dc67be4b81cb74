"""The task-app wire contract: what `/task_info` returns and what `/rollout` takes and gives back.

These models carry the exact JSON shapes of synth-ai 0.2.17 (`synth_ai.task.contracts`), so a trainer, `eval` or
the verifier written against either implementation can talk to a task app built with the other. Every model
accepts extra keys and keeps them (apps add fields such as `action_space`; responses carry app-specific `info`).

Only pydantic is imported here: the CLI, the verifier and the embedded backend validate payloads with these
models without importing FastAPI.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RolloutMode = Literal["rl", "eval"]
TraceFormat = Literal["compact", "full", "structured"]


class _Open(BaseModel):
    """A contract model that keeps unknown keys (the reference's shapes are open-ended)."""

    model_config = ConfigDict(extra="allow")


# --- /task_info -------------------------------------------------------------------------------------------------


class TaskDescriptor(_Open):
    id: str
    name: str
    description: str | None = None
    version: str | None = None


class DatasetInfo(_Open):
    id: str | None = None
    name: str | None = None
    version: str | None = None
    splits: list[str] | None = None
    default_split: str | None = None
    description: str | None = None


class RubricInfo(_Open):
    outcome: Any = None
    events: Any = None


class InferenceInfo(_Open):
    model: str | None = None
    inference_url: str | None = None


class LimitsInfo(_Open):
    max_turns: int | None = None
    max_response_tokens: int | None = None
    timeout_seconds: int | None = None


class TaskInfo(_Open):
    """Static description of a task (and, per seed, of one task instance)."""

    task: TaskDescriptor
    environment: str
    dataset: DatasetInfo = Field(default_factory=DatasetInfo)
    rubric: RubricInfo = Field(default_factory=RubricInfo)
    inference: InferenceInfo = Field(default_factory=InferenceInfo)
    limits: LimitsInfo = Field(default_factory=LimitsInfo)
    task_metadata: dict[str, Any] = Field(default_factory=dict)


# --- /rollout request -------------------------------------------------------------------------------------------


class RolloutEnvSpec(_Open):
    env_id: str | None = None
    env_name: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = None


class RolloutPolicySpec(_Open):
    """`config` conventionally carries `model`, `inference_url` (the trainer passes `…/v1/chat/completions?cid=…`),
    `temperature`, `top_p`, `max_tokens`, `max_llm_calls`, `thinking_mode`, `thinking_budget`, `use_vision`,
    `image_only_mode`, `max_images_per_message`."""

    policy_id: str | None = None
    policy_name: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class RolloutRecordConfig(_Open):
    trajectories: bool = True
    logprobs: bool = False
    value: bool = False
    return_trace: bool = False
    trace_format: TraceFormat = "compact"


class RolloutSafetyConfig(_Open):
    max_ops: int = 100000
    max_time_s: float = 3600.0


class RolloutRequest(_Open):
    run_id: str
    env: RolloutEnvSpec
    policy: RolloutPolicySpec
    ops: list[dict[str, Any]] | list[str]
    record: RolloutRecordConfig = Field(default_factory=RolloutRecordConfig)
    on_done: str = "reset"
    safety: RolloutSafetyConfig = Field(default_factory=RolloutSafetyConfig)
    training_session_id: str | None = None
    synth_base_url: str | None = None
    mode: RolloutMode  # required: "rl" (trainer) or "eval"


# --- /rollout response ------------------------------------------------------------------------------------------


class RolloutStep(_Open):
    obs: dict[str, Any]
    tool_calls: list[dict[str, Any]]
    reward: float | None = None
    done: bool = False
    truncated: bool | None = None
    info: dict[str, Any] | None = None  # the RL trainer requires info.meta.inference_url on every step


class RolloutTrajectory(_Open):
    env_id: str
    policy_id: str
    steps: list[RolloutStep]
    final: dict[str, Any] | None = None
    length: int
    inference_url: str
    decision_samples: list[dict[str, Any]] | None = None


class RolloutMetrics(_Open):
    episode_returns: list[float]
    mean_return: float
    num_steps: int
    num_episodes: int = 0
    outcome_score: float | None = None
    events_score: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class RolloutResponse(_Open):
    run_id: str
    trajectories: list[RolloutTrajectory]
    branches: dict[str, list[str]] = Field(default_factory=dict)
    metrics: RolloutMetrics
    aborted: bool = False
    ops_executed: int = 0
    trace_correlation_id: str | None = None
    trace: dict[str, Any] | None = None
    pipeline_metadata: dict[str, Any] = Field(default_factory=dict)


def rl_response_problems(response: RolloutResponse | dict[str, Any]) -> list[str]:
    """What the RL trainer would reject in a rollout response (`validate_rollout_response_for_rl` in the
    reference): `pipeline_metadata.inference_url` must be a string carrying `?cid=`, and every step must carry
    `info.meta.inference_url`. Returns one sentence per problem, naming the field; empty when acceptable."""
    doc = response.model_dump() if isinstance(response, RolloutResponse) else response
    problems: list[str] = []
    url = (doc.get("pipeline_metadata") or {}).get("inference_url")
    if not isinstance(url, str) or not url:
        problems.append("pipeline_metadata.inference_url is missing")
    elif "?cid=" not in url and "&cid=" not in url:
        problems.append("pipeline_metadata.inference_url has no ?cid= correlation id")
    for t_index, trajectory in enumerate(doc.get("trajectories") or []):
        for s_index, step in enumerate(trajectory.get("steps") or []):
            meta = ((step.get("info") or {}).get("meta") or {})
            if not meta.get("inference_url"):
                problems.append(f"trajectories[{t_index}].steps[{s_index}].info.meta.inference_url is missing")
    return problems


__all__ = [
    "DatasetInfo",
    "InferenceInfo",
    "LimitsInfo",
    "RolloutEnvSpec",
    "RolloutMetrics",
    "RolloutMode",
    "RolloutPolicySpec",
    "RolloutRecordConfig",
    "RolloutRequest",
    "RolloutResponse",
    "RolloutSafetyConfig",
    "RolloutStep",
    "RolloutTrajectory",
    "RubricInfo",
    "TaskDescriptor",
    "TaskInfo",
    "TraceFormat",
    "rl_response_problems",
]
