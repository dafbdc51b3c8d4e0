"""Read the end of a transcript: bounded bytes, so a 2 GB file costs what a 2 KB one does."""

from __future__ import annotations

import os
from pathlib import Path


def read_tail(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of `path`, starting at a line boundary; OSError propagates."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size - limit)
        f.seek(start)
        data = f.read(limit)
    if start > 0:
        # The first line is cut at an arbitrary byte: drop it rather than misread it.
        newline = data.find(b"\n")
        data = data[newline + 1 :] if newline >= 0 else b""
    return data
