"""Rendered and tokenised text prompts, remembered by exact content.

Why: rendering a chat template (jinja) and tokenising costs about a millisecond of CPU per request, and the same
prompt comes back often: an RL iteration samples every prompt `group_size` times (each rollout its own request),
and agents resend the same system turn. A text request whose messages, tools and thinking mode equal an earlier
one's gets that request's `generation.Encoded` (prompt ids are never mutated downstream). Each `LoadedModel`
holds its own cache (`LoadedModel.prompts`), so it goes with the model and its tokenizer. Requests with images are
not cached, nor are templates that read the clock (`strftime_now`: a cached prompt would keep yesterday's date).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

MAX_ENTRIES = 512


class PromptCache:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    @staticmethod
    def key(loaded: Any, params: dict[str, Any], messages: list[dict[str, Any]], images: list[Any]) -> str | None:
        """What the rendered prompt depends on, or None when this request is not cached."""
        if images or loaded.vision or "strftime_now" in (loaded.template or ""):
            return None
        tools = params["tools"] if params["tool_choice"] != "none" else None
        try:
            return json.dumps([messages, tools, params["thinking_mode"]], sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):  # something json cannot write: render it every time
            return None

    def get(self, key: str | None) -> Any:
        if key is None:
            return None
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return found

    def put(self, key: str | None, encoded: Any) -> None:
        if key is None:
            return
        with self._lock:
            self._entries[key] = encoded
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
