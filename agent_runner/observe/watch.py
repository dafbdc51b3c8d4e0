"""Waiting for something in a directory to change: inotify where the kernel has it, else a tick.

Used by `events --follow`, which must notice new lines, a new month's file, a truncated or a
replaced file without reading the log over and over.
"""

from __future__ import annotations

import ctypes
import os
import select
import time
from pathlib import Path

TICK_S = 0.5  # without inotify: how often to look
RECHECK_S = 5.0  # with it: how often to look anyway (the directory itself replaced, say)
_IN_MASK = (
    0x002  # IN_MODIFY
    | 0x008  # IN_CLOSE_WRITE
    | 0x040  # IN_MOVED_FROM
    | 0x080  # IN_MOVED_TO
    | 0x100  # IN_CREATE
    | 0x200  # IN_DELETE
    | 0x400  # IN_DELETE_SELF
    | 0x800  # IN_MOVE_SELF
)
_READ_BYTES = 64 * 1024


class DirectoryWatch:
    """`wait()` returns soon after an entry of `path` changes, or after at most a few seconds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._watched: tuple[int, int] | None = None  # (st_dev, st_ino) of the folder watched
        try:
            self._libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
        except OSError:
            self._libc = None
        self._watch()  # before the caller's first read, so no change falls in between

    def wait(self) -> None:
        """Block until something changed (or a while passed); never busy."""
        fd = self._watch()
        if fd is None:
            time.sleep(TICK_S)
            return
        readable, _, _ = select.select([fd], [], [], RECHECK_S)
        if readable:
            self._drain(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self._watched = None, None

    def _watch(self) -> int | None:
        """The inotify descriptor on the folder that is at `path` now; None to fall back."""
        try:
            info = os.stat(self.path)
        except OSError:
            self.close()  # not there (yet): look again at the next tick
            return None
        if self._fd is not None and self._watched == (info.st_dev, info.st_ino):
            return self._fd
        self.close()
        if self._libc is None:
            return None
        fd = int(self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            return None
        if self._libc.inotify_add_watch(fd, os.fsencode(self.path), _IN_MASK) < 0:
            os.close(fd)
            return None
        self._fd, self._watched = fd, (info.st_dev, info.st_ino)
        return fd

    def _drain(self, fd: int) -> None:
        while True:
            try:
                if not os.read(fd, _READ_BYTES):
                    return
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
