"""secure_tree against real git repositories: each action, idempotency, and odd repo states."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_runner.plugins import DirtyIntent
from agent_runner.supervisor.dirty import DirtyView, TreeReport, secure_tree
from tests.fakes import RecordedEvents
from tests.integration.conftest import git

pytestmark = pytest.mark.usefixtures("isolated_git")

NOW = 1_800_000_000.0


def make_repo(tmp_path: Path, *, commit: bool = True) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    if commit:
        (repo / "tracked.txt").write_text("v1\n")
        (repo / ".gitignore").write_text("*.ignored\n")
        git(repo, "add", "tracked.txt", ".gitignore")
        git(repo, "commit", "-q", "-m", "initial")
    return repo


def secure(repo: Path, events: RecordedEvents, **overrides: Any) -> TreeReport:
    head = (
        subprocess.run(
            ["git", "rev-parse", "-q", "--verify", "HEAD"],
            cwd=repo,
            capture_output=True,
            check=False,
        )
        .stdout.decode()
        .strip()
    )
    kwargs: dict[str, Any] = {
        "round_no": 7,
        "exit_cause": "error",
        "head_before": head or None,
        "dirty_action": "stash",
        "idempotency_s": 60.0,
        "state_dir": repo.parent / "state",
        "emit": events,
        "now": NOW,
    }
    kwargs.update(overrides)
    return secure_tree(repo, **kwargs)


def stash_shas(repo: Path) -> list[str]:
    return git(repo, "stash", "list", "--format=%H").split()


def porcelain(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all")


def leave_work(repo: Path) -> None:
    (repo / "tracked.txt").write_text("v2\n")
    (repo / "new.txt").write_text("brand new\n")


# --- nothing to do ----------------------------------------------------------------------


def test_clean_tree_reports_no_progress_and_emits_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    events = RecordedEvents()
    report = secure(repo, events)
    assert report.action == "none"
    assert not report.dirty_before
    assert not report.progressed
    assert events.events == []


def test_new_commit_by_the_agent_counts_as_progress(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    before = git(repo, "rev-parse", "HEAD").strip()
    (repo / "tracked.txt").write_text("agent\n")
    git(repo, "commit", "-q", "-am", "agent work")
    report = secure(repo, RecordedEvents(), head_before=before)
    assert report.action == "none"
    assert report.progressed


def test_ignored_files_are_not_dirty_and_stay_on_disk(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "cache.ignored").write_text("keep me")
    report = secure(repo, RecordedEvents())
    assert report.action == "none"
    assert (repo / "cache.ignored").read_text() == "keep me"


# --- stash ------------------------------------------------------------------------------


def test_stash_includes_untracked_files_and_leaves_the_tree_clean(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events, exit_cause="timeout")

    assert events.kinds() == ["dirty_detected", "orphan_stashed"]
    assert events.of("dirty_detected")[0] == {
        "event": "dirty_detected",
        "round": 7,
        "files": ["new.txt", "tracked.txt"],
        "count": 2,
    }
    sha = events.of("orphan_stashed")[0]["ref"]
    assert report.action == "stash"
    assert report.ref == sha
    assert report.progressed
    assert not report.dirty_after
    assert len(sha) == 40
    assert stash_shas(repo) == [sha]
    assert (
        git(repo, "log", "-1", "--format=%s", sha)
        .strip()
        .endswith("agent-runner round 7 (timeout)")
    )
    assert git(repo, "show", f"{sha}:tracked.txt") == "v2\n"
    assert git(repo, "show", f"{sha}:new.txt") == "brand new\n", "untracked files are in its tree"
    assert porcelain(repo) == ""


def test_stash_ref_is_a_sha_that_survives_later_stashes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    first = secure(repo, events).ref
    (repo / "tracked.txt").write_text("v3\n")
    second = secure(repo, events, round_no=8).ref
    (repo / "operator.txt").write_text("mine")
    git(repo, "stash", "push", "-q", "-m", "operator's own stash", "--include-untracked")

    assert first
    assert second
    assert first != second
    assert not first.startswith("stash@")
    assert stash_shas(repo)[1:] == [second, first]
    assert git(repo, "show", f"{first}:tracked.txt") == "v2\n"


def test_identical_work_within_the_window_is_not_stashed_twice(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    first = secure(repo, events).ref
    leave_work(repo)
    report = secure(repo, events, round_no=8, now=NOW + 30)

    assert report.action == "skipped_idempotent"
    assert events.of("orphan_idempotent_skip") == [
        {"event": "orphan_idempotent_skip", "round": 8, "ref": first}
    ]
    assert stash_shas(repo) == [first]
    assert (repo / "new.txt").exists()


def test_identical_work_after_the_window_is_stashed_again(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    secure(repo, events)
    leave_work(repo)
    report = secure(repo, events, round_no=8, now=NOW + 61)
    assert report.action == "stash"
    assert len(stash_shas(repo)) == 2


def test_different_work_within_the_window_is_stashed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    secure(repo, events)
    leave_work(repo)
    (repo / "new.txt").write_text("different\n")
    report = secure(repo, events, round_no=8, now=NOW + 1)
    assert report.action == "stash"
    assert len(stash_shas(repo)) == 2


def test_stash_without_any_commit_fails_and_keeps_the_work(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, commit=False)
    (repo / "first.txt").write_text("work")
    events = RecordedEvents()
    report = secure(repo, events)

    assert report.action == "failed"
    assert report.progressed
    failed = events.of("dirty_action_failed")[0]
    assert failed["action"] == "stash"
    assert "no commits yet" in failed["reason"]
    assert (repo / "first.txt").read_text() == "work"


def test_stash_on_a_detached_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo, "checkout", "-q", "--detach")
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events)
    assert report.action == "stash"
    assert porcelain(repo) == ""


# --- commit -----------------------------------------------------------------------------


def test_commit_after_a_clean_exit_needs_no_user_identity(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events, exit_cause="clean", dirty_action="commit")

    head = git(repo, "rev-parse", "HEAD").strip()
    assert report.action == "commit"
    assert report.ref == head
    assert report.head_after == head != report.head_before
    assert events.of("dirty_auto_committed") == [
        {
            "event": "dirty_auto_committed",
            "round": 7,
            "ref": head,
            "files": ["new.txt", "tracked.txt"],
        }
    ]
    assert git(repo, "log", "-1", "--format=%s|%an|%ae").strip() == (
        "agent-runner: round 7|agent-runner|agent-runner@localhost"
    )
    assert porcelain(repo) == ""


@pytest.mark.parametrize("cause", ["error", "timeout", "signal:SIGKILL", "stopped"])
def test_commit_after_any_other_exit_stashes_instead(tmp_path: Path, cause: str) -> None:
    repo = make_repo(tmp_path)
    head = git(repo, "rev-parse", "HEAD").strip()
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events, exit_cause=cause, dirty_action="commit")
    assert report.action == "stash"
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert git(repo, "log", "-1", "--format=%s", "refs/stash").strip().endswith(f"({cause})")


def test_commit_in_a_repository_without_commits_makes_the_root_commit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, commit=False)
    (repo / "first.txt").write_text("work")
    report = secure(repo, RecordedEvents(), exit_cause="clean", dirty_action="commit")
    assert report.action == "commit"
    assert report.head_before is None
    assert report.head_after == git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "show", "HEAD:first.txt") == "work"


def test_commit_on_a_detached_head_moves_only_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    main = git(repo, "rev-parse", "main").strip()
    git(repo, "checkout", "-q", "--detach")
    leave_work(repo)
    report = secure(repo, RecordedEvents(), exit_cause="clean", dirty_action="commit")
    assert report.action == "commit"
    assert git(repo, "rev-parse", "main").strip() == main
    assert git(repo, "rev-parse", "HEAD^").strip() == main


# --- ignore -----------------------------------------------------------------------------


def test_ignore_leaves_the_work_and_says_so(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events, dirty_action="ignore")
    assert report.action == "ignore"
    assert report.dirty_after
    assert events.kinds() == ["dirty_detected", "dirty_ignored"]
    assert events.of("dirty_ignored")[0]["reason"]
    assert (repo / "new.txt").exists()
    assert stash_shas(repo) == []


# --- odd repository states --------------------------------------------------------------


def test_stale_index_lock_is_cleared_with_an_event(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    lock = repo / ".git" / "index.lock"
    lock.write_bytes(b"half-written index of a killed git")
    events = RecordedEvents()
    report = secure(repo, events)
    assert events.of("git_index_lock_cleared") == [
        {"event": "git_index_lock_cleared", "round": 7, "path": str(lock)}
    ]
    assert report.action == "stash"
    assert not lock.exists()


def test_index_lock_held_by_a_live_process_is_left_alone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    lock = repo / ".git" / "index.lock"
    events = RecordedEvents()
    with lock.open("wb"):
        report = secure(repo, events)
        assert lock.exists()
    assert report.action == "failed"
    assert f"pid {os.getpid()}" in events.of("dirty_action_failed")[0]["reason"]
    assert (repo / "new.txt").exists()
    assert events.of("git_index_lock_cleared") == []


def test_index_lock_held_is_seen_through_a_symlinked_work_dir(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    link = tmp_path / "link"
    link.symlink_to(repo)
    with (repo / ".git" / "index.lock").open("wb"):
        report = secure(link, RecordedEvents())
    assert report.action == "failed"
    assert (repo / ".git" / "index.lock").exists()


def test_merge_in_progress_is_left_for_the_operator(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "tracked.txt").write_text("side\n")
    git(repo, "commit", "-q", "-am", "side")
    git(repo, "checkout", "-q", "main")
    (repo / "tracked.txt").write_text("main\n")
    git(repo, "commit", "-q", "-am", "main")
    git(repo, "merge", "side", check=False)
    (repo / "new.txt").write_text("more")
    assert (repo / ".git" / "MERGE_HEAD").exists()

    events = RecordedEvents()
    report = secure(repo, events)
    assert events.of("git_merge_in_progress") == [
        {"event": "git_merge_in_progress", "round": 7, "operation": "merge"}
    ]
    assert report.action == "failed"
    assert (repo / ".git" / "MERGE_HEAD").exists()
    assert "<<<<<<<" in (repo / "tracked.txt").read_text()
    assert (repo / "new.txt").exists()
    assert stash_shas(repo) == []


@pytest.mark.parametrize("action", ["stash", "commit"])
def test_odd_file_names_are_secured(tmp_path: Path, action: str) -> None:
    repo = make_repo(tmp_path)
    names = [
        b"with space.txt",
        b"new\nline.txt",
        b"caf\xc3\xa9 \xe2\x9c\x93.txt",
        b"latin1-\xe9.txt",
    ]
    for name in names:
        Path(os.fsdecode(bytes(repo) + b"/" + name)).write_bytes(name)
    events = RecordedEvents()
    report = secure(repo, events, exit_cause="clean", dirty_action=action)

    assert report.action == action
    assert porcelain(repo) == ""
    files = events.of("dirty_detected")[0]["files"]
    assert "café ✓.txt" in files
    assert "latin1-\\xe9.txt" in files
    assert "new\nline.txt" in files
    tree = git(
        repo,
        "ls-tree",
        "-r",
        "-z",
        "--name-only",
        report.ref if action == "stash" else "HEAD",
    )
    assert {os.fsencode(n) for n in tree.split("\0") if n} >= set(names)


def test_modified_config_is_never_stashed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "agent-runner.toml").write_text("schema_version = 1\n")
    git(repo, "add", "agent-runner.toml")
    git(repo, "commit", "-q", "-m", "config")
    (repo / "agent-runner.toml").write_text("schema_version = 1\n# operator edit\n")
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events)

    assert events.of("dirty_protected_file") == [
        {"event": "dirty_protected_file", "round": 7, "path": "agent-runner.toml"}
    ]
    assert report.action == "stash"
    assert not report.dirty_after
    assert "# operator edit" in (repo / "agent-runner.toml").read_text()
    assert git(repo, "show", f"{report.ref}:agent-runner.toml") == "schema_version = 1\n"
    assert events.of("dirty_detected")[0]["files"] == ["new.txt", "tracked.txt"]


def test_untracked_config_is_never_committed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "agent-runner.toml").write_text("schema_version = 1\n")
    leave_work(repo)
    report = secure(repo, RecordedEvents(), exit_cause="clean", dirty_action="commit")
    assert report.action == "commit"
    assert "agent-runner.toml" not in git(repo, "ls-tree", "-r", "--name-only", "HEAD")
    assert porcelain(repo) == "?? agent-runner.toml\n"


def test_an_untracked_config_alone_is_not_agent_work_and_not_news(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "agent-runner.toml").write_text("schema_version = 1\n")
    events = RecordedEvents()
    report = secure(repo, events)
    assert report.action == "none"
    assert not report.progressed
    assert events.events == []


def test_protected_log_dir_and_subdirectory_work_dir(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    work = repo / "project"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "events.jsonl").write_text("{}\n")
    (work / "agent-runner.toml").write_text("schema_version = 1\n")
    (work / "code.py").write_text("x = 1\n")
    report = secure_tree(
        work,
        round_no=1,
        exit_cause="error",
        head_before=None,
        dirty_action="stash",
        idempotency_s=60,
        state_dir=tmp_path / "state",
        emit=RecordedEvents(),
        now=NOW,
        protected=("agent-runner.toml", str(work / "logs")),
    )
    assert report.action == "stash"
    assert (work / "logs" / "events.jsonl").exists()
    assert (work / "agent-runner.toml").exists()
    assert not (work / "code.py").exists()
    assert git(repo, "show", f"{report.ref}:project/code.py") == "x = 1\n"


def test_not_a_work_tree_fails_without_raising(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "file").write_text("x")
    events = RecordedEvents()
    report = secure(plain, events, head_before=None)
    assert report.action == "failed"
    assert "not inside a git work tree" in events.of("dirty_action_failed")[0]["reason"]
    assert (plain / "file").exists()


# --- third-party intents ----------------------------------------------------------------


def test_third_party_commit_of_a_subset(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("# guide\n")
    leave_work(repo)
    seen: list[DirtyView] = []

    def keep_docs(view: DirtyView) -> DirtyIntent:
        seen.append(view)
        docs = [f for f in view.files if f.startswith("docs/")]
        return DirtyIntent.commit(f"docs from round {view.round}", paths=docs)

    events = RecordedEvents()
    report = secure(repo, events, exit_cause="clean", decide=keep_docs, settings={"start_hour": 9})
    assert seen[0].settings == {"start_hour": 9}
    assert seen[0].files == ("docs/guide.md", "new.txt", "tracked.txt")
    assert report.action == "commit"
    assert git(repo, "log", "-1", "--format=%s").strip() == "docs from round 7"
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["docs/guide.md"]
    # What the commit left is stashed by SHA, untracked files included: nothing stays loose.
    (stashed,) = events.of("orphan_stashed")
    assert events.kinds().index("dirty_auto_committed") < events.kinds().index("orphan_stashed")
    assert not report.dirty_after
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "show", f"{stashed['ref']}:tracked.txt") == "v2\n"
    assert git(repo, "show", f"{stashed['ref']}:new.txt") == "brand new\n"
    subject = git(repo, "log", "-1", "--format=%s", stashed["ref"]).strip()
    assert subject.endswith("agent-runner round 7 (clean)")


def test_third_party_commit_after_an_error_is_stashed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events, decide=lambda v: DirtyIntent.commit("half done"))
    assert report.action == "stash"
    assert "stashed instead" in events.of("dirty_intent_rejected")[0]["reason"]


@pytest.mark.parametrize(
    "intent",
    [
        DirtyIntent.commit("sneaky", paths=["agent-runner.toml"]),
        DirtyIntent.commit("outside", paths=["../etc/passwd"]),
        DirtyIntent.stash("two\nlines"),
        DirtyIntent.stash("x" * 201),
        "stash please",
    ],
)
def test_invalid_third_party_intent_falls_back_to_the_builtin(
    tmp_path: Path, intent: object
) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events, exit_cause="clean", decide=lambda v: intent)
    assert len(events.of("dirty_intent_rejected")) == 1
    assert report.action == "stash"
    assert (
        git(repo, "log", "-1", "--format=%s", "refs/stash")
        .strip()
        .endswith("agent-runner round 7 (clean)")
    )


def test_raising_third_party_handler_falls_back_to_the_builtin(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)

    def broken(view: DirtyView) -> DirtyIntent:
        raise RuntimeError("boom")

    events = RecordedEvents()
    report = secure(repo, events, decide=broken)
    assert "boom" in events.of("dirty_intent_rejected")[0]["reason"]
    assert report.action == "stash"


def test_third_party_ignore_and_empty_stash_message(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    events = RecordedEvents()
    assert secure(repo, events, decide=lambda v: DirtyIntent.ignore("mine")).action == "ignore"
    assert events.of("dirty_ignored")[0]["reason"] == "mine"
    report = secure(repo, events, decide=lambda v: DirtyIntent.stash(""))
    assert (
        git(repo, "log", "-1", "--format=%s", f"{report.ref}")
        .strip()
        .endswith("agent-runner round 7 (error)")
    )


def test_the_supervisor_never_asks_git_to_destroy_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_git = shutil.which("git")
    assert real_git
    shim_dir = tmp_path / "shim"
    shim_dir.mkdir()
    calls = tmp_path / "calls"
    shim = shim_dir / "git"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\nexec "{real_git}" "$@"\n')
    shim.chmod(0o755)
    repo = make_repo(tmp_path)
    monkeypatch.setenv("PATH", f"{shim_dir}{os.pathsep}{os.environ['PATH']}")

    for round_no, cause in enumerate(["error", "clean", "timeout"], start=1):
        leave_work(repo)
        (repo / f"round{round_no}.txt").write_text("work")
        secure(repo, RecordedEvents(), round_no=round_no, exit_cause=cause, dirty_action="commit")

    invoked = calls.read_text().splitlines()
    assert any(" commit " in f" {line} " for line in invoked)
    forbidden = ("clean", "checkout", "restore", "stash", "rm", "--hard", "--keep", "--merge")
    for line in invoked:
        assert not any(f" {word} " in f" {line} " for word in forbidden), line
    # The only command that changes the work tree runs once the stash holding it is stored.
    updates = [i for i, line in enumerate(invoked) if " read-tree -m -u " in f" {line} "]
    stores = [i for i, line in enumerate(invoked) if " refs/stash " in f" {line} "]
    assert len(updates) == len(stores) == 2, "rounds 1 and 3 stash, round 2 commits"
    assert all(store < update for store, update in zip(stores, updates, strict=True))


def test_a_state_dir_inside_the_work_tree_is_never_stashed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    state = repo / "state"
    events = RecordedEvents()
    report = secure(repo, events, state_dir=state)
    assert report.action == "stash"
    assert (state / "dirty-last-stash.json").exists()
    leave_work(repo)
    assert secure(repo, events, state_dir=state, now=NOW + 1).action == "skipped_idempotent"
    assert "state" not in git(repo, "ls-tree", "-r", "--name-only", report.ref)


@pytest.mark.parametrize(("action", "cause"), [("stash", "error"), ("commit", "clean")])
def test_an_ignored_config_and_log_dir_do_not_break_stash_or_commit(
    tmp_path: Path, action: str, cause: str
) -> None:
    repo = make_repo(tmp_path)
    (repo / ".gitignore").write_text("agent-runner.toml\nlogs/*.jsonl\n")
    git(repo, "commit", "-q", "-am", "ignore the config")
    (repo / "agent-runner.toml").write_text("schema_version = 1\n")
    (repo / "logs").mkdir()
    (repo / "logs" / "events.jsonl").write_text("{}\n")
    (repo / "logs" / "notes.txt").write_text("not ignored, still protected\n")
    leave_work(repo)
    events = RecordedEvents()
    report = secure(
        repo, events, exit_cause=cause, dirty_action=action, protected=("agent-runner.toml", "logs")
    )
    assert events.of("dirty_action_failed") == []
    assert report.action == action
    assert porcelain(repo) == "?? logs/notes.txt\n"
    assert (repo / "agent-runner.toml").exists()
    assert (repo / "logs" / "events.jsonl").exists()


def test_an_embedded_repository_is_never_deleted(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "src.c").write_text("int x;")
    git(nested, "add", "src.c")
    git(nested, "commit", "-q", "-m", "nested")
    (nested / "uncommitted.c").write_text("int y;")
    (repo / "tracked.txt").write_text("v2\n")
    events = RecordedEvents()
    report = secure(repo, events)

    # git stash cannot hold another repository's files: they stay, and the event says so.
    assert report.action == "failed"
    assert events.kinds() == ["dirty_detected", "orphan_stashed", "dirty_action_failed"]
    assert report.ref == events.of("orphan_stashed")[0]["ref"]
    assert "vendor/lib/" in events.of("dirty_action_failed")[0]["reason"]
    assert (nested / "uncommitted.c").read_text() == "int y;"
    assert (nested / ".git").is_dir()
    assert git(repo, "show", f"{report.ref}:tracked.txt") == "v2\n"


FILE_NAMES = st.binary(min_size=1, max_size=24).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..", b".git")
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(FILE_NAMES, min_size=1, max_size=4, unique=True))
def test_any_file_names_are_stashed_or_committed_exactly(
    tmp_path: Path, names: list[bytes]
) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        repo = make_repo(Path(scratch))
        paths = [os.fsdecode(n) for n in names]
        for path in paths:
            (repo / path).write_bytes(b"content of " + os.fsencode(path))
        chosen = paths[:1]
        report = secure(
            repo,
            RecordedEvents(),
            exit_cause="clean",
            decide=lambda v: DirtyIntent.commit("m", chosen),
        )
        assert report.action == "commit"
        assert set(git(repo, "show", "--name-only", "-z", "--format=", "HEAD").split("\0")) - {
            ""
        } == set(chosen)
        # The rest was stashed by the same call, exactly: the stash holds HEAD plus them.
        assert not report.dirty_after
        assert porcelain(repo) == ""
        for path in paths:
            assert not (repo / path).exists() or path in chosen
        if paths[1:]:
            stashed = git(repo, "ls-tree", "-z", "--name-only", "refs/stash").split("\0")
            head = git(repo, "ls-tree", "-z", "--name-only", "HEAD").split("\0")
            assert set(stashed) - set(head) == set(paths[1:])


# --- what git would rewrite, and what it cannot open --------------------------------------


def rot13_filter(repo: Path) -> None:
    """A reversible clean/smudge pair: the blob is rot13, the checked-out file plain text."""
    rot13 = "tr a-zA-Z n-za-mN-ZA-M"
    git(repo, "config", "filter.rot13.clean", rot13)
    git(repo, "config", "filter.rot13.smudge", rot13)
    (repo / ".gitattributes").write_text("*.secret filter=rot13\n")
    (repo / "data.secret").write_text("hello\n")
    git(repo, "add", ".gitattributes", "data.secret")
    git(repo, "commit", "-q", "-m", "filtered")
    assert git(repo, "cat-file", "blob", "HEAD:data.secret") == "uryyb\n"
    # Older than the index, so not racily clean: git trusts its stat data and reads nothing.
    past = time.time() - 100
    os.utime(repo / "data.secret", (past, past))
    git(repo, "update-index", "-q", "--refresh")


@pytest.mark.parametrize(("action", "cause"), [("stash", "error"), ("commit", "clean")])
def test_files_under_a_filter_are_left_on_disk_not_rewritten(
    tmp_path: Path, action: str, cause: str
) -> None:
    repo = make_repo(tmp_path)
    rot13_filter(repo)
    # Unchanged content, new mtime: with the filter emptied git sees "hello" where the
    # index holds "uryyb", and a stash would check the blob out in its clean form.
    os.utime(repo / "data.secret")
    leave_work(repo)
    head = git(repo, "rev-parse", "HEAD").strip()
    events = RecordedEvents()
    report = secure(repo, events, exit_cause=cause, dirty_action=action)

    assert report.action == "failed"
    assert report.dirty_before
    failure = events.of("dirty_action_failed")
    assert len(failure) == 1
    assert failure[0]["action"] == action
    assert "data.secret" in failure[0]["reason"]
    assert "rot13" in failure[0]["reason"]
    assert (repo / "data.secret").read_text() == "hello\n"
    assert (repo / "new.txt").read_text() == "brand new\n"
    assert (repo / "tracked.txt").read_text() == "v2\n"
    assert stash_shas(repo) == []
    assert git(repo, "rev-parse", "HEAD").strip() == head


def test_unfiltered_work_in_a_repository_with_filters_is_stashed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    rot13_filter(repo)
    leave_work(repo)
    report = secure(repo, RecordedEvents())
    assert report.action == "stash"
    assert (repo / "data.secret").read_text() == "hello\n"
    assert porcelain(repo) == ""


def test_a_filter_dropped_from_gitattributes_still_counts(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    rot13_filter(repo)
    # The stash would put HEAD's .gitattributes back and write HEAD's blob unfiltered.
    (repo / ".gitattributes").write_text("")
    (repo / "data.secret").write_text("hello again\n")
    events = RecordedEvents()
    report = secure(repo, events)
    assert report.action == "failed"
    assert "data.secret" in events.of("dirty_action_failed")[0]["reason"]
    assert (repo / "data.secret").read_text() == "hello again\n"
    assert stash_shas(repo) == []


def test_symlinked_config_and_prompt_are_never_stashed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "real.toml").write_text("schema_version = 1\n")
    (outside / "prompt.md").write_text("do the thing\n")
    (repo / "agent-runner.toml").symlink_to(outside / "real.toml")
    (repo / "prompt.md").symlink_to(outside / "prompt.md")
    leave_work(repo)
    events = RecordedEvents()
    report = secure(repo, events, protected=("agent-runner.toml", str(repo / "prompt.md")))

    assert report.action == "stash"
    assert events.of("dirty_detected")[0]["files"] == ["new.txt", "tracked.txt"]
    assert (repo / "agent-runner.toml").is_symlink()
    assert (repo / "prompt.md").is_symlink()
    stashed = git(repo, "ls-tree", "-r", "--name-only", report.ref).split()
    assert stashed == [".gitignore", "new.txt", "tracked.txt"]
    assert porcelain(repo) == "?? agent-runner.toml\n?? prompt.md\n"


def corrupt_head(repo: Path) -> None:
    (repo / ".git" / "HEAD").write_text("not a ref\n")


def make_bare(repo: Path) -> None:
    git(repo, "config", "core.bare", "true")


@pytest.mark.parametrize("breakage", [corrupt_head, make_bare])
def test_a_repository_git_cannot_open_counts_as_possibly_dirty(
    tmp_path: Path, breakage: Any
) -> None:
    repo = make_repo(tmp_path)
    leave_work(repo)
    head = git(repo, "rev-parse", "HEAD").strip()
    breakage(repo)
    events = RecordedEvents()
    report = secure(repo, events, head_before=head)

    # The work may well be there: a round that cannot be inspected must not look stalled.
    assert report.action == "failed"
    assert report.dirty_before
    assert report.progressed
    assert len(events.of("dirty_action_failed")) == 1
    assert (repo / "new.txt").exists()
