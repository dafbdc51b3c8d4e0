"""Reading and securing the work in a tree: status, attributes, snapshots, stash and commit."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent_runner.errors import GitError
from agent_runner.vcs.repo import Repo

_GITLINK_MODE = b"160000"
_OPERATIONS = (
    ("MERGE_HEAD", "merge"),
    ("rebase-merge", "rebase"),
    ("rebase-apply", "rebase"),
    ("CHERRY_PICK_HEAD", "cherry-pick"),
    ("REVERT_HEAD", "revert"),
)


@dataclass(frozen=True)
class StatusEntry:
    """One `git status --porcelain=v1` record; `path` is fs-decoded and relative to the top."""

    xy: str
    path: str


@dataclass(frozen=True)
class TreeEntry:
    """One blob, link or gitlink in a tree: mode and object id."""

    mode: str
    oid: str


def status(repo: Repo) -> tuple[StatusEntry, ...]:
    """Changed and untracked (not ignored) files, one entry per path, renames split in two."""
    out = repo.git(
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--no-renames",
        "--ignored=no",
        "--ignore-submodules=all",
    )
    entries = []
    for record in out.split(b"\0"):
        if len(record) > 3:
            entries.append(StatusEntry(record[:2].decode("ascii"), os.fsdecode(record[3:])))
    return tuple(entries)


def operation_in_progress(repo: Repo) -> str | None:
    """`merge`, `rebase`, `cherry-pick` or `revert` when one was left half-done, else None."""
    for name, operation in _OPERATIONS:
        if (repo.git_dir / name).exists():
            return operation
    return None


def submodule_paths(repo: Repo) -> tuple[str, ...]:
    """Paths of the submodules (gitlinks) in the index."""
    out = repo.git("ls-files", "-z", "--stage")
    paths = []
    for record in out.split(b"\0"):
        if record.startswith(_GITLINK_MODE + b" "):
            paths.append(os.fsdecode(record.partition(b"\t")[2]))
    return tuple(paths)


def filtered_paths(repo: Repo, paths: Sequence[str]) -> dict[str, str]:
    """Each of `paths` that .gitattributes puts under a filter, with the filter's name."""
    found = _filter_attributes(repo, paths, {})
    if repo.head is not None and any(p.rpartition("/")[2] == ".gitattributes" for p in paths):
        # A stash puts HEAD's .gitattributes back: what HEAD says about a file counts too.
        with tempfile.TemporaryDirectory(dir=repo.git_dir, prefix="agent-runner-attr-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            repo.git("read-tree", repo.head, env=env)
            found = {**_filter_attributes(repo, paths, env, "--cached"), **found}
    return found


def _filter_attributes(
    repo: Repo, paths: Sequence[str], env: Mapping[str, str], *mode: str
) -> dict[str, str]:
    out = repo.git(
        "check-attr", *mode, "-z", "--stdin", "filter", env=env, input=_pathspec_input(paths)
    )
    fields = out.split(b"\0")
    found = {}
    for i in range(0, len(fields) - 2, 3):
        value = os.fsdecode(fields[i + 2])
        if value not in ("unspecified", "unset"):
            found[os.fsdecode(fields[i])] = value
    return found


def literal_pathspecs(paths: Iterable[str]) -> list[str]:
    """Pathspecs matching exactly these paths, whatever characters they hold."""
    return [f":(literal){p}" for p in paths]


def all_but(excluded: Iterable[str]) -> list[str]:
    """Pathspecs matching the whole tree except `excluded` (files or folders)."""
    return [".", *(f":(exclude,literal){p}" for p in excluded)]


def _pathspec_input(pathspecs: Sequence[str]) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in pathspecs)


_PATHSPEC_STDIN = ("--pathspec-from-file=-", "--pathspec-file-nul")


def snapshot_tree(repo: Repo, pathspecs: Sequence[str]) -> str:
    """Tree id of the work tree as `git add -A` would stage it, built in a throwaway index."""
    # The throwaway index lives in the git dir: anywhere in the work tree it would snapshot itself.
    with tempfile.TemporaryDirectory(dir=repo.git_dir, prefix="agent-runner-snapshot-") as tmp:
        index = Path(tmp) / "index"
        real_index = repo.git_dir / "index"
        if real_index.exists():
            # Starting from the real index reuses its stat data: unchanged files are not rehashed.
            shutil.copyfile(real_index, index)
        env = {"GIT_INDEX_FILE": str(index)}
        repo.git("add", "-A", *_PATHSPEC_STDIN, env=env, input=_pathspec_input(pathspecs))
        return repo.git("write-tree", env=env).decode("ascii").strip()


def stash_push(repo: Repo, message: str, pathspecs: Sequence[str]) -> str | None:
    """Stash matching changes, untracked files included; the new stash's SHA, or None if none."""
    before = repo.resolve("refs/stash")
    out = repo.git(
        "stash",
        "push",
        "--include-untracked",
        "--message",
        message,
        *_PATHSPEC_STDIN,
        input=_pathspec_input(pathspecs),
    )
    after = repo.resolve("refs/stash")
    # Identical work, message and second make an identical stash commit: the SHA alone
    # cannot tell "saved again" from "nothing to save", git's own report can (LC_ALL=C).
    saved = after != before or out.startswith(b"Saved working directory")
    return after if saved else None


def commit(repo: Repo, message: str, pathspecs: Sequence[str]) -> str:
    """Commit exactly the matching paths as they are on disk; the new HEAD."""
    spec = _pathspec_input(pathspecs)
    repo.git("add", "-A", *_PATHSPEC_STDIN, input=spec)
    repo.git(
        "commit",
        "--no-verify",
        "--no-gpg-sign",
        "--cleanup=verbatim",
        "--message",
        message,
        "--only",
        *_PATHSPEC_STDIN,
        input=spec,
    )
    sha = repo.resolve("HEAD^{commit}")
    if sha is None:
        raise GitError("git commit reported success but HEAD names no commit")
    return sha


def tree_entries(repo: Repo, treeish: str) -> dict[str, TreeEntry]:
    """Every path under `treeish` with its mode and object id."""
    out = repo.git("ls-tree", "-r", "-z", "--full-tree", "--end-of-options", treeish)
    entries = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, oid = meta.decode("ascii").split(" ")
        entries[os.fsdecode(path)] = TreeEntry(mode, oid)
    return entries


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
