"""The work tree serve supervises, pinned at boot by device and inode: every later git action
first proves it still acts on the same folders, so a work_dir renamed and replaced by a
symlink to another project is noticed before git touches anything.

Each pinned folder stays open (O_PATH) while serve runs: an inode in use cannot be freed, so
a folder deleted and created again can never come back with the pinned inode number.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agent_runner.errors import WorkTreeChanged


@dataclass(frozen=True)
class Place:
    """One folder (or `.git` file) of the pinned tree: what it is, where, and its identity."""

    what: str
    path: Path
    device: int
    inode: int
    follow: bool  # stat (work_dir may be an operator's symlink) or lstat (.git never is one)
    fd: int  # held open for serve's lifetime, so the inode number stays taken

    def problem(self) -> str | None:
        """Why this path no longer names the pinned object, or None."""
        try:
            now = os.stat(self.path) if self.follow else os.lstat(self.path)
        except OSError as exc:
            return f"{self.what} {self.path} is gone ({exc.strerror})"
        if (now.st_dev, now.st_ino) == (self.device, self.inode):
            return None
        real = os.path.realpath(self.path)
        where = f" (it now leads to {real})" if self.follow and real != str(self.path) else ""
        return (
            f"{self.what} {self.path} is not the one serve started with: device {self.device} "
            f"inode {self.inode} at boot, device {now.st_dev} inode {now.st_ino} now{where}"
        )


@dataclass(frozen=True)
class TreeIdentity:
    """work_dir, and the repository in it when there was one at boot."""

    places: tuple[Place, ...]

    @classmethod
    def capture(
        cls,
        work_dir: Path,
        *,
        top: Path | None = None,
        git_dir: Path | None = None,
        common_dir: Path | None = None,
    ) -> TreeIdentity:
        """Pin `work_dir` (and the repository's folders when given) as they are now."""
        wanted = [("work_dir", work_dir, True)]
        if top is not None and git_dir is not None and common_dir is not None:
            wanted += [
                ("the top of the work tree", top, True),
                ("the repository's .git", top / ".git", False),
                ("the git directory", git_dir, True),
                ("the common git directory", common_dir, True),
            ]
        places: list[Place] = []
        try:
            for what, path, follow in wanted:
                flags = os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
                fd = os.open(path, flags)
                info = os.fstat(fd)
                places.append(Place(what, path, info.st_dev, info.st_ino, follow, fd))
        except OSError:
            for place in places:
                os.close(place.fd)
            raise
        return cls(tuple(places))

    def close(self) -> None:
        """Let go of the pinned folders."""
        for place in self.places:
            os.close(place.fd)

    @property
    def has_repository(self) -> bool:
        return len(self.places) > 1

    def problem(self) -> str | None:
        """What changed since boot, or None while every pinned path is what it was."""
        for place in self.places:
            found = place.problem()
            if found is not None:
                return found
        return None

    def verify(self) -> None:
        """Raise WorkTreeChanged unless every pinned path is what it was at boot."""
        found = self.problem()
        if found is not None:
            raise WorkTreeChanged(found)

    def moved(self, top: Path, git_dir: Path, common_dir: Path) -> str | None:
        """Why a freshly opened repository is not the pinned one (by path), or None."""
        pinned = {p.what: p.path for p in self.places}
        found = {
            "the top of the work tree": top,
            "the git directory": git_dir,
            "the common git directory": common_dir,
        }
        for what, path in found.items():
            if pinned.get(what) != path:
                return f"git now finds {what} at {path}, not at {pinned.get(what)} as at boot"
        return None
