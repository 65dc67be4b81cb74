"""Whether a TCP port is taken: the one check the task-app server and the backend daemon both make before binding."""

from __future__ import annotations

import errno
import socket


def port_in_use(host: str, port: int) -> bool:
    """True when binding `host:port` fails the way it does while something listens there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False
