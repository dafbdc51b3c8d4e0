"""What a killed git leaves behind, and who still holds it: temporary objects and packs
(`tmp_pack_*` grows to the size of the file being added), lock files, and the temporary
indexes of a serve that died. Each goes only when provably nobody is using it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # repo.py imports this module
    from agent_runner.vcs.repo import Repo

_TEMP_OBJECTS = ("pack/tmp_pack_*", "pack/tmp_idx_*", "pack/tmp_rev_*", "tmp_obj_*", "??/tmp_obj_*")
# The temporary folders serve's own git calls make in the git dir (work.py); one serve per
# repository, so at boot any of them belongs to a serve that died.
OWN_TEMP_PREFIXES = ("agent-runner-snapshot-", "agent-runner-attr-")


def clear_leftovers(repo: Repo) -> list[Path]:
    """Remove what a git killed with a dead serve left behind; the paths removed.

    Our own temporary folders always go. index.lock and temporary object files go only when
    no process has anything in the git dir open and no git runs in the repository: a lock
    kept by an operator's `git commit` waiting in its editor must survive. (An ordinary user
    cannot see into other users' processes; see `_in_use`.)
    """
    git_dir, common = repo.git_dir, repo.common_dir
    removed = [p for p in _own_temp_folders(git_dir) if _remove(p)]
    objects = common / "objects"
    others = [git_dir / "index.lock", *(p for pat in _TEMP_OBJECTS for p in objects.glob(pat))]
    present = [p for p in others if p.is_file() and not p.is_symlink()]
    if present and not _in_use((git_dir, common), repo.top):
        removed.extend(p for p in present if _remove(p))
    return removed


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


def _own_temp_folders(git_dir: Path) -> list[Path]:
    try:
        return [git_dir / n for n in sorted(os.listdir(git_dir)) if n.startswith(OWN_TEMP_PREFIXES)]
    except OSError:
        return []


def _remove(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError:
        return False
    return True


def _in_use(git_dirs: tuple[Path, Path], top: Path) -> bool:
    """Whether any process we can see has a file in the git dirs open or runs git in the tree.

    Processes we cannot look into are another user's: they count (when they are git) only if
    the git dir lets others write to it at all.
    """
    dirs = tuple(os.path.realpath(p) for p in git_dirs)
    tree = (*dirs, os.path.realpath(top))
    shared = any(os.stat(d).st_mode & (stat.S_IWGRP | stat.S_IWOTH) for d in dirs)
    me = os.getpid()
    for pid_dir in Path("/proc").glob("[0-9]*"):
        if int(pid_dir.name) == me:
            continue
        try:
            is_git = (pid_dir / "comm").read_text().startswith("git")
        except OSError:
            continue  # gone
        try:
            cwd = os.readlink(pid_dir / "cwd")
            fds = list((pid_dir / "fd").iterdir())
        except FileNotFoundError:
            continue
        except OSError:
            if is_git and shared:
                return True
            continue
        if is_git and _under(cwd, tree):
            return True
        for fd in fds:
            with contextlib.suppress(OSError):  # closed meanwhile
                if _under(os.readlink(fd), dirs):
                    return True
    return False


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)
