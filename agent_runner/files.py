"""Reading and writing the small files serve and the read-only commands own or are given.

Anyone may have put something else at a path: a FIFO (an open would wait forever), a
device (`/dev/zero` never ends), a directory, a symlink. So a read opens without blocking,
checks on the descriptor that it is a regular file and reads at most a cap; a write goes to
a fresh temporary file no one could have planted (`O_EXCL`, a random name) and is renamed
over the target, which replaces a planted symlink instead of writing through it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_TEMP_ATTEMPTS = 8


class FileRefused(OSError):
    """The path holds something other than a regular file of an acceptable size."""


def read_regular(path: Path, *, max_bytes: int, follow: bool = True) -> bytes:
    """The bytes of the regular file at `path`; FileRefused (an OSError) for anything else.

    `follow=False` refuses a symlink (ELOOP) instead of reading what it points at.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket: there is nothing to open
            raise FileRefused(errno.ENXIO, "a socket, not a regular file", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
            raise FileRefused(errno.EINVAL, f"{kind}, not a regular file", str(path))
        chunks, size = [], 0
        # Read to the cap even if fstat says less: a file can grow while it is read.
        while size <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise FileRefused(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace `path` with a file holding `data`, atomically, through a fresh temporary file."""
    fd, tmp = _create_temp(path, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        # A rename before the data is on disk can leave an empty file after a power cut.
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _create_temp(path: Path, mode: int) -> tuple[int, Path]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_TEMP_ATTEMPTS):
        # A random name: a FIFO or symlink planted at a predictable name is never opened.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))
