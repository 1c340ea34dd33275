"""The worker pipe's framing: messages whole whatever the reads return, back to back or in pieces."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from spacetools.toolshed.backends.process import _MessageReader, _write_message


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    os.close(read_fd)
    os.close(write_fd)


def test_messages_written_back_to_back_are_read_one_at_a_time(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    _write_message(write_fd, b"release")
    _write_message(write_fd, b"call")  # both arrive before the reader reads: one read takes both
    reader = _MessageReader(read_fd)
    assert bytes(reader.wait()) == b"release"
    assert reader.pending() == b"call"  # kept from the same read, no read needed
    assert reader.pending() is None


def test_a_message_bigger_than_a_pipe_arrives_whole(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    payload = bytes(range(256)) * 20_000  # 5 MB: written in pieces while the reader reads
    writer = threading.Thread(target=_write_message, args=(write_fd, payload))
    writer.start()
    reader = _MessageReader(read_fd)
    reads = 1
    message = reader.read()
    while message is None:  # each read takes what has arrived, as the server's reads do
        message = reader.read()
        reads += 1
    writer.join()
    assert bytes(message) == payload
    assert reads > 1


def test_the_other_end_closing_reads_as_end_of_file() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"\0\0\0")  # part of a header, then the writer is gone
    reader = _MessageReader(read_fd)
    assert reader.read() is None
    os.close(write_fd)
    with pytest.raises(EOFError):
        reader.read()
    os.close(read_fd)
