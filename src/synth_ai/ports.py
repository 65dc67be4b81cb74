"""TCP ports: whether one is taken, a free one, and a listening socket on the port asked for (or, when the caller
allows it, on a free one). The task-app server, the demo and the backend daemon all ask here."""

from __future__ import annotations

import errno
import socket


def _bound_socket(host: str, port: int) -> socket.socket | None:
    """A socket bound to `host:port`, or None when something listens there. SO_REUSEADDR as uvicorn sets it: a
    port that a stopped server left in TIME_WAIT counts as free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return None
        raise
    return sock


def port_in_use(host: str, port: int) -> bool:
    """True when binding `host:port` fails the way it does while something listens there."""
    sock = _bound_socket(host, port)
    if sock is None:
        return True
    sock.close()
    return False


def any_free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, chosen by the kernel (another program may still take it before we do)."""
    sock = _bound_socket(host, 0)
    assert sock is not None  # port 0 cannot be taken
    with sock:
        return sock.getsockname()[1]


def preferred_or_free_port(host: str, preferred: int) -> int:
    """`preferred` when nothing listens there, otherwise a free port: a taken port is never touched."""
    return any_free_port(host) if port_in_use(host, preferred) else preferred


def listening_socket(host: str, port: int, *, or_free: bool) -> socket.socket | None:
    """A socket listening on `host:port`, held from this moment so nothing can take the port before the server
    uses it. When the port is taken: one on a free port if `or_free`, else None."""
    sock = _bound_socket(host, port)
    if sock is None and or_free:
        sock = _bound_socket(host, 0)
    if sock is not None:
        sock.listen(2048)
    return sock
