"""serve's own git dies with serve, and what a killed git leaves goes only when provably stale."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner import vcs
from tests.integration.conftest import REPO, git

RUN_GIT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from agent_runner.vcs import run_git
    run_git(Path(sys.argv[1]), *sys.argv[2:])
    """
)


@pytest.fixture
def repo(tmp_path: Path, isolated_git: None) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q")
    (work / "a.txt").write_text("a\n")
    git(work, "add", "a.txt")
    git(work, "commit", "-q", "-m", "init")
    return work


def slow_git(tmp_path: Path, subcommand: str) -> tuple[dict[str, str], Path]:
    """A `git` first on PATH that, for `subcommand`, records its pid and hangs."""
    folder = tmp_path / "bin"
    folder.mkdir()
    record = tmp_path / "git.pid"
    script = folder / "git"
    script.write_text(
        f"""#!/bin/sh
case " $* " in *" {subcommand} "*) echo $$ > {record}; exec sleep 300;; esac
exec {shutil.which("git")} "$@"
"""
    )
    script.chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}, record


def wait_for(check: object, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def dead(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize(("args", "dies"), [(["stash", "list"], True), (["status"], False)])
def test_a_git_that_writes_dies_the_moment_serve_does(
    repo: Path, tmp_path: Path, args: list[str], dies: bool
) -> None:
    env, record = slow_git(tmp_path, args[0])
    serve = subprocess.Popen(
        [sys.executable, "-c", RUN_GIT, str(repo), *args], env={**os.environ, **env}
    )
    wait_for(record.exists, "git to start")
    helper = int(record.read_text())
    serve.kill()
    serve.wait()
    try:
        if dies:
            wait_for(lambda: dead(helper), "git to die with its parent")
        else:
            # Quick reads may finish on their own (a death signal costs each a full fork).
            time.sleep(0.5)
            assert not dead(helper)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(helper, signal.SIGKILL)


def leftovers(repo: Path) -> list[Path]:
    git_dir = repo / ".git"
    snapshot = git_dir / "agent-runner-snapshot-x1"
    snapshot.mkdir()
    (snapshot / "index").write_text("half an index")
    (git_dir / "index.lock").write_text("half a lock")
    pack = git_dir / "objects" / "pack"
    pack.mkdir(parents=True, exist_ok=True)
    (pack / "tmp_pack_Ab12").write_text("half a pack")
    loose = git_dir / "objects" / "ab"
    loose.mkdir(exist_ok=True)
    (loose / "tmp_obj_Cd34").write_text("half an object")
    return [snapshot, git_dir / "index.lock", pack / "tmp_pack_Ab12", loose / "tmp_obj_Cd34"]


def test_what_a_killed_git_left_is_removed_when_nobody_uses_the_repository(repo: Path) -> None:
    left = leftovers(repo)
    removed = vcs.clear_leftovers(vcs.open_repo(repo))
    assert sorted(removed) == sorted(left)
    assert not any(p.exists() for p in left)
    assert git(repo, "status", "--porcelain") == ""
    assert vcs.clear_leftovers(vcs.open_repo(repo)) == []


@pytest.fixture
def holder(repo: Path) -> Iterator[subprocess.Popen[bytes]]:
    """An operator's process with index.lock open (as `git commit` waiting in its editor)."""
    lock = repo / ".git" / "index.lock"
    lock.write_text("")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; f = open(sys.argv[1]); print(1, flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline()
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


def test_an_index_lock_someone_holds_survives_but_our_temp_folders_go(
    repo: Path, holder: subprocess.Popen[bytes]
) -> None:
    left = leftovers(repo)
    removed = vcs.clear_leftovers(vcs.open_repo(repo))
    assert removed == [left[0]]
    assert all(p.exists() for p in left[1:])


def test_nothing_but_our_temp_folders_goes_while_a_git_runs_in_the_tree(
    repo: Path, tmp_path: Path
) -> None:
    left = leftovers(repo)
    fake = tmp_path / "git"  # any program named git counts: its cwd is in the tree
    shutil.copy("/bin/sleep", fake)
    running = subprocess.Popen([str(fake), "60"], cwd=repo)
    try:
        wait_for(lambda: Path(f"/proc/{running.pid}/comm").read_text().strip() == "git", "git")
        removed = vcs.clear_leftovers(vcs.open_repo(repo))
    finally:
        running.kill()
        running.wait()
    assert removed == [left[0]]
    assert all(p.exists() for p in left[1:])
