"""One serve per project: an flock on <log_dir>/serve.lock, and serve.pid naming who holds it.

The lock is the truth; serve.pid only names the holder, with its start time so that a
recycled pid is never taken for a running serve.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from agent_runner.errors import AgentRunnerError, LockHeld
from agent_runner.files import read_regular
from agent_runner.supervisor.strays import process_start_ticks

LOCK_FILE = "serve.lock"
PID_FILE = "serve.pid"
MAX_PID_FILE_BYTES = 4096


class LockFileError(AgentRunnerError):
    """serve.lock cannot be opened at all (missing or read-only log_dir, a symlink)."""


@dataclass(frozen=True)
class Holder:
    """A serve process, as serve.pid records it."""

    pid: int
    start_ticks: int | None


class InstanceLock:
    """The project's single-instance lock, held for the life of one serve."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.path = log_dir / LOCK_FILE
        self.previous: Holder | None = None
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise LockHeld naming the holder; then record this process."""
        if self._fd is not None:
            return
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise LockFileError(f"cannot open {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read_pid_file(self.log_dir)
            who = f"pid {holder.pid}" if holder else "pid unknown"
            raise LockHeld(f"another serve ({who}) holds {self.path}") from None
        # A serve.pid left behind while nobody held the lock is the trace of an unclean death.
        self.previous = _read_pid_file(self.log_dir)
        self._fd = fd
        try:
            _write_pid_file(self.log_dir, Holder(os.getpid(), process_start_ticks(os.getpid())))
        except OSError as exc:
            self.release()
            raise LockFileError(f"cannot write {self.log_dir / PID_FILE}: {exc}") from exc

    def release(self) -> None:
        """Remove serve.pid and let go of the lock."""
        if self._fd is None:
            return
        # serve.pid goes first, while the lock still says it is ours to remove.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.log_dir / PID_FILE)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


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
