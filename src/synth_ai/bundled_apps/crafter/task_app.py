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
import time
from typing import Any

from synth_ai.taskapp.config import ModalDeploymentConfig, RubricBundle, TaskAppConfig, TaskAppEntry, register_task_app
from synth_ai.taskapp.contracts import RolloutRequest, RolloutResponse, TaskInfo
from synth_ai.taskapp.errors import RolloutError
from synth_ai.taskapp.inference import chat_completion
from synth_ai.taskapp.siblings import load_sibling
from synth_ai.taskapp.tracing import correlation_id_of, current_trace
from synth_ai.taskapp.vision import build_user_message, image_to_png_bytes, png_data_url

APP_ID = "grpo-crafter-task-app"

# The helper files next to this one (loaded by path: this folder is not a package).
crafter_env = load_sibling(__file__, "crafter_env")
prompt = load_sibling(__file__, "crafter_prompt")
request_rules = load_sibling(__file__, "crafter_request")
RolloutSettings = request_rules.RolloutSettings
DEFAULT_SEED = request_rules.DEFAULT_SEED
DEFAULT_MAX_TURNS = request_rules.DEFAULT_MAX_TURNS
SEED_RANGE = (0, 2**31 - 1)

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
        inference={"tool": {"name": prompt.TOOL_NAME, "parallel_tool_calls": False}, "supports_vision": True},
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
    text = obs["text"] + "\n" + prompt.history_text(previous["actions"], previous["achievements_unlocked"])
    vision = settings.vision
    image_urls = [png_data_url(image_to_png_bytes(f)) for f in frames][-vision.max_images_per_message:] \
        if vision.use_vision else []
    if image_urls:
        obs["observation_image_data_url"] = image_urls[-1]
    payload = prompt.payload(settings.policy, [{"role": "system", "content": prompt.SYSTEM_PROMPT},
                                               build_user_message(text, image_urls, vision)])
    if trace is not None:
        trace.timestep(turn_number=turn, metadata={"seed": settings.episode.seed})
    completion = await chat_completion(settings.inference_url, payload, timeout=max(1.0, timeout_s))
    actions, rejected, recorded_calls = prompt.requested_actions(completion)

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
                                  "image_only_mode": vision.image_only_mode, "tool": prompt.TOOL_NAME},
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
