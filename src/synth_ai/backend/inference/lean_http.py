"""`LeanHandler`: a `BaseHTTPRequestHandler` that reads requests and writes JSON answers with a few lines of its own.

Why: the stdlib handler parses every request's headers with the `email` package and writes an answer in several
small writes (status, each header, body), about half a millisecond of CPU per request; the RL policy server takes a
whole batch of rollouts' calls at once in the trainer's process, where that CPU is the iteration's time. This one
splits the request line and `Name: value` lines itself (names lower-cased; `headers.get` takes any case), answers
`Expect: 100-continue`, keeps HTTP/1.1 connections alive unless asked to close, and sends each answer in one write.
Request bodies are read by Content-Length (no chunked request bodies, as the stdlib handler).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

MAX_LINE = 65536
MAX_FIELDS = 100


class Fields(dict):
    """Header fields by lower-cased name."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


class LeanHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def handle_one_request(self) -> None:
        try:
            line = self.rfile.readline(MAX_LINE + 1)
        except OSError:  # a timeout or reset between two requests: the connection is over
            self.close_connection = True
            return
        if not line:
            self.close_connection = True
            return
        words = line.decode("latin-1").split()
        self.requestline = " ".join(words)
        if len(line) > MAX_LINE or len(words) != 3 or not words[2].startswith("HTTP/1."):
            self.close_connection = True
            self.send_json(400, {"error": {"code": "bad_request", "message": "Not an HTTP/1.x request line."}})
            return
        self.command, self.path, self.request_version = words
        fields = Fields()
        for _ in range(MAX_FIELDS + 1):
            raw = self.rfile.readline(MAX_LINE + 1)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            fields[name.strip().lower()] = value.strip()
        else:
            self.close_connection = True
            self.send_json(431, {"error": {"code": "bad_request", "message": "Too many header fields."}})
            return
        self.headers = fields  # type: ignore[assignment]
        connection = fields.get("connection", "").lower()
        self.close_connection = connection == "close" or (self.request_version == "HTTP/1.0"
                                                         and connection != "keep-alive")
        if fields.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        method = getattr(self, f"do_{self.command}", None)
        if method is None:
            self.send_json(501, {"error": {"code": "not_implemented", "message": f"No method {self.command}."}})
            return
        method()

    def send_json(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(doc).encode()
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json", f"Content-Length: {len(data)}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
