"""Putting secured work back: what a stash or commit holds, applying it, branching from it.

Nothing here checks whether the tree may be written; `commands/rescue.py` decides that and
calls these only for a clean tree (apply) or a branch name not taken (branch).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from agent_runner.errors import GitError
from agent_runner.vcs.repo import Repo

_STASH_SUBJECT = re.compile(r"^(?:On|WIP on) [^:]*: agent-runner round (\d+) \(([^()\s]+)\)$")


@dataclass(frozen=True)
class StashEntry:
    """One `git stash list` entry: its position, commit and message."""

    index: int
    sha: str
    subject: str

    @property
    def round_and_cause(self) -> tuple[int, str] | None:
        """(round, exit cause) when serve made this stash, from its message."""
        return serve_stash_subject(self.subject)


def serve_stash_subject(subject: str) -> tuple[int, str] | None:
    """(round, exit cause) from the subject of a stash serve made, else None."""
    match = _STASH_SUBJECT.match(subject)
    return (int(match[1]), match[2]) if match else None


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    time: int
    subject: str
    parents: tuple[str, ...]


def stash_entries(repo: Repo) -> list[StashEntry]:
    """The stash list, newest (stash@{0}) first."""
    if repo.resolve("refs/stash") is None:
        return []
    out = repo.git("reflog", "show", "--format=%H%x00%gs%x00", "refs/stash", "--")
    fields = out.split(b"\0")
    return [
        StashEntry(i, os.fsdecode(fields[2 * i].strip()), os.fsdecode(fields[2 * i + 1]))
        for i in range(len(fields) // 2)
    ]


def existing_commits(repo: Repo, shas: Iterable[str]) -> dict[str, CommitInfo]:
    """Each of `shas` that names a commit in the repository, with its time, subject, parents."""
    wanted = [sha for sha in shas if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha)]
    if not wanted:
        return {}
    out = repo.git(
        "cat-file", "--batch-check=%(objectname) %(objecttype)", input="\n".join(wanted).encode()
    )
    commits = [line.split()[0] for line in out.decode().splitlines() if line.endswith(" commit")]
    if not commits:
        return {}
    log = repo.git(
        "log",
        "--no-walk=unsorted",
        "--stdin",
        "--format=%H%x00%ct%x00%P%x00%s%x00",
        input="\n".join(commits).encode(),
    )
    fields = log.split(b"\0")
    found = {}
    for i in range(0, len(fields) - 4, 4):
        sha, time, parents, subject = (os.fsdecode(f.strip(b"\n")) for f in fields[i : i + 4])
        found[sha] = CommitInfo(sha, int(time), subject, tuple(parents.split()))
    return found


def changed_paths(repo: Repo, base: str, sha: str) -> list[str]:
    """The paths that differ between commits `base` and `sha` (what applying `sha` writes)."""
    out = repo.git("diff-tree", "-r", "-z", "--no-renames", "--name-only", base, sha, "--")
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def tracked_paths(repo: Repo) -> set[str]:
    """Every path in the index (for a clean tree: HEAD's files)."""
    return {os.fsdecode(p) for p in repo.git("ls-files", "-z").split(b"\0") if p}


def is_ancestor(repo: Repo, sha: str, of: str = "HEAD") -> bool:
    return repo.says_yes("merge-base", "--is-ancestor", sha, of)


def apply_stash(repo: Repo, sha: str) -> None:
    """`git stash apply <sha>`: a three-way merge of the stash onto HEAD, nothing staged."""
    repo.git("stash", "apply", "--quiet", sha)


def apply_commit(repo: Repo, sha: str) -> None:
    """`git cherry-pick --no-commit <sha>`: the commit's change onto HEAD, left uncommitted."""
    repo.git("cherry-pick", "--no-commit", sha)


def valid_branch_name(repo: Repo, name: str) -> bool:
    try:
        repo.git("check-ref-format", "--branch", name)
    except GitError:
        return False
    return True


def create_branch(repo: Repo, name: str, sha: str) -> None:
    """refs/heads/<name> at commit `sha`; refuses (GitError) when the branch exists."""
    # An empty old value: git refuses if the branch appeared meanwhile.
    repo.git("update-ref", "--no-deref", f"refs/heads/{name}", sha, "")


def commit_of_stash(repo: Repo, sha: str, message: str) -> str:
    """A commit holding stash `sha`'s work tree on the commit it was made on."""
    out = repo.git("commit-tree", f"{sha}^{{tree}}", "-p", f"{sha}^1", "-m", message)
    return out.decode("ascii").strip()
