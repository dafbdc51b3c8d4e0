"""Every shape of work a stash must hold: it is proven before the tree is cleaned, the
documented recovery gives it back, and a failure leaves the tree as the agent left it."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_runner import vcs
from agent_runner.supervisor import dirty
from tests.fakes import RecordedEvents
from tests.integration.conftest import Project, git
from tests.integration.test_dirty_tree import make_repo, porcelain, secure, stash_shas
from tests.integration.test_vcs import add_submodule

pytestmark = pytest.mark.usefixtures("isolated_git")


def listing(root: Path) -> dict[str, tuple[str, str]]:
    """Every file and symlink under `root` (outside .git): its mode or target, and content.

    Folders are not listed: git keeps none, so an emptied one is not work.
    """
    found: dict[str, tuple[str, str]] = {}
    for folder, dirs, files in os.walk(root):  # never descends into a symlinked folder
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in [*dirs, *files]:
            path = Path(folder, name)
            info = path.lstat()
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                found[rel] = (oct(info.st_mode & 0o777), path.read_text(errors="replace"))
    return found


def file_to_folder(repo: Path, _outside: Path) -> None:
    (repo / "tracked.txt").unlink()
    (repo / "tracked.txt").mkdir()
    (repo / "tracked.txt" / "new.txt").write_text("inside the new folder\n")


def folder_to_file(repo: Path, _outside: Path) -> None:
    (repo / "docs" / "guide.md").unlink()
    (repo / "docs").rmdir()
    (repo / "docs").write_text("now a file\n")


def file_to_symlink_outside(repo: Path, outside: Path) -> None:
    (repo / "tracked.txt").unlink()
    (repo / "tracked.txt").symlink_to(outside / "secret.txt")


def folder_to_symlink_outside(repo: Path, outside: Path) -> None:
    (repo / "docs" / "guide.md").unlink()
    (repo / "docs").rmdir()
    (repo / "docs").symlink_to(outside)


def symlink_to_file(repo: Path, _outside: Path) -> None:
    (repo / "link").unlink()
    (repo / "link").write_text("was a link\n")


def symlink_retargeted(repo: Path, _outside: Path) -> None:
    (repo / "link").unlink()
    (repo / "link").symlink_to("docs/guide.md")


def mode_only(repo: Path, _outside: Path) -> None:
    (repo / "run.sh").chmod(0o644)
    (repo / "tracked.txt").chmod(0o755)


def staged_and_changed_again(repo: Path, _outside: Path) -> None:
    (repo / "tracked.txt").write_text("staged\n")
    git(repo, "add", "tracked.txt")
    (repo / "tracked.txt").write_text("changed after staging\n")
    (repo / "added.txt").write_text("staged new file\n")
    git(repo, "add", "added.txt")


def deleted_and_untracked(repo: Path, _outside: Path) -> None:
    (repo / "docs" / "guide.md").unlink()
    (repo / "deep" / "er").mkdir(parents=True)
    (repo / "deep" / "er" / "new.bin").write_bytes(bytes(range(256)))


SHAPES: list[Callable[[Path, Path], None]] = [
    file_to_folder,
    folder_to_file,
    file_to_symlink_outside,
    folder_to_symlink_outside,
    symlink_to_file,
    symlink_retargeted,
    mode_only,
    staged_and_changed_again,
    deleted_and_untracked,
]


def shaped_repo(tmp_path: Path) -> tuple[Path, Path]:
    repo = make_repo(tmp_path)
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("guide\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("tracked.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "shapes")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the repository's\n")
    return repo, outside


@pytest.mark.parametrize("shape", SHAPES, ids=lambda f: f.__name__)
def test_every_shape_is_stashed_whole_and_comes_back_with_stash_apply(
    tmp_path: Path, shape: Callable[[Path, Path], None]
) -> None:
    repo, outside = shaped_repo(tmp_path)
    outside_before = listing(outside)
    shape(repo, outside)
    left = listing(repo)
    events = RecordedEvents()
    report = secure(repo, events)

    assert events.of("dirty_action_failed") == []
    assert report.action == "stash"
    assert porcelain(repo) == "", "the tree is clean once the stash is proven"
    assert listing(outside) == outside_before, "nothing outside the repository was touched"
    assert stash_shas(repo) == [report.ref]

    applied = git(repo, "stash", "apply", report.ref, check=False)
    assert "conflict" not in applied.lower()
    assert listing(repo) == left, "git stash apply gives back every file as the agent left it"
    git(repo, "add", "-A")
    assert git(repo, "write-tree") == git(repo, "rev-parse", f"{report.ref}^{{tree}}")


def test_with_index_restores_what_the_agent_had_staged(tmp_path: Path) -> None:
    repo, outside = shaped_repo(tmp_path)
    staged_and_changed_again(repo, outside)
    staged = git(repo, "diff", "--cached", "--name-status")
    report = secure(repo, RecordedEvents())
    assert porcelain(repo) == ""
    git(repo, "stash", "apply", "--index", report.ref)
    assert git(repo, "diff", "--cached", "--name-status") == staged
    assert (repo / "tracked.txt").read_text() == "changed after staging\n"
    assert git(repo, "show", ":tracked.txt") == "staged\n"


def ignored_file_in_a_new_folder(repo: Path, outside: Path) -> None:
    file_to_folder(repo, outside)
    # Turning the folder back into a file would delete this, and git counts it as expendable.
    (repo / "tracked.txt" / "cache.ignored").write_text("ignored, never stashed\n")


def untracked_and_ignored_in_place(repo: Path, _outside: Path) -> None:
    git(repo, "rm", "-q", "--cached", "tracked.txt")
    (repo / ".gitignore").write_text("*.ignored\ntracked.txt\n")
    (repo / "tracked.txt").write_text("the agent's own version, now ignored\n")


@pytest.mark.parametrize(
    ("shape", "stored", "reason"),
    [
        # Held by the stash, but the folder holding it cannot become a file again.
        (ignored_file_in_a_new_folder, True, "which git ignores and the stash does not hold"),
        # An ignored file the stash cannot hold at all: proven missing before anything is stored.
        (untracked_and_ignored_in_place, False, "does not hold tracked.txt as it is on disk"),
    ],
    ids=["ignored_file_in_a_new_folder", "untracked_and_ignored_in_place"],
)
def test_a_tree_that_cannot_be_put_back_is_left_exactly_as_the_agent_left_it(
    tmp_path: Path, shape: Callable[[Path, Path], None], stored: bool, reason: str
) -> None:
    repo, outside = shaped_repo(tmp_path)
    shape(repo, outside)
    left = listing(repo)
    events = RecordedEvents()
    report = secure(repo, events)

    assert report.action == "failed"
    assert reason in events.of("dirty_action_failed")[0]["reason"]
    assert listing(repo) == left
    if stored:
        assert events.kinds() == ["dirty_detected", "orphan_stashed", "dirty_action_failed"]
        assert stash_shas(repo) == [report.ref], "what it does hold is also safe in the stash"
    else:
        assert events.kinds() == ["dirty_detected", "dirty_action_failed"]
        assert stash_shas(repo) == []


def test_a_stash_that_does_not_hold_the_work_is_never_stored_and_cleans_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, outside = shaped_repo(tmp_path)
    file_to_folder(repo, outside)
    left = listing(repo)
    real_entries = vcs.tree_entries

    def losing_a_file(opened: vcs.Repo, treeish: str) -> dict[str, vcs.TreeEntry]:
        entries = real_entries(opened, treeish)
        entries.pop("tracked.txt/new.txt", None)
        return entries

    monkeypatch.setattr(dirty.vcs, "tree_entries", losing_a_file)
    events = RecordedEvents()
    report = secure(repo, events)

    assert report.action == "failed"
    assert events.kinds() == ["dirty_detected", "dirty_action_failed"]
    reason = events.of("dirty_action_failed")[0]["reason"]
    assert "does not hold tracked.txt/new.txt" in reason
    assert "nothing stored or cleaned" in reason
    assert listing(repo) == left
    assert stash_shas(repo) == []


def test_a_moved_submodule_pointer_is_left_exactly_where_the_agent_put_it(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    add_submodule(repo, tmp_path)
    sub = repo / "sub"
    (sub / "lib.txt").write_text("a new commit inside the submodule\n")
    git(sub, "add", "lib.txt")
    git(sub, "commit", "-q", "-m", "inside")
    moved_to = git(sub, "rev-parse", "HEAD").strip()
    git(repo, "add", "sub")  # the pointer change, staged
    (repo / "tracked.txt").write_text("v2\n")
    events = RecordedEvents()
    report = secure(repo, events)

    assert events.of("dirty_action_failed") == []
    assert report.action == "stash"
    assert git(repo, "show", f"{report.ref}:tracked.txt") == "v2\n"
    assert (repo / "tracked.txt").read_text() == "v1\n"
    assert git(repo, "diff", "--cached", "--name-only") == "sub\n", "still staged"
    assert git(repo, "ls-files", "-s", "sub").split()[1] == moved_to
    assert git(sub, "rev-parse", "HEAD").strip() == moved_to
    assert (sub / "lib.txt").read_text() == "a new commit inside the submodule\n"


DOCS = Path(__file__).parents[2] / "docs" / "dirty-tree.md"


def recovery_commands() -> list[str]:
    """The commands of the docs' "How to get your work back", in order, comments dropped."""
    section = DOCS.read_text().split("## How to get your work back", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```sh\n")[1:]
    lines = [line for block in blocks for line in block.split("```", 1)[0].splitlines()]
    return [line.split("  #", 1)[0].strip() for line in lines if line.strip()]


def test_every_recovery_command_in_the_docs_gives_the_work_back(project: Project) -> None:
    work = project.work_dir
    (work / "README").write_text("readme\n")
    (work / "run.sh").write_text("#!/bin/sh\n")
    git(work, "add", "README", "run.sh")
    git(work, "commit", "-q", "-m", "files")
    shapes = (
        "rm README && mkdir README && echo new > README/new.txt && ln -s README/new.txt link"
        " && chmod +x run.sh && echo staged > staged.txt && git add staged.txt"
        " && echo unstaged >> staged.txt; exit 1"
    )
    project.write_config(["sh", "-c", shapes], runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    left_by_agent = {
        "README/new.txt": ("0o644", "new\n"),
        "link": ("link", "README/new.txt"),
        "run.sh": ("0o755", "#!/bin/sh\n"),
        "staged.txt": ("0o644", "staged\nunstaged\n"),
    }
    ref = project.events("orphan_stashed")[0]["ref"]
    branch = git(work, "rev-parse", "--abbrev-ref", "HEAD").strip()
    assert porcelain(work) == ""

    def reset_tree() -> None:
        git(work, "checkout", "-q", "-f", branch)
        git(work, "reset", "-q", "--hard")
        git(work, "clean", "-q", "-fd")

    def agent_work() -> dict[str, tuple[str, str]]:
        found = listing(work)
        return {path: found[path] for path in left_by_agent if path in found}

    def run(command: str) -> str:
        argv = shlex.split(command.replace("<ref>", ref).replace("<name>", "rescued"))
        if argv[0] == "agent-runner":
            done = project.cli(*argv[1:])
            assert done.returncode == 0, done.stderr
            return done.stdout
        return git(work, *argv[1:])

    checks = {
        "agent-runner rescue": lambda out: (
            f"    1  stash   {ref[:12]}  error" in out and "README/new.txt" in out
        ),
        "agent-runner rescue apply <ref>": lambda _out: agent_work() == left_by_agent,
        "agent-runner rescue branch <ref> <name>": lambda _out: (
            git(work, "show", "rescued:README/new.txt") == "new\n"
            and git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == branch
            and git(work, "ls-tree", "rescued", "link").startswith("120000")
        ),
        "agent-runner events --kind orphan_stashed": lambda out: ref in out,
        "git stash list": lambda out: f"On {branch}: agent-runner round 1 (error)" in out,
        "git stash show --stat <ref>": lambda out: "README/new.txt" in out and "link" in out,
        "git stash apply <ref>": lambda _out: agent_work() == left_by_agent,
        "git stash apply --index <ref>": lambda _out: (
            agent_work() == left_by_agent and git(work, "show", ":staged.txt") == "staged\n"
        ),
        "git stash branch <name> <ref>": lambda _out: (
            agent_work() == left_by_agent
            and git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "rescued"
        ),
        'git stash store -m "agent-runner round 42" <ref>': lambda _out: (
            git(work, "stash", "list", "--format=%H").split() == [ref]
        ),
    }
    commands = recovery_commands()
    assert commands == list(checks), "the docs and this test name the same commands"
    for command in commands:
        if command.startswith(("git stash apply", "git stash branch", "agent-runner rescue ")):
            reset_tree()
        if command.startswith("git stash branch"):
            git(work, "branch", "-q", "-D", "rescued")  # made by `rescue branch` above
        if command.startswith("git stash store"):
            git(work, "stash", "drop", "-q")
            assert git(work, "stash", "list") == ""
        assert checks[command](run(command)), command
