"""A slow client for the servers' tests: a raw socket that sends a request one byte at a time."""

from __future__ import annotations

import select
import socket

#: A request whose headers, one byte every 50 ms, would take about 25 s to arrive.
SLOW_HEADERS = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 450 + b"\r\n\r\n"


def body_request(path: str, length: int = 1000) -> bytes:
    """The headers of a JSON POST to `path` whose body of `length` bytes is still to come."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def drip(url: str, data: bytes, interval_s: float, *, head: bytes = b"", source: str = "127.0.0.1") -> bytes:
    """Send `head` at once, then `data` one byte every `interval_s`, until the server answers or closes
    the connection; what it sent before closing (empty when it sent nothing). An `AssertionError` when
    every byte went out and the server still held the connection open."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0)) as raw:
        raw.sendall(head)
        for byte in data:
            try:
                raw.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                return b""
            readable, _, _ = select.select([raw], [], [], interval_s)
            if readable:
                return read_until_closed(raw)
    raise AssertionError(f"the server never cut off a client sending one byte every {interval_s:g} s")


def read_until_closed(raw: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while True:
        try:
            chunk = raw.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
