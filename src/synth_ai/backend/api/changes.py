"""Waking live streams when the database changes, whoever wrote it.

Workers are separate processes that write events and metrics to SQLite themselves, so an in-process notification
would miss most writes. Instead one asyncio task per server reads `PRAGMA data_version` on its own connection every
`interval` seconds: SQLite bumps that number whenever another connection (any process) commits. A change wakes every
waiting stream, which then reads what is new for its job. The pragma reads a counter in the WAL index, so a poll
costs microseconds, and the task runs only while at least one stream is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

POLL_S = 0.05


class ChangeWatcher:
    def __init__(self, path: Path, interval: float = POLL_S) -> None:
        self.path = path
        self.interval = interval
        self.generation = 0  # grows by one per change seen
        self._changed: asyncio.Event | None = None
        self._subscribers = 0
        self._task: asyncio.Task | None = None

    @contextlib.asynccontextmanager
    async def subscribed(self) -> AsyncIterator[ChangeWatcher]:
        """Keep the watcher running while the caller streams."""
        self._subscribers += 1
        if self._changed is None:
            self._changed = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._watch())
        try:
            yield self
        finally:
            self._subscribers -= 1

    async def wait_past(self, generation: int, timeout: float) -> bool:
        """Wait until a change newer than `generation` (the value read before the caller's last query); False when
        `timeout` passed without one. Checking first closes the gap between a query and the wait."""
        if self.generation != generation:
            return True
        assert self._changed is not None, "wait_past is used inside subscribed()"
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            return self.generation != generation
        return True

    async def _watch(self) -> None:
        conn = sqlite3.connect(str(self.path), check_same_thread=False)
        try:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            while self._subscribers > 0:
                await asyncio.sleep(self.interval)
                now = conn.execute("PRAGMA data_version").fetchone()[0]
                if now != version:
                    version = now
                    self.generation += 1
                    woken, self._changed = self._changed, asyncio.Event()
                    if woken is not None:
                        woken.set()
        finally:
            conn.close()
