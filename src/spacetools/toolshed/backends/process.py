"""Worker-process backend: each instance is a separate process that owns one tool object.

The tool is constructed and `setup()` runs inside the worker. Calls and results cross a pipe as pickles,
one message each, written and read with plain `os` calls (multiprocessing's `Connection` costs a no-op
call more than the rest of its trip through the pipe). The server watches the pipe with the event loop
(no thread per call) and reads what has arrived, never waiting for the rest of a message: end of file
means the worker died, and the router then restarts it. Workers come from a forkserver where the platform has one
(starting a worker costs milliseconds instead of a fresh interpreter), else from spawn.

Workers die with the server, even in the middle of a call and even when the server is killed without
cleanup: a thread in each worker waits on the server's process sentinel, and on Linux the kernel also
kills the worker when its parent process goes (`PR_SET_PDEATHSIG`), for a call that holds the
interpreter lock. That parent is the forkserver, which exits once no process holds its "alive" pipe,
so workers close their inherited copy of it. The workers that notice the death remove the server's
multiprocessing temporary folder (`pymp-*`), which the killed server could not.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.util
import os
import pickle
import shutil
import signal
import struct
import sys
import threading
from typing import Any

from threadpoolctl import threadpool_limits

from spacetools.kit.batched_methods import invoke_call
from spacetools.kit.definition import (
    Tool,
    ToolContext,
    ToolResult,
    error_result,
    release_tool_session,
    releases_sessions,
    sanitize_error_text,
)
from spacetools.kit.mainscript import main_script_hidden
from spacetools.toolshed.backends.base import InstanceCrashed, SetupFailed
from spacetools.toolshed.backends.context import ContextReceiver, ContextSender
from spacetools.toolshed.deployment import resolve_tool_class

__all__ = ["ProcessInstance", "worker_context"]

_context: multiprocessing.context.BaseContext | None = None
#: Modules the forkserver imports before it forks any worker: this module and the tools' modules of the
#: instances made before it starts (a Toolshed makes all of them first). A worker then starts with its
#: tool's imports done instead of repeating them (about a second of CPU per worker for the V1 tools).
_preload: list[str] = [__name__]
#: The method name of a session release sent to a worker (no tool method starts with "__").
_RELEASE_SESSION = "__release_session__"
_PROTOCOL = pickle.HIGHEST_PROTOCOL
#: One worker starts at a time while the main script is hidden (see `main_script_hidden`).
_START_LOCK = threading.Lock()
_GUARD_HINT = (
    "; a worker re-runs the main script when a tool is defined in it: put the script's work under "
    '`if __name__ == "__main__":`'
)


def worker_context() -> multiprocessing.context.BaseContext:
    """The multiprocessing context for workers: forkserver (modules preloaded) where available."""
    global _context
    if _context is None:
        if "forkserver" in multiprocessing.get_all_start_methods():
            forkserver = multiprocessing.get_context("forkserver")
            forkserver.set_forkserver_preload(list(_preload))
            _context = forkserver
        else:
            _context = multiprocessing.get_context("spawn")
    return _context


def _module_of(tool: type[Tool] | str) -> str:
    return tool.__module__ if isinstance(tool, type) else tool.partition(":")[0]


def _preload_tool_module(tool: type[Tool] | str) -> None:
    """Have the forkserver import a tool's module, if it has not started yet (a tool defined in the main
    script is left out: the worker finds it there)."""
    module = _module_of(tool)
    if module == "__main__" or module in _preload:
        return
    _preload.append(module)
    context = worker_context()
    if isinstance(context, multiprocessing.context.ForkServerContext):
        context.set_forkserver_preload(list(_preload))


class _WorkerExited(Exception):
    """The pipe reached end of file: the worker process is gone."""


#: What comes before each message on the pipe: its length in bytes.
_LENGTH = struct.Struct("!Q")
_HEADER = _LENGTH.size
#: Messages up to this size are written in one call with their length (bigger ones are not copied).
_JOIN_BYTES = 64 * 2**10
#: What one read takes at most: a small message whole, at most what a pipe holds.
_MIN_READ_BYTES = 64 * 2**10
_MAX_READ_BYTES = 2**20


def _write_message(fd: int, payload: bytes) -> None:
    """Write one message, all of it: its length, then its bytes (a small one in one system call)."""
    if len(payload) > _JOIN_BYTES:
        _write_all(fd, memoryview(_LENGTH.pack(len(payload))))
        _write_all(fd, memoryview(payload))
        return
    data = _LENGTH.pack(len(payload)) + payload
    written = os.write(fd, data)
    if written < len(data):  # a pipe may take fewer bytes at once
        _write_all(fd, memoryview(data)[written:])


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


class _MessageReader:
    """One end's reads of the other's messages, each taken whole.

    `read` makes one read of what has arrived (up to the rest of the message, when known): the server
    calls it when the pipe is readable, so it never waits there; the worker's reads wait for data.
    Bytes past a message (the worker gets a session's release and the next call back to back) are
    kept for `pending`.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._read_size = _MIN_READ_BYTES

    def read(self) -> bytes | bytearray | memoryview | None:
        """One read: the next message once it is whole, else None; `EOFError` once the other end is
        closed."""
        chunk = os.read(self._fd, self._read_size)
        if not chunk:
            raise EOFError
        # The usual: nothing kept, and the chunk is one whole message.
        size = len(chunk) - _HEADER
        if not self._buffer and size >= 0 and _LENGTH.unpack_from(chunk)[0] == size:
            return memoryview(chunk)[_HEADER:]
        self._buffer += chunk
        return self.pending()

    def pending(self) -> bytearray | None:
        """The next message if it was read whole already, else None."""
        buffer = self._buffer
        end = _HEADER + _LENGTH.unpack_from(buffer)[0] if len(buffer) >= _HEADER else _HEADER
        if len(buffer) < end:
            self._read_size = min(max(end - len(buffer), _MIN_READ_BYTES), _MAX_READ_BYTES)
            return None
        message = buffer[_HEADER:end]
        del buffer[:end]
        self._read_size = _MIN_READ_BYTES
        return message

    def wait(self) -> bytes | bytearray | memoryview:
        """The next message, read as long as it takes (a blocking pipe)."""
        message: bytes | bytearray | memoryview | None = self.pending() if self._buffer else None
        while message is None:
            message = self.read()
        return message


class ProcessInstance:
    """A tool instance living in its own worker process."""

    def __init__(
        self,
        tool: type[Tool] | str,
        config: dict[str, Any],
        name: str,
        start_timeout_s: float = 600.0,
        blas_threads: int | None = None,
    ) -> None:
        self._tool_ref = tool
        self._blas_threads = blas_threads
        _preload_tool_module(tool)
        self._config = dict(config)
        self._name = name
        self._start_timeout_s = start_timeout_s
        self._releases = releases_sessions(resolve_tool_class(tool))
        self._contexts = ContextSender()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._fd = -1  # the pipe's file descriptor, once started
        self._reader: _MessageReader | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: asyncio.Future[Any] | None = None
        self._reading = False
        #: True from a successful start until the worker dies or is killed (a plain attribute: the
        #: router reads it on every call).
        self.alive = False

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self._process.pid if self._process is not None else None

    async def start(self) -> None:
        """Start the worker and wait until its tool is set up."""
        context = worker_context()
        parent_conn, child_conn = context.Pipe(duplex=True)
        self._process = context.Process(  # type: ignore[attr-defined]
            target=_worker_main,
            args=(
                child_conn,
                self._tool_ref,
                self._config,
                multiprocessing.util.get_temp_dir(),
                self._blas_threads,
            ),
            name=f"toolshed-{self._name}",
            daemon=True,
        )
        await asyncio.to_thread(self._start_process, self._process)
        child_conn.close()  # only the worker holds its end, so its death reads as end of file here
        self._conn = parent_conn
        self._fd = parent_conn.fileno()
        self._reader = _MessageReader(self._fd)
        self._loop = asyncio.get_running_loop()
        self._pending = self._loop.create_future()
        self._loop.add_reader(self._fd, self._on_readable)
        self._reading = True
        try:
            status, detail = await asyncio.wait_for(self._pending, self._start_timeout_s)
        except _WorkerExited:
            await self.kill()
            code = self._process.exitcode if self._process is not None else None
            hint = _GUARD_HINT if _module_of(self._tool_ref) == "__main__" else ""
            raise RuntimeError(f"{self._name} worker exited during setup (exit code {code}){hint}") from None
        except asyncio.TimeoutError:
            await self.kill()
            raise SetupFailed(
                f"{self._name} setup did not finish within {self._start_timeout_s:g} s"
            ) from None
        if status != "ready":
            await self.kill()
            raise SetupFailed(f"{self._name} setup failed: {detail}")
        self.alive = self._reading  # unless it died or was killed meanwhile

    def _start_process(self, process: multiprocessing.process.BaseProcess) -> None:
        # The worker finds its tool by module; one defined in the main script needs that script.
        in_main = _module_of(self._tool_ref) == "__main__"
        with _START_LOCK, contextlib.nullcontext() if in_main else main_script_hidden():
            process.start()

    async def invoke(self, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Send one call to the worker and wait for its result."""
        if not self.alive:
            raise InstanceCrashed(await self._exit_code())
        try:
            payload = pickle.dumps((method, kwargs, self._contexts.pack(ctx)), _PROTOCOL)
        except Exception:
            self._contexts.forget(ctx.session_id)  # the worker did not get it: send it again next time
            raise
        assert self._loop is not None  # set by start, with `alive`
        pending = self._pending = self._loop.create_future()
        try:
            _write_message(self._fd, payload)
            result: ToolResult = await pending
            return result
        except (_WorkerExited, BrokenPipeError, ConnectionResetError):
            self.alive = False
            raise InstanceCrashed(await self._exit_code()) from None

    def release_session(self, session_id: str) -> None:
        """Send the session's release down the pipe, when the worker holds its context or the tool
        frees sessions; the worker runs it after the call before it and answers nothing (so the pending
        call's answer stays the next message)."""
        held = self._contexts.forget(session_id)
        if not (held or self._releases) or not self.alive:
            return
        with contextlib.suppress(OSError):  # a worker that died meanwhile is the router's to replace
            _write_message(self._fd, pickle.dumps((_RELEASE_SESSION, session_id, None)))

    async def kill(self) -> None:
        """Kill the worker process and close the pipe."""
        self._mark_dead()
        if self._process is not None and self._process.pid is not None:
            if self._process.exitcode is None:
                self._process.kill()
            await asyncio.to_thread(self._process.join, 5.0)
        if self._conn is not None:
            self._conn.close()

    def _on_readable(self) -> None:
        assert self._reader is not None
        try:
            message = self._reader.read()
        except (EOFError, OSError):
            self._mark_dead()
            return
        pending = self._pending
        if message is None or pending is None or pending.done():
            return
        try:
            outcome = pickle.loads(message)
        except Exception as exc:  # a result the server cannot load (the call fails, the worker is fine)
            pending.set_exception(exc)
            return
        pending.set_result(outcome)

    def _mark_dead(self) -> None:
        self.alive = False
        if self._reading and self._loop is not None:
            self._loop.remove_reader(self._fd)
            self._reading = False
        if self._pending is not None and not self._pending.done():
            self._pending.set_exception(_WorkerExited())

    async def _exit_code(self) -> int | None:
        if self._process is None or self._process.pid is None:
            return None
        await asyncio.to_thread(self._process.join, 2.0)
        return self._process.exitcode


_PR_SET_PDEATHSIG = 1


def die_with_parent(server_temp_dir: str | None = None) -> None:
    """Make this worker process exit as soon as the process that started it dies.

    A daemon thread waits on the parent's sentinel, removes `server_temp_dir` (the dead server's
    multiprocessing folder) and exits. On Linux the kernel also sends SIGKILL when the parent process
    (the forkserver, which exits with the server) dies, for when the thread cannot run.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The forkserver hands each child the server's end of its "alive" pipe; while a worker holds it, the
    # forkserver outlives a killed server and the kernel's parent-death signal never comes.
    forkserver = getattr(multiprocessing.forkserver, "_forkserver", None)
    alive_fd = getattr(forkserver, "_forkserver_alive_fd", None)
    if isinstance(alive_fd, int):
        with contextlib.suppress(OSError):
            os.close(alive_fd)
        forkserver._forkserver_alive_fd = None  # type: ignore[union-attr]
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        if server_temp_dir is not None:
            shutil.rmtree(server_temp_dir, ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_main(
    conn: multiprocessing.connection.Connection,
    tool_ref: type[Tool] | str,
    config: dict[str, Any],
    server_temp_dir: str | None = None,
    blas_threads: int | None = None,
) -> None:
    """The worker's loop: build the tool, then answer calls until the pipe closes."""
    die_with_parent(server_temp_dir)
    if blas_threads is not None:
        threadpool_limits(blas_threads, user_api="blas")
    if server_temp_dir is not None:
        # The server's temporary folder is the worker's too (`multiprocessing.util.get_temp_dir`): files
        # that tools share there (the simulated tools' renders) live as long as the server.
        vars(multiprocessing.current_process())["_config"]["tempdir"] = server_temp_dir
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle, not each worker's
    fd = conn.fileno()
    try:
        tool = resolve_tool_class(tool_ref)(**config)
        tool.setup()
    except Exception as exc:
        _write_message(fd, pickle.dumps(("failed", sanitize_error_text(f"{type(exc).__name__}: {exc}"))))
        return
    _write_message(fd, pickle.dumps(("ready", os.getpid())))
    contexts = ContextReceiver()
    reader = _MessageReader(fd)
    while True:
        try:
            method, kwargs, wire = pickle.loads(reader.wait())
        except EOFError:
            return
        if method == _RELEASE_SESSION:
            contexts.forget(kwargs)
            release_tool_session(tool, kwargs)
            continue
        result = invoke_call(tool, method, kwargs, contexts.unpack(wire))
        try:
            payload = pickle.dumps(result, _PROTOCOL)
        except Exception as exc:
            payload = pickle.dumps(error_result(TypeError(f"the result of {method} cannot be sent: {exc}")))
        _write_message(fd, payload)
