"""Typed resources over the transport: files, SFT (learning) jobs and RL jobs. Paths and fields follow the Synth
learning API as synth-ai 0.2.17 used it; none of this touches httpx directly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from synth_ai.client.transport import Transport
from synth_ai.client.uploads import multipart_file_body
from synth_ai.errors import NotFoundError, ServerError
from synth_ai.models.job_ids import kind_of_job_id

T = TypeVar("T")


def job_id_of(created: Any, url: str) -> str:
    """The id of a created job: `job_id` or `id` (the reference accepted both)."""
    if isinstance(created, dict):
        for key in ("job_id", "id"):
            if isinstance(created.get(key), str) and created[key]:
                return created[key]
    raise ServerError(f"{url} created a job but its answer has no job id: {str(created)[:200]}")


def next_after_step(page: list[dict[str, Any]], after_step: int, limit: int) -> int:
    """Where the next metrics page starts (`after_step`: points with a greater step).

    The highest step of a page may be incomplete: points are written one by one while a job runs, and a full page
    can end inside a step. So the next page starts just before it (its points are read again; callers drop the
    ones already seen), and only a full page holding nothing but that step moves past it, so paging always ends.
    """
    steps = [p["step"] for p in page if isinstance(p.get("step"), int) and p["step"] >= 0]
    if not steps:
        return after_step
    top = max(steps)
    if top - 1 > after_step or len(page) < limit:
        return max(after_step, top - 1)
    return top


class Files:
    def __init__(self, transport: Transport) -> None:
        self.t = transport

    def upload(self, path: Path, *, purpose: str = "fine-tune", idempotency_key: str | None = None,
               filename: str | None = None, on_progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        def body():
            return multipart_file_body(path, fields={"purpose": purpose}, filename=filename, on_progress=on_progress)

        response = self.t.request("POST", "/files", idempotency_key=idempotency_key, body_factory=body)
        created = self.t.decode(response)
        if not (isinstance(created, dict) and created.get("id")):
            raise ServerError(f"{self.t.url('/files')} accepted the upload but answered without a file id.")
        return created

    def get(self, file_id: str) -> dict[str, Any]:
        return self.t.get_json(f"/files/{file_id}")

    def list(self, *, purpose: str | None = None, limit: int = 100) -> Any:
        params: dict[str, Any] = {"limit": limit}
        if purpose:
            params["purpose"] = purpose
        return self.t.get_json("/files", params=params)


class Jobs:
    """A job family rooted at `prefix` (`/learning/jobs` for SFT, `/rl/jobs` for RL)."""

    def __init__(self, transport: Transport, prefix: str, fallbacks: tuple[str, ...] = ()) -> None:
        self.t = transport
        self.prefix = prefix
        self.fallbacks = fallbacks

    def create(self, payload: dict[str, Any], *, idempotency_key: str | None) -> dict[str, Any]:
        return self.t.post_json(self.prefix, payload, idempotency_key=idempotency_key)

    def start(self, job_id: str, *, idempotency_key: str | None) -> Any:
        return self.t.post_json(f"{self.prefix}/{job_id}/start", {}, idempotency_key=idempotency_key)

    def get(self, job_id: str) -> dict[str, Any]:
        """The job; RL jobs fall back to `/learning/jobs` and `/orchestration/jobs` as the reference did.

        When no route knows it, the family's own answer is raised ("job ... not found"): a fallback's 404 may only
        say that this backend has no such route, which reads as a fault rather than an unknown id."""
        first: NotFoundError | None = None
        for prefix in (self.prefix, *self.fallbacks):
            try:
                return self.t.get_json(f"{prefix}/{job_id}")
            except NotFoundError as exc:
                first = first or exc
        assert first is not None
        raise first

    def events(self, job_id: str, *, since_seq: int = 0, limit: int = 200) -> list[dict[str, Any]]:
        doc = self.t.get_json(f"{self.prefix}/{job_id}/events", params={"since_seq": since_seq, "limit": limit})
        return list(doc.get("events", [])) if isinstance(doc, dict) else []

    def metrics(self, job_id: str, *, after_step: int = -1, limit: int = 200) -> list[dict[str, Any]]:
        doc = self.t.get_json(f"{self.prefix}/{job_id}/metrics", params={"after_step": after_step, "limit": limit})
        return list(doc.get("points", [])) if isinstance(doc, dict) else []

    def all_metrics(self, job_id: str, *, after_step: int = -1, page: int = 1000) -> list[dict[str, Any]]:
        """Every metric point after `after_step`, paged by step (`next_after_step`), each (name, step, phase) once."""
        points: list[dict[str, Any]] = []
        seen: set[tuple[Any, ...]] = set()
        while True:
            batch = self.metrics(job_id, after_step=after_step, limit=page)
            for point in batch:
                key = (point.get("name"), point.get("step"), point.get("phase"))
                if key not in seen:
                    seen.add(key)
                    points.append(point)
            following = next_after_step(batch, after_step, page)
            if len(batch) < page or following <= after_step:
                return points
            after_step = following

    def all_events(self, job_id: str, *, since_seq: int = 0, page: int = 1000) -> list[dict[str, Any]]:
        """Every event after `since_seq`, in order, paged by sequence number."""
        events: list[dict[str, Any]] = []
        while True:
            batch = self.events(job_id, since_seq=since_seq, limit=page)
            events.extend(batch)
            seqs = [e["seq"] for e in batch if isinstance(e.get("seq"), int)]
            if len(batch) < page or not seqs or max(seqs) <= since_seq:
                return events
            since_seq = max(seqs)

    def stream(self, job_id: str, *, last_event_id: str | None = None, read_timeout: float = 60.0) -> Iterator[str]:
        """The lines of the job's server-sent-events stream (`/events/stream`; the hosted backend has none: 404)."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else None
        return self.t.stream_lines(f"{self.prefix}/{job_id}/events/stream", headers=headers,
                                   read_timeout=read_timeout)

    def timeline(self, job_id: str) -> list[dict[str, Any]]:
        doc = self.t.get_json(f"{self.prefix}/{job_id}/timeline")
        return list(doc.get("events", [])) if isinstance(doc, dict) else []

    def cancel(self, job_id: str) -> Any:
        # Cancelling twice answers the cancelled job, so a cancel whose answer was lost is simply sent again.
        return self.t.post_json(f"{self.prefix}/{job_id}/cancel", {}, repeatable=True)

    def list(self, *, status: str | None = None, type_: str | None = None, limit: int = 50) -> Any:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        if type_:
            params["type"] = type_
        return self.t.get_json(self.prefix, params=params)


class RL(Jobs):
    def __init__(self, transport: Transport) -> None:
        super().__init__(transport, "/rl/jobs", fallbacks=("/learning/jobs", "/orchestration/jobs"))

    def verify_task_app(self, task_url: str) -> dict[str, Any]:
        return self.t.post_json("/rl/verify_task_app", {"endpoint_base_url": task_url})


def says_rl(job: Any) -> bool:
    """Whether a job document describes an RL job (`job_type` rl, or a training type such as rl_online)."""
    if not isinstance(job, dict):
        return False
    return job.get("job_type") == "rl" or any(str(job.get(key) or "").startswith("rl")
                                              for key in ("type", "training_type"))


def first_that_knows(families: tuple[Jobs, ...], call: Callable[[Jobs], T]) -> tuple[Jobs, T]:
    """`call(jobs)` on each family in turn until one knows the job: that family and its answer. When none does,
    the first family's not-found error (the likeliest home of the job)."""
    first: NotFoundError | None = None
    for jobs in families:
        try:
            return jobs, call(jobs)
        except NotFoundError as exc:
            first = first or exc
    assert first is not None
    raise first


class SynthAPI:
    """All resources over one transport."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.files = Files(transport)
        self.sft = Jobs(transport, "/learning/jobs")
        self.rl = RL(transport)

    def families_for(self, job_id: str, kind: str | None = None) -> tuple[Jobs, ...]:
        """The job families to ask about `job_id`, in order: the one `kind` names, else the one the id's prefix
        names; for an id of another shape, `/learning/jobs` (which serves every kind here, and RL status on the
        hosted API) and then `/rl/jobs`."""
        named = kind or kind_of_job_id(job_id)
        if named is None:
            return (self.sft, self.rl)
        return (self.rl,) if named == "rl" else (self.sft,)

    def family_of(self, job_id: str, kind: str | None = None) -> Jobs:
        """The one family to follow `job_id` through: asked with a GET only when neither `kind` nor the id says
        which (then the job's own document decides, RL jobs going to `/rl/jobs`)."""
        families = self.families_for(job_id, kind)
        if len(families) == 1:
            return families[0]
        jobs, job = first_that_knows(families, lambda family: family.get(job_id))
        return self.rl if says_rl(job) else jobs

    def close(self) -> None:
        self.transport.close()

    def models(self) -> Any:
        return self.transport.get_json("/learning/models")

    def chat_completion(self, body: dict[str, Any]) -> Any:
        """`POST /inference/v1/chat/completions` (OpenAI's body and answer). It creates nothing, so it may repeat."""
        return self.transport.post_json("/inference/v1/chat/completions", body, repeatable=True)
