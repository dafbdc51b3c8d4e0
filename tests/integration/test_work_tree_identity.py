"""The work tree is pinned at boot: a work_dir swapped for another project is never touched."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agent_runner import vcs
from agent_runner.errors import WorkTreeChanged
from tests.integration.conftest import Project, git

pytestmark = pytest.mark.usefixtures("isolated_git")


def other_project(tmp_path: Path) -> Path:
    """The operator's other repository, with uncommitted edits of its own."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "notes.txt").write_text("committed\n")
    git(other, "add", "notes.txt")
    git(other, "commit", "-q", "-m", "other")
    (other / "notes.txt").write_text("the operator's uncommitted edit\n")
    (other / "draft.txt").write_text("untracked draft\n")
    return other


def test_a_work_dir_replaced_by_a_symlink_to_another_repo_is_never_stashed(
    project: Project, tmp_path: Path
) -> None:
    other = other_project(tmp_path)
    before = git(other, "status", "--porcelain")
    swap = f'echo agent > work.txt; cd .. && mv work work.moved && ln -s "{other}" work'
    project.write_config(["sh", "-c", swap], runtime={"max_rounds": 3})
    done = project.cli("serve")
    assert done.returncode == 69, done.stderr
    changed = project.events("work_tree_changed")
    assert len(changed) == 1
    assert changed[0]["round"] == 1
    assert "work_dir" in changed[0]["reason"]
    assert str(other) in changed[0]["reason"]
    assert project.events("serve_stop")[-1]["reason"] == "gave up: work_tree_changed"
    assert project.events("orphan_stashed") == []
    assert project.events("dirty_detected") == []
    assert len(project.events("round_start")) == 1
    assert git(other, "status", "--porcelain") == before
    assert git(other, "stash", "list") == ""
    assert (other / "notes.txt").read_text() == "the operator's uncommitted edit\n"
    assert (tmp_path / "work.moved" / "work.txt").read_text() == "agent\n", "left where it is"


def test_a_work_dir_that_is_no_repository_is_checked_before_each_spawn(
    project: Project, tmp_path: Path
) -> None:
    shutil.rmtree(project.work_dir / ".git")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    swap = f'cd .. && mv work work.moved && ln -s "{elsewhere}" work'
    project.write_config(["sh", "-c", swap], runtime={"max_rounds": 3})
    done = project.cli("serve")
    assert done.returncode == 69, done.stderr
    assert len(project.events("round_start")) == 1, "no agent was started in the other folder"
    assert project.events("work_tree_changed")[0]["round"] == 1


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    (path / "a.txt").write_text("a\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "a")
    return path


def test_a_repository_recreated_in_place_is_not_the_pinned_one(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    pinned = vcs.pin_tree(repo, vcs.open_repo(repo))
    assert vcs.open_repo(repo, pinned=pinned).head is not None
    for _ in range(20):  # a freed inode number is soon handed out again: try to get it back
        shutil.rmtree(repo / ".git")
        git(repo, "init", "-q")
        with pytest.raises(WorkTreeChanged, match=r"the repository's \.git .* is not the one"):
            vcs.open_repo(repo, pinned=pinned)
    dot_git = next(p for p in pinned.places if p.path == repo / ".git")
    held = os.fstat(dot_git.fd)
    assert (held.st_ino, held.st_nlink) == (dot_git.inode, 0), "deleted, but its inode is held"
    pinned.close()


def test_every_git_call_of_a_pinned_repo_proves_the_tree_first(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    pinned = vcs.pin_tree(repo, vcs.open_repo(repo))
    opened = vcs.open_repo(repo, pinned=pinned)
    assert opened.resolve("HEAD") is not None
    repo.rename(tmp_path / "moved")
    make_repo(repo)
    with pytest.raises(WorkTreeChanged, match=r"^work_dir .* is not the one serve started with"):
        opened.git("status", "--porcelain")
    with pytest.raises(WorkTreeChanged, match=r"^work_dir .* is not the one serve started with"):
        opened.resolve("HEAD")
    pinned.close()
