"""The single-instance lock between real processes: one holder, named; a lock file deleted,
replaced or orphaned cannot let a second serve in; stale records are ignored."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.errors import ExitCode, LockHeld
from agent_runner.supervisor.agent.strays import process_start_ticks
from agent_runner.supervisor.boot.instance import (
    Holder,
    InstanceLock,
    LockFileError,
    open_holder,
    read_holder,
)
from tests.fakes import RecordedEvents
from tests.integration.unprivileged import UNUSED_UID, owned_dir, run_as

REPO = Path(__file__).parent.parent.parent

HOLD_THE_LOCK = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    from agent_runner.supervisor.boot.instance import InstanceLock
    lock = InstanceLock(Path(sys.argv[1]), Path(sys.argv[2]))
    lock.acquire()
    # A program started the careless way: every descriptor this process has, inherited.
    child = subprocess.Popen(["sleep", "3600"], close_fds=False)
    print(child.pid, flush=True)
    time.sleep(3600)
    """
)


def lock(log_dir: Path) -> InstanceLock:
    """A lock on the project whose work tree is the log dir's parent."""
    return InstanceLock(log_dir, log_dir.parent)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


@pytest.fixture
def other_serve(log_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Another process holding the lock of `log_dir`, as a running serve would."""
    serve = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(log_dir), str(log_dir.parent)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    )
    assert serve.stdout is not None
    serve.child_pid = int(serve.stdout.readline())  # type: ignore[attr-defined]
    yield serve
    serve.kill()
    serve.wait()
    serve.stdout.close()
    os.kill(serve.child_pid, signal.SIGKILL)  # type: ignore[attr-defined]


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_second_serve_in_another_process_fails_naming_the_holder(
    log_dir: Path, other_serve: subprocess.Popen[bytes]
) -> None:
    with pytest.raises(LockHeld) as caught:
        lock(log_dir).acquire()
    assert (
        str(caught.value)
        == f"another serve (pid {other_serve.pid}) already supervises {log_dir.parent}"
    )
    assert caught.value.exit_code == ExitCode.LOCKED
    assert int(caught.value.exit_code) == 73


def test_a_deleted_log_dir_does_not_let_a_second_serve_in(
    log_dir: Path, other_serve: subprocess.Popen[bytes]
) -> None:
    shutil.rmtree(log_dir)
    log_dir.mkdir()
    with pytest.raises(LockHeld, match=f"pid {other_serve.pid}"):
        lock(log_dir).acquire()  # no serve.pid to read: the socket's peer names the holder


def test_another_log_dir_for_the_same_work_tree_is_refused_too(
    log_dir: Path, other_serve: subprocess.Popen[bytes]
) -> None:
    elsewhere = log_dir.parent / "other-logs"
    elsewhere.mkdir()
    with pytest.raises(LockHeld, match=f"pid {other_serve.pid}"):
        InstanceLock(elsewhere, log_dir.parent).acquire()


def test_a_killed_holder_frees_the_lock_even_while_its_child_inherited_everything(
    log_dir: Path, other_serve: subprocess.Popen[bytes]
) -> None:
    other_serve.kill()
    other_serve.wait()
    child = other_serve.child_pid  # type: ignore[attr-defined]
    assert Path(f"/proc/{child}").exists(), "the careless child outlives the holder"
    assert read_holder(log_dir) is None
    with lock(log_dir) as again:
        assert again.previous is not None
        assert again.previous.pid == other_serve.pid
        assert read_holder(log_dir) == Holder(os.getpid(), process_start_ticks(os.getpid()))


def test_read_holder_names_a_running_serve(
    log_dir: Path, other_serve: subprocess.Popen[bytes]
) -> None:
    assert read_holder(log_dir) == Holder(other_serve.pid, process_start_ticks(other_serve.pid))
    opened = open_holder(log_dir)
    assert opened is not None
    assert opened[0].pid == other_serve.pid
    os.close(opened[1])


def test_second_instance_in_the_same_process_is_refused(log_dir: Path) -> None:
    with lock(log_dir), pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
        lock(log_dir).acquire()


def test_stale_pid_file_of_a_dead_process_does_not_block(log_dir: Path) -> None:
    stale = {"pid": dead_pid(), "start_ticks": 12345}
    (log_dir / "serve.pid").write_text(json.dumps(stale))
    assert read_holder(log_dir) is None
    assert open_holder(log_dir) is None
    with lock(log_dir) as held:
        assert held.previous == Holder(stale["pid"], 12345)
        recorded = json.loads((log_dir / "serve.pid").read_text())
        assert recorded == {"pid": os.getpid(), "start_ticks": process_start_ticks(os.getpid())}


def test_release_removes_the_pid_file_and_frees_the_lock(log_dir: Path) -> None:
    held = lock(log_dir)
    held.acquire()
    assert held.release() == []
    assert not (log_dir / "serve.pid").exists()
    assert read_holder(log_dir) is None
    with lock(log_dir) as again:
        assert again.previous is None


def test_read_holder_rejects_a_recycled_pid(log_dir: Path) -> None:
    ticks = process_start_ticks(os.getpid())
    assert ticks is not None
    with lock(log_dir):
        (log_dir / "serve.pid").write_text(
            json.dumps({"pid": os.getpid(), "start_ticks": ticks - 1})
        )
        assert read_holder(log_dir) is None
        assert open_holder(log_dir) is None


def test_read_holder_requires_the_lock_to_be_held(log_dir: Path) -> None:
    record = {"pid": os.getpid(), "start_ticks": process_start_ticks(os.getpid())}
    (log_dir / "serve.pid").write_text(json.dumps(record))
    assert read_holder(log_dir) is None
    (log_dir / "serve.lock").touch()
    assert read_holder(log_dir) is None
    assert open_holder(log_dir) is None


@pytest.mark.parametrize("content", ["", "not json", "[1]", '{"pid": "1"}', '{"pid": -4}'])
def test_malformed_pid_file_is_ignored(log_dir: Path, content: str) -> None:
    (log_dir / "serve.pid").write_text(content)
    assert read_holder(log_dir) is None
    with lock(log_dir) as held:
        assert held.previous is None


def test_symlinked_lock_file_is_refused(log_dir: Path) -> None:
    target = log_dir / "elsewhere"
    target.write_text("")
    (log_dir / "serve.lock").symlink_to(target)
    with pytest.raises(LockFileError, match=r"serve\.lock"):
        lock(log_dir).acquire()


def test_missing_log_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LockFileError, match="No such file"):
        InstanceLock(tmp_path / "missing", tmp_path).acquire()


def test_symlink_planted_at_serve_pid_is_replaced_not_written_through(log_dir: Path) -> None:
    target = log_dir / "precious"
    target.write_text("keep me")
    (log_dir / "serve.pid").symlink_to(target)
    with lock(log_dir):
        assert not (log_dir / "serve.pid").is_symlink()
    assert target.read_text() == "keep me"


def test_a_deleted_lock_file_is_put_back_and_a_second_serve_stays_out(log_dir: Path) -> None:
    events = RecordedEvents()
    with lock(log_dir) as held:
        (log_dir / "serve.lock").unlink()
        (log_dir / "serve.pid").unlink()
        with pytest.raises(LockHeld):
            lock(log_dir).acquire()
        assert held.check(events) is None
        assert read_holder(log_dir) == Holder(os.getpid(), process_start_ticks(os.getpid()))
        assert [e["path"] for e in events.of("instance_lock_restored")] == [
            str(log_dir / "serve.lock"),
            str(log_dir / "serve.pid"),
        ]
        assert held.check(events) is None
        assert len(events.events) == 2, "an intact lock is not restored again"


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_lost_log_dir_is_reported_not_written_into(log_dir: Path, how: str) -> None:
    with lock(log_dir) as held:
        shutil.rmtree(log_dir)
        if how == "replaced":
            log_dir.mkdir()
        reason = held.check(RecordedEvents())
        assert reason is not None
        assert ("is gone" if how == "removed" else "was replaced") in reason
        assert not (log_dir / "serve.pid").exists()


def test_refused_serves_never_fill_the_queue_that_names_the_holder(log_dir: Path) -> None:
    with lock(log_dir) as held:
        for _ in range(3):
            for _ in range(20):
                with pytest.raises(LockHeld):
                    lock(log_dir).acquire()
            held.check(RecordedEvents())
        (log_dir / "serve.pid").unlink()
        with pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
            lock(log_dir).acquire()


def test_forty_simultaneous_starts_leave_exactly_one_holder(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    racer = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from agent_runner.errors import LockHeld
        from agent_runner.supervisor.boot.instance import InstanceLock
        go = Path(sys.argv[2])
        print("ready", flush=True)
        while not go.exists():
            time.sleep(0.001)
        try:
            InstanceLock(Path(sys.argv[1]), Path(sys.argv[1]).parent).acquire()
        except LockHeld:
            sys.exit(73)
        print("won", flush=True)
        sys.stdin.read()
        """
    )
    go = tmp_path / "go"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", racer, str(log_dir), str(go)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for _ in range(40)
    ]
    # Every racer is past its imports and polling before any may take the lock.
    assert [r.stdout.readline() for r in racers if r.stdout is not None] == [b"ready\n"] * 40
    go.touch()
    # Each racer either says it won or exits 73, which reads as end of file.
    outcomes = [r.stdout.readline() for r in racers if r.stdout is not None]
    assert outcomes.count(b"won\n") == 1
    for racer_ in racers:
        assert racer_.stdin is not None and racer_.stdout is not None
        racer_.stdin.close()
        racer_.stdout.close()
    assert sorted(r.wait() for r in racers) == [0] + [73] * 39


def test_release_on_a_read_only_log_dir_reports_instead_of_raising() -> None:
    def hold_then_release(root: Path) -> str:
        log_dir = root / "logs"
        log_dir.mkdir()
        held = lock(log_dir)
        held.acquire()
        log_dir.chmod(0o500)
        return json.dumps(held.release())

    with owned_dir(UNUSED_UID) as root:
        problems = json.loads(run_as(UNUSED_UID, hold_then_release, root))
    assert len(problems) == 1
    assert "cannot remove" in problems[0]
    assert "serve.pid" in problems[0]
