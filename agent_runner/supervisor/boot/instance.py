"""One serve per work tree: an abstract unix socket named after it, an flock on
<log_dir>/serve.lock, and serve.pid naming who holds them.

The socket is the lock that cannot be lost: it has no file to delete or replace and goes only
when its holder dies. serve.lock and serve.pid are what `status` and `stop` read; serve puts
them back if they vanish, and stops when log_dir itself does.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent_runner.errors import AgentRunnerError, LockHeld
from agent_runner.events import Emit
from agent_runner.files import read_regular
from agent_runner.supervisor.agent.strays import process_start_ticks

if TYPE_CHECKING:
    import socket

LOCK_FILE = "serve.lock"
PID_FILE = "serve.pid"
MAX_PID_FILE_BYTES = 4096
SOCKET_PREFIX = "agent-runner-"
SOCKET_BACKLOG = 8


class LockFileError(AgentRunnerError):
    """serve.lock cannot be opened at all (missing or read-only log_dir, a symlink)."""


@dataclass(frozen=True)
class Holder:
    """A serve process, as serve.pid records it."""

    pid: int
    start_ticks: int | None


def project_key(work_dir: Path) -> str:
    """A short name for the work tree, the same for every serve that would act on it."""
    return hashlib.sha256(os.fsencode(os.path.realpath(work_dir))).hexdigest()[:32]


class InstanceLock:
    """The project's single-instance lock, held for the life of one serve."""

    def __init__(self, log_dir: Path, work_dir: Path) -> None:
        self.log_dir = log_dir
        self.work_dir = work_dir
        self.path = log_dir / LOCK_FILE
        self.previous: Holder | None = None
        self._socket: socket.socket | None = None
        self._fd: int | None = None
        self._log_dir_id: tuple[int, int] | None = None

    def acquire(self) -> None:
        """Take the lock or raise LockHeld naming the holder; then record this process."""
        if self._socket is not None:
            return
        self._socket = self._bind()
        try:
            self._fd = self._flock()
            # A serve.pid left behind while nobody held the lock is the trace of an unclean death.
            self.previous = _read_pid_file(self.log_dir)
            self._write_pid_file()
            self._log_dir_id = _identity(os.stat(self.log_dir))
        except BaseException:
            self.release()
            raise

    def check(self, emit: Emit) -> str | None:
        """Why serve must stop (its log_dir is gone or replaced), or None; repairs the rest.

        Cheap enough for every state transition: a few stat calls.
        """
        if self._fd is None or self._log_dir_id is None:
            return None
        self._refuse_waiting_peers()
        try:
            current = _identity(os.stat(self.log_dir))
        except OSError as exc:
            return f"{self.log_dir} is gone ({exc.strerror})"
        if current != self._log_dir_id:
            return f"{self.log_dir} was replaced by another directory"
        try:
            if not _names(self.path, os.fstat(self._fd)):
                # Someone deleted or replaced serve.lock; the socket kept every other serve out.
                fd = self._flock()
                os.close(self._fd)
                self._fd = fd
                emit("instance_lock_restored", path=str(self.path))
            holder = _read_pid_file(self.log_dir)
            if holder is None or holder.pid != os.getpid():
                self._write_pid_file()
                emit("instance_lock_restored", path=str(self.log_dir / PID_FILE))
        except AgentRunnerError as exc:
            return f"cannot restore the lock files: {exc}"
        return None

    def release(self) -> list[str]:
        """Remove serve.pid and let go of the lock; what could not be cleaned up, never raised."""
        problems: list[str] = []
        if self._fd is not None:
            # serve.pid goes first, while the lock still says it is ours to remove.
            holder = _read_pid_file(self.log_dir)
            if holder is not None and holder.pid == os.getpid():
                try:
                    os.unlink(self.log_dir / PID_FILE)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    problems.append(f"cannot remove {self.log_dir / PID_FILE}: {exc.strerror}")
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        return problems

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def _bind(self) -> socket.socket:
        import socket  # noqa: PLC0415 -- only serve binds; peek and status read serve.pid

        name = "\0" + SOCKET_PREFIX + project_key(self.work_dir)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(name)
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise LockFileError(f"cannot take the instance lock: {exc.strerror}") from exc
            raise LockHeld(self._held_message(_socket_peer(name))) from None
        # Listening lets a refused serve ask the kernel who holds the name (SO_PEERCRED).
        sock.listen(SOCKET_BACKLOG)
        sock.setblocking(False)
        return sock

    def _flock(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise LockFileError(f"cannot open {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            # The socket is free but the file is locked: a serve that cannot see our socket
            # (another network namespace) or one of an older version.
            raise LockHeld(self._held_message(None)) from None
        return fd

    def _held_message(self, peer: int | None) -> str:
        if peer is None:
            holder = _read_pid_file(self.log_dir)
            peer = holder.pid if holder is not None else None
        who = f"pid {peer}" if peer is not None else "pid unknown"
        return f"another serve ({who}) already supervises {self.work_dir}"

    def _write_pid_file(self) -> None:
        try:
            _write_pid_file(self.log_dir, Holder(os.getpid(), process_start_ticks(os.getpid())))
        except OSError as exc:
            raise LockFileError(f"cannot write {self.log_dir / PID_FILE}: {exc}") from exc

    def _refuse_waiting_peers(self) -> None:
        # Refused serves leave their connections queued; accept and drop them so the queue
        # never fills and later ones can still learn who holds the lock.
        assert self._socket is not None
        with contextlib.suppress(BlockingIOError):
            while True:
                conn, _ = self._socket.accept()
                conn.close()


def open_holder(log_dir: Path) -> tuple[Holder, int] | None:
    """The running serve and a pidfd on it, opened before its start time is checked.

    In that order, a pid recycled at any moment is caught: the descriptor names whatever ran
    under the pid when it was opened, and only a process with the recorded start time passes.
    """
    holder = _read_pid_file(log_dir)
    if holder is None or holder.start_ticks is None:
        return None
    try:
        pidfd = os.pidfd_open(holder.pid)
    except OSError:
        return None
    if process_start_ticks(holder.pid) != holder.start_ticks or not _lock_is_held(
        log_dir / LOCK_FILE
    ):
        os.close(pidfd)
        return None
    return holder, pidfd


def read_holder(log_dir: Path) -> Holder | None:
    """The running serve: a live process with the recorded start time, and the lock held."""
    holder = _read_pid_file(log_dir)
    if holder is None or holder.start_ticks is None:
        return None
    if process_start_ticks(holder.pid) != holder.start_ticks:
        return None
    # Probed last: by now a serve is almost surely running, so this brief lock can hardly
    # collide with one that is starting (and would make it exit 73).
    return holder if _lock_is_held(log_dir / LOCK_FILE) else None


def _socket_peer(name: str) -> int | None:
    """The pid of the process listening on abstract socket `name`, if it will say."""
    import socket  # noqa: PLC0415 -- as in _bind

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as probe:
        probe.setblocking(False)
        try:
            probe.connect(name)
        except OSError:
            return None
        creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return pid if pid > 0 else None


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _names(path: Path, st: os.stat_result) -> bool:
    """Whether `path` still names the file `st` describes."""
    try:
        return _identity(os.stat(path, follow_symlinks=False)) == _identity(st)
    except OSError:
        return False


def _lock_is_held(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _read_pid_file(log_dir: Path) -> Holder | None:
    try:
        raw = read_regular(log_dir / PID_FILE, max_bytes=MAX_PID_FILE_BYTES, follow=False)
        data = json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid, ticks = data.get("pid"), data.get("start_ticks")
    if type(pid) is not int or pid <= 0 or not (ticks is None or type(ticks) is int):
        return None
    return Holder(pid, ticks)


def _write_pid_file(log_dir: Path, holder: Holder) -> None:
    tmp = log_dir / f".{PID_FILE}.{holder.pid}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o644)
    try:
        os.write(fd, json.dumps({"pid": holder.pid, "start_ticks": holder.start_ticks}).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    # rename replaces a planted symlink itself rather than writing through it.
    os.replace(tmp, log_dir / PID_FILE)
