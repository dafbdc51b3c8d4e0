"""`<log_dir>/state.json`: the supervisor's state, rewritten atomically at every transition.

Readers (peek, status, the next serve after a crash) get a whole old or a whole new file,
never a mix: the writer renames a fully written temporary file over it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STATE_NAME = "state.json"


def write_state(log_dir: Path, state: dict[str, Any]) -> None:
    """Replace state.json with `state` atomically."""
    path = log_dir / STATE_NAME
    tmp = log_dir / f".{STATE_NAME}.{os.getpid()}.tmp"
    data = json.dumps(state, separators=(",", ":"), sort_keys=True, default=str).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        # A rename before the data is on disk can leave an empty state.json after a power cut.
        os.fsync(fd)
    except OSError:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


def read_state(log_dir: Path) -> dict[str, Any]:
    """The last state written, or {} when there is none or it cannot be read."""
    try:
        fd = os.open(log_dir / STATE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as handle:
        try:
            state = json.loads(handle.read(16 * 1024 * 1024))
        except ValueError:
            return {}
    return state if isinstance(state, dict) else {}
