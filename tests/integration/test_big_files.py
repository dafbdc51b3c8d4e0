"""Big files: left on disk above the size limit, git given time in proportion to the work,
and a git killed at its limit leaves no half-written pack behind."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from agent_runner import vcs
from agent_runner.supervisor import dirty
from agent_runner.vcs.run import GitTimedOut
from tests.fakes import RecordedEvents
from tests.integration.conftest import Project, git
from tests.integration.test_dirty_tree import make_repo, secure, stash_shas

pytestmark = pytest.mark.usefixtures("isolated_git")
MIB = 1024 * 1024


def git_dir_bytes(repo: Path) -> int:
    return sum(p.stat().st_size for p in (repo / ".git").rglob("*") if p.is_file())


def test_a_file_over_the_limit_is_reported_and_left_while_the_rest_is_stashed(
    project: Project,
) -> None:
    script = 'test -f big.bin || head -c 3145728 /dev/urandom > big.bin; echo "$AGENT_RUNNER_ROUND" > small.txt'
    project.write_config(
        ["sh", "-c", script], runtime={"max_rounds": 2}, vcs={"dirty_file_max_bytes": MIB}
    )
    before = git_dir_bytes(project.work_dir)
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr

    too_large = project.events("dirty_file_too_large")
    assert [(e["round"], e["path"], e["bytes"]) for e in too_large] == [
        (1, "big.bin", 3 * MIB),
        (2, "big.bin", 3 * MIB),
    ]
    stashed = [e["ref"] for e in project.events("orphan_stashed")]
    assert len(stashed) == 2
    assert project.events("dirty_action_failed") == []
    work = project.work_dir
    assert git(work, "show", f"{stashed[1]}:small.txt") == "2\n"
    assert "big.bin" not in git(work, "ls-tree", "-r", "--name-only", stashed[1])
    assert (work / "big.bin").stat().st_size == 3 * MIB, "left where the agent put it"
    assert git(work, "status", "--porcelain") == "?? big.bin\n"
    assert git_dir_bytes(work) - before < MIB, "the big file was never copied into .git"


def test_only_files_over_the_limit_leave_the_tree_as_it_is(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "huge.log").write_bytes(b"x" * 2048)
    events = RecordedEvents()
    report = secure(repo, events, max_file_bytes=1024)
    assert events.kinds() == ["dirty_detected", "dirty_file_too_large"]
    assert report.action == "left_on_disk"
    assert report.progressed
    assert stash_shas(repo) == []
    assert (repo / "huge.log").stat().st_size == 2048


def test_a_git_killed_at_its_time_limit_leaves_no_temporary_pack(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo, "config", "core.bigFileThreshold", "1m")  # streamed straight into a pack
    with (repo / "big.bin").open("wb") as out:
        for _ in range(256):
            out.write(os.urandom(MIB))
    opened = dataclasses.replace(vcs.open_repo(repo), timeout_s=0.3)
    with pytest.raises(GitTimedOut, match=r"git add timed out after 0\.3s"):
        opened.git("add", "big.bin")
    objects = repo / ".git" / "objects"
    assert sorted(p.name for p in objects.glob("pack/tmp_*")) == []
    assert sorted(p.name for p in objects.rglob("tmp_obj_*")) == []


def test_time_limits_grow_with_the_bytes_git_must_read() -> None:
    assert vcs.timeout_for(0) == vcs.GIT_TIMEOUT_S
    gib = vcs.timeout_for(1024 * MIB)
    assert gib == vcs.GIT_TIMEOUT_S + 1024 * MIB / vcs.GIT_MIN_BYTES_PER_S
    assert gib > 2 * vcs.GIT_TIMEOUT_S


def test_a_stash_whose_store_was_cut_short_after_the_ref_is_still_reported_by_sha(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path)
    (repo / "new.txt").write_text("work\n")
    real_store = vcs.store_stash

    def store_then_die(opened: vcs.Repo, sha: str, message: str) -> None:
        real_store(opened, sha, message)
        raise GitTimedOut("git update-ref timed out after 60s")

    monkeypatch.setattr(dirty.vcs, "store_stash", store_then_die)
    events = RecordedEvents()
    report = secure(repo, events)
    assert report.action == "stash"
    assert events.of("orphan_stashed")[0]["ref"] == report.ref == stash_shas(repo)[0]
