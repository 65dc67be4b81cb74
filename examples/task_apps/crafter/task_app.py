"""Crafter task app (`grpo-crafter-task-app`, aliases `crafter`, `crafter-task`): multi-turn Crafter for text and
vision policies.

Each turn the policy sees the game state as text (vitals, inventory, achievements, what is nearby and a 9×7 map
around the player) and, with `policy.config.use_vision`, the current frame as a PNG data URL in an OpenAI
multimodal message (`image_only_mode` sends the image alone; `max_images_per_message` > 1 adds the frames seen
after each action of the previous turn, newest last). It answers by calling `interact_many` with 1–8 actions.

Rewards: a step's reward is the number of achievements unlocked for the first time during that turn; the
outcome is the number of distinct achievements unlocked in the episode. When `policy.config.step_rewards` asks for
it (`enabled`, mode "decision_stepwise", as the RL trainer sends), each step's `info.meta.decision_rewards` holds
the reference's decision record: `unique_delta` (first-time unlocks), `ach_delta` (every achievement achieved in the
turn, repeats included), `all`, `unique`.

Request knobs:
- `env.seed` (or `env.config.seed`; default 42), `env.config`: `area` [64, 64] (sides 1..256),
  `length` 10000 (world steps), `image_size` 64 or [w, h], `max_turns`.
- `policy.config`: `inference_url` (required), `model`, `temperature`, `top_p`, `max_tokens`, `max_turns` /
  `max_llm_calls`, `max_actions_per_call` (≤ 8), `tool_choice` ("required"), `timeout_s`, `use_vision`,
  `image_only_mode`, `max_images_per_message`, `thinking_mode`, `thinking_budget`.
- `ops`: each "agent" op is one decision; with ops given, the number of turns is at most their count.
- `safety.max_ops` (agent + env ops executed) and `safety.max_time_s` stop the rollout early (truncated).

Run it: `synth-ai serve crafter`, `synth-ai deploy crafter` (Modal), or in process with
`create_task_app(build_config())`.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth_ai.taskapp.config import ModalDeploymentConfig, RubricBundle, TaskAppConfig, TaskAppEntry, register_task_app
from synth_ai.taskapp.contracts import RolloutRequest, RolloutResponse, TaskInfo
from synth_ai.taskapp.errors import RolloutError
from synth_ai.taskapp.inference import chat_completion, normalize_inference_url, tool_calls_of
from synth_ai.taskapp.tracing import correlation_id_of, current_trace
from synth_ai.taskapp.vision import VisionSettings, build_user_message, image_to_png_bytes, png_data_url

APP_ID = "grpo-crafter-task-app"
APP_DIR = Path(__file__).resolve().parent


def _load_sibling(name: str) -> Any:
    """Import `<this directory>/<name>.py` whether this file was imported as part of a package, by path during
    discovery, or from a directory mounted in a Modal container."""
    path = APP_DIR / f"{name}.py"
    module_name = f"_synth_crafter_{name}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return module


crafter_env = _load_sibling("crafter_env")

DEFAULT_SEED = 42
SEED_RANGE = (0, 2**31 - 1)
DEFAULT_MAX_TURNS = 10
MAX_ACTIONS_PER_CALL = 8
DEFAULT_INFERENCE_TIMEOUT_S = 120.0
TOOL_NAME = "interact_many"

TOOLS: list[dict[str, Any]] = [{
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Execute a short sequence of Crafter actions in order (1-8).",
        "parameters": {
            "type": "object",
            "properties": {
                "actions": {
                    "type": "array",
                    "description": "Crafter actions to execute one after another.",
                    "items": {"type": "string", "enum": list(crafter_env.ACTION_NAMES)},
                    "minItems": 1,
                    "maxItems": MAX_ACTIONS_PER_CALL,
                },
            },
            "required": ["actions"],
            "additionalProperties": False,
        },
    },
}]

SYSTEM_PROMPT = (
    "You are playing Crafter, a 2D survival and crafting game seen from above. Your goal is to unlock as many of "
    f"its {len(crafter_env.ACHIEVEMENTS)} achievements as you can: "
    + ", ".join(crafter_env.ACHIEVEMENTS) + ".\n"
    "Each turn you get the game state; reply by calling the `interact_many` tool with 1 to 8 actions from: "
    + ", ".join(crafter_env.ACTION_NAMES) + ".\n"
    "Rules: move_* moves one cell (or turns you to face that way when blocked); `do` acts on the cell you face "
    "(collect wood from a tree, stone with a pickaxe, drink water, eat a cow, attack a zombie). Keep health, "
    "food, drink and energy up (eat, drink, sleep when energy is low). Crafting needs a table nearby: wood "
    "pickaxe and sword need wood; stone ones need wood and stone; iron ones also need a furnace nearby, coal and "
    "iron. A table needs wood; a furnace needs stone and a table nearby."
)

DATASET = {
    "id": "crafter_classic_procedural",
    "name": "Crafter Classic Procedural Seeds",
    "version": "1.0.0",
    "splits": ["train"],
    "default_split": "train",
    "description": "Procedurally generated Crafter worlds, one per seed.",
}


def _base_task_info() -> TaskInfo:
    return TaskInfo(
        task={"id": "crafter_classic", "name": "Crafter Classic", "version": "1.0.0",
              "description": "Unlock Crafter achievements through the interact_many tool."},
        environment="crafter",
        dataset={**DATASET, "seed_range": list(SEED_RANGE), "default_seed": DEFAULT_SEED},
        rubric={"outcome": "distinct achievements unlocked in the episode",
                "events": "achievements unlocked for the first time in each turn"},
        inference={"tool": {"name": TOOL_NAME, "parallel_tool_calls": False}, "supports_vision": True},
        limits={"max_turns": DEFAULT_MAX_TURNS},
        action_space={"type": "discrete", "size": len(crafter_env.ACTION_NAMES),
                      "actions": list(crafter_env.ACTION_NAMES)},
        observation={"type": "text+image", "text": "game state summary",
                     "image": "RGB frame as a PNG data URL (64x64 by default) when policy.config.use_vision",
                     "image_shape": [64, 64, 3]},
    )


def describe_taskset() -> dict[str, Any]:
    return {**DATASET, "seed_range": list(SEED_RANGE), "default_seed": DEFAULT_SEED,
            "config": {"area": list(crafter_env.DEFAULT_AREA), "length": crafter_env.DEFAULT_LENGTH}}


def provide_task_instances(seeds: list[int]) -> list[TaskInfo]:
    base = _base_task_info()
    instances = []
    for seed in seeds:
        if not SEED_RANGE[0] <= int(seed) <= SEED_RANGE[1]:
            raise RolloutError(f"seed {seed} is outside {list(SEED_RANGE)}", status_code=400, code="invalid_seed")
        config = crafter_env.EpisodeConfig.from_request(int(seed), {})
        instances.append(base.model_copy(update={
            "dataset": base.dataset.model_copy(update={"seed": int(seed), "config": config.to_dict()}),
            "task_metadata": {"seed": int(seed)},
        }))
    return instances


# ----- rollout ---------------------------------------------------------------------------------------------------


def _bad_request(message: str, code: str = "invalid_rollout_request") -> RolloutError:
    return RolloutError(message, status_code=400, code=code)


def _int_option(value: Any, name: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise _bad_request(f"{name} must be an integer, not {value!r}") from None
    if number < 1:
        raise _bad_request(f"{name} must be at least 1, not {number}")
    return number


def _timeout_option(value: Any, default: float) -> float:
    if value is None or value == "" or value == 0:
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise _bad_request(f"policy.config.timeout_s must be a number of seconds, not {value!r}") from None
    if not 0 < seconds < float("inf"):
        raise _bad_request(f"policy.config.timeout_s must be a positive number of seconds, not {value!r}")
    return seconds


def _agent_op_count(ops: list[Any]) -> int | None:
    """How many decisions the ops allow (None: no ops given, no bound from them)."""
    if not ops:
        return None
    count = 0
    for index, op in enumerate(ops):
        kind = op if isinstance(op, str) else (op.get("type") or op.get("op")) if isinstance(op, dict) else None
        if not isinstance(kind, str):
            raise _bad_request(f"ops[{index}] has no op type (expected 'agent' or 'env')")
        kind = kind.strip().lower()
        if kind in ("agent", "policy"):
            count += 1
        elif kind not in ("env", "environment"):
            raise _bad_request(f"ops[{index}] is {kind!r}; expected 'agent' or 'env'")
    return count


def _turn_budget(request: RolloutRequest) -> int:
    env_cfg = request.env.config or {}
    policy_cfg = request.policy.config or {}
    limits = [n for n in (
        _int_option(env_cfg.get("max_turns"), "env.config.max_turns"),
        _int_option(policy_cfg.get("max_turns"), "policy.config.max_turns"),
        _int_option(policy_cfg.get("max_llm_calls"), "policy.config.max_llm_calls"),
    ) if n is not None]
    turns = min(limits) if limits else DEFAULT_MAX_TURNS
    agent_ops = _agent_op_count(list(request.ops or []))
    return turns if agent_ops is None else min(turns, agent_ops)


def _requested_actions(completion: dict[str, Any]) -> tuple[list[str], list[Any], list[dict[str, Any]]]:
    """(valid actions, rejected entries, the tool calls as recorded) from the model's answer. Tool calls win (their
    arguments may use aliases such as `left`); without any, exact action names written in the reply text are used
    (aliases there would turn prose like "go up the hill" into moves)."""
    calls = tool_calls_of(completion)
    raw: list[Any] = []
    recorded: list[dict[str, Any]] = []
    for call in calls:
        args = call.get("arguments") or {}
        recorded.append({"tool_name": call.get("name"), "arguments": args})
        if call.get("name") not in (TOOL_NAME, "interact"):
            raw.append({"tool": call.get("name")})
            continue
        values = args.get("actions", args.get("action"))
        raw.extend(values if isinstance(values, list) else [values])
    if not calls:
        content = ((completion.get("choices") or [{}])[0].get("message") or {}).get("content")
        if isinstance(content, str):
            words = content.replace(",", " ").replace("\n", " ").split()
            raw = [w.strip("`'\".;:()[]<>").lower() for w in words]
            raw = [w for w in raw if w in crafter_env.ACTION_NAMES]
            if raw:
                recorded.append({"tool_name": TOOL_NAME, "arguments": {"actions": raw}, "parsed_from": "content"})
    actions, rejected = [], []
    for value in raw:
        name = crafter_env.normalise_action(value)
        (actions if name else rejected).append(name or value)
    return actions, rejected, recorded


def _history_text(last_actions: list[str], last_unlocked: list[str]) -> str:
    if not last_actions:
        return "Previous turn: none (this is the first turn)."
    text = "Previous turn: " + ", ".join(last_actions)
    return text + (f" -> unlocked {', '.join(last_unlocked)}" if last_unlocked else " -> nothing unlocked")


@dataclass(frozen=True)
class RolloutSettings:
    """Everything a rollout request asks for, validated before the world is generated (bad input → 400)."""

    inference_url: str
    policy: dict[str, Any]
    vision: Any  # VisionSettings
    episode: Any  # crafter_env.EpisodeConfig
    max_turns: int
    max_actions: int
    timeout_s: float
    max_ops: int
    max_time_s: float

    @classmethod
    def from_request(cls, request: RolloutRequest) -> RolloutSettings:
        policy = dict(request.policy.config or {})
        raw_url = policy.get("inference_url")
        if not raw_url:
            raise _bad_request("policy.config.inference_url is required", code="missing_inference_url")
        try:
            vision = VisionSettings.from_policy_config(policy)
            episode = crafter_env.EpisodeConfig.from_request(request.env.seed, request.env.config,
                                                             default_seed=DEFAULT_SEED)
        except ValueError as exc:
            raise _bad_request(str(exc)) from exc
        max_actions = _int_option(policy.get("max_actions_per_call"), "policy.config.max_actions_per_call")
        return cls(
            inference_url=normalize_inference_url(str(raw_url)), policy=policy, vision=vision, episode=episode,
            max_turns=_turn_budget(request), max_actions=min(max_actions or MAX_ACTIONS_PER_CALL, MAX_ACTIONS_PER_CALL),
            timeout_s=_timeout_option(policy.get("timeout_s"), DEFAULT_INFERENCE_TIMEOUT_S),
            max_ops=request.safety.max_ops, max_time_s=request.safety.max_time_s,
        )


async def rollout(request: RolloutRequest, fastapi_request: Any = None) -> RolloutResponse:
    started = time.monotonic()
    settings = RolloutSettings.from_request(request)
    episode = crafter_env.CrafterEpisode(settings.episode)
    await asyncio.to_thread(episode.reset)  # world generation takes about a second
    trace = current_trace()

    steps: list[dict[str, Any]] = []
    ops_executed = 0
    stop_reason = "max_turns"
    frames = [episode.frame]  # the frames since the last decision, newest last
    previous: dict[str, Any] = {"actions": [], "achievements_unlocked": []}
    for turn in range(settings.max_turns):
        remaining = settings.max_time_s - (time.monotonic() - started)
        if remaining <= 0:
            stop_reason = "max_time_s"
            break
        if ops_executed + 2 > settings.max_ops:  # a turn is one agent op and one env op
            stop_reason = "max_ops"
            break
        step, frames = await _turn(settings, episode, turn, frames, previous, timeout_s=min(settings.timeout_s,
                                                                                              remaining))
        ops_executed += 2
        steps.append(step)
        previous = step["info"]
        if trace is not None:
            event = trace.environment_event(
                reward=step["reward"], terminated=episode.done, truncated=False,
                system_state_after={"text": step["obs"]["text"], "actions": previous["actions"]},
                metadata={"achievements_unlocked": previous["achievements_unlocked"]})
            trace.event_reward(event, step["reward"], reward_type="achievement_delta", source="environment")
        if episode.done:
            stop_reason = "episode_done"
            break
    if steps and not episode.done:
        steps[-1]["truncated"] = True
    if trace is not None:
        trace.set_outcome(float(len(episode.unlocked)), achievements_count=len(episode.unlocked),
                          total_steps=len(steps), metadata={"achievements": list(episode.unlocked),
                                                            "seed": settings.episode.seed})
    return _response(request, settings, episode, steps, stop_reason, ops_executed)


async def _turn(settings: RolloutSettings, episode: Any, turn: int, frames: list[Any], previous: dict[str, Any],
                *, timeout_s: float) -> tuple[dict[str, Any], list[Any]]:
    """One decision and its actions: (the step, the frames seen after each action)."""
    trace = current_trace()
    obs = episode.observation(turn=turn, max_turns=settings.max_turns)
    text = obs["text"] + "\n" + _history_text(previous["actions"], previous["achievements_unlocked"])
    vision = settings.vision
    image_urls = [png_data_url(image_to_png_bytes(f)) for f in frames][-vision.max_images_per_message:] \
        if vision.use_vision else []
    if image_urls:
        obs["observation_image_data_url"] = image_urls[-1]
    payload = _payload(settings.policy, [{"role": "system", "content": SYSTEM_PROMPT},
                                         build_user_message(text, image_urls, vision)])
    if trace is not None:
        trace.timestep(turn_number=turn, metadata={"seed": settings.episode.seed})
    completion = await chat_completion(settings.inference_url, payload, timeout=max(1.0, timeout_s))
    actions, rejected, recorded_calls = _requested_actions(completion)

    unlocked_before, counts_before = len(episode.unlocked), episode.achievement_counts
    results = await asyncio.to_thread(_play, episode, actions[:settings.max_actions])
    unlocked = episode.unlocked[unlocked_before:]
    achieved = {name: count - counts_before.get(name, 0) for name, count in episode.achievement_counts.items()
                if count > counts_before.get(name, 0)}
    message = (completion.get("choices") or [{}])[0].get("message") or {}
    info = {
        "meta": {
            "inference_url": settings.inference_url,
            "turn": turn,
            "model": completion.get("model") or settings.policy.get("model"),
            "inference_request": {"messages": len(payload["messages"]), "images": len(image_urls),
                                  "image_only_mode": vision.image_only_mode, "tool": TOOL_NAME},
        },
        "actions": [result.action for result, _ in results],
        "invalid_actions": rejected,
        "achievements_unlocked": list(unlocked),
        "achievements": list(episode.unlocked),
        "crafter_reward": round(sum(result.crafter_reward for result, _ in results), 4),
        "world_step": episode.steps,
        "assistant": {"content": message.get("content"), "tool_calls": message.get("tool_calls") or []},
    }
    if _decision_records_asked(settings.policy):  # the reference's shape, read by RL trainers' step rewards
        info["meta"]["decision_rewards"] = {"turn": turn, "ach_delta": sum(achieved.values()),
                                            "unique_delta": len(unlocked), "all": sorted(achieved),
                                            "unique": list(unlocked)}
    step = {"obs": obs, "tool_calls": recorded_calls, "reward": float(len(unlocked)), "done": episode.done,
            "truncated": False, "info": info}
    return step, [frame for _, frame in results] or [episode.frame]


def _decision_records_asked(policy: dict[str, Any]) -> bool:
    asked = policy.get("step_rewards")
    return isinstance(asked, dict) and bool(asked.get("enabled")) and asked.get("mode") == "decision_stepwise"


def _response(request: RolloutRequest, settings: RolloutSettings, episode: Any, steps: list[dict[str, Any]],
              stop_reason: str, ops_executed: int) -> RolloutResponse:
    total = float(len(episode.unlocked))
    episode_return = sum(step["reward"] for step in steps)
    cid = (correlation_id_of(settings.inference_url) or settings.policy.get("trace_correlation_id")
           or request.run_id)
    return RolloutResponse(
        run_id=request.run_id,
        trajectories=[{
            "env_id": request.env.env_id or f"crafter-{settings.episode.seed}",
            "policy_id": request.policy.policy_id or request.policy.policy_name or "crafter-react",
            "steps": steps,
            "final": {"observation": episode.observation(turn=len(steps), max_turns=settings.max_turns),
                      "reward": total},
            "length": len(steps),
            "inference_url": settings.inference_url,
        }],
        metrics={
            "episode_returns": [episode_return],
            "mean_return": episode_return,
            "num_steps": len(steps),
            "num_episodes": 1,
            "outcome_score": total,
            "details": {"achievements": list(episode.unlocked), "achievements_count": len(episode.unlocked),
                        "world_steps": episode.steps, "stop_reason": stop_reason, "seed": settings.episode.seed,
                        "max_turns": settings.max_turns},
        },
        aborted=stop_reason in ("max_ops", "max_time_s"),
        ops_executed=ops_executed,
        trace_correlation_id=cid,
        pipeline_metadata={"trace_correlation_id": cid, "inference_url": settings.inference_url},
    )


def _play(episode: Any, actions: list[str]) -> list[tuple[Any, Any]]:
    """Execute actions until the episode ends; (result, frame after it) for each executed action."""
    results = []
    for action in actions:
        if episode.done:
            break
        results.append((episode.act(action), episode.frame))
    return results


_PASSTHROUGH = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed",
                "thinking_mode", "thinking_budget", "logprobs", "top_logprobs")


def _payload(policy_cfg: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": policy_cfg.get("model"),
        "messages": messages,
        "tools": TOOLS,
        "tool_choice": policy_cfg.get("tool_choice", "required"),
        "parallel_tool_calls": False,
    }
    payload.update({k: policy_cfg[k] for k in _PASSTHROUGH if policy_cfg.get(k) is not None})
    return payload


# ----- registration ----------------------------------------------------------------------------------------------


def build_config() -> TaskAppConfig:
    return TaskAppConfig(
        app_id="grpo-crafter-task-app",
        name="Crafter Classic",
        description="Multi-turn Crafter with text and vision observations and achievement rewards.",
        base_task_info=_base_task_info(),
        describe_taskset=describe_taskset,
        provide_task_instances=provide_task_instances,
        rollout=rollout,
        rubrics=RubricBundle(outcome={"score": "distinct achievements unlocked"},
                             events={"reward": "achievements unlocked for the first time per turn"}),
    )


register_task_app(
    entry=TaskAppEntry(  # literal id and aliases: discovery reads them without importing this file
        app_id="grpo-crafter-task-app",
        description="Crafter Classic: multi-turn, text or vision (PNG frames), achievement rewards.",
        config_factory=build_config,
        aliases=("crafter", "crafter-task"),
        modal=ModalDeploymentConfig(
            app_name="grpo-crafter-task-app",
            pip_packages=("crafter>=1.8",),
            cpu=4.0,
            memory=4096,
            min_containers=1,
            max_containers=10,
        ),
    )
)
