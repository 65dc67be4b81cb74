"""A loopback HTTP/1.1 proxy that injects transient faults between our client and a real backend.

It sits on 127.0.0.1 in the test process, in front of a real `synth-ai backend serve` subprocess. For each request a
per-route rule (`FaultRule`) and a seeded random draw decide what happens:

    status:NNN        answer NNN itself; the backend never sees the request (429 comes with Retry-After)
    reset             read the request, then reset the TCP connection (RST); the backend never sees it
    drop              forward the request, let the backend commit, then close the connection without answering
    after-commit:NNN  forward the request, let the backend commit, then answer NNN (a gateway that gave up)

Every attempt is logged (`Attempt`) with what was injected and what the backend answered, so tests can check
what reached the backend, which idempotency key each attempt carried, and what the client did next.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import struct
import threading
from dataclasses import dataclass, field

import httpx

FLOW_HEADER = "x-fault-flow"  # which test flow sent the request (added by `FlowTag`; stripped before forwarding)
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "upgrade"}
STATUS_TEXT = {429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
               503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclass(frozen=True)
class FaultRule:
    """Faults for requests whose `METHOD path` matches `pattern` (a regex), drawn with probability `rate`, at most
    `limit` times in all (None: no limit)."""

    pattern: str
    faults: tuple[str, ...]
    rate: float = 0.2
    limit: int | None = None

    def matches(self, method: str, path: str) -> bool:
        return re.fullmatch(self.pattern, f"{method} {path}") is not None


@dataclass
class Attempt:
    flow: str
    method: str
    target: str  # path and query
    key: str | None  # Idempotency-Key
    fault: str | None  # what was injected (None: passed through untouched)
    upstream: int | None  # what the backend answered (None: it never saw the request)
    delivered: int | None  # what the client received (None: a reset or a dropped answer)
    retry_after: float | None = None  # the wait an injected 429 asked for
    body_tag: str | None = None  # what the request creates (file name of an upload, JSON body of a create)


@dataclass
class FaultProxy:
    upstream: str  # http://127.0.0.1:PORT of the real backend
    rules: list[FaultRule]
    seed: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._rngs: dict[str, random.Random] = {}
        self._used: dict[int, int] = {}  # injections per rule, for `FaultRule.limit`
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # Lifecycle ------------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._client = httpx.AsyncClient(base_url=self.upstream, timeout=120.0,
                                         limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))
        server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 20))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]  # open client connections
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(self._client.aclose())
            loop.close()

    # Decisions ------------------------------------------------------------------------------------------------
    def _draw(self, flow: str, method: str, path: str) -> str | None:
        index = next((i for i, r in enumerate(self.rules) if r.matches(method, path)), None)
        if index is None or not self.rules[index].faults:
            return None
        rule = self.rules[index]
        with self._lock:  # one seeded stream per flow: a flow's faults do not depend on other flows' timing
            rng = self._rngs.setdefault(flow, random.Random(f"{self.seed}:{flow}"))
            if rng.random() >= rule.rate or (rule.limit is not None and self._used.get(index, 0) >= rule.limit):
                return None
            self._used[index] = self._used.get(index, 0) + 1
            return rng.choice(rule.faults)

    def log(self, flow: str | None = None) -> list[Attempt]:
        with self._lock:
            return [a for a in self.attempts if flow is None or a.flow == flow]

    # Serving --------------------------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                keep_open = await self._handle(request, writer)
                if not keep_open:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def _handle(self, request: tuple[str, str, dict[str, str], bytes], writer: asyncio.StreamWriter) -> bool:
        method, target, headers, body = request
        flow = headers.pop(FLOW_HEADER, "-")
        path = target.split("?", 1)[0]
        fault = self._draw(flow, method, path)
        attempt = Attempt(flow, method, target, headers.get("idempotency-key"), fault, None, None,
                          body_tag=_body_tag(headers, body))
        with self._lock:
            self.attempts.append(attempt)
        if fault == "reset":
            _reset(writer)
            return False
        if fault is not None and fault.startswith("status:"):
            status = int(fault.split(":")[1])
            extra = {}
            if status == 429:
                wait = self._retry_after(flow)
                attempt.retry_after = wait
                extra = {"retry-after-ms": str(int(wait * 1000))} if wait < 1 else {"retry-after": str(int(wait))}
            attempt.delivered = status
            await _write(writer, status, _injected_body(status), extra)
            return True
        forwarded = {k: v for k, v in headers.items() if k not in HOP_HEADERS and k != "host"}
        try:
            response = await self._client.request(method, target, headers=forwarded, content=body)
        except httpx.HTTPError as exc:  # the backend itself failed: logged, so a test can refuse it
            attempt.fault = f"upstream-error:{type(exc).__name__}"
            writer.close()
            return False
        attempt.upstream = response.status_code
        if fault == "drop":
            writer.close()  # the backend has committed; the client hears nothing
            return False
        if fault is not None and fault.startswith("after-commit:"):
            status = int(fault.split(":")[1])
            attempt.delivered = status
            await _write(writer, status, _injected_body(status), {})
            return True
        attempt.delivered = response.status_code
        await _write(writer, response.status_code, response.content,
                     {k: v for k, v in response.headers.items() if k not in HOP_HEADERS})
        return True

    def _retry_after(self, flow: str) -> float:
        with self._lock:
            return self._rngs[flow].choice((0.25, 1.0, 2.0, 3.0))


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        body = await reader.readexactly(int(headers.get("content-length") or 0))
    return method.upper(), target, headers, body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def _write(writer: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, str]) -> None:
    lines = [f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [f"content-length: {len(body)}", "connection: keep-alive", "", ""]
    writer.write("\r\n".join(lines).encode("latin-1") + body)
    await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:  # linger 0: close() sends RST instead of FIN
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _injected_body(status: int) -> bytes:
    return json.dumps({"detail": f"injected {status}",
                       "error": {"code": "injected_fault", "message": f"injected {status}"}}).encode()


def _body_tag(headers: dict[str, str], body: bytes) -> str | None:
    """What a create is about: the uploaded file's name, or the canonical JSON body."""
    if not body:
        return None
    if headers.get("content-type", "").startswith("multipart/"):
        found = re.search(rb'name="file"; filename="([^"]*)"', body)
        return found.group(1).decode() if found else None
    try:
        return json.dumps(json.loads(body), sort_keys=True)
    except ValueError:
        return None


class FlowTag(httpx.HTTPTransport):
    """A real httpx transport that names the flow in a header the proxy reads (and strips)."""

    def __init__(self, flow: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.flow = flow

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.headers[FLOW_HEADER] = self.flow
        return super().handle_request(request)
