"""The traces v3 SQLite schema (what synth-ai 0.2.17's SessionTracer creates), so a trace database written by
either implementation is readable by the other's `eval`/`filter`.

Column names, types, CHECK constraints, views and index names follow the reference. JSON columns are TEXT.
"""

from __future__ import annotations

SCHEMA_VERSION = 3

TABLES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS experiments (
        experiment_id VARCHAR NOT NULL PRIMARY KEY,
        name VARCHAR NOT NULL,
        description TEXT,
        created_at DATETIME,
        updated_at DATETIME,
        configuration TEXT,
        metadata TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS systems (
        system_id VARCHAR NOT NULL PRIMARY KEY,
        name VARCHAR NOT NULL,
        system_type VARCHAR,
        description TEXT,
        created_at DATETIME,
        metadata TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS system_versions (
        version_id VARCHAR NOT NULL PRIMARY KEY,
        system_id VARCHAR NOT NULL REFERENCES systems (system_id),
        version_number VARCHAR NOT NULL,
        commit_hash VARCHAR,
        created_at DATETIME,
        configuration TEXT,
        metadata TEXT,
        CONSTRAINT uq_system_version UNIQUE (system_id, version_number)
    )""",
    """CREATE TABLE IF NOT EXISTS experimental_systems (
        id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        experiment_id VARCHAR NOT NULL REFERENCES experiments (experiment_id),
        system_id VARCHAR NOT NULL REFERENCES systems (system_id),
        version_id VARCHAR NOT NULL REFERENCES system_versions (version_id),
        CONSTRAINT uq_experiment_system UNIQUE (experiment_id, system_id)
    )""",
    """CREATE TABLE IF NOT EXISTS session_traces (
        session_id VARCHAR NOT NULL PRIMARY KEY,
        created_at DATETIME NOT NULL,
        num_timesteps INTEGER NOT NULL DEFAULT 0,
        num_events INTEGER NOT NULL DEFAULT 0,
        num_messages INTEGER NOT NULL DEFAULT 0,
        metadata TEXT,
        experiment_id VARCHAR REFERENCES experiments (experiment_id),
        embedding VECTOR
    )""",
    """CREATE TABLE IF NOT EXISTS session_timesteps (
        id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        session_id VARCHAR NOT NULL REFERENCES session_traces (session_id),
        step_id VARCHAR NOT NULL,
        step_index INTEGER NOT NULL,
        turn_number INTEGER,
        started_at DATETIME,
        completed_at DATETIME,
        num_events INTEGER,
        num_messages INTEGER,
        step_metadata TEXT,
        CONSTRAINT uq_session_step UNIQUE (session_id, step_id)
    )""",
    """CREATE TABLE IF NOT EXISTS events (
        id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        session_id VARCHAR NOT NULL REFERENCES session_traces (session_id),
        timestep_id INTEGER REFERENCES session_timesteps (id),
        event_type VARCHAR NOT NULL,
        system_instance_id VARCHAR,
        event_time FLOAT,
        message_time INTEGER,
        created_at DATETIME,
        model_name VARCHAR,
        provider VARCHAR,
        input_tokens INTEGER,
        output_tokens INTEGER,
        total_tokens INTEGER,
        cost_usd INTEGER,
        latency_ms INTEGER,
        span_id VARCHAR,
        trace_id VARCHAR,
        call_records TEXT,
        reward FLOAT,
        terminated BOOLEAN,
        truncated BOOLEAN,
        system_state_before TEXT,
        system_state_after TEXT,
        metadata TEXT,
        event_metadata TEXT,
        embedding VECTOR,
        CONSTRAINT check_event_type CHECK (event_type IN ('cais', 'environment', 'runtime'))
    )""",
    """CREATE TABLE IF NOT EXISTS messages (
        id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        session_id VARCHAR NOT NULL REFERENCES session_traces (session_id),
        timestep_id INTEGER REFERENCES session_timesteps (id),
        message_type VARCHAR NOT NULL,
        content TEXT NOT NULL,
        timestamp DATETIME,
        event_time FLOAT,
        message_time INTEGER,
        metadata TEXT,
        embedding VECTOR,
        CONSTRAINT check_message_type CHECK (message_type IN ('user', 'assistant', 'system', 'tool_use', 'tool_result'))
    )""",
    """CREATE TABLE IF NOT EXISTS outcome_rewards (
        id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        session_id VARCHAR NOT NULL REFERENCES session_traces (session_id),
        total_reward INTEGER NOT NULL,
        achievements_count INTEGER NOT NULL DEFAULT 0,
        total_steps INTEGER NOT NULL DEFAULT 0,
        created_at DATETIME NOT NULL,
        reward_metadata TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS event_rewards (
        id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        event_id INTEGER NOT NULL REFERENCES events (id),
        session_id VARCHAR NOT NULL REFERENCES session_traces (session_id),
        message_id INTEGER REFERENCES messages (id),
        turn_number INTEGER,
        reward_value FLOAT NOT NULL DEFAULT 0.0,
        reward_type VARCHAR,
        "key" VARCHAR,
        annotation TEXT,
        source VARCHAR,
        created_at DATETIME NOT NULL
    )""",
)

INDEXES: tuple[str, ...] = (
    "CREATE INDEX IF NOT EXISTS idx_experiment_created ON experiments (created_at)",
    "CREATE INDEX IF NOT EXISTS idx_experiment_name ON experiments (name)",
    "CREATE INDEX IF NOT EXISTS idx_system_name ON systems (name)",
    "CREATE INDEX IF NOT EXISTS idx_system_type ON systems (system_type)",
    "CREATE INDEX IF NOT EXISTS idx_version_system ON system_versions (system_id)",
    "CREATE INDEX IF NOT EXISTS idx_version_created ON system_versions (created_at)",
    "CREATE INDEX IF NOT EXISTS idx_experimental_system ON experimental_systems (experiment_id, system_id)",
    "CREATE INDEX IF NOT EXISTS idx_session_created ON session_traces (created_at)",
    "CREATE INDEX IF NOT EXISTS idx_session_experiment ON session_traces (experiment_id)",
    "CREATE INDEX IF NOT EXISTS idx_timestep_session_step ON session_timesteps (session_id, step_id)",
    "CREATE INDEX IF NOT EXISTS idx_timestep_turn ON session_timesteps (turn_number)",
    "CREATE INDEX IF NOT EXISTS idx_event_session_step ON events (session_id, timestep_id)",
    "CREATE INDEX IF NOT EXISTS idx_event_type ON events (event_type)",
    "CREATE INDEX IF NOT EXISTS idx_event_created ON events (created_at)",
    "CREATE INDEX IF NOT EXISTS idx_event_model ON events (model_name)",
    "CREATE INDEX IF NOT EXISTS idx_event_trace ON events (trace_id)",
    "CREATE INDEX IF NOT EXISTS idx_message_session_step ON messages (session_id, timestep_id)",
    "CREATE INDEX IF NOT EXISTS idx_message_type ON messages (message_type)",
    "CREATE INDEX IF NOT EXISTS idx_message_timestamp ON messages (timestamp)",
    "CREATE INDEX IF NOT EXISTS idx_outcome_rewards_session ON outcome_rewards (session_id)",
    "CREATE INDEX IF NOT EXISTS idx_outcome_rewards_total ON outcome_rewards (total_reward)",
    "CREATE INDEX IF NOT EXISTS idx_event_rewards_session ON event_rewards (session_id)",
    "CREATE INDEX IF NOT EXISTS idx_event_rewards_event ON event_rewards (event_id)",
    "CREATE INDEX IF NOT EXISTS idx_event_rewards_type ON event_rewards (reward_type)",
    "CREATE INDEX IF NOT EXISTS idx_event_rewards_key ON event_rewards (\"key\")",
)

VIEWS: tuple[str, ...] = (
    """CREATE VIEW IF NOT EXISTS model_usage_stats AS
        SELECT model_name, provider,
               COUNT(*) AS usage_count,
               SUM(input_tokens) AS total_input_tokens,
               SUM(output_tokens) AS total_output_tokens,
               SUM(total_tokens) AS total_tokens,
               SUM(cost_usd) / 100.0 AS total_cost_usd,
               AVG(latency_ms) AS avg_latency_ms,
               MIN(created_at) AS first_used,
               MAX(created_at) AS last_used
        FROM events
        WHERE event_type = 'cais' AND model_name IS NOT NULL
        GROUP BY model_name, provider""",
    """CREATE VIEW IF NOT EXISTS session_summary AS
        SELECT s.session_id, s.created_at, s.num_timesteps, s.num_events, s.num_messages,
               e.experiment_id, e.name AS experiment_name,
               COUNT(DISTINCT ev.model_name) AS unique_models_used,
               SUM(CASE WHEN ev.event_type = 'cais' THEN ev.cost_usd ELSE 0 END) / 100.0 AS total_cost_usd
        FROM session_traces s
        LEFT JOIN experiments e ON s.experiment_id = e.experiment_id
        LEFT JOIN events ev ON s.session_id = ev.session_id
        GROUP BY s.session_id""",
    """CREATE VIEW IF NOT EXISTS experiment_overview AS
        SELECT e.experiment_id, e.name, e.description, e.created_at,
               COUNT(DISTINCT s.session_id) AS session_count,
               SUM(s.num_events) AS total_events,
               SUM(s.num_messages) AS total_messages,
               AVG(s.num_timesteps) AS avg_timesteps_per_session
        FROM experiments e
        LEFT JOIN session_traces s ON e.experiment_id = s.experiment_id
        GROUP BY e.experiment_id""",
)

ALL_STATEMENTS: tuple[str, ...] = (*TABLES, *INDEXES, *VIEWS)
