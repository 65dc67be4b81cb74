"""What must hold after a batch of flows ran through the fault proxy: checked from the proxy's log of attempts,
the flows' outcomes and the backend's own records (read directly, not through the proxy)."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import httpx
from reliability.faults_flows import Outcome
from reliability.faults_proxy import Attempt

from synth_ai.client.transport import RETRYABLE_STATUS, SAFE_METHODS, RetryPolicy

CREATE_ROUTES = re.compile(r"POST /api/(files|learning/jobs|learning/jobs/[^/]+/start)")
REPEATABLE_ROUTES = re.compile(r"POST /api/learning/jobs/[^/]+/cancel")  # `Jobs.cancel(...)`: repeatable=True
# The follower reads the event stream and reconnects by its own rule (from its cursor, after a short pause), not
# through the transport's retries, so its attempts are left out of the retry replay; its end state still counts.
STREAM_ROUTES = re.compile(r"GET /api/learning/jobs/[^/]+/events/stream")


def _route(attempt: Attempt) -> str:
    return f"{attempt.method} {attempt.target.split('?', 1)[0]}"


def _same_request(a: Attempt, b: Attempt) -> bool:
    return (a.method, a.target, a.key, a.body_tag) == (b.method, b.target, b.key, b.body_tag)


def key_violations(attempts: list[Attempt]) -> list[str]:
    """Every attempt of one logical create carries one key, and no two logical creates share a key."""
    keys: dict[tuple[str, str, str | None], set[str | None]] = defaultdict(set)
    for a in attempts:
        if CREATE_ROUTES.fullmatch(_route(a)):
            keys[(a.flow, _route(a), a.body_tag)].add(a.key)
    problems = [f"{op}: keys {sorted(map(str, found))}" for op, found in keys.items()
                if len(found) != 1 or None in found]
    owners: dict[str, tuple] = {}
    for op, found in keys.items():
        for key in found:
            if key is not None and owners.setdefault(key, op) != op:
                problems.append(f"key {key} used for {owners[key]} and {op}")
    return problems


def retry_violations(attempts: list[Attempt], sleeps: list[float], policy: RetryPolicy = RetryPolicy()) -> list[str]:
    """Replay one flow's attempts against the transport's documented rules: which failures are retried (and
    none after a 4xx other than 408/429), that a retry repeats the same request, and that each wait is inside
    its envelope: the server's Retry-After, else exponential backoff with jitter on its upper half."""
    problems: list[str] = []
    attempts = [a for a in attempts if not STREAM_ROUTES.fullmatch(_route(a))]
    waits = list(sleeps)
    index = 0  # attempt number within the current logical request
    for position, a in enumerate(attempts):
        following = attempts[position + 1] if position + 1 < len(attempts) else None
        failed_in_flight = a.delivered is None
        repeatable = a.method in SAFE_METHODS or a.key is not None or REPEATABLE_ROUTES.fullmatch(_route(a))
        retryable = (a.delivered in RETRYABLE_STATUS) or (failed_in_flight and repeatable)
        if failed_in_flight and not repeatable:  # every request of these flows may be repeated safely
            problems.append(f"{a.flow}: {_route(a)} lost its answer and cannot be retried (no key)")
        if a.delivered is not None and 400 <= a.delivered < 500 and a.delivered not in RETRYABLE_STATUS:
            if following is not None and _same_request(a, following):
                problems.append(f"{a.flow}: {_route(a)} retried after a {a.delivered}")
        if retryable and index < policy.max_retries:
            if not waits:
                problems.append(f"{a.flow}: {_route(a)} failed ({a.fault}) but the client did not wait to retry")
                break
            wait = waits.pop(0)
            if a.retry_after is not None:
                if abs(wait - a.retry_after) > 1e-6:
                    problems.append(f"{a.flow}: waited {wait:.3f} s, the server asked for {a.retry_after} s")
            else:
                ceiling = min(policy.max_delay, policy.base_delay * 2 ** index)
                if not ceiling / 2 <= wait <= ceiling:
                    problems.append(f"{a.flow}: retry {index + 1} waited {wait:.3f} s, outside "
                                    f"[{ceiling / 2:.3f}, {ceiling:.3f}]")
            if following is None or not _same_request(a, following):
                problems.append(f"{a.flow}: {_route(a)} failed ({a.fault}) and was not retried")
            index += 1
        else:
            index = 0
    if waits:
        problems.append(f"{attempts[0].flow if attempts else '?'}: {len(waits)} wait(s) with no failure to explain")
    return problems


def backend_records(client: httpx.Client) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every file and every job the backend holds (paged, read straight from the backend)."""
    def pages(path: str, size: int) -> list[dict[str, Any]]:
        rows, offset = [], 0
        while True:
            doc = client.get(path, params={"limit": size, "offset": offset}).raise_for_status().json()
            rows += doc["data"]
            if not doc.get("has_more"):
                return rows
            offset += size

    return pages("/files", 1000), pages("/learning/jobs", 500)


def duplicate_violations(outcomes: list[Outcome], files: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> list[str]:
    """Each flow made exactly one file; each flow that created a job made exactly one; a refused create made
    none."""
    problems = []
    files_by_name: dict[str, list[str]] = defaultdict(list)
    for f in files:
        files_by_name[f["filename"]].append(f["id"])
    jobs_by_file: dict[str, list[str]] = defaultdict(list)
    for j in jobs:
        jobs_by_file[str(j.get("training_file_id") or j.get("training_file"))].append(j["id"])
    for o in outcomes:
        made = files_by_name.get(f"{o.flow}.jsonl", [])
        if len(made) != 1:
            problems.append(f"{o.flow}: {len(made)} files on the backend")
        wanted = 0 if o.kind == "reject" else 1
        created = jobs_by_file.get(made[0], []) if made else []
        if len(created) != wanted:
            problems.append(f"{o.flow}: {len(created)} jobs on the backend, expected {wanted}")
    return problems
