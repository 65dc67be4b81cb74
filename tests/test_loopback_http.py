"""The loopback transport (task app -> policy server, trainer -> task app on this machine): real stdlib servers on
127.0.0.1; a server that drops idle keep-alive connections, a busy server's 429, and a closed port."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from synth_ai import loopback_http
from synth_ai.taskapp import inference
from synth_ai.taskapp.errors import InferenceError

COMPLETION = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}


def _server(answer: Any) -> tuple[ThreadingHTTPServer, str, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "body": body, "port": self.client_address[1]})
            status, headers, doc, drop = answer(len(seen))
            data = json.dumps(doc).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            if drop:  # close without saying so, as a server timing out an idle keep-alive connection does
                self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}", seen


def test_a_dropped_keep_alive_connection_is_retried_on_a_fresh_one() -> None:
    server, url, seen = _server(lambda n: (200, {}, {"n": n}, True))
    try:
        async def calls() -> list[Any]:
            pool = ThreadPoolExecutor(max_workers=1)  # one thread: the second call reuses its socket
            try:
                return [await loopback_http.post_json(f"{url}/rollout?x=1", json.dumps({"i": i}).encode(),
                                                      {"Content-Type": "application/json"}, 10, executor=pool)
                        for i in range(3)]
            finally:
                pool.shutdown()

        answers = asyncio.run(calls())
        assert [a.json() for a in answers] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert [s["body"]["i"] for s in seen] == [0, 1, 2] and seen[0]["path"] == "/rollout?x=1"
    finally:
        server.shutdown()


def test_task_app_policy_calls_retry_a_busy_loopback_server() -> None:
    server, url, seen = _server(lambda n: (429, {"Retry-After": "0"}, {"error": {"code": "rate_limited"}}, False)
                                if n <= 2 else (200, {}, COMPLETION, False))
    try:
        completion = asyncio.run(inference.chat_completion(f"{url}/v1?cid=abc", {"model": "m", "messages": []},
                                                           record=False))
        assert completion["choices"][0]["message"]["content"] == "hi"
        assert len(seen) == 3 and all(s["path"] == "/v1/chat/completions?cid=abc" for s in seen)
    finally:
        server.shutdown()


def test_a_closed_loopback_port_is_an_inference_unreachable_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(InferenceError) as info:
        asyncio.run(inference.chat_completion(f"http://127.0.0.1:{port}/v1", {"model": "m", "messages": []},
                                              record=False))
    assert info.value.code == "inference_unreachable" and "ConnectionRefusedError" in str(info.value)
    assert not loopback_http.is_loopback_http("https://127.0.0.1:1/v1")
    assert not loopback_http.is_loopback_http("http://example.com/v1")


def test_the_daemon_pool_bounds_its_threads_and_hands_back_results_and_errors():
    import threading
    import time

    from synth_ai.loopback_http import DaemonPool

    pool = DaemonPool(3, "pool-test")
    running, peak, lock = 0, 0, threading.Lock()

    def work(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        if i == 7:
            raise ValueError("seven")
        return i * 2

    futures = [pool.submit(work, i) for i in range(20)]
    for i, future in enumerate(futures):
        if i == 7:
            with pytest.raises(ValueError, match="seven"):
                future.result(timeout=10)
        else:
            assert future.result(timeout=10) == i * 2
    assert peak <= 3 and len(pool._threads) <= 3
    # daemons: a call stuck in a socket read cannot hold an interrupted command's exit
    assert all(thread.daemon for thread in pool._threads)
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(work, 1)


def _raw_server(answers: list[bytes]) -> tuple[socket.socket, str, list[bytes]]:
    """A server that reads one request per connection and writes the next of `answers` byte for byte, then
    closes: the answer shapes our parser must read besides Content-Length (chunked, to the close, after a 100)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    requests: list[bytes] = []

    def serve() -> None:
        for answer in answers:
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(body) < length:
                    body += conn.recv(65536)
                requests.append(head + b"\r\n\r\n" + body)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}", requests


def test_answers_that_are_chunked_run_to_the_close_or_follow_a_100_are_read_whole() -> None:
    answers = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Seen: a\r\nx-seen: b\r\n\r\n"
        b"5\r\n{\"a\":\r\n3;ext=1\r\n 1}\r\n0\r\n\r\n",
        b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n{\"busy\": true}",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    ]
    listener, url, requests = _raw_server(answers)
    try:
        async def calls() -> list[Any]:
            pool = ThreadPoolExecutor(max_workers=1)
            try:
                return [await loopback_http.post_json(f"{url}/r?cid=x", b'{"i": 1}', {"X-API-Key": "k"}, 10,
                                                      executor=pool) for _ in answers]
            finally:
                pool.shutdown()

        chunked, to_close, after_100 = asyncio.run(calls())
    finally:
        listener.close()
    assert (chunked.status_code, chunked.json(), chunked.headers["x-seen"]) == (200, {"a": 1}, "a, b")
    assert (to_close.status_code, to_close.json()) == (503, {"busy": True})
    assert (after_100.status_code, after_100.json()) == (201, {})
    first = requests[0].decode()
    assert first.startswith("POST /r?cid=x HTTP/1.1\r\n") and "X-API-Key: k\r\n" in first
    assert "Content-Length: 8\r\n" in first and first.endswith('{"i": 1}')
