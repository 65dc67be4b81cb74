"""math-single-step: one math problem per rollout, answered through a `math_submit` tool call.

The policy (an OpenAI-compatible chat-completions endpoint at `policy.config.inference_url`) gets the problem and a
`math_submit(answer)` tool; the reward is 1.0 when the submitted answer matches the solution's final (boxed)
answer after normalisation, else 0.0. A model that answers in text instead of calling the tool is graded on the
last `\\boxed{…}` of its text (recorded as `answer_source: "text"`).

Data: the offline dataset in `data/` (train 40, test 20 problems). A larger local dataset is read from
`MATH_DATASET_LOCAL_DIR` (`train.jsonl` / `test.jsonl`, rows with `problem` and `solution`; an optional `answer`
overrides the boxed one); `MATH_DATASET_LOCAL_<SPLIT>_FILE` points at one split's file directly.

Env config: `split` ("train" | "test", default "train"); the seed picks the problem (`seed % split size`).
Policy config: `model`, `inference_url`, `temperature` (0.0), `max_tokens` (512), `top_p`, `tool_choice`
("required"), `timeout_s` (120), `thinking_mode`, `thinking_budget`, `seed` (the model call's sampling seed).
"""

from __future__ import annotations

import json
import os
import re
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

from synth_ai.taskapp import (
    DatasetInfo,
    InferenceInfo,
    LimitsInfo,
    ModalDeploymentConfig,
    RolloutError,
    RolloutMetrics,
    RolloutRequest,
    RolloutResponse,
    RolloutStep,
    RolloutTrajectory,
    RubricBundle,
    RubricInfo,
    TaskAppConfig,
    TaskAppEntry,
    TaskDescriptor,
    TaskInfo,
    chat_completion,
    current_trace,
    normalize_inference_url,
    register_task_app,
    tool_calls_of,
)
from synth_ai.taskapp.tracing import correlation_id_of

APP_ID = "math-single-step"
TASK_ID = "math_single_step"
SPLITS = ("train", "test")
DATA_DIR = Path(__file__).resolve().parent / "data"

SYSTEM_PROMPT = (
    "You are a careful math solver. Work out the answer, then call the `math_submit` tool exactly once with the "
    "final answer only (a number, a simplified fraction like \\frac{3}{4}, or an expression), without units or words."
)

MATH_SUBMIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "math_submit",
        "description": "Submit the final answer to the math problem.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer, e.g. 42 or \\frac{7}{8}."}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    },
}


# --- dataset ----------------------------------------------------------------------------------------------------


def _split_file(split: str) -> tuple[Path, str]:
    explicit = os.environ.get(f"MATH_DATASET_LOCAL_{split.upper()}_FILE", "").strip()
    if explicit:
        return Path(explicit).expanduser(), "local"
    local_dir = os.environ.get("MATH_DATASET_LOCAL_DIR", "").strip()
    if local_dir:
        return Path(local_dir).expanduser() / f"{split}.jsonl", "local"
    return DATA_DIR / f"{split}.jsonl", "bundled"


@lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int) -> tuple[dict[str, str], ...]:
    rows: list[dict[str, str]] = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise RolloutError(f"{path}:{line_no}: not valid JSON ({exc.msg})", status_code=500,
                                   code="dataset_error") from None
            if not isinstance(row, dict) or not isinstance(row.get("problem"), str) \
                    or not isinstance(row.get("solution"), str):
                raise RolloutError(f"{path}:{line_no}: each row needs string fields 'problem' and 'solution'",
                                   status_code=500, code="dataset_error")
            rows.append(row)
    if not rows:
        raise RolloutError(f"{path}: the dataset split is empty", status_code=500, code="dataset_error")
    return tuple(rows)


def dataset(split: str) -> tuple[tuple[dict[str, str], ...], str]:
    """The rows of `split` and where they came from ("bundled" or "local")."""
    if split not in SPLITS:
        raise RolloutError(f"Unknown split {split!r}; use one of {', '.join(SPLITS)}", status_code=400,
                           code="invalid_split")
    path, source = _split_file(split)
    if not path.is_file():
        raise RolloutError(f"Math dataset file not found: {path} (MATH_DATASET_LOCAL_DIR must contain "
                           "train.jsonl and test.jsonl)", status_code=500, code="dataset_error")
    return _load(str(path), path.stat().st_mtime_ns), source


def pick(split: str, seed: int) -> tuple[int, dict[str, str]]:
    rows, _ = dataset(split)
    index = seed % len(rows)
    return index, rows[index]


# --- grading ----------------------------------------------------------------------------------------------------


def extract_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{…}` (or `\\fbox{…}`) in `text`, braces balanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1:i].strip()
    return None


def expected_answer(row: dict[str, str]) -> str:
    if isinstance(row.get("answer"), str) and row["answer"].strip():
        return row["answer"].strip()
    boxed = extract_boxed(row["solution"])
    return boxed if boxed is not None else row["solution"].strip()


_FRAC = re.compile(r"\\frac\{([^{}]+)\}\{([^{}]+)\}")
_FRAC_SHORT = re.compile(r"\\frac(\d)(\d)")


def normalize_answer(text: Any) -> str:
    s = str(text).strip()
    boxed = extract_boxed(s)
    if boxed is not None:
        s = boxed
    s = s.strip().strip("$").strip()
    for token in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", "\\$"):
        s = s.replace(token, "")
    s = re.sub(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)
    s = s.replace(" ", "").rstrip(".")
    while re.search(r"(\d),(\d{3})(?!\d)", s):
        s = re.sub(r"(\d),(\d{3})(?!\d)", r"\1\2", s)
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC.sub(r"(\1)/(\2)", s)
    return s.lower()


_NUM = r"-?\d+(?:\.\d+)?"


def _numeric(s: str) -> Fraction | None:
    sign = 1
    if s.startswith("-(") or s.startswith("-\\("):
        sign, s = -1, s[1:]
    m = re.fullmatch(rf"\(?({_NUM})\)?/\(?({_NUM})\)?", s)
    try:
        if m:
            den = Fraction(m.group(2))
            return None if den == 0 else sign * Fraction(m.group(1)) / den
        if re.fullmatch(_NUM, s):
            return sign * Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return None


def answers_match(given: Any, expected: Any) -> bool:
    a, b = normalize_answer(given), normalize_answer(expected)
    if not a:
        return False
    if a == b:
        return True
    x, y = _numeric(a), _numeric(b)
    return x is not None and y is not None and abs(x - y) <= Fraction(1, 10**6) * max(1, abs(y))


# --- task app ---------------------------------------------------------------------------------------------------

BASE_TASK_INFO = TaskInfo(
    task=TaskDescriptor(id=TASK_ID, name="Math single step", version="1.0.0",
                        description="Solve one math problem; submit the final answer with the math_submit tool."),
    environment=TASK_ID,
    dataset=DatasetInfo(id=TASK_ID, name="Math problems (offline bundle or MATH_DATASET_LOCAL_DIR)",
                        version="1.0.0", splits=list(SPLITS), default_split="train"),
    rubric=RubricInfo(outcome={"criteria": "1.0 when the submitted answer equals the solution's final answer"}),
    inference=InferenceInfo(tool="math_submit"),
    limits=LimitsInfo(max_turns=1, max_response_tokens=512, timeout_seconds=120),
    action_space={"type": "tool_call", "tools": [MATH_SUBMIT_TOOL["function"]]},
    observation={"type": "text", "fields": ["problem"]},
)


def describe_taskset() -> dict[str, Any]:
    sizes = {}
    sources = {}
    for split in SPLITS:
        rows, source = dataset(split)
        sizes[split] = len(rows)
        sources[split] = source
    return {"id": TASK_ID, "name": "Math single step", "splits": list(SPLITS), "default_split": "train",
            "sizes": sizes, "sources": sources}


def provide_task_instances(seeds: list[int]) -> list[TaskInfo]:
    infos = []
    for seed in seeds:
        index, row = pick("train", seed)
        info = BASE_TASK_INFO.model_copy(deep=True)
        info.task_metadata = {"seed": seed, "split": "train", "index": index, "problem": row["problem"]}
        infos.append(info)
    return infos


def _seed_of(request: RolloutRequest) -> int:
    seed = request.env.seed if request.env.seed is not None else request.env.config.get("seed", 0)
    try:
        return int(seed)
    except (TypeError, ValueError, OverflowError):
        raise RolloutError(f"env.seed must be an integer, not {seed!r}", status_code=400,
                           code="invalid_seed") from None


def _timeout_of(config: dict[str, Any]) -> float:
    raw = config.get("timeout_s", 120)
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise RolloutError(f"policy.config.timeout_s must be a positive number of seconds, not {raw!r}",
                           status_code=400, code="invalid_timeout")
    return seconds


async def rollout(request: RolloutRequest, fastapi_request: Any = None) -> RolloutResponse:
    split = str(request.env.config.get("split") or "train")
    seed = _seed_of(request)
    index, row = pick(split, seed)
    expected = expected_answer(row)
    config = request.policy.config or {}
    raw_url = config.get("inference_url")
    if not raw_url:
        raise RolloutError("policy.config.inference_url is required (an OpenAI-compatible chat-completions URL)",
                           status_code=400, code="missing_inference_url")
    inference_url = normalize_inference_url(str(raw_url))

    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["problem"]}]
    payload: dict[str, Any] = {
        "model": config.get("model"),
        "messages": messages,
        "tools": [MATH_SUBMIT_TOOL],
        "temperature": config.get("temperature", 0.0),
        "max_tokens": config.get("max_tokens", 512),
    }
    tool_choice = config.get("tool_choice", "required")
    if tool_choice is not None:
        payload["tool_choice"] = tool_choice
    for key in ("top_p", "thinking_mode", "thinking_budget", "stop", "seed"):
        if config.get(key) is not None:
            payload[key] = config[key]

    trace = current_trace()
    if trace is not None:
        trace.metadata.update({"task_id": f"{TASK_ID}:{split}:{index}", "task_split": split, "seed": seed})
        trace.timestep("math_step", turn_number=0, metadata={"split": split, "index": index})

    completion = await chat_completion(inference_url, payload, timeout=_timeout_of(config))
    calls = tool_calls_of(completion)
    submit = next((c for c in calls if c.get("name") == "math_submit"), None)
    content = (completion["choices"][0].get("message") or {}).get("content") or ""
    if submit is not None:
        answer = submit["arguments"].get("answer")
        answer = None if answer is None else str(answer)
        source = "tool_call"
    else:
        answer = extract_boxed(content) if isinstance(content, str) else None
        source = "text" if answer is not None else None
    correct = answer is not None and answers_match(answer, expected)
    reward = 1.0 if correct else 0.0

    obs = {"problem": row["problem"], "split": split, "index": index}
    step = RolloutStep(
        obs=obs,
        tool_calls=[{"tool_name": "math_submit", "arguments": {"answer": answer}}] if submit is not None else [],
        reward=reward,
        done=True,
        truncated=False,
        info={
            "meta": {"inference_url": inference_url},
            "correct": correct,
            "answer": answer,
            "answer_source": source,
            "expected_answer": expected,
            "finish_reason": completion["choices"][0].get("finish_reason"),
        },
    )
    cid = correlation_id_of(inference_url)
    return RolloutResponse(
        run_id=request.run_id,
        trajectories=[RolloutTrajectory(
            env_id=f"{TASK_ID}:{split}:{index}",
            policy_id=request.policy.policy_id or request.policy.policy_name or "policy",
            steps=[step], final={"observation": obs, "reward": reward}, length=1, inference_url=inference_url,
        )],
        metrics=RolloutMetrics(episode_returns=[reward], mean_return=reward, num_steps=1, num_episodes=1,
                               outcome_score=reward, details={"correct": correct}),
        ops_executed=len(request.ops),
        trace_correlation_id=cid,
        pipeline_metadata={"trace_correlation_id": cid, "inference_url": inference_url},
    )


def build_config() -> TaskAppConfig:
    return TaskAppConfig(
        app_id=APP_ID,
        name="Math single step",
        description="One math problem per rollout; reward 1 for a correct math_submit answer.",
        base_task_info=BASE_TASK_INFO,
        describe_taskset=describe_taskset,
        provide_task_instances=provide_task_instances,
        rollout=rollout,
        rubrics=RubricBundle(outcome=BASE_TASK_INFO.rubric.outcome),
    )


register_task_app(
    entry=TaskAppEntry(
        app_id=APP_ID,
        description="Single-step math: the model answers with a math_submit tool call; reward 1 when correct.",
        config_factory=build_config,
        aliases=("math", "math-single"),
        modal=ModalDeploymentConfig(
            app_name="synth-math-single-step",
            pip_packages=(),
            secret_names=(),
            timeout=600,
            memory=2048,
            cpu=1.0,
            min_containers=1,
            max_containers=4,
        ),
    )
)
