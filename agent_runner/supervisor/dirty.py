"""Securing the work a round left in the tree: detect, ask a handler, execute, verify.

A handler (builtin or third-party) only returns a DirtyIntent; everything that touches
git happens here, through `agent_runner.vcs`. Work is never destroyed: a failure leaves it on disk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from agent_runner import vcs
from agent_runner.errors import GitError, WorkTreeChanged
from agent_runner.events import encodable
from agent_runner.files import read_regular, write_atomic
from agent_runner.plugins import DirtyIntent
from agent_runner.plugins.builtin import dirty as builtin_dirty

EVENT_FILES_MAX = 20
REASON_FILES_MAX = 3
MESSAGE_MAX_CHARS = 200
LAST_STASH_FILE = "dirty-last-stash.json"
DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024
DAY_S = 86_400

Emit = Callable[..., None]
Decide = Callable[["DirtyView"], DirtyIntent]


@dataclass(frozen=True)
class DirtyView:
    """What a dirty handler sees; plain data, serialisable to JSON for third-party handlers."""

    round: int
    files: tuple[str, ...]
    work_dir: str
    exit_cause: str
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TreeReport:
    """The tree before and after securing it; what the stalled breaker reads."""

    head_before: str | None
    head_after: str | None
    dirty_before: bool
    dirty_after: bool
    action: str  # none | stash | commit | ignore | failed | skipped_idempotent
    ref: str | None = None

    @property
    def progressed(self) -> bool:
        """A new commit appeared, or the round left work in the tree."""
        return self.head_after != self.head_before or self.dirty_before


@dataclass(frozen=True)
class _Tree:
    repo: vcs.Repo
    protected: tuple[str, ...]
    files: tuple[str, ...]
    # Never taken by a stash or commit: dirty protected paths, submodules, embedded
    # repositories, and files over the size limit.
    excluded: tuple[str, ...]
    oversized: Mapping[str, int]  # dirty files over the size limit, with their sizes
    sizes: Mapping[str, int]  # the size of every dirty regular file

    @property
    def head(self) -> str | None:
        return self.repo.head


def secure_tree(
    work_dir: Path,
    *,
    round_no: int,
    exit_cause: str,
    head_before: str | None,
    dirty_action: str,
    idempotency_s: float,
    state_dir: Path,
    emit: Emit,
    now: float,
    decide: Decide | None = None,
    protected: Sequence[str] = ("agent-runner.toml",),
    settings: Mapping[str, Any] | None = None,
    pinned: vcs.TreeIdentity | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    keep_days: float = 0,
) -> TreeReport:
    """Detect work left by round `round_no` and stash, commit or leave it; never raises GitError.

    `decide=None` is the builtin handler; a third-party `decide` gets `settings` as view.settings.
    With `pinned`, a tree that is not the one pinned at boot is left alone: action
    `work_tree_changed`, and the caller must stop. A file over `max_file_bytes` stays on disk.
    What is stashed or committed is also kept under refs/agent-runner/rounds/<round_no>, and
    such refs older than `keep_days` (0: never) are pruned.
    """
    try:
        # The state dir holds the idempotency record: never the agent's work.
        protected = (*protected, str(state_dir.absolute()))
        tree = _inspect(work_dir, round_no, protected, emit, pinned, max_file_bytes)
    except WorkTreeChanged as exc:
        return _left_alone(work_dir, round_no, head_before, exc, emit)
    except (GitError, OSError) as exc:
        emit("dirty_action_failed", round=round_no, action=dirty_action, reason=str(exc))
        # Not inspected is not clean: the round's work may be there, so it must not look stalled.
        return TreeReport(head_before, head_before, True, True, "failed")
    if not tree.files:
        return TreeReport(head_before, tree.head, False, False, "none")
    emit(
        "dirty_detected",
        round=round_no,
        files=[display_path(f) for f in tree.files[:EVENT_FILES_MAX]],
        count=len(tree.files),
    )
    for path, size in list(tree.oversized.items())[:EVENT_FILES_MAX]:
        emit("dirty_file_too_large", round=round_no, path=display_path(path), bytes=size)
    builtin_view = DirtyView(
        round_no, tree.files, str(work_dir), exit_cause, {"dirty_action": dirty_action}
    )
    if decide is None:
        intent = _validated(builtin_dirty.decide(builtin_view), builtin_view, emit)
    else:
        view = replace(builtin_view, settings=dict(settings or {}))
        intent = _ask(decide, view, builtin_view, emit)
    job = _Job(
        tree, round_no, head_before, idempotency_s, state_dir, now, emit, exit_cause, keep_days
    )
    try:
        report = job.execute(intent)
    except WorkTreeChanged as exc:
        return _left_alone(work_dir, round_no, head_before, exc, emit)
    except (GitError, OSError) as exc:
        emit("dirty_action_failed", round=round_no, action=intent.action, reason=str(exc))
        return TreeReport(head_before, _head_or(tree), True, True, "failed")
    if report.action == "commit" and intent.paths and report.dirty_after:
        # A second look at a tree whose news was already reported: no event twice.
        look_again = partial(
            _inspect, work_dir, round_no, protected, _no_event, pinned, max_file_bytes
        )
        report = _stash_leftovers(job, report, work_dir, look_again, exit_cause)
    return report


def _stash_leftovers(
    job: _Job,
    report: TreeReport,
    work_dir: Path,
    look_again: Callable[[], _Tree],
    exit_cause: str,
) -> TreeReport:
    """After a partial commit, stash what it left: no path of the round stays unsecured."""
    try:
        leftovers = look_again()
        if not leftovers.files:
            return replace(report, dirty_after=False)
        intent = DirtyIntent.stash(builtin_dirty.stash_message(job.round_no, exit_cause))
        stashed = replace(job, tree=leftovers).stash(intent)
    except WorkTreeChanged as exc:
        return _left_alone(work_dir, job.round_no, job.head_before, exc, job.emit)
    except (GitError, OSError) as exc:
        job.emit("dirty_action_failed", round=job.round_no, action="stash", reason=str(exc))
        return report
    return replace(report, dirty_after=stashed.dirty_after)


def _no_event(kind: str, **fields: Any) -> None:
    """An emit that writes nothing."""


def _left_alone(
    work_dir: Path, round_no: int, head_before: str | None, exc: WorkTreeChanged, emit: Emit
) -> TreeReport:
    emit("work_tree_changed", round=round_no, path=str(work_dir), reason=str(exc))
    return TreeReport(head_before, head_before, True, True, "work_tree_changed")


def display_path(path: str) -> str:
    """A file name as text for events: undecodable bytes shown as backslash escapes."""
    return encodable(path)


def _inspect(
    work_dir: Path,
    round_no: int,
    protected: Sequence[str],
    emit: Emit,
    pinned: vcs.TreeIdentity | None,
    max_file_bytes: int,
) -> _Tree:
    repo = vcs.open_repo(work_dir, pinned=pinned)
    _clear_stale_index_lock(repo, round_no, emit)
    rel = _relative_to_top(work_dir, repo.top, protected)
    files = []
    excluded: set[str] = set()
    for entry in vcs.status(repo):
        if _is_protected(entry.path, rel):
            # The supervisor's own config and logs are the operator's, not the agent's work.
            # An untracked config is the usual setup, not news: only a changed tracked one is.
            if entry.xy != "??":
                emit("dirty_protected_file", round=round_no, path=display_path(entry.path))
            excluded.update(p for p in rel if _is_protected(entry.path, (p,)))
        else:
            files.append(entry.path)
            if entry.path.endswith("/"):
                # An embedded repository: git would store a pointer, never its files.
                excluded.add(entry.path)
    if files:
        # add and stash would look inside a submodule, running its own config's filters.
        excluded.update(vcs.submodule_paths(repo))
    sizes = vcs.file_sizes(repo, [f for f in files if f not in excluded])
    oversized = {path: size for path, size in sorted(sizes.items()) if size > max_file_bytes}
    excluded.update(oversized)
    # git reads every byte it stores: its time limit grows with what it is given to read.
    content = sum(size for path, size in sizes.items() if path not in excluded)
    repo = replace(repo, timeout_s=vcs.timeout_for(content))
    # Excluding an ignored path by name makes `git add` fail; ignored paths need no exclusion.
    return _Tree(repo, rel, tuple(sorted(files)), tuple(sorted(excluded)), oversized, sizes)


def agents_work(repo: vcs.Repo, work_dir: Path, protected: Sequence[str]) -> list[str]:
    """The dirty paths that are work, as the dirty-tree step sees them: protected ones left out."""
    rel = _relative_to_top(work_dir, repo.top, protected)
    return [entry.path for entry in vcs.status(repo) if not _is_protected(entry.path, rel)]


def _clear_stale_index_lock(repo: vcs.Repo, round_no: int, emit: Emit) -> None:
    lock = repo.git_dir / "index.lock"
    if not lock.exists():
        return
    holders = vcs.index_lock_holders(lock)
    if holders:
        raise GitError(f"{lock} is held by pid {holders[0]}; work left on disk")
    # Nothing has it open: it was left by a killed git. It holds no work, only a half-written index.
    lock.unlink(missing_ok=True)
    emit("git_index_lock_cleared", round=round_no, path=str(lock))


def _relative_to_top(work_dir: Path, top: Path, protected: Sequence[str]) -> tuple[str, ...]:
    rel = []
    real_top = top.resolve()
    for item in protected:
        path = work_dir / item
        # A symlinked config is protected where it sits, not where it points (maybe outside).
        path = path.parent.resolve() / path.name if path.name else path.resolve()
        try:
            rel.append(path.relative_to(real_top).as_posix())
        except ValueError:
            continue  # outside this repository: git cannot touch it anyway
    return tuple(r for r in rel if r != ".")


def _is_protected(path: str, protected: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in protected)


def _ask(decide: Decide, view: DirtyView, builtin_view: DirtyView, emit: Emit) -> DirtyIntent:
    # A third-party handler that fails or lies costs nothing: the builtin stashes the work.
    stash_view = replace(builtin_view, settings={"dirty_action": "stash"})
    try:
        intent = decide(view)
    except Exception as exc:
        emit("dirty_intent_rejected", round=view.round, reason=f"{exc}; stashed instead"[:200])
        return builtin_dirty.decide(stash_view)
    return _validated(intent, stash_view, emit)


def _validated(intent: object, view: DirtyView, emit: Emit) -> DirtyIntent:
    problem = intent_problem(intent, view.files)
    if problem is not None:
        emit("dirty_intent_rejected", round=view.round, reason=problem)
        return builtin_dirty.decide(view)
    assert isinstance(intent, DirtyIntent)
    if intent.action == "commit" and view.exit_cause != "clean":
        emit(
            "dirty_intent_rejected",
            round=view.round,
            reason=f"commit after a {view.exit_cause} exit: stashed instead",
        )
        return DirtyIntent.stash(builtin_dirty.stash_message(view.round, view.exit_cause))
    if intent.action != "ignore" and not intent.message:
        default = builtin_dirty.decide(replace(view, settings={"dirty_action": intent.action}))
        return replace(intent, message=default.message)
    return intent


def intent_problem(intent: object, files: Sequence[str]) -> str | None:
    """Why `intent` cannot be executed as given, or None when it can."""
    if not isinstance(intent, DirtyIntent):
        return f"handler returned {type(intent).__name__}, not a DirtyIntent"
    message, paths = intent.message, intent.paths
    checks = (
        (intent.action not in builtin_dirty.DIRTY_ACTIONS, f"unknown action {intent.action!r}"),
        (
            not isinstance(message, str) or len(message) > MESSAGE_MAX_CHARS,
            f"message must be a string of at most {MESSAGE_MAX_CHARS} characters",
        ),
        (
            not isinstance(paths, tuple) or not all(isinstance(p, str) for p in paths),
            "paths must be a sequence of strings",
        ),
    )
    for failed, reason in checks:
        if failed:
            return reason
    if any(ord(c) < 32 or ord(c) == 127 for c in message):
        return "message holds control characters"
    if paths and intent.action != "commit":
        return f"{intent.action} takes no paths"
    outside = sorted(set(paths) - set(files))
    return f"path not among the dirty files: {display_path(outside[0])}" if outside else None


@dataclass(frozen=True)
class _Job:
    tree: _Tree
    round_no: int
    head_before: str | None
    idempotency_s: float
    state_dir: Path
    now: float
    emit: Emit
    exit_cause: str = "clean"
    keep_days: float = 0

    def execute(self, intent: DirtyIntent) -> TreeReport:
        tree = self.tree
        if intent.action == "ignore":
            reason = intent.message or "handler chose ignore"
            self.emit("dirty_ignored", round=self.round_no, reason=reason)
            return TreeReport(self.head_before, tree.head, True, True, "ignore")
        operation = vcs.operation_in_progress(tree.repo)
        if operation is not None:
            self.emit("git_merge_in_progress", round=self.round_no, operation=operation)
            raise GitError(f"a {operation} is in progress; left for the operator")
        _refuse_filtered(tree.repo, intent.paths or tree.files, intent.action)
        if not [f for f in intent.paths or tree.files if f not in tree.oversized]:
            # Only files over the size limit: each was reported, and all stay where they are.
            return TreeReport(self.head_before, tree.head, True, True, "left_on_disk")
        if intent.action == "commit":
            return self.commit(intent)
        return self.stash(intent)

    def stash(self, intent: DirtyIntent) -> TreeReport:
        tree = self.tree
        if tree.head is None:
            # git cannot stash without a commit to stash against; building one would mean
            # committing to the operator's branch, so the work stays on disk instead.
            raise GitError(
                "the repository has no commits yet, so git cannot stash; work left on disk"
            )
        excluded = tree.excluded
        with vcs.snapshot(tree.repo, vcs.all_but(excluded), as_in_head=excluded) as snap:
            previous = self.recent_identical_stash(snap.tree)
            if previous is not None:
                self.emit("orphan_idempotent_skip", round=self.round_no, ref=previous)
                return TreeReport(
                    self.head_before, tree.head, True, True, "skipped_idempotent", previous
                )
            sha = vcs.stash_commit(tree.repo, snap, intent.message)
            # Proven against the disk before anything is stored or cleaned: a stash that
            # does not hold the work must not cost the work.
            held = vcs.tree_entries(tree.repo, f"{sha}^{{tree}}")
            taken = [f for f in tree.files if f not in excluded]
            missing = vcs.first_not_held(tree.repo, held, taken)
            if missing is not None:
                raise GitError(
                    f"stash commit {sha} does not hold {display_path(missing)} as it is on disk;"
                    " nothing stored or cleaned, work left on disk"
                )
            try:
                vcs.store_stash(tree.repo, sha, intent.message)
            except GitError:
                # A git killed after it wrote the ref still made the stash: it is reported.
                if tree.repo.resolve("refs/stash") != sha:
                    raise
            self.emit("orphan_stashed", round=self.round_no, ref=sha)
            self.keep("stash", sha, taken)
            # Recorded now: if cleaning fails, the next round does not stash the same work again.
            _save_last_stash(self.state_dir, {"tree": snap.tree, "ref": sha, "at": self.now})
            return self.verified(
                "stash",
                sha,
                [f for f in tree.files if f not in tree.oversized],
                lambda: vcs.clean_to_head(tree.repo, snap, held, excluded),
            )

    def keep(self, action: str, sha: str, files: Sequence[str]) -> None:
        """Keep `sha` under refs/agent-runner/rounds/<n> too: a stash list can be cleared."""
        record = {
            "action": action,
            "exit_cause": self.exit_cause,
            "at": self.now,
            "files": [display_path(f) for f in files[:EVENT_FILES_MAX]],
            "count": len(files),
            "bytes": sum(self.tree.sizes.get(f, 0) for f in files),
        }
        repo = self.tree.repo
        try:
            vcs.keep_work(repo, self.round_no, sha, record, self.now)
            pruned = (
                vcs.prune_kept(repo, older_than=self.now - self.keep_days * DAY_S)
                if self.keep_days
                else []
            )
        except WorkTreeChanged:
            raise
        except GitError as exc:
            # The work is stored all the same (refs/stash or the branch): this only costs the
            # copy that `git stash clear` cannot reach.
            self.emit("work_keep_failed", round=self.round_no, reason=str(exc))
            return
        if pruned:
            self.emit("work_refs_pruned", count=len(pruned), refs=pruned[:EVENT_FILES_MAX])

    def recent_identical_stash(self, snapshot: str) -> str | None:
        last = _load_last_stash(self.state_dir)
        if last is None or last.get("tree") != snapshot:
            return None
        ref = str(last.get("ref"))
        age = self.now - float(last.get("at", 0))
        if not 0 <= age < self.idempotency_s:
            return None
        return ref if self.tree.repo.resolve(f"{ref}^{{commit}}") == ref else None

    def commit(self, intent: DirtyIntent) -> TreeReport:
        tree = self.tree
        paths = [p for p in intent.paths or tree.files if p not in tree.oversized]
        pathspecs = vcs.literal_pathspecs(paths) if intent.paths else vcs.all_but(tree.excluded)
        snapshot = vcs.snapshot_tree(tree.repo, pathspecs)
        sha = vcs.commit(tree.repo, intent.message, pathspecs)
        files = [display_path(p) for p in paths[:EVENT_FILES_MAX]]
        self.emit("dirty_auto_committed", round=self.round_no, ref=sha, files=files)
        self.keep("commit", sha, paths)

        def check() -> None:
            parent = tree.repo.resolve(f"{sha}^") if tree.head is not None else None
            if parent != tree.head:
                raise GitError(f"commit {sha} does not follow {tree.head}; left for the operator")
            self.verify_holds(snapshot, vcs.tree_entries(tree.repo, sha), paths, f"commit {sha}")

        return self.verified("commit", sha, paths, check)

    def verify_holds(
        self, snapshot: str, actual: Mapping[str, vcs.TreeEntry], paths: Sequence[str], what: str
    ) -> None:
        expected = vcs.tree_entries(self.tree.repo, snapshot)
        for path in paths:
            key = path.rstrip("/")  # status names an embedded repository as a folder
            if expected.get(key) != actual.get(key):
                raise GitError(f"{what} does not hold {display_path(path)} as it was on disk")

    def verified(
        self, action: str, sha: str, secured: Sequence[str], then: Callable[[], None]
    ) -> TreeReport:
        """Run `then` (a check, or the cleaning) once `action` made `sha`; then make sure
        `secured` left the tree."""
        tree = self.tree
        try:
            then()
            left = [e.path for e in vcs.status(tree.repo)]
            left = [p for p in left if not _is_protected(p, tree.protected)]
            still = sorted(set(left) & set(secured))
            if still:
                raise GitError(f"{action} {sha} made but {display_path(still[0])} is still dirty")
        except WorkTreeChanged:
            raise
        except GitError as exc:
            self.emit("dirty_action_failed", round=self.round_no, action=action, reason=str(exc))
            return TreeReport(self.head_before, _head_or(tree), True, True, "failed", sha)
        head = tree.repo.resolve("HEAD^{commit}")
        return TreeReport(self.head_before, head, True, bool(left), action, sha)


def _head_or(tree: _Tree) -> str | None:
    try:
        return tree.repo.resolve("HEAD^{commit}")
    except GitError:
        return tree.head


def _refuse_filtered(repo: vcs.Repo, paths: Sequence[str], action: str) -> None:
    # Filters are emptied, so git would store these files' working-tree bytes and a stash
    # would check them out unfiltered (an LFS file turned into its pointer). Left to the operator.
    filtered = vcs.filtered_paths(repo, paths)
    if not filtered:
        return
    named = [f"{display_path(p)} (filter {d})" for p, d in sorted(filtered.items())]
    more = len(named) - REASON_FILES_MAX
    listed = ", ".join(named[:REASON_FILES_MAX]) + (f" and {more} more" if more > 0 else "")
    raise GitError(
        f"{listed}: under a git filter the supervisor does not run; {action} refused, work left"
        " on disk"
    )


def _load_last_stash(state_dir: Path) -> dict[str, Any] | None:
    try:
        raw = read_regular(state_dir / LAST_STASH_FILE, max_bytes=64 * 1024, follow=False)
        data = json.loads(raw)
    except (OSError, ValueError):
        return None  # no record (or a torn one) only means the next stash is not skipped
    return data if isinstance(data, dict) else None


def _save_last_stash(state_dir: Path, record: Mapping[str, Any]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(state_dir / LAST_STASH_FILE, json.dumps(record).encode())
