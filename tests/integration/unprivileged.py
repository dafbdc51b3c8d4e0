"""An ordinary user for integration tests: a folder it owns, and test code run as it.

Whole programs run as that user through `tests.unprivileged.command`; these two helpers
cover what that does not: files the user owns (pytest's tmp_path is root-only) and a few
lines of already-imported code run in a forked child that dropped to the uid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unprivileged import become, unused_uid

UNUSED_UID = unused_uid()


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unused uid")


@contextlib.contextmanager
def owned_dir(uid: int) -> Iterator[Path]:
    """A fresh folder under /tmp that `uid` owns, with everything put in it before it ends."""
    require_root()
    root = Path(tempfile.mkdtemp(prefix="agent-runner-uid-", dir="/tmp"))
    os.chown(root, uid, uid)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def chown_tree(root: Path, uid: int) -> None:
    """Give `uid` everything under `root` (made by this root test for that user)."""
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, uid)


def run_as(uid: int, func: Callable[..., str], *args: Any) -> str:
    """`func(*args)` in a forked child running as `uid`; its string result.

    Only for code whose modules are imported already: the child cannot read this
    interpreter's install if it lives in a root-only home.
    """
    require_root()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            become(uid)
            os.write(write_end, func(*args).encode())
            code = 0
        except BaseException:
            os.write(write_end, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        output = reader.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, output
    return output
