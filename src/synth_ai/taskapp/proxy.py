"""Optional vendor proxies on a task app: `/proxy/v1/chat/completions` (OpenAI) and
`/proxy/groq/v1/chat/completions` (Groq). The app's own vendor key is added server-side, so a policy can call a
vendor model through the task app without holding the key. 503 `missing_openai_api_key` / `missing_groq_api_key`
when the key is not configured."""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from synth_ai.taskapp.config import ProxyConfig
from synth_ai.taskapp.errors import TaskAppError
from synth_ai.taskapp.inference import chat_completion


def add_proxy_routes(app: FastAPI, proxy: ProxyConfig, guard: list[Any]) -> None:
    def routes() -> list[tuple[str, str, str, str]]:
        found = []
        if proxy.enable_openai:
            found.append(("/proxy/v1/chat/completions", proxy.openai_url, "OPENAI_API_KEY", "missing_openai_api_key"))
        if proxy.enable_groq:
            found.append(("/proxy/groq/v1/chat/completions", proxy.groq_url, "GROQ_API_KEY", "missing_groq_api_key"))
        return found

    for path, target, key_name, missing_code in routes():

        async def forward(request: Request, _target: str = target, _key: str = key_name,
                          _missing: str = missing_code) -> JSONResponse:
            key = os.environ.get(_key)
            if not key:
                raise TaskAppError(f"{_key} is not configured", status_code=503, code=_missing)
            try:
                payload = await request.json()
            except ValueError:
                payload = None
            if not isinstance(payload, dict):
                raise TaskAppError("The body must be a JSON object (an OpenAI chat completion request).",
                                   status_code=400, code="invalid_request")
            if proxy.system_hint and isinstance(payload.get("messages"), list):
                payload["messages"] = [{"role": "system", "content": proxy.system_hint}, *payload["messages"]]
            return JSONResponse(await chat_completion(_target, payload, api_key=key))

        app.add_api_route(path, forward, methods=["POST"], dependencies=guard)
