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

from spacetools.kit.definition import (
    Tool,
    ToolContext,
    ToolResult,
    error_result,
    invoke_tool_method,
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
#: Messages up to this size are written in one call with their length (bigger ones are not copied).
_JOIN_BYTES = 64 * 2**10
#: What the server reads at once: at least a small message whole, at most what a pipe holds.
_MIN_READ_BYTES = 64 * 2**10
_MAX_READ_BYTES = 2**20


def _write_message(fd: int, payload: bytes) -> None:
    """Write one message, all of it (a pipe may take fewer bytes at once): its length, then its bytes."""
    header = _LENGTH.pack(len(payload))
    if len(payload) <= _JOIN_BYTES:
        _write_all(fd, header + payload)
    else:
        _write_all(fd, header)
        _write_all(fd, payload)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_message(fd: int) -> bytearray:
    """Wait for the next whole message (the worker's side); `EOFError` once the server's end is closed."""
    (size,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size))
    return _read_exactly(fd, size)


def _read_exactly(fd: int, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    while view:
        count = os.readv(fd, [view])
        if count == 0:
            raise EOFError
        view = view[count:]
    return data


class _MessageReader:
    """The server's side of the pipe: a worker's message, taken as it arrives.

    One read per call of `read`, made when the pipe is readable, so it never waits. A worker sends one
    message (its setup's outcome, then a call's result) only when the server waits for it: nothing
    follows a message before the server has read it.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._missing = 0  # bytes of the message not read yet, when known

    def read(self) -> bytes | bytearray | memoryview | None:
        """What has arrived: the message once it is whole, else None; `EOFError` once the worker's end
        is closed."""
        chunk = os.read(self._fd, min(max(self._missing, _MIN_READ_BYTES), _MAX_READ_BYTES))
        if not chunk:
            raise EOFError
        if not self._buffer and len(chunk) >= _LENGTH.size:  # the usual: a whole message at once
            end = _LENGTH.size + _LENGTH.unpack_from(chunk)[0]
            if len(chunk) == end:
                return memoryview(chunk)[_LENGTH.size :]
        buffer = self._buffer
        buffer += chunk
        if len(buffer) < _LENGTH.size:
            return None
        end = _LENGTH.size + _LENGTH.unpack_from(buffer)[0]
        if len(buffer) < end:
            self._missing = end - len(buffer)
            return None
        message = buffer[_LENGTH.size : end]
        del buffer[:end]
        self._missing = 0
        return message


class ProcessInstance:
    """A tool instance living in its own worker process."""

    def __init__(
        self, tool: type[Tool] | str, config: dict[str, Any], name: str, start_timeout_s: float = 600.0
    ) -> None:
        self._tool_ref = tool
        _preload_tool_module(tool)
        self._config = dict(config)
        self._name = name
        self._start_timeout_s = start_timeout_s
        self._releases = releases_sessions(resolve_tool_class(tool))
        self._contexts = ContextSender()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._reader: _MessageReader | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: asyncio.Future[Any] | None = None
        self._dead = False
        self._reading = False

    @property
    def alive(self) -> bool:
        """True from a successful start until the worker dies or is killed."""
        return self._conn is not None and not self._dead

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
            args=(child_conn, self._tool_ref, self._config, multiprocessing.util.get_temp_dir()),
            name=f"toolshed-{self._name}",
            daemon=True,
        )
        await asyncio.to_thread(self._start_process, self._process)
        child_conn.close()  # only the worker holds its end, so its death reads as end of file here
        self._conn = parent_conn
        self._reader = _MessageReader(parent_conn.fileno())
        self._loop = asyncio.get_running_loop()
        self._pending = self._loop.create_future()
        self._loop.add_reader(parent_conn.fileno(), self._on_readable)
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

    def _start_process(self, process: multiprocessing.process.BaseProcess) -> None:
        # The worker finds its tool by module; one defined in the main script needs that script.
        in_main = _module_of(self._tool_ref) == "__main__"
        with _START_LOCK, contextlib.nullcontext() if in_main else main_script_hidden():
            process.start()

    async def invoke(self, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Send one call to the worker and wait for its result."""
        if not self.alive or self._conn is None or self._loop is None:
            raise InstanceCrashed(await self._exit_code())
        try:
            payload = pickle.dumps(
                (method, kwargs, self._contexts.pack(ctx)), protocol=pickle.HIGHEST_PROTOCOL
            )
        except Exception:
            self._contexts.forget(ctx.session_id)  # the worker did not get it: send it again next time
            raise
        self._pending = self._loop.create_future()
        try:
            _write_message(self._conn.fileno(), payload)
            result: ToolResult = await self._pending
            return result
        except (_WorkerExited, BrokenPipeError, ConnectionResetError):
            self._dead = True
            raise InstanceCrashed(await self._exit_code()) from None

    def release_session(self, session_id: str) -> None:
        """Send the session's release down the pipe, when the worker holds its context or the tool
        frees sessions; the worker runs it after the call before it and answers nothing (so the pending
        call's answer stays the next message)."""
        held = self._contexts.forget(session_id)
        if not (held or self._releases) or not self.alive or self._conn is None:
            return
        with contextlib.suppress(OSError):  # a worker that died meanwhile is the router's to replace
            _write_message(self._conn.fileno(), pickle.dumps((_RELEASE_SESSION, session_id, None)))

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
        if message is None or self._pending is None or self._pending.done():
            return
        try:
            outcome = pickle.loads(message)
        except Exception as exc:  # a result the server cannot load (the call fails, the worker is fine)
            self._pending.set_exception(exc)
            return
        self._pending.set_result(outcome)

    def _mark_dead(self) -> None:
        self._dead = True
        if self._reading and self._loop is not None and self._conn is not None:
            self._loop.remove_reader(self._conn.fileno())
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
) -> None:
    """The worker's loop: build the tool, then answer calls until the pipe closes."""
    die_with_parent(server_temp_dir)
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
    while True:
        try:
            method, kwargs, wire = pickle.loads(_read_message(fd))
        except EOFError:
            return
        if method == _RELEASE_SESSION:
            contexts.forget(kwargs)
            release_tool_session(tool, kwargs)
            continue
        result = invoke_tool_method(tool, method, kwargs, contexts.unpack(wire))
        try:
            payload = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            payload = pickle.dumps(error_result(TypeError(f"the result of {method} cannot be sent: {exc}")))
        _write_message(fd, payload)
