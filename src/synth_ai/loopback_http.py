"""JSON POSTs to a server on this machine, cheaply: stdlib keep-alive socket connections on a thread pool.

Why: httpx's async client spends about 5 ms of CPU per request here (its connection pool re-checks every
connection for every queued request); stdlib `http.client` about 0.3 ms, most of it parsing headers with the
`email` package; a plain socket and the few lines of HTTP/1.1 below (Content-Length or chunked bodies, interim
1xx answers skipped) less again. On the local RL path each rollout is two
such requests (trainer -> task app `/rollout`, task app -> policy server), and the trainer, the policy server and
often the task app share a process and its GIL, so that CPU is the iteration's time. Only plain `http://` URLs on a
loopback host use this (`is_loopback_http`); anything else (https, remote hosts, where proxies and TLS settings
matter) stays on httpx.

`await post_json(url, data, headers, timeout_s)` returns an `Answer` (status code, headers, text, `json()`) or raises
`LoopbackTimeout` (no answer in time) / `LoopbackUnreachable` (no connection, a connect timeout included, or
one closed before the answer; message: the exception type and text). Each pool thread keeps one
connection per (host, port); a keep-alive connection the server closed while idle is retried once on a fresh one.
The pool's threads are daemons (`DaemonPool`): a request blocked in a socket read must not hold a command that was
interrupted (Ctrl-C) or a worker that was cancelled until the read times out, as `ThreadPoolExecutor`'s threads,
joined at interpreter exit, would.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

CONNECT_TIMEOUT_S = 10.0
POOL_THREADS = 64  # requests in flight at once; more wait for a thread
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class LoopbackTimeout(Exception):
    pass


class LoopbackUnreachable(Exception):
    pass


@dataclass
class Answer:
    status_code: int
    text: str
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased

    def json(self) -> Any:
        return json.loads(self.text)


def is_loopback_http(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "http" and (parts.hostname or "") in LOOPBACK


class DaemonPool(Executor):
    """At most `max_workers` daemon threads, started as work arrives, taking calls from one queue."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        self.max_workers = max_workers
        self.prefix = thread_name_prefix
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a pool that was shut down")
            self._work.put((future, fn, args, kwargs))
            if self._idle <= 0 and len(self._threads) < self.max_workers:
                thread = threading.Thread(target=self._run, name=f"{self.prefix}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self._idle -= 1  # an idle thread takes it (or, below zero, it waits for the next free one)
        return future

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()


_pool: DaemonPool | None = None
_pool_lock = threading.Lock()
_local = threading.local()


def _executor() -> DaemonPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = DaemonPool(POOL_THREADS, "loopback-http")
        return _pool


async def post_json(url: str, data: bytes, headers: dict[str, str], timeout_s: float, *,
                    connect_timeout_s: float = CONNECT_TIMEOUT_S, executor: Executor | None = None
                    ) -> Answer:
    """POST on `executor`'s threads (default: this module's shared pool). A caller whose requests wait on other
    loopback requests (the trainer's `/rollout` calls wait on the task app's policy calls, maybe in this very
    process) passes its own executor, so the two can never take all of one pool's threads and deadlock."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor or _executor(), _post, url, data, headers, timeout_s,
                                      connect_timeout_s)


def _post(url: str, data: bytes, headers: dict[str, str], timeout_s: float, connect_timeout_s: float) -> Answer:
    import socket

    parts = urlsplit(url)
    key = (parts.hostname or "", parts.port or 80)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items()
                   if name.lower() not in ("host", "content-length", "connection"))
    host = f"[{key[0]}]" if ":" in key[0] else key[0]
    request = (f"POST {target or '/'} HTTP/1.1\r\nHost: {host}:{key[1]}\r\nContent-Length: {len(data)}\r\n"
               f"{head}\r\n").encode("latin-1") + data
    for attempt in range(2):
        conn, reused = None, False
        try:
            conn, reused = _connection(key, timeout_s, connect_timeout_s)
            conn.sock.sendall(request)
            answer, keep = _read_answer(conn.reader)
            if not keep:
                _drop(key, conn)
            return answer
        except (socket.timeout, TimeoutError) as exc:
            _drop(key, conn)
            if conn is None:  # no connection within connect_timeout_s: nothing took the request
                raise LoopbackUnreachable(f"connect timeout after {connect_timeout_s:g}s") from exc
            raise LoopbackTimeout(f"{type(exc).__name__}: {exc}") from exc
        except (_Closed, BrokenPipeError, ConnectionResetError) as exc:
            _drop(key, conn)
            if reused and attempt == 0:
                continue  # the server closed an idle keep-alive connection: once more on a fresh one
            raise LoopbackUnreachable(f"{type(exc).__name__}: {exc}") from exc
        except (OSError, ValueError) as exc:
            _drop(key, conn)
            raise LoopbackUnreachable(f"{type(exc).__name__}: {exc}") from exc
    raise AssertionError("not reached")  # pragma: no cover


class _Closed(Exception):
    """The server closed the connection before it answered."""


@dataclass
class _Conn:
    sock: Any
    reader: Any  # buffered binary file over `sock`

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def _read_answer(reader: Any) -> tuple[Answer, bool]:
    """One HTTP/1.1 answer (interim 1xx answers skipped); whether the connection may be reused. A small parser of
    our own: `http.client` parses headers with the `email` package, ~10x the CPU for the few headers seen here."""
    while True:
        line = reader.readline(65537)
        if not line:
            raise _Closed("the server closed the connection without an answer")
        version, _, rest = line.decode("latin-1").partition(" ")
        if not version.startswith("HTTP/"):
            raise ValueError(f"not an HTTP status line: {line[:80]!r}")
        status = int(rest[:3])
        fields: dict[str, str] = {}
        while True:
            line = reader.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            fields[name] = f"{fields[name]}, {value.strip()}" if name in fields else value.strip()
        if not 100 <= status < 200:
            break
    keep = fields.get("connection", "").lower() != "close" and version != "HTTP/1.0"
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = _read_chunked(reader)
    elif "content-length" in fields:
        length = int(fields["content-length"])
        body = reader.read(length)
        if len(body) < length:
            raise _Closed("the server closed the connection in the middle of its answer")
    elif status in (204, 304):
        body = b""
    else:  # no length given: the body runs to the end of the connection
        body, keep = reader.read(), False
    return Answer(status, body.decode("utf-8", errors="replace"), fields), keep


def _read_chunked(reader: Any) -> bytes:
    chunks = []
    while True:
        size = int(reader.readline(65537).split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while reader.readline(65537) not in (b"\r\n", b"\n", b""):  # trailer fields, if any
                pass
            return b"".join(chunks)
        chunk = reader.read(size)
        if len(chunk) < size:
            raise _Closed("the server closed the connection in the middle of its answer")
        chunks.append(chunk)
        reader.readline(65537)


def _connection(key: tuple[str, int], timeout_s: float, connect_timeout_s: float) -> tuple[_Conn, bool]:
    import socket

    conns = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = {}
    conn = conns.get(key)
    if conn is not None:
        conn.sock.settimeout(timeout_s)
        return conn, True
    sock = socket.create_connection(key, timeout=connect_timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout_s)
    conn = conns[key] = _Conn(sock, sock.makefile("rb"))
    return conn, False


def _drop(key: tuple[str, int], conn: Any) -> None:
    if conn is None:
        return
    conn.close()
    conns = getattr(_local, "conns", None)
    if conns is not None and conns.get(key) is conn:
        del conns[key]
