"""Other programs on a backend's port: real HTTP servers on real sockets that are not Synth backends.

`foreign_server()` runs Python's own `http.server` (a 404 HTML page for every missing path, a 501 page for POST),
as a developer's `python -m http.server 8000` would; `json_server(...)` answers every request with one JSON reply,
as an API of some other kind would, and `answering_server(...)` with any one reply. All record what they were
asked for.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Foreign:
    port: int
    requests: list[str] = field(default_factory=list)  # "GET /path", in order
    keyed: list[str] = field(default_factory=list)  # the paths asked with an Authorization header

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[Foreign]:
    seen = Foreign(0)

    class Recording(handler):  # type: ignore[misc, valid-type]
        def log_message(self, *args: Any) -> None:  # quiet: the test's output is the CLI's
            pass

        def parse_request(self) -> bool:
            ok = super().parse_request()
            seen.requests.append(f"{self.command} {self.path}")
            if self.headers.get("Authorization"):
                seen.keyed.append(self.path)
            return ok

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    seen.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def foreign_server(root: Path) -> Iterator[Foreign]:
    """`python -m http.server` serving the folder `root` (which holds `index.html`), on a free port."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "index.html").write_text("<html><body>someone else's page</body></html>\n")

    class Static(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

    with _serving(Static) as foreign:
        yield foreign


@contextmanager
def answering_server(status: int, body: bytes, content_type: str) -> Iterator[Foreign]:
    """Every GET and POST answers `status` with `body` as `content_type`."""

    class Answer(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    with _serving(Answer) as foreign:
        yield foreign


def json_server(status: int, body: Any):
    """Every GET and POST answers `status` with `body` as application/json."""
    return answering_server(status, json.dumps(body).encode(), "application/json")
