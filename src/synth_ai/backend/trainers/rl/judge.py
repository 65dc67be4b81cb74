"""`[judge]`: an LLM judge that scores each successful rollout against a rubric, blended into the reward.

The judge is any OpenAI-compatible chat-completions server: the provider's (`[judge.options].provider` openai,
groq or gemini, its key from OPENAI_API_KEY / GROQ_API_KEY / GEMINI_API_KEY in the backend's environment), or the
one at `[judge.options].base_url` / `[services].judge_url` (then the provider's key is sent when it is set, and not
required). A missing key is refused when the job is created (`require_judge_key`), never mid-run.

Each enabled kind (`options.outcome`: the episode as a whole; `options.event`: the quality of its individual
decisions) is one call per rollout: the rubric and a compact transcript of the rollout's steps, answered with
{"score": <0..1>}. A call that fails (transport, HTTP, timeout) or whose answer has no such score is counted and
that score is left out: `advantages.group_returns` gives the rollout its group's mean score for that kind, so it
neither gains nor loses from the judge (it is never scored 0).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from synth_ai.backend.trainers.common import _float, _int
from synth_ai.env.secrets import redact
from synth_ai.errors import InvalidInputError

PROVIDERS = {  # provider -> (chat-completions URL, env var of its key)
    "openai": ("https://api.openai.com/v1/chat/completions", "OPENAI_API_KEY"),
    "groq": ("https://api.groq.com/openai/v1/chat/completions", "GROQ_API_KEY"),
    "gemini": ("https://generativelanguage.googleapis.com/v1beta/openai/chat/completions", "GEMINI_API_KEY"),
}
KINDS = ("outcome", "event")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_CONCURRENCY = 4
TRANSCRIPT_CHARS = 6000
STEP_CHARS = 800
DEFAULT_RUBRICS = {
    "outcome": "How well did the agent accomplish the task over the whole episode?",
    "event": "How good were the agent's individual decisions (each step), on average?",
}
SYSTEM_PROMPT = ("You are a strict evaluator of an AI agent's episode. Read the rubric and the transcript, then "
                 'answer with only a JSON object: {"score": <number from 0 to 1>, "reason": "<one sentence>"}.')


@dataclass(frozen=True)
class JudgeSettings:
    provider: str
    model: str
    url: str
    key_env: str
    key_required: bool  # False when the URL was overridden (a local or self-hosted judge)
    kinds: tuple[str, ...]
    blend: dict[str, float]  # env, event, outcome
    rubrics: dict[str, str]  # configured ones only; the task app's `/info` rubrics, then DEFAULT_RUBRICS, fill in
    timeout_s: float = DEFAULT_TIMEOUT_S
    concurrency: int = DEFAULT_CONCURRENCY


def resolve_judge(config: Mapping[str, Any]) -> JudgeSettings | None:
    """`[judge]` of an RL config, or None when there is none (or `enabled = false`)."""
    judge = config.get("judge")
    if not isinstance(judge, dict) or judge.get("enabled", True) is False:
        return None
    options = judge.get("options") if isinstance(judge.get("options"), dict) else {}
    provider = options.get("provider")
    if provider not in PROVIDERS:
        raise InvalidInputError(f"[judge.options].provider must be one of openai, groq, gemini (found {provider!r}).",
                                hint='Set provider = "openai" (or groq, gemini).')
    model = options.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError(f"[judge.options].model must name the judge model (found {model!r}).")
    kinds = tuple(k for k in KINDS if options.get(k, True) is not False)
    if not kinds:
        raise InvalidInputError("[judge.options]: at least one of event or outcome judging must be on.")
    services = config.get("services") if isinstance(config.get("services"), dict) else {}
    override = options.get("base_url") or services.get("judge_url")
    if override is not None and (not isinstance(override, str) or not override.startswith(("http://", "https://"))):
        raise InvalidInputError(f"The judge URL ([judge.options].base_url or [services].judge_url) must be an "
                                f"http(s) URL (found {override!r}).")
    default_url, key_env = PROVIDERS[provider]
    blend_cfg = judge.get("reward_blend") if isinstance(judge.get("reward_blend"), dict) else {}
    blend = {"env": 1.0, **{k: 1.0 if k in kinds else 0.0 for k in KINDS}}
    for key in blend:
        if blend_cfg.get(key) is not None:
            blend[key] = _float(f"[judge.reward_blend].{key}", blend_cfg[key], low=0.0)
    for kind in KINDS:
        if blend[kind] > 0 and kind not in kinds:
            raise InvalidInputError(f"[judge.reward_blend].{kind} is {blend[kind]:g} but {kind} judging is off.",
                                    hint=f"Set [judge.options].{kind} = true, or reward_blend.{kind} = 0.")
    if not any(blend.values()):
        raise InvalidInputError("[judge.reward_blend] weights are all zero.")
    return JudgeSettings(
        provider=provider, model=model.strip(), url=(override or default_url).rstrip("/"), key_env=key_env,
        key_required=override is None, kinds=kinds, blend=blend, rubrics=_rubrics(judge, options),
        timeout_s=_float("[judge].timeout_s", judge.get("timeout_s", DEFAULT_TIMEOUT_S), low=0.0, strict_low=True),
        concurrency=_int("[judge.options].max_concurrency", options.get("max_concurrency", DEFAULT_CONCURRENCY)))


def rubric_texts(source: Any) -> dict[str, str]:
    """Rubric text per kind from a string (both kinds) or {outcome, event|events} (a non-string value as JSON)."""
    if isinstance(source, str) and source.strip():
        return {k: source.strip() for k in KINDS}
    texts: dict[str, str] = {}
    if isinstance(source, dict):
        for kind, names in (("outcome", ("outcome",)), ("event", ("event", "events"))):
            for name in names:
                value = source.get(name)
                if value:
                    texts[kind] = value.strip() if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return texts


def _rubrics(judge: dict[str, Any], options: dict[str, Any]) -> dict[str, str]:
    """The configured rubric texts: `[judge].rubric`, then `[judge.options].rubric_overrides` over it."""
    return {**rubric_texts(judge.get("rubric")), **rubric_texts(options.get("rubric_overrides"))}


def require_judge_key(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> JudgeSettings | None:
    """Raise when the job's judge could not be called: an invalid `[judge]`, or the provider's key missing from the
    backend's environment. Called at create time and when the worker starts."""
    settings = resolve_judge(config)
    env = os.environ if environ is None else environ
    if settings is not None and settings.key_required and not (env.get(settings.key_env) or "").strip():
        raise InvalidInputError(
            f"[judge] uses provider {settings.provider!r}, but {settings.key_env} is not set in the backend's "
            "environment, so the judge could not be called.",
            hint=f"Start the backend with {settings.key_env} set, or point [judge.options].base_url (or "
                 "[services].judge_url) at an OpenAI-compatible server that needs no key.")
    return settings


def parse_score(text: Any) -> float | None:
    """The score in a judge's answer: a JSON object with a numeric `score` in [0, 1] (code fences and a leading
    <think> block allowed), or a bare number in [0, 1]. None when there is none."""
    if not isinstance(text, str):
        return None
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL).strip()
    candidates = re.findall(r"\{[^{}]*\}", text)
    values: list[Any] = []
    for chunk in candidates:
        try:
            doc = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(doc, dict) and "score" in doc:
            values.append(doc["score"])
    if not candidates:
        values.append(text)
    for value in values:
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value) and 0.0 <= value <= 1.0:
            return float(value)
    return None


def _without_images(value: Any) -> Any:
    """Images (data URLs) become "<image>": the judge reads text, and base64 would crowd it out."""
    if isinstance(value, str):
        return "<image>" if value.startswith("data:") else value
    if isinstance(value, dict):
        return {k: _without_images(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_images(v) for v in value]
    return value


def transcript(response: dict[str, Any]) -> str:
    """The rollout's steps as the judge reads them: observation, tool calls and info of each (the step's `reward`
    field, `info.meta` and images left out), shortened to fit."""
    from synth_ai.backend.trainers.rl.step_rewards import steps_of

    lines = []
    for t, step in enumerate(steps_of(response)):
        info = {k: v for k, v in (step.get("info") or {}).items() if k != "meta"} \
            if isinstance(step.get("info"), dict) else {}
        shown = _without_images({"observation": step.get("obs"), "tool_calls": step.get("tool_calls"), "info": info})
        lines.append(f"Step {t}: " + json.dumps(shown, default=str, sort_keys=True)[:STEP_CHARS])
    text = "\n".join(lines) or "(no steps)"
    return text if len(text) <= TRANSCRIPT_CHARS else text[:TRANSCRIPT_CHARS] + "\n(…)"


def judge_messages(rubric: str, kind: str, response: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Rubric ({kind}): {rubric}\n\nTranscript:\n{transcript(response)}\n\n"
                                        "Answer with the JSON object only."}]


def task_app_rubrics(task_url: str, api_key: str | None, timeout: float = 10.0) -> dict[str, str]:
    """The rubrics the task app advertises on `GET /info` (`rubrics.outcome`, `rubrics.events`); {} when it gives
    none or cannot say (the judge then uses its default wording)."""
    import httpx

    try:
        response = httpx.get(f"{task_url}/info", headers={"X-API-Key": api_key} if api_key else {}, timeout=timeout,
                             follow_redirects=False)
        doc = response.json() if response.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}
    return rubric_texts(doc.get("rubrics")) if isinstance(doc, dict) else {}


@dataclass
class JudgeReport:
    calls: int = 0
    scores: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)  # timeout | unreachable | http | unparseable
    first_error: str | None = None

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def fail(self, kind: str, message: str) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + 1
        self.first_error = self.first_error or message


class Judge:
    def __init__(self, settings: JudgeSettings, environ: Mapping[str, str] | None = None,
                 task_rubrics: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        env = os.environ if environ is None else environ
        self.api_key = (env.get(settings.key_env) or "").strip() or None
        self.rubrics = {**DEFAULT_RUBRICS, **(task_rubrics or {}), **settings.rubrics}
        self.rubric_source = {k: "config" if k in settings.rubrics else "task_app" if k in (task_rubrics or {})
                              else "default" for k in settings.kinds}

    def _scrub(self, text: str) -> str:
        text = redact(text)  # every secret of the environment, then the judge's key wherever it came from
        return redact(text, [self.api_key]) if self.api_key else text

    def score(self, rollouts: list[Any]) -> JudgeReport:
        """Score every successful rollout (that kept its response) for each enabled kind; fills `rollout.judge`."""
        return asyncio.run(self._score_all(rollouts))

    async def _score_all(self, rollouts: list[Any]) -> JudgeReport:
        import httpx

        report = JudgeReport()
        gate = asyncio.Semaphore(self.settings.concurrency)
        todo = [(r, kind) for r in rollouts if r.ok and isinstance(r.response, dict) for kind in self.settings.kinds]
        async with httpx.AsyncClient(follow_redirects=False) as client:
            await asyncio.gather(*(self._one(client, gate, r, kind, report) for r, kind in todo))
        return report

    async def _one(self, client: Any, gate: asyncio.Semaphore, rollout: Any, kind: str, report: JudgeReport) -> None:
        from synth_ai.taskapp.errors import InferenceError
        from synth_ai.taskapp.inference import chat_completion

        s = self.settings
        payload = {"model": s.model, "messages": judge_messages(self.rubrics[kind], kind, rollout.response),
                   "temperature": 0.0,
                   "max_tokens": 256}
        async with gate:
            report.calls += 1
            try:
                completion = await chat_completion(s.url, payload, api_key=self.api_key, timeout=s.timeout_s,
                                                   client=client, record=False)
            except InferenceError as exc:
                code = getattr(exc, "code", "")
                what = "timeout" if code == "inference_timeout" else \
                    "unreachable" if code == "inference_unreachable" else "http"
                report.fail(what, self._scrub(str(exc)))
                return
        content = (completion["choices"][0].get("message") or {}).get("content")
        value = parse_score(content)
        if value is None:
            shown = self._scrub(str(content)[:200])
            report.fail("unparseable", f"the judge's answer has no score in [0, 1]: {shown!r}")
            return
        rollout.judge[kind] = value
        report.scores.append(value)
