"""What the Crafter policy is shown and how its answer becomes actions: the `interact_many` tool, the system
prompt, the per-turn history line, the chat request sent to `inference_url`, and reading actions back from the
reply (tool calls, else exact action names in the text)."""

from __future__ import annotations

from typing import Any

from synth_ai.taskapp.inference import tool_calls_of
from synth_ai.taskapp.siblings import load_sibling

crafter_env = load_sibling(__file__, "crafter_env")

MAX_ACTIONS_PER_CALL = 8
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


def requested_actions(completion: dict[str, Any]) -> tuple[list[str], list[Any], list[dict[str, Any]]]:
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


def history_text(last_actions: list[str], last_unlocked: list[str]) -> str:
    if not last_actions:
        return "Previous turn: none (this is the first turn)."
    text = "Previous turn: " + ", ".join(last_actions)
    return text + (f" -> unlocked {', '.join(last_unlocked)}" if last_unlocked else " -> nothing unlocked")


_PASSTHROUGH = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed",
                "thinking_mode", "thinking_budget", "logprobs", "top_logprobs")


def payload(policy_cfg: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": policy_cfg.get("model"),
        "messages": messages,
        "tools": TOOLS,
        "tool_choice": policy_cfg.get("tool_choice", "required"),
        "parallel_tool_calls": False,
    }
    payload.update({k: policy_cfg[k] for k in _PASSTHROUGH if policy_cfg.get(k) is not None})
    return payload


