"""A raw-socket upstream that breaks HTTP/2: a valid SETTINGS, then DATA on stream 0 (a connection error
for any HTTP/2 client).

Scripted because no real server can be made to send invalid frames. It answers every connection the
same way, on a thread of its own, until the ``with`` block ends (then the thread is joined and the
socket closed).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import h2.config
import h2.connection

#: A DATA frame (type 0, no flags) on stream 0 carrying ``junk``.
DATA_ON_STREAM_0 = (4).to_bytes(3, "big") + b"\x00\x00" + bytes(4) + b"junk"


def _serve(srv: socket.socket, stop: threading.Event) -> None:
    srv.settimeout(0.2)  # how often the accept loop looks at ``stop``
    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            continue
        with conn:
            h = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
            h.initiate_connection()
            conn.settimeout(5)
            try:
                if conn.recv(65536):  # the client's preface: answer it, then break the connection
                    conn.sendall(h.data_to_send() + DATA_ON_STREAM_0)
                    while conn.recv(65536):
                        pass
            except OSError:
                pass


@contextmanager
def bad_h2_upstream() -> Iterator[str]:
    """The upstream running on a free loopback port: yields its ``127.0.0.1:PORT``."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()
    t = threading.Thread(target=_serve, args=(srv, stop), name="bad-upstream", daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        srv.close()
