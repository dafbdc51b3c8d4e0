"""Read the end of a transcript: bounded bytes, so a 2 GB file costs what a 2 KB one does.

The agent knows the transcript's path and can replace the file: only a regular file is read,
opened without following a symlink and without blocking on a FIFO.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def read_tail(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of `path`, starting at a line boundary; b"" unless a regular file.

    OSError propagates (missing file, a symlink: ELOOP).
    """
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    fd = os.open(path, _OPEN_FLAGS)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        # Checked on the opened descriptor, not the name: the agent may swap the file meanwhile.
        if not stat.S_ISREG(info.st_mode):
            return b""
        start = max(0, info.st_size - limit)
        f.seek(start)
        data = f.read(limit)
    return _from_a_line(data) if start > 0 else data


def last_lines(tail: bytes, limit: int) -> bytes:
    """What `read_tail(path, limit)` returns, from `tail` = `read_tail(path, n)` with n >= limit."""
    return tail if len(tail) <= limit else _from_a_line(tail[len(tail) - limit :])


def _from_a_line(data: bytes) -> bytes:
    # The first line is cut at an arbitrary byte: drop it rather than misread it.
    newline = data.find(b"\n")
    return data[newline + 1 :] if newline >= 0 else b""
