"""`agent-runner rescue`: every piece of work serve secured, and putting one back.

The list joins three records: the `orphan_stashed` / `dirty_auto_committed` events, the refs
under refs/agent-runner/rounds/ and serve's entries in the stash list, so work whose ref was
pruned or whose stash was dropped still shows, with what (if anything) still keeps it. git
runs only on the repository under the project's work_dir, pinned for the command; `apply`
writes only into a clean tree and over nothing git does not track, `branch` only makes a new
branch and touches neither the tree nor HEAD.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from agent_runner import vcs
from agent_runner.config import Config
from agent_runner.errors import AgentRunnerError
from agent_runner.events import iter_events, parse_ts
from agent_runner.supervisor.boot.instance import read_holder
from agent_runner.supervisor.dirty import agents_work, display_path
from agent_runner.supervisor.loop.round import own_paths
from agent_runner.vcs import restore

SECURED_KINDS = {"orphan_stashed": "stash", "dirty_auto_committed": "commit"}
MIN_PREFIX = 7
SHOWN_PATHS = 3


class RescueRefused(AgentRunnerError):
    """The work cannot be put back as asked; nothing was changed."""


@dataclass(frozen=True)
class Secured:
    """One piece of work serve secured, and what keeps git's garbage collection off it."""

    sha: str
    round: int
    action: str  # stash | commit
    exit_cause: str | None
    at: float | None
    files: tuple[str, ...]  # at most the first 20
    count: int | None
    bytes: int | None
    exists: bool  # the commit is still in the repository
    kept_by: tuple[str, ...]  # refs/agent-runner/rounds/<n>, stash@{i}, HEAD

    @property
    def reachable(self) -> bool:
        """Safe from `git gc`; an unreachable one that still exists is lost at the next gc."""
        return bool(self.kept_by)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reachable": self.reachable}


def secured_work(config: Config) -> list[Secured]:
    """Every piece of work serve secured in this project, oldest round first."""
    with _opened(config) as repo:
        return _collect(repo, config.runtime.log_dir)


def apply_work(config: Config, sha: str) -> Secured:
    """Put one piece back into the work tree; RescueRefused unless that overwrites nothing."""
    holder = read_holder(config.runtime.log_dir)
    if holder is not None:
        # Its next round would take the work straight back into a stash.
        raise RescueRefused(f"serve is running (pid {holder.pid}): `agent-runner stop` first")
    with _opened(config) as repo:
        entry = _pick(_collect(repo, config.runtime.log_dir), sha)
        dirty = agents_work(repo, config.runtime.work_dir, own_paths(config))
        if dirty:
            raise RescueRefused(
                f"the work tree is not clean ({_listed(dirty)}): commit or stash that first,"
                f" or use `agent-runner rescue branch {entry.sha[:12]} NAME`"
            )
        if entry.action == "commit" and "HEAD" in entry.kept_by:
            raise RescueRefused(f"commit {entry.sha[:12]} is already in HEAD's history")
        base = f"{entry.sha}^1"
        taken = _untracked_in_the_way(repo, restore.changed_paths(repo, base, entry.sha))
        if taken:
            raise RescueRefused(
                f"{_listed(taken)} would be overwritten and git does not track it:"
                " move it away first"
            )
        if entry.action == "stash":
            restore.apply_stash(repo, entry.sha)
        else:
            restore.apply_commit(repo, entry.sha)
        return entry


def branch_work(config: Config, sha: str, name: str) -> Secured:
    """Make a new branch `name` holding one piece, on the commit it was made on."""
    with _opened(config) as repo:
        entry = _pick(_collect(repo, config.runtime.log_dir), sha)
        if not restore.valid_branch_name(repo, name):
            raise RescueRefused(f"{name!r} is not a valid branch name")
        if repo.resolve(f"refs/heads/{name}") is not None:
            raise RescueRefused(f"branch {name!r} exists already; pick another name")
        commit = entry.sha
        if entry.action == "stash":
            cause = f" ({entry.exit_cause})" if entry.exit_cause else ""
            message = f"agent-runner round {entry.round}{cause}, from stash {entry.sha[:12]}"
            commit = restore.commit_of_stash(repo, entry.sha, message)
        restore.create_branch(repo, name, commit)
        return entry


@contextmanager
def _opened(config: Config) -> Iterator[vcs.Repo]:
    work_dir = config.runtime.work_dir
    repo = vcs.open_repo(work_dir)  # refuses a repository that config or .git points elsewhere
    pinned = vcs.pin_tree(work_dir, repo)
    try:
        yield replace(repo, pinned=pinned)
    finally:
        pinned.close()


def _collect(repo: vcs.Repo, log_dir: Path) -> list[Secured]:
    found: dict[str, dict[str, Any]] = {}
    for event in iter_events(log_dir, frozenset(SECURED_KINDS)):
        sha, number = event.get("ref"), event.get("round")
        if isinstance(sha, str) and type(number) is int:
            entry = found.setdefault(sha, {"round": number, "kept_by": []})
            entry["action"] = SECURED_KINDS[event["event"]]
            entry["at"] = parse_ts(event.get("ts"))
            if isinstance(event.get("files"), list):
                entry["files"] = [str(f) for f in event["files"]]
    for kept in vcs.list_kept(repo):
        entry = found.setdefault(kept.sha, {"round": kept.record["round"], "kept_by": []})
        entry.update(_from_record(kept.record))
        entry["kept_by"].append(kept.ref)
    for stash in restore.stash_entries(repo):
        ours = stash.round_and_cause
        if ours is None and stash.sha not in found:
            continue  # someone else's stash
        entry = found.setdefault(stash.sha, {"round": ours[0] if ours else 0, "kept_by": []})
        entry.setdefault("action", "stash")
        if ours is not None:
            entry.setdefault("exit_cause", ours[1])
        entry["kept_by"].append(f"stash@{{{stash.index}}}")
    commits = restore.existing_commits(repo, found)
    return sorted(
        (_secured(repo, sha, entry, commits.get(sha)) for sha, entry in found.items()),
        key=lambda s: (s.round, s.at or 0),
    )


def _from_record(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of a kept ref's record that have the types serve writes."""
    wanted = {"action": str, "exit_cause": str, "at": float, "count": int, "bytes": int}
    fields: dict[str, Any] = {
        k: record[k] for k, kind in wanted.items() if isinstance(record.get(k), kind)
    }
    if fields.get("action") not in ("stash", "commit"):
        fields.pop("action", None)
    files = record.get("files")
    if isinstance(files, list) and all(isinstance(f, str) for f in files):
        fields["files"] = files
    return fields


def _secured(
    repo: vcs.Repo, sha: str, entry: dict[str, Any], commit: restore.CommitInfo | None
) -> Secured:
    action = entry.get("action") or ("stash" if commit and len(commit.parents) > 1 else "commit")
    kept_by = list(entry["kept_by"])
    files = entry.get("files")
    count = entry.get("count")
    if commit is not None:
        if action == "commit" and restore.is_ancestor(repo, sha):
            kept_by.append("HEAD")
        if files is None and commit.parents:
            changed = restore.changed_paths(repo, commit.parents[0], sha)
            files, count = [display_path(p) for p in changed[:20]], len(changed)
    at = entry.get("at")
    cause = entry.get("exit_cause")
    if cause is None and commit is not None and action == "stash":
        cause = (restore.serve_stash_subject(commit.subject) or (0, None))[1]
    return Secured(
        sha=sha,
        round=entry["round"],
        action=action,
        exit_cause=cause,
        at=at if at is not None else (commit.time if commit else None),
        files=tuple(files or ()),
        count=count if count is not None else (len(files) if files is not None else None),
        bytes=entry.get("bytes"),
        exists=commit is not None,
        kept_by=tuple(kept_by) if commit is not None else (),
    )


def _pick(entries: list[Secured], sha: str) -> Secured:
    sha = sha.strip().lower()
    if len(sha) < MIN_PREFIX:
        raise RescueRefused(f"give at least {MIN_PREFIX} characters of the SHA")
    matches = [e for e in entries if e.sha.startswith(sha)]
    if not matches:
        raise RescueRefused(f"{sha} is not work serve secured here (see `agent-runner rescue`)")
    if len(matches) > 1:
        raise RescueRefused(f"{sha} names {len(matches)} pieces of work: give more of the SHA")
    if not matches[0].exists:
        raise RescueRefused(
            f"{matches[0].sha[:12]} is gone from the repository (garbage-collected)"
        )
    return matches[0]


def _untracked_in_the_way(repo: vcs.Repo, paths: list[str]) -> list[str]:
    """Paths (or folders on the way to them) on disk that git does not track: git would count
    an ignored file as expendable and write over it."""
    tracked = restore.tracked_paths(repo)
    in_the_way = []
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            try:
                info = os.lstat(repo.top / prefix)
            except OSError:
                break  # nothing there: nothing to overwrite
            if stat.S_ISDIR(info.st_mode):
                if depth < len(parts):
                    continue
                # A folder where the work has a file: git may replace it if all it holds is
                # tracked (committed, so not lost), never what it does not track.
                in_the_way.extend(_untracked_beneath(repo.top, prefix, tracked))
            elif prefix not in tracked:
                in_the_way.append(prefix)
            break
    return sorted(set(in_the_way))


def _untracked_beneath(top: Path, folder: str, tracked: set[str]) -> list[str]:
    found = []
    for here, dirs, files in os.walk(top / folder):  # symlinked folders are listed, not entered
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(here, d)))]:
            rel = Path(here, name).relative_to(top).as_posix()
            if rel not in tracked:
                found.append(rel)
    return found


def render_secured(entries: list[Secured], work_dir: Path) -> str:
    """The list as a table, one piece of work a line."""
    if not entries:
        return f"no work secured in {work_dir} yet"
    lines = [f"{'round':>5}  {'action':<6}  {'sha':<12}  {'cause':<9}  {'when':<16}  files  size"]
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.at)) if e.at else "?"
        size = "?" if e.bytes is None else _size(e.bytes)
        count = "?" if e.count is None else str(e.count)
        lines.append(
            f"{e.round:>5}  {e.action:<6}  {e.sha[:12]:<12}  {e.exit_cause or '?':<9}  {when:<16}"
            f"  {count:>5}  {size}"
        )
        if e.files:
            more = (e.count or len(e.files)) - len(e.files)
            lines.append("       " + ", ".join(e.files) + (f" and {more} more" if more > 0 else ""))
        if not e.exists:
            lines.append("       gone: garbage-collected by git")
        elif not e.reachable:
            lines.append(
                "       kept by nothing: the next `git gc` deletes it;"
                f" `agent-runner rescue branch {e.sha[:12]} NAME` keeps it"
            )
        else:
            lines.append("       kept by " + ", ".join(e.kept_by))
    return "\n".join(lines)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _listed(paths: list[str]) -> str:
    shown = ", ".join(display_path(p) for p in paths[:SHOWN_PATHS])
    more = len(paths) - SHOWN_PATHS
    return shown + (f" and {more} more" if more > 0 else "")
