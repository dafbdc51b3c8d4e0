"""What a killed git leaves behind, and who still holds it: temporary objects and packs
(`tmp_pack_*` grows to the size of the file being added) and lock files.
"""

from __future__ import annotations

import os
from pathlib import Path

_TEMP_OBJECTS = ("pack/tmp_pack_*", "pack/tmp_idx_*", "pack/tmp_rev_*", "tmp_obj_*", "??/tmp_obj_*")


def remove_temp_objects(objects: Path, *, since: float) -> list[Path]:
    """Delete the temporary object and pack files a killed git started after `since`.

    A file some live process still holds open (another git at work) is left alone.
    """
    removed = []
    for pattern in _TEMP_OBJECTS:
        for path in objects.glob(pattern):
            try:
                if path.lstat().st_mtime < since - 1 or index_lock_holders(path):
                    continue
                path.unlink()
            except OSError:
                continue  # gone already, or not ours to remove
            removed.append(path)
    return removed


def index_lock_holders(lock: Path) -> list[int]:
    """Pids of processes with `lock` open, as far as /proc lets this user see."""
    holders = []
    target = os.path.realpath(lock)  # /proc shows the resolved path
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:
            continue  # another user's process, or already gone
        for fd in fds:
            try:
                if os.readlink(fd) == target:
                    holders.append(int(pid_dir.name))
                    break
            except OSError:
                continue
    return holders
