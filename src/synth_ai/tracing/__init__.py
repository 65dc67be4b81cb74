"""Traces v3: the SQLite schema that task apps, `eval` and `filter` share, a session recorder and a writer.

- `schema`   the DDL (tables, CHECK constraints, views, indexes) compatible with synth-ai 0.2.17's tracing_v3
- `session`  `SessionRecorder`: builds one session (timesteps, events, messages, rewards) in memory
- `store`    `TraceStore`: writes recorded sessions to a SQLite file (WAL, one writer at a time)

Only the standard library is used (`sqlite3`), so any layer can read or write traces.
"""

from synth_ai.tracing.session import MESSAGE_TYPES, EventRef, SessionRecorder
from synth_ai.tracing.store import TraceStore, db_path_from_url

__all__ = ["MESSAGE_TYPES", "EventRef", "SessionRecorder", "TraceStore", "db_path_from_url"]
