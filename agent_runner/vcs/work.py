"""Reading and securing the work in a tree: status, attributes, snapshots, stash and commit."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent_runner.errors import GitError
from agent_runner.vcs.repo import Repo

_GITLINK_MODE = b"160000"
_HASH_BLOCK = 1024 * 1024
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


@dataclass(frozen=True)
class Snapshot:
    """The work in the tree as git objects, built in a throwaway index; nothing else changed."""

    tree: str  # the work tree as `git add -A` stages it; excluded paths as in HEAD
    index_tree: str  # the real index as it was: what the agent had staged
    index: Path  # the throwaway index holding `tree`, its stat data fresh from the disk


def snapshot_tree(repo: Repo, pathspecs: Sequence[str]) -> str:
    """Tree id of the work tree as `git add -A` would stage it, built in a throwaway index."""
    with snapshot(repo, pathspecs) as snap:
        return snap.tree


@contextmanager
def snapshot(
    repo: Repo, pathspecs: Sequence[str], *, as_in_head: Sequence[str] = ()
) -> Iterator[Snapshot]:
    """The work matching `pathspecs`, with the index entries of `as_in_head` put back to HEAD."""
    # The throwaway index lives in the git dir: anywhere in the work tree it would snapshot itself.
    with tempfile.TemporaryDirectory(dir=repo.git_dir, prefix="agent-runner-snapshot-") as tmp:
        index = Path(tmp) / "index"
        real_index = repo.git_dir / "index"
        if real_index.exists():
            # Starting from the real index reuses its stat data: unchanged files are not rehashed.
            shutil.copyfile(real_index, index)
        env = {"GIT_INDEX_FILE": str(index)}
        index_tree = _hex(repo.git("write-tree", env=env))
        if as_in_head and repo.head is not None:
            # A path-limited reset of the throwaway index: no work-tree file is read or written.
            spec = _pathspec_input(literal_pathspecs(as_in_head))
            repo.git("reset", "-q", repo.head, *_PATHSPEC_STDIN, env=env, input=spec)
        repo.git("add", "-A", *_PATHSPEC_STDIN, env=env, input=_pathspec_input(pathspecs))
        yield Snapshot(_hex(repo.git("write-tree", env=env)), index_tree, index)


def stash_commit(repo: Repo, snap: Snapshot, message: str) -> str:
    """A stash commit of `snap` on HEAD (work tree, and the index as its second parent).

    Untracked files are part of the work tree commit, not a third parent, so `git stash apply`
    restores every shape (a file turned into a folder, a symlink) in one step.
    Nothing is stored yet and nothing on disk changes.
    """
    if repo.head is None:
        raise GitError("the repository has no commits yet, so git cannot stash; work left on disk")
    on = _branch_label(repo)
    index_commit = _hex(
        repo.git(
            "commit-tree",
            snap.index_tree,
            "-p",
            repo.head,
            "-m",
            f"index on {on}: {repo.head[:12]}",
        )
    )
    parents = ("-p", repo.head, "-p", index_commit)
    return _hex(repo.git("commit-tree", snap.tree, *parents, "-m", f"On {on}: {message}"))


def store_stash(repo: Repo, sha: str, message: str) -> None:
    """Add stash commit `sha` to `refs/stash` (what `git stash store` does)."""
    reflog = f"On {_branch_label(repo)}: {message}"
    repo.git("update-ref", "--create-reflog", "-m", reflog, "refs/stash", sha)


def clean_to_head(
    repo: Repo, snap: Snapshot, held: Mapping[str, TreeEntry], excluded: Sequence[str]
) -> None:
    """Put every path but `excluded` back to HEAD, on disk and in the index.

    Only for a snapshot already stored and verified (`held` is its tree's entries).
    `read-tree -m` moves the throwaway index from the snapshot to HEAD and refuses, before
    changing anything, when a file on disk is not what the snapshot holds; `-u` applies it
    to the work tree. git counts ignored files as expendable, so a path HEAD would write over
    an ignored file, or over a folder holding one, is refused here first.
    """
    assert repo.head is not None
    out = repo.git("diff-tree", "-r", "-z", "--no-renames", "--name-status", snap.tree, repo.head)
    fields = out.split(b"\0")
    for status_field, raw in zip(fields[0::2], fields[1::2], strict=False):
        if status_field != b"D":  # HEAD has this path: read-tree will write it
            path = os.fsdecode(raw)
            lost = _not_held_beneath(repo.top, path, held)
            if lost is not None:
                raise GitError(
                    f"putting {path} back would delete {lost}, which git ignores and the stash "
                    "does not hold; the tree is left as it is"
                )
    repo.git("read-tree", "-m", "-u", snap.tree, repo.head, env={"GIT_INDEX_FILE": str(snap.index)})
    # The real index: back to HEAD for the same paths; excluded entries stay as they were.
    spec = _pathspec_input(all_but(excluded))
    repo.git("reset", "-q", repo.head, *_PATHSPEC_STDIN, input=spec)


def first_not_held(repo: Repo, held: Mapping[str, TreeEntry], paths: Sequence[str]) -> str | None:
    """The first of `paths` whose state on disk the tree entries `held` do not record exactly.

    Read from the disk without git where it can be: the blob id of a file or a symlink's
    target is computed here, and git is asked only about a file whose bytes git converts
    on the way in (line endings).
    """
    exec_bit = _hex(repo.git("config", "--type=bool", "--default=true", "core.filemode")) == "true"
    for path in paths:
        key = path.rstrip("/")  # status names a folder it did not enter with a slash
        entry = held.get(key)
        info = _lstat_beneath(repo.top, key)
        if info is None or stat.S_ISDIR(info.st_mode):
            if entry is not None:  # gone from the disk (or a folder now) but still in the tree
                return path
        elif entry is None or not _holds(repo, key, entry, info, exec_bit):
            return path
    return None


def _holds(repo: Repo, path: str, entry: TreeEntry, info: os.stat_result, exec_bit: bool) -> bool:
    """Whether tree entry `entry` records the symlink or regular file at `path` (lstat `info`)."""
    if stat.S_ISLNK(info.st_mode):
        target = os.fsencode(os.readlink(repo.top / path))
        return entry == TreeEntry("120000", _blob_id(entry, len(target), [target]))
    if not stat.S_ISREG(info.st_mode) or entry.mode not in ("100644", "100755"):
        return False
    if exec_bit and (entry.mode == "100755") != bool(info.st_mode & stat.S_IXUSR):
        return False
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with os.fdopen(os.open(repo.top / path, flags), "rb") as handle:
        if os.fstat(handle.fileno()).st_ino != info.st_ino:
            return False
        oid = _blob_id(entry, info.st_size, iter(lambda: handle.read(_HASH_BLOCK), b""))
    if oid == entry.oid:
        return True
    # Bytes that differ may still be what git stores once it converts line endings.
    return _hex(repo.git("hash-object", "--end-of-options", path)) == entry.oid


def _blob_id(entry: TreeEntry, size: int, chunks: Iterable[bytes]) -> str:
    """The id git gives a blob of `size` bytes, in the repository's object format."""
    name = "sha256" if len(entry.oid) == 64 else "sha1"
    digest = hashlib.new(name, b"blob %d\0" % size, usedforsecurity=False)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def file_sizes(repo: Repo, paths: Iterable[str]) -> dict[str, int]:
    """The size of each of `paths` that is a regular file on disk (symlinks not followed)."""
    sizes = {}
    for path in paths:
        info = _lstat_beneath(repo.top, path)
        if info is not None and stat.S_ISREG(info.st_mode):
            sizes[path] = info.st_size
    return sizes


def _lstat_beneath(top: Path, path: str) -> os.stat_result | None:
    """lstat of `path` under `top` as git sees it: None when it, or a folder on the way, is not
    there or is not a real folder (git never follows a symlinked folder)."""
    parts = path.split("/")
    here = top
    for part in parts[:-1]:
        here = here / part
        try:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                return None
        except OSError:
            return None
    try:
        return os.lstat(here / parts[-1])
    except OSError:
        return None


def _not_held_beneath(top: Path, path: str, held: Mapping[str, TreeEntry]) -> str | None:
    """A file or symlink at `path`, or anywhere in a real folder there, that `held` lacks."""
    info = _lstat_beneath(top, path)
    if info is None:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None if path in held else path
    for folder, dirs, files in os.walk(top / path):  # symlinked folders are listed, not entered
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
            rel = Path(folder, name).relative_to(top).as_posix()
            if rel not in held:
                return rel
    return None


def _branch_label(repo: Repo) -> str:
    out = _hex(repo.git("rev-parse", "--abbrev-ref", "HEAD"))
    return "(no branch)" if out == "HEAD" else out


def _hex(out: bytes) -> str:
    return out.decode("ascii").strip()


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
