"""Which repository git acts on: only the one that lives under the work dir, never one that
config, a `gitdir:` file or a symlink points at.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent_runner.errors import GitError, WorkTreeChanged
from agent_runner.vcs.identity import TreeIdentity
from agent_runner.vcs.leftovers import remove_temp_objects
from agent_runner.vcs.run import (
    _MAX_ERROR_CHARS,
    GIT_TIMEOUT_S,
    GitTimedOut,
    _config_entries,
    _detail,
    _failure,
    _finish,
    _overrides_for,
    _run,
    _start,
    run_git,
)

_FALSE_VALUES = frozenset({"false", "no", "off", "0", ""})
# Slow disks and zlib at its worst: a limit this generous never kills a git doing its work.
GIT_MIN_BYTES_PER_S = 8 * 1024 * 1024


@dataclass(frozen=True)
class Repo:
    """A work tree opened once: its top, its git directories, HEAD and the filter overrides.

    With `pinned`, every git call first proves the folders are still the ones pinned at boot.
    """

    top: Path
    git_dir: Path
    common_dir: Path
    head: str | None
    overrides: tuple[tuple[str, str], ...]
    pinned: TreeIdentity | None = None
    timeout_s: float = GIT_TIMEOUT_S  # see `timeout_for`: raised for commands reading big files

    def git(
        self, *args: str, env: Mapping[str, str] | None = None, input: bytes | None = None
    ) -> bytes:
        """`run_git` at the top of this work tree, reusing its filter overrides."""
        if self.pinned is not None:
            self.pinned.verify()
        started = time.time()
        try:
            return run_git(
                self.top,
                *args,
                timeout_s=self.timeout_s,
                env=self._env(env),
                input=input,
                overrides=self.overrides,
            )
        except GitTimedOut:
            # A killed `git add` of a big file leaves its half-written pack behind, every round.
            remove_temp_objects(self.common_dir / "objects", since=started)
            raise

    def resolve(self, rev: str) -> str | None:
        """The object id `rev` names in this repository, or None when it names nothing."""
        if self.pinned is not None:
            self.pinned.verify()
        args = ["rev-parse", "-q", "--verify", "--end-of-options", rev]
        result = _run(self.top, args, env=self._env(None), overrides=self.overrides)
        return result.stdout.decode("ascii").strip() if result.returncode == 0 else None

    def says_yes(self, *args: str) -> bool:
        """The answer of a git command that answers by its exit status: 0 yes, 1 no."""
        if self.pinned is not None:
            self.pinned.verify()
        result = _run(self.top, args, env=self._env(None), overrides=self.overrides)
        if result.returncode not in (0, 1):
            raise GitError(_failure(args, result))
        return result.returncode == 0

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        # Named explicitly, so no later call rediscovers the repository or reads core.worktree.
        return {"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.top), **(extra or {})}


def timeout_for(content_bytes: int) -> float:
    """Time limit for a git command that reads or writes `content_bytes` of file content."""
    return GIT_TIMEOUT_S + content_bytes / GIT_MIN_BYTES_PER_S


def open_repo(work_dir: Path, *, pinned: TreeIdentity | None = None) -> Repo:
    """Open the repository under `work_dir`; GitError if none, or if git would act elsewhere.

    With `pinned` (captured at boot), WorkTreeChanged unless it is the same repository.
    """
    if pinned is not None:
        pinned.verify()  # before git runs at all: work_dir may now be someone else's project
    if not work_dir.is_dir():
        raise GitError(f"{work_dir} is not a directory")
    args = [
        "rev-parse",
        "--path-format=absolute",
        "--show-toplevel",
        "--absolute-git-dir",
        "--git-common-dir",
        "-q",
        "--verify",
        "HEAD^{commit}",
    ]
    # Both run at once: this sits between two rounds, on the restart-latency path.
    locating = _start(work_dir, args)
    try:
        entries = _config_entries(work_dir, r"^(filter\.|core\.(worktree|bare)$)")
    finally:
        result = _finish(locating, args, None, GIT_TIMEOUT_S)
    problem, bare = _layout_settings(entries)
    lines = result.stdout.split(b"\n")
    # Exit 1 with the paths printed is an unborn HEAD; anything else is no work tree at all.
    if problem is None and (result.returncode not in (0, 1) or len(lines) < 4 or not lines[0]):
        # git's own words matter here: "dubious ownership" needs a different fix than no repo.
        problem = bare or f"{work_dir} is not inside a git work tree: {_detail(result)}"
    if problem is None:
        top, git_dir, common = (Path(os.fsdecode(line)) for line in lines[:3])
        problem = _layout_problem(work_dir, top, git_dir, common)
        # A bare repository's linked worktrees are ordinary work trees: git ignores core.bare there.
        if problem is None and bare and not (top / ".git").is_file():
            problem = bare
    if problem is not None:
        raise GitError(problem[:_MAX_ERROR_CHARS])
    head = lines[3].decode("ascii") if result.returncode == 0 else None
    if pinned is not None and pinned.has_repository:
        moved = pinned.moved(top, git_dir, common)
        if moved is not None:
            raise WorkTreeChanged(moved)
        pinned.verify()
    return Repo(top, git_dir, common, head or None, tuple(_overrides_for(entries)), pinned)


def pin_tree(work_dir: Path, repo: Repo | None) -> TreeIdentity:
    """work_dir's identity, and its repository's when `repo` was opened from it."""
    if repo is None:
        return TreeIdentity.capture(work_dir)
    return TreeIdentity.capture(
        work_dir, top=repo.top, git_dir=repo.git_dir, common_dir=repo.common_dir
    )


def _layout_settings(entries: Iterable[tuple[str, str | None]]) -> tuple[str | None, str | None]:
    """Why core.worktree refuses the repository, and why core.bare would (None: it does not)."""
    worktree = bare = None
    for key, value in entries:
        if key == "core.worktree":
            worktree = f"core.worktree is set (to {value}): git would act on another directory"
        if key == "core.bare" and (value is None or value.lower() not in _FALSE_VALUES):
            bare = "core.bare is true: git sees a repository without a work tree"
    return worktree, bare


def _layout_problem(work_dir: Path, top: Path, git_dir: Path, common: Path) -> str | None:
    """Why git, started in `work_dir`, would act on something other than the repository there."""
    real = work_dir.resolve()
    if real != top and top not in real.parents:
        return f"git reports the work tree {top}, which does not hold {work_dir}"
    for folder in (real, *real.parents):
        if folder == top:
            break
        if os.path.lexists(folder / ".git"):
            # git walked past it to an outer repository: acting there would take another's work.
            return f"{folder / '.git'} is there but git does not recognise it as a repository"
    dot_git = top / ".git"
    own = dot_git.is_dir() and git_dir == dot_git and common == dot_git
    linked = dot_git.is_file() and _is_linked_worktree(dot_git, git_dir, common)
    if (own or linked) and not dot_git.is_symlink():
        return None
    return (
        f"git would use {git_dir}, not the repository in {dot_git} (a `gitdir:` file, "
        "`commondir` or symlink points elsewhere)"
    )


def _is_linked_worktree(dot_git: Path, git_dir: Path, common: Path) -> bool:
    # `git worktree add` registers the work tree in the main repository, and that registration
    # points back at this `.git` file: a gitdir file alone cannot forge the way back.
    if git_dir.parent != common / "worktrees":
        return False
    try:
        back = (git_dir / "gitdir").read_bytes().strip()
    except OSError:
        return False
    return Path(os.fsdecode(back)).resolve() == dot_git


def is_work_tree(work_dir: Path) -> bool:
    """True when `work_dir` is inside a git work tree."""
    if not work_dir.is_dir():
        return False
    result = _run(work_dir, ["rev-parse", "--is-inside-work-tree"])
    return result.returncode == 0 and result.stdout.strip() == b"true"


def head_sha(work_dir: Path) -> str | None:
    """The commit HEAD points at, or None when the repository has no commits yet."""
    return resolve(work_dir, "HEAD^{commit}")


def resolve(work_dir: Path, rev: str) -> str | None:
    """The object id `rev` names, or None when it names nothing."""
    result = _run(work_dir, ["rev-parse", "-q", "--verify", "--end-of-options", rev])
    if result.returncode != 0:
        return None
    return result.stdout.decode("ascii").strip()
