"""The policy server's request handler (`lean_http.LeanHandler`) over a real socket: keep-alive, header names in
any case, `Expect: 100-continue`, `Connection: close`, and the answers to a bad request line or an unknown method."""

from __future__ import annotations

import json
import socket
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from synth_ai.backend.inference.lean_http import LeanHandler


class EchoHandler(LeanHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        body = self.rfile.read(int(self.headers.get("CONTENT-LENGTH") or 0))
        self.send_json(200, {"path": self.path, "body": body.decode(), "key": self.headers.get("x-api-key")},
                       {"X-Echo": "1"})


def _read_answer(reader: Any) -> tuple[str, dict[str, str], Any]:
    status = reader.readline().decode().strip()
    fields = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        fields[name.lower()] = value.strip()
    body = reader.read(int(fields.get("content-length", 0)))
    return status, fields, json.loads(body) if body else None


def test_lean_handler_keeps_connections_alive_and_answers_in_one_piece() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with socket.create_connection(server.server_address) as sock, sock.makefile("rb") as reader:
            sock.sendall(b"POST /v1/chat/completions?cid=a HTTP/1.1\r\nHost: x\r\nx-Api-KEY: k1\r\n"
                         b"Content-Length: 2\r\n\r\n{}")
            status, fields, doc = _read_answer(reader)
            assert status == "HTTP/1.1 200 OK" and fields["x-echo"] == "1" and "connection" not in fields
            assert doc == {"path": "/v1/chat/completions?cid=a", "body": "{}", "key": "k1"}
            # the same connection again, with a 100-continue handshake, then asking to close
            sock.sendall(b"POST /b HTTP/1.1\r\nExpect: 100-continue\r\nConnection: close\r\nContent-Length: 3\r\n\r\n")
            assert reader.readline() == b"HTTP/1.1 100 Continue\r\n" and reader.readline() == b"\r\n"
            sock.sendall(b"abc")
            status, fields, doc = _read_answer(reader)
            assert (status, doc["body"], fields["connection"]) == ("HTTP/1.1 200 OK", "abc", "close")
            assert reader.read() == b""  # the server closed it
        with socket.create_connection(server.server_address) as sock, sock.makefile("rb") as reader:
            sock.sendall(b"DELETE /x HTTP/1.1\r\n\r\n")
            assert _read_answer(reader)[0] == "HTTP/1.1 501 Not Implemented"
            sock.sendall(b"nonsense\r\n\r\n")
            status, fields, doc = _read_answer(reader)
            assert status == "HTTP/1.1 400 Bad Request" and doc["error"]["code"] == "bad_request"
            assert reader.read() == b""
    finally:
        server.shutdown()
        server.server_close()
