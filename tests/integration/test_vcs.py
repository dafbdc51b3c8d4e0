"""The hardened git layer against real repositories, poisoned ones included."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agent_runner import vcs
from agent_runner.errors import GitError
from agent_runner.supervisor.dirty import secure_tree
from tests.fakes import RecordedEvents
from tests.integration.conftest import git

pytestmark = pytest.mark.usefixtures("isolated_git")


def stash_after_a_failed_round(work_dir: Path, state_dir: Path, events: RecordedEvents) -> Any:
    """secure_tree as the loop calls it after round 1 ended in an error, dirty_action stash."""
    return secure_tree(
        work_dir,
        round_no=1,
        exit_cause="error",
        head_before=None,
        dirty_action="stash",
        idempotency_s=60.0,
        state_dir=state_dir,
        emit=events,
        now=1_800_000_000.0,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "tracked.txt").write_text("v1\n")
    git(path, "add", "tracked.txt")
    git(path, "commit", "-q", "-m", "initial")
    return path


# --- run_git --------------------------------------------------------------------------


def test_run_git_returns_stdout(repo: Path) -> None:
    assert vcs.run_git(repo, "rev-parse", "--abbrev-ref", "HEAD") == b"main\n"


def test_run_git_failure_is_one_line_naming_the_command(repo: Path) -> None:
    with pytest.raises(GitError) as caught:
        vcs.run_git(repo, "rev-parse", "--verify", "no-such-branch")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("git rev-parse failed (exit 128): fatal:")


def test_run_git_outside_a_directory_is_a_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="cannot run git"):
        vcs.run_git(tmp_path / "missing", "status")


def test_run_git_times_out_and_kills_git(repo: Path) -> None:
    fifo = repo / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    # Opening a FIFO nobody writes to blocks forever.
    with pytest.raises(GitError, match=r"timed out after 0\.5s"):
        vcs.run_git(repo, "hash-object", "fifo", timeout_s=0.5)
    assert time.monotonic() - started < 10


def test_inherited_git_variables_do_not_redirect_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.fsmonitor'='touch /tmp/x'")
    assert (
        vcs.head_sha(repo)
        == git(repo, "--git-dir", str(repo / ".git"), "rev-parse", "HEAD").strip()
    )


def test_caller_env_cannot_undo_the_hardening(repo: Path) -> None:
    out = vcs.run_git(repo, "config", "core.hooksPath", env={"GIT_CONFIG_NOSYSTEM": "0"})
    assert out == b"/dev/null\n"


# --- queries ----------------------------------------------------------------------------


def test_is_work_tree(repo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert vcs.is_work_tree(repo)
    assert vcs.is_work_tree(repo / ".")
    assert not vcs.is_work_tree(plain)
    assert not vcs.is_work_tree(tmp_path / "missing")


def test_head_sha_is_none_before_the_first_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "fresh")
    assert vcs.head_sha(tmp_path / "fresh") is None


def test_head_sha_follows_a_detached_head(repo: Path) -> None:
    sha = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "--detach")
    assert vcs.head_sha(repo) == sha


def test_status_lists_untracked_and_odd_names_but_not_ignored(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "debug.log").write_text("x")
    (repo / "tracked.txt").write_text("v2\n")
    (repo / "dir").mkdir()
    (repo / "dir" / "with space.txt").write_text("x")
    (repo / "new\nline").write_text("x")
    Path(os.fsdecode(bytes(repo) + b"/bad-\xff")).write_text("x")
    (repo / "ünï.txt").write_text("x")
    git(repo, "add", "tracked.txt")
    git(repo, "mv", "tracked.txt", "renamed.txt")

    entries = {e.path: e.xy for e in vcs.status(vcs.open_repo(repo))}
    assert entries == {
        ".gitignore": "??",
        "dir/with space.txt": "??",
        "new\nline": "??",
        os.fsdecode(b"bad-\xff"): "??",
        "ünï.txt": "??",
        "renamed.txt": "A ",
        "tracked.txt": "D ",
    }


def test_operation_in_progress(repo: Path) -> None:
    assert vcs.operation_in_progress(vcs.open_repo(repo)) is None
    (repo / ".git" / "CHERRY_PICK_HEAD").write_text("0" * 40 + "\n")
    assert vcs.operation_in_progress(vcs.open_repo(repo)) == "cherry-pick"


def test_snapshot_tree_matches_what_git_add_would_stage(repo: Path, tmp_path: Path) -> None:
    (repo / "tracked.txt").write_text("v2\n")
    (repo / "new.txt").write_text("n\n")
    (repo / "agent-runner.toml").write_text("x\n")
    tree = vcs.snapshot_tree(vcs.open_repo(repo), vcs.all_but(["agent-runner.toml"]))
    assert set(vcs.tree_entries(vcs.open_repo(repo), tree)) == {"tracked.txt", "new.txt"}
    assert (
        git(repo, "status", "--porcelain") == " M tracked.txt\n?? agent-runner.toml\n?? new.txt\n"
    )
    assert not list((repo / ".git").glob("agent-runner-snapshot-*"))


def test_a_stash_commit_changes_nothing_until_it_is_stored_and_cleaned(repo: Path) -> None:
    (repo / "tracked.txt").write_text("v2\n")
    (repo / "new.txt").write_text("n\n")
    opened = vcs.open_repo(repo)
    before = git(repo, "status", "--porcelain")
    with vcs.snapshot(opened, ["."]) as snap:
        sha = vcs.stash_commit(opened, snap, "round 1")
        assert git(repo, "status", "--porcelain") == before
        assert git(repo, "stash", "list") == ""
        held = vcs.tree_entries(opened, f"{sha}^{{tree}}")
        assert vcs.first_not_held(opened, held, ["new.txt", "tracked.txt"]) is None
        vcs.store_stash(opened, sha, "round 1")
        assert git(repo, "stash", "list", "--format=%H %gs") == f"{sha} On main: round 1\n"
        vcs.clean_to_head(opened, snap, held, [])
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "show", f"{sha}:new.txt") == "n\n"
    assert git(repo, "show", f"{sha}^2:tracked.txt") == "v1\n", "the index as it was"


def test_first_not_held_compares_the_disk_not_what_git_says(repo: Path) -> None:
    (repo / "new.txt").write_text("n\n")
    (repo / "link").symlink_to("tracked.txt")
    opened = vcs.open_repo(repo)
    tree = vcs.snapshot_tree(opened, ["."])
    held = vcs.tree_entries(opened, tree)
    assert vcs.first_not_held(opened, held, ["link", "new.txt"]) is None
    (repo / "new.txt").write_text("changed after the snapshot\n")
    assert vcs.first_not_held(opened, held, ["link", "new.txt"]) == "new.txt"
    (repo / "new.txt").write_text("n\n")
    (repo / "new.txt").chmod(0o755)
    assert vcs.first_not_held(opened, held, ["new.txt"]) == "new.txt", "the mode counts"
    (repo / "link").unlink()
    (repo / "link").symlink_to("elsewhere")
    assert vcs.first_not_held(opened, held, ["link"]) == "link"
    (repo / "link").unlink()
    assert vcs.first_not_held(opened, held, ["link"]) == "link", "gone from the disk"


def test_literal_pathspecs_match_glob_characters_literally(repo: Path) -> None:
    (repo / "a*b").write_text("1")
    (repo / "aXb").write_text("2")
    sha = vcs.commit(vcs.open_repo(repo), "only the star", vcs.literal_pathspecs(["a*b"]))
    assert set(vcs.tree_entries(vcs.open_repo(repo), sha)) == {"tracked.txt", "a*b"}
    assert (repo / "aXb").exists()


def test_index_lock_holders_sees_an_open_descriptor(repo: Path) -> None:
    lock = repo / ".git" / "index.lock"
    with lock.open("wb"):
        assert vcs.index_lock_holders(lock) == [os.getpid()]
    assert vcs.index_lock_holders(lock) == []


# --- a poisoned repository runs nothing ---------------------------------------------------

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
    "post-rewrite",
)


# Every file of the work under every filter driver the poison defines.
ALL_FILTERED = "* filter=evil diff=evil merge=evil\n*.txt filter=a=b\n*.bin filter=proc\n"
# Filters only on files committed before the poison (racily clean), none on the round's work:
# work under a filter is never stashed or committed at all.
RACY_FILTERED = (
    "* diff=evil merge=evil\nracy.* filter=evil\n*.eq filter=a=b\n*.proc filter=proc\n"
    "*.inc filter=inc\n"
)
RACY_FILES = ("racy.txt", "racy.eq", "racy.proc", "racy.inc")


def poison(repo: Path, markers: Path, attributes: str = ALL_FILTERED) -> list[str]:
    """Point every repo-controlled program git knows at a script that leaves a marker."""
    markers.mkdir(exist_ok=True)
    bin_dir = repo.parent / "evil"
    bin_dir.mkdir(exist_ok=True)
    hooks_dir = bin_dir / "hooks"
    hooks_dir.mkdir(exist_ok=True)
    names: list[str] = []

    def script(name: str) -> str:
        path = bin_dir / name
        # Filters and textconv must still pass data through, or git could fail before the marker.
        path.write_text(f'#!/bin/sh\ntouch "{markers}/{name}"\ncat\n')
        path.chmod(0o755)
        names.append(name)
        return str(path)

    # Tracked, so that a stash cannot carry the attributes away with the work.
    (repo / ".gitattributes").write_text(attributes)
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    for hook in HOOKS:
        for where in (hooks_dir, repo / ".git" / "hooks"):
            target = where / hook
            target.write_text(f'#!/bin/sh\ntouch "{markers}/hook-{hook}"\n')
            target.chmod(0o755)
    config = f"""
[core]
    fsmonitor = {script("fsmonitor")}
    hooksPath = {hooks_dir}
    pager = {script("core-pager")}
    editor = {script("editor")}
    sshCommand = {script("ssh")}
    askPass = {script("askpass")}
[sequence]
    editor = {script("sequence-editor")}
[pager]
    status = {script("pager-status")}
    stash = {script("pager-stash")}
[alias]
    status = !{script("alias-status")}
    stash = !{script("alias-stash")}
    st = !{script("alias-st")}
[diff]
    external = {script("diff-external")}
[diff "evil"]
    textconv = {script("textconv")}
    command = {script("diff-command")}
[merge "evil"]
    driver = {script("merge-driver")}
[filter "evil"]
    clean = {script("filter-clean")}
    smudge = {script("filter-smudge")}
    required = true
[filter "proc"]
    process = {script("filter-process")}
    required = true
[filter "a=b"]
    clean = {script("filter-equals-clean")}
    smudge = {script("filter-equals-smudge")}
[credential]
    helper = !{script("credential")}
[gpg]
    program = {script("gpg")}
[commit]
    gpgSign = true
[gc]
    auto = 1
    autoDetach = false
"""
    with (repo / ".git" / "config").open("a") as f:
        f.write(config)
    return names


def test_the_poison_is_live_for_unhardened_git(repo: Path, tmp_path: Path) -> None:
    poison(repo, tmp_path / "markers")
    (repo / "tracked.txt").write_text("v2\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, capture_output=True, check=False)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-m", "x"],
        cwd=repo,
        capture_output=True,
        check=False,
    )
    fired = {p.name for p in (tmp_path / "markers").iterdir()}
    assert {"fsmonitor", "filter-clean", "hook-pre-commit"} <= fired


def commit_racy_files(repo: Path) -> None:
    for name in RACY_FILES:
        (repo / name).write_text("committed just before the poison: racily clean\n")
    git(repo, "add", *RACY_FILES)
    git(repo, "commit", "-q", "-m", "racy")


def test_a_poisoned_config_runs_nothing_through_a_stash_and_commit_cycle(
    repo: Path, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    commit_racy_files(repo)
    poison(repo, markers, RACY_FILTERED)
    events = RecordedEvents()
    common: dict[str, Any] = {
        "dirty_action": "commit",
        "idempotency_s": 60.0,
        "state_dir": tmp_path / "state",
        "emit": events,
        "now": 1_800_000_000.0,
    }
    (repo / "tracked.txt").write_text("round 1\n")
    (repo / "new.txt").write_text("new\n")
    stashed = secure_tree(repo, round_no=1, exit_cause="error", head_before=None, **common)
    (repo / "tracked.txt").write_text("round 2\n")
    (repo / "other.bin").write_bytes(b"\x00\x01")
    head = vcs.head_sha(repo)
    committed = secure_tree(repo, round_no=2, exit_cause="clean", head_before=head, **common)

    assert sorted(p.name for p in markers.iterdir()) == []
    assert events.of("dirty_action_failed") == []
    assert stashed.action == "stash"
    assert committed.action == "commit"
    assert git(repo, "cat-file", "blob", f"{committed.ref}:tracked.txt") == "round 2\n"
    assert git(repo, "cat-file", "blob", f"{stashed.ref}:new.txt") == "new\n"


def test_poisoned_queries_run_nothing(repo: Path, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    poison(repo, markers)
    (repo / "tracked.txt").write_text("v2\n")
    assert vcs.is_work_tree(repo)
    vcs.status(vcs.open_repo(repo))
    vcs.head_sha(repo)
    vcs.operation_in_progress(vcs.open_repo(repo))
    vcs.snapshot_tree(vcs.open_repo(repo), ["."])
    assert list(markers.iterdir()) == []


def test_poisoned_filters_on_the_work_itself_refuse_the_stash_and_run_nothing(
    repo: Path, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    poison(repo, markers)
    (repo / "tracked.txt").write_text("round 1\n")
    events = RecordedEvents()
    report = stash_after_a_failed_round(repo, tmp_path / "state", events)
    assert list(markers.iterdir()) == []
    assert report.action == "failed"
    assert "tracked.txt" in events.of("dirty_action_failed")[0]["reason"]
    assert (repo / "tracked.txt").read_text() == "round 1\n"


# --- a poisoned repository that reaches beyond the work dir ---------------------------------


def fingerprint(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file and link under `root`, by content, except the top-level entries in `skip`."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in skip:
            continue
        if path.is_symlink():
            found[str(rel)] = os.fsencode(os.readlink(path))
        elif path.is_file():
            found[str(rel)] = path.read_bytes()
    return found


def evil_script(tmp_path: Path, markers: Path, name: str) -> str:
    path = tmp_path / "evil" / name
    path.write_text(f'#!/bin/sh\ntouch "{markers}/{name}"\ncat\n')
    path.chmod(0o755)
    return str(path)


def add_submodule(repo: Path, tmp_path: Path) -> None:
    source = tmp_path / "subsrc"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    (source / "lib.txt").write_text("lib\n")
    (source / ".gitattributes").write_text("* filter=subevil\n")
    git(source, "add", ".")
    git(source, "commit", "-q", "-m", "lib")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "sub")
    # In-repo .gitmodules asking git to look inside, whatever the config says.
    git(repo, "config", "--file", ".gitmodules", "submodule.sub.ignore", "none")
    git(repo, "add", ".gitmodules")
    git(repo, "commit", "-q", "-m", "submodule")


def poison_submodule(repo: Path, tmp_path: Path, markers: Path) -> None:
    sub = repo / "sub"
    for key, name in (
        ("filter.subevil.clean", "sub-filter-clean"),
        ("filter.subevil.smudge", "sub-filter-smudge"),
        ("filter.subevil.process", "sub-filter-process"),
        ("core.fsmonitor", "sub-fsmonitor"),
        ("core.pager", "sub-pager"),
    ):
        git(sub, "config", key, evil_script(tmp_path, markers, name))
    git(sub, "config", "filter.subevil.required", "true")
    git(sub, "config", "core.hooksPath", str(tmp_path / "evil" / "hooks"))
    (sub / "lib.txt").write_text("work inside the submodule\n")  # status would look inside


def include_poison(repo: Path, tmp_path: Path, markers: Path) -> None:
    included = tmp_path / "included.cfg"
    included.write_text(
        f'[filter "inc"]\n\tclean = {evil_script(tmp_path, markers, "inc-clean")}\n'
        f"\tsmudge = {evil_script(tmp_path, markers, 'inc-smudge')}\n\trequired = true\n"
        f"[core]\n\tfsmonitor = {evil_script(tmp_path, markers, 'inc-fsmonitor')}\n"
    )
    git(repo, "config", "include.path", str(included))


def make_victim(tmp_path: Path, markers: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    git(victim, "init", "-q", "-b", "main")
    (victim / "own.txt").write_text("v1\n")
    git(victim, "add", "own.txt")
    git(victim, "commit", "-q", "-m", "victim")
    (victim / "own.txt").write_text("the victim's uncommitted work\n")
    git(victim, "config", "core.fsmonitor", evil_script(tmp_path, markers, "victim-fsmonitor"))
    return victim


def worktree_elsewhere(repo: Path, tmp_path: Path, markers: Path) -> None:
    git(repo, "config", "core.worktree", str(make_victim(tmp_path, markers)))


def gitdir_elsewhere(repo: Path, tmp_path: Path, markers: Path) -> None:
    victim = make_victim(tmp_path, markers)
    shutil.rmtree(repo / ".git")
    (repo / ".git").write_text(f"gitdir: {victim / '.git'}\n")


@pytest.mark.parametrize(
    ("redirect", "outcome"),
    [
        (poison_submodule, "secured"),
        (include_poison, "secured"),
        (worktree_elsewhere, "core.worktree"),
        (gitdir_elsewhere, "gitdir"),
    ],
)
def test_a_poisoned_repository_runs_nothing_and_touches_nothing_outside_the_work_dir(
    repo: Path, tmp_path: Path, redirect: Any, outcome: str
) -> None:
    markers = tmp_path / "markers"
    commit_racy_files(repo)
    if redirect is poison_submodule:
        add_submodule(repo, tmp_path)  # before the poison: test-side git is not hardened
    poison(repo, markers, RACY_FILTERED)
    redirect(repo, tmp_path, markers)
    outside = fingerprint(tmp_path, skip=("repo", "state"))
    events = RecordedEvents()
    common: dict[str, Any] = {
        "dirty_action": "commit",
        "idempotency_s": 60.0,
        "state_dir": tmp_path / "state",
        "emit": events,
        "now": 1_800_000_000.0,
    }
    (repo / "tracked.txt").write_text("round 1\n")
    (repo / "new.txt").write_text("new\n")
    stashed = secure_tree(repo, round_no=1, exit_cause="error", head_before=None, **common)
    (repo / "tracked.txt").write_text("round 2\n")
    committed = secure_tree(repo, round_no=2, exit_cause="clean", head_before=None, **common)

    assert sorted(p.name for p in markers.iterdir()) == []
    assert fingerprint(tmp_path, skip=("repo", "state")) == outside
    if outcome == "secured":
        assert events.of("dirty_action_failed") == []
        assert (stashed.action, committed.action) == ("stash", "commit")
    else:
        assert (stashed.action, committed.action) == ("failed", "failed")
        reasons = [e["reason"] for e in events.of("dirty_action_failed")]
        assert all(outcome in reason for reason in reasons), reasons
        assert (repo / "new.txt").read_text() == "new\n"
        assert (repo / "tracked.txt").read_text() == "round 2\n"
    if redirect is poison_submodule:
        assert (repo / "sub" / "lib.txt").read_text() == "work inside the submodule\n"


# --- the repository the supervisor acts on is the one under work_dir -----------------------


def make_other(tmp_path: Path) -> Path:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "x.txt").write_text("x\n")
    git(other, "add", "x.txt")
    git(other, "commit", "-q", "-m", "other")
    return other


def symlinked_git_dir(repo: Path, other: Path) -> None:
    shutil.rmtree(repo / ".git")
    (repo / ".git").symlink_to(other / ".git")


def common_dir_elsewhere(repo: Path, other: Path) -> None:
    (repo / ".git" / "commondir").write_text(f"{other / '.git'}\n")


def separate_git_dir(repo: Path, other: Path) -> None:
    shutil.move(repo / ".git", other / "moved.git")
    (repo / ".git").write_text(f"gitdir: {other / 'moved.git'}\n")


def bare_config(repo: Path, other: Path) -> None:
    git(repo, "config", "core.bare", "true")


def own_worktree_setting(repo: Path, other: Path) -> None:
    git(repo, "config", "core.worktree", str(repo))


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        (symlinked_git_dir, "not the repository in"),
        (common_dir_elsewhere, "not the repository in"),
        (separate_git_dir, "not the repository in"),
        (bare_config, "core.bare"),
        (own_worktree_setting, "core.worktree"),
    ],
)
def test_open_repo_refuses_a_repository_redirected_away_from_work_dir(
    repo: Path, tmp_path: Path, layout: Any, reason: str
) -> None:
    layout(repo, make_other(tmp_path))
    with pytest.raises(GitError, match=reason):
        vcs.open_repo(repo)


def test_open_repo_refuses_a_broken_git_dir_inside_another_repository(tmp_path: Path) -> None:
    outer = make_other(tmp_path)
    inner = outer / "project"
    inner.mkdir()
    git(inner, "init", "-q")
    (inner / ".git" / "HEAD").write_text("garbage\n")  # git now walks up to `outer`
    assert git(inner, "rev-parse", "--show-toplevel").strip() == str(outer)
    with pytest.raises(GitError, match="does not recognise"):
        vcs.open_repo(inner)


def test_open_repo_accepts_a_subdirectory_and_a_linked_worktree(repo: Path, tmp_path: Path) -> None:
    (repo / "sub").mkdir()
    assert vcs.open_repo(repo / "sub").top == repo
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    opened = vcs.open_repo(linked)
    assert opened.top == linked
    assert opened.git_dir == repo / ".git" / "worktrees" / "linked"


def test_a_linked_worktree_is_stashed_without_touching_the_main_one(
    repo: Path, tmp_path: Path
) -> None:
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    (repo / "tracked.txt").write_text("main's own work\n")
    (linked / "tracked.txt").write_text("linked work\n")
    (linked / "new.txt").write_text("new\n")
    events = RecordedEvents()
    report = stash_after_a_failed_round(linked, tmp_path / "state", events)
    assert events.of("dirty_action_failed") == []
    assert report.action == "stash"
    assert git(linked, "status", "--porcelain") == ""
    assert (repo / "tracked.txt").read_text() == "main's own work\n"
    assert git(repo, "cat-file", "blob", f"{report.ref}:tracked.txt") == "linked work\n"


def test_a_linked_worktree_of_a_bare_repository_is_stashed(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    linked = tmp_path / "linked"
    git(bare, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "new.txt").write_text("new\n")
    events = RecordedEvents()
    report = stash_after_a_failed_round(linked, tmp_path / "state", events)
    assert events.of("dirty_action_failed") == []
    assert report.action == "stash"
    assert git(bare, "cat-file", "blob", f"{report.ref}:new.txt") == "new\n"


def test_a_forged_linked_worktree_is_refused(repo: Path, tmp_path: Path) -> None:
    other = make_other(tmp_path)
    git(other, "worktree", "add", "-q", "-b", "side", str(tmp_path / "legit"))
    # The registration in `other` points back at `legit`, not at this repository.
    shutil.rmtree(repo / ".git")
    (repo / ".git").write_text(f"gitdir: {other / '.git' / 'worktrees' / 'legit'}\n")
    with pytest.raises(GitError, match="not the repository in"):
        vcs.open_repo(repo)
