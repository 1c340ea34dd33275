"""The worker pipe's framing (messages whole whatever the reads return, back to back or in pieces) and the
worker's BLAS threads."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from threadpoolctl import threadpool_info

from spacetools.kit.definition import Tool, ToolResult, tool_method
from spacetools.toolshed import ToolDeployment, Toolshed
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


class BlasThreadsTool(Tool):
    """Reports the BLAS threads of the process it runs in."""

    name = "blas"

    @tool_method
    def threads(self) -> ToolResult:
        """The thread count of each BLAS library loaded here."""
        counts = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
        return ToolResult(text=str(counts), value=counts)


@pytest.mark.parametrize(("num_cpus", "threads"), [(0.2, 1), (3.0, 3)])
def test_a_worker_runs_as_many_blas_threads_as_its_cpu_share(num_cpus: float, threads: int) -> None:
    """As Ray does for its actors: the pool's workers spread over the cores, so each keeps its own share."""

    async def main() -> Any:
        deployment = ToolDeployment(tool=BlasThreadsTool, backend="process", num_cpus=num_cpus)
        async with Toolshed([deployment]) as shed:
            return (await shed.open_session([]).call("blas.threads", {})).value

    counts = asyncio.run(main())
    assert counts and set(counts) == {threads}
