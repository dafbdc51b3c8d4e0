"""`agent-runner rescue` through real serves and real git: every piece of work secured is
listed, survives `git stash clear` and gc, comes back into a clean tree or onto a new branch,
and nothing is ever overwritten or done to another repository."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.contracts import checks_by_name, conforming
from tests.integration.conftest import Project, agent, git

pytestmark = pytest.mark.usefixtures("isolated_git")

# Round 1 leaves half-done work and fails: stashed. Round 2 finishes cleanly: committed.
TWO_ROUNDS = (
    'if [ "$AGENT_RUNNER_ROUND" = 1 ]; then printf "half done\\n" > draft.txt;'
    ' printf "changed\\n" >> README; exit 1; fi;'
    ' printf "finished\\n" > done.txt'
)


def secured(project: Project) -> list[dict[str, Any]]:
    done = project.cli("rescue", "--json")
    assert done.returncode == 0, done.stderr
    return list(conforming("rescue --json", done.stdout)["secured"])


def with_readme(project: Project) -> None:
    (project.work_dir / "README").write_text("readme\n")
    git(project.work_dir, "add", "README")
    git(project.work_dir, "commit", "-q", "-m", "readme")


def serve_rounds(project: Project, script: str, rounds: int, **vcs: Any) -> None:
    project.write_config(
        ["sh", "-c", script], runtime={"max_rounds": rounds}, vcs={"stash_idempotency_s": 0, **vcs}
    )
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr


def test_every_secured_piece_is_listed_with_round_cause_time_files_and_size(
    project: Project,
) -> None:
    with_readme(project)
    started = time.time()
    serve_rounds(project, TWO_ROUNDS, 2, dirty_action="commit")
    stash_sha = project.events("orphan_stashed")[0]["ref"]
    commit_sha = project.events("dirty_auto_committed")[0]["ref"]
    stash, commit = secured(project)
    assert stash["sha"] == stash_sha
    assert (stash["round"], stash["action"], stash["exit_cause"]) == (1, "stash", "error")
    assert stash["files"] == ["README", "draft.txt"]
    assert (stash["count"], stash["bytes"]) == (2, len("readme\nchanged\n") + len("half done\n"))
    assert started <= stash["at"] <= time.time()
    assert stash["kept_by"] == ["refs/agent-runner/rounds/1", "stash@{0}"]
    assert stash["reachable"] and stash["exists"]
    assert commit["sha"] == commit_sha
    assert (commit["round"], commit["action"], commit["exit_cause"]) == (2, "commit", "clean")
    assert commit["files"] == ["done.txt"]
    assert commit["kept_by"] == ["refs/agent-runner/rounds/2", "HEAD"]
    text = project.cli("rescue").stdout
    assert f"    1  stash   {stash_sha[:12]}  error" in text
    assert "kept by refs/agent-runner/rounds/1, stash@{0}" in text
    peek = project.cli("peek").stdout
    assert f"work committed as {commit_sha[:12]} (`agent-runner rescue`)" in peek
    checks = checks_by_name(project.cli("doctor", "--json").stdout)
    assert checks["secured work"]["detail"].startswith("2 piece(s) under refs/agent-runner/rounds/")


def test_stash_clear_and_garbage_collection_cannot_lose_the_work(project: Project) -> None:
    with_readme(project)
    serve_rounds(project, TWO_ROUNDS, 1)
    work = project.work_dir
    sha = project.events("orphan_stashed")[0]["ref"]
    git(work, "stash", "clear")
    git(work, "reflog", "expire", "--expire=now", "--all")
    git(work, "gc", "-q", "--prune=now")
    [entry] = secured(project)
    assert (entry["sha"], entry["kept_by"], entry["reachable"]) == (
        sha,
        ["refs/agent-runner/rounds/1"],
        True,
    )
    done = project.cli("rescue", "apply", sha[:10])
    assert done.returncode == 0, done.stderr
    assert (work / "draft.txt").read_text() == "half done\n"
    assert (work / "README").read_text() == "readme\nchanged\n"


def test_work_nothing_keeps_any_more_is_flagged_then_shown_gone(project: Project) -> None:
    serve_rounds(project, "echo lost > lost.txt; exit 1", 1)
    work = project.work_dir
    sha = project.events("orphan_stashed")[0]["ref"]
    git(work, "update-ref", "-d", "refs/agent-runner/rounds/1")
    git(work, "stash", "drop", "-q")
    [entry] = secured(project)  # from the event log: serve said it stashed it
    assert (entry["exists"], entry["reachable"], entry["kept_by"]) == (True, False, [])
    # Without the ref's record, what git still has says what it was.
    assert (entry["round"], entry["exit_cause"], entry["files"]) == (1, "error", ["lost.txt"])
    assert "the next `git gc` deletes it" in project.cli("rescue").stdout
    git(work, "reflog", "expire", "--expire=now", "--all")
    git(work, "gc", "-q", "--prune=now")
    [entry] = secured(project)
    assert (entry["sha"], entry["exists"]) == (sha, False)
    done = project.cli("rescue", "apply", sha)
    assert done.returncode == 1
    assert "is gone from the repository" in done.stderr


def test_apply_refuses_a_dirty_tree_an_ignored_file_in_the_way_and_a_running_serve(
    project: Project,
) -> None:
    with_readme(project)
    serve_rounds(project, TWO_ROUNDS, 1)
    work = project.work_dir
    sha = project.events("orphan_stashed")[0]["ref"]

    (work / "unrelated.txt").write_text("the operator's own edit\n")
    done = project.cli("rescue", "apply", sha)
    assert done.returncode == 1
    assert "the work tree is not clean (unrelated.txt)" in done.stderr
    (work / "unrelated.txt").unlink()

    (work / ".git" / "info" / "exclude").write_text("draft.txt\n")
    (work / "draft.txt").write_text("ignored, and precious\n")
    done = project.cli("rescue", "apply", sha)
    assert done.returncode == 1
    assert "draft.txt would be overwritten and git does not track it" in done.stderr
    assert (work / "draft.txt").read_text() == "ignored, and precious\n"
    (work / "draft.txt").unlink()

    project.write_config(agent("sleeper.py", "60"))
    serve = project.start()
    project.wait_for("agent_spawn", count=2)  # round 1 of this serve, after the earlier one
    done = project.cli("rescue", "apply", sha)
    assert done.returncode == 1
    assert "serve is running" in done.stderr
    serve.terminate()
    assert serve.wait(timeout=15) == 0
    assert git(work, "status", "--porcelain") == ""


def test_branch_makes_a_new_branch_and_touches_neither_the_tree_nor_head(
    project: Project,
) -> None:
    with_readme(project)
    serve_rounds(project, TWO_ROUNDS, 1)
    work = project.work_dir
    sha = project.events("orphan_stashed")[0]["ref"]
    head = git(work, "rev-parse", "HEAD").strip()
    (work / "unrelated.txt").write_text("a dirty tree is fine for a branch\n")
    done = project.cli("rescue", "branch", sha[:8], "rescued/round-1")
    assert done.returncode == 0, done.stderr
    assert git(work, "show", "rescued/round-1:draft.txt") == "half done\n"
    assert git(work, "show", "rescued/round-1:README") == "readme\nchanged\n"
    assert git(work, "rev-parse", "rescued/round-1^").strip() == head
    assert git(work, "rev-parse", "HEAD").strip() == head
    assert git(work, "status", "--porcelain") == "?? unrelated.txt\n"
    again = project.cli("rescue", "branch", sha, "rescued/round-1")
    assert again.returncode == 1
    assert "exists already" in again.stderr
    assert git(work, "show", "rescued/round-1:draft.txt") == "half done\n"
    bad = project.cli("rescue", "branch", sha, "../escape")
    assert bad.returncode == 1
    assert "not a valid branch name" in bad.stderr


def test_refs_older_than_rescue_keep_days_are_pruned_when_new_work_is_kept(
    project: Project,
) -> None:
    serve_rounds(project, "date +%N > work.txt; exit 1", 1)
    work = project.work_dir
    assert git(work, "for-each-ref", "--format=%(refname)", "refs/agent-runner/").split() == [
        "refs/agent-runner/rounds/1"
    ]
    time.sleep(1.5)
    serve_rounds(project, "date +%N > work.txt; exit 1", 1, rescue_keep_days=1 / 86_400)
    assert project.events("work_refs_pruned")[0]["refs"] == ["refs/agent-runner/rounds/1"]
    assert git(work, "for-each-ref", "--format=%(refname)", "refs/agent-runner/").split() == [
        "refs/agent-runner/rounds/2"
    ]
    assert len(git(work, "stash", "list").splitlines()) == 2  # pruning never drops a stash


def test_a_round_number_used_again_after_a_lost_state_file_never_overwrites_a_ref(
    project: Project,
) -> None:
    serve_rounds(project, "date +%N > work.txt; exit 1", 1)
    (project.log_dir / "state.json").unlink()
    serve_rounds(project, "date +%N > work.txt; exit 1", 1)
    refs = git(project.work_dir, "for-each-ref", "--format=%(refname)", "refs/agent-runner/")
    assert refs.split() == ["refs/agent-runner/rounds/1", "refs/agent-runner/rounds/1-1"]
    shas = [e["ref"] for e in project.events("orphan_stashed")]
    assert [e["sha"] for e in secured(project)] == shas


def test_rescue_acts_only_on_the_repository_under_work_dir(
    project: Project, tmp_path: Path
) -> None:
    with_readme(project)
    serve_rounds(project, TWO_ROUNDS, 1)
    sha = project.events("orphan_stashed")[0]["ref"]
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "mine.txt").write_text("another project's file\n")
    git(other, "add", "mine.txt")
    git(other, "commit", "-q", "-m", "other")
    before = git(other, "for-each-ref")
    work_git = project.work_dir / ".git"
    os.rename(work_git, tmp_path / "moved.git")
    work_git.write_text(f"gitdir: {other / '.git'}\n")
    for args in (("rescue",), ("rescue", "apply", sha), ("rescue", "branch", sha, "x")):
        done = project.cli(*args)
        assert done.returncode == 1, args
        assert "not the repository in" in done.stderr, done.stderr
    assert git(other, "for-each-ref") == before
    assert git(other, "status", "--porcelain") == ""
