"""A hostile store: a TCP server on a free loopback port that answers every read with the same
bytes (an error reply to every command, or a reply that is not even UTF-8), as a service that is not
Valkey would, or one that is broken.

::

    with answering_garbage(b"+\\xff\\xfe\\r\\n") as port:
        ...   # valkey://127.0.0.1:{port}/0 answers that to everything

On exit it stops listening and closes every connection it accepted (a client's pooled connections
must not keep talking to it after the port is given to a real Valkey).
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator


class _Answering(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.accepted: list[socket.socket] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def close_all(self) -> None:
        with self.lock:
            for connection in self.accepted:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
                connection.close()
            self.accepted.clear()


class _Handler(socketserver.BaseRequestHandler):
    server: _Answering

    def handle(self) -> None:
        with self.server.lock:
            self.server.accepted.append(self.request)
        with contextlib.suppress(OSError):
            while self.request.recv(65536):
                self.request.sendall(self.server.reply)


@contextlib.contextmanager
def answering_garbage(reply: bytes) -> Iterator[int]:
    """The port of a server that answers ``reply`` to whatever it reads, until the block ends."""
    server = _Answering(reply)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        server.close_all()
        thread.join(5.0)
