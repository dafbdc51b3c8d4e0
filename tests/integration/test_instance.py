"""The single-instance lock between real processes: one holder, named; stale records ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.errors import ExitCode, LockHeld
from agent_runner.supervisor.instance import (
    Holder,
    InstanceLock,
    LockFileError,
    read_holder,
)
from agent_runner.supervisor.strays import process_start_ticks

REPO = Path(__file__).parent.parent.parent

HOLD_THE_LOCK = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agent_runner.supervisor.instance import InstanceLock
    lock = InstanceLock(Path(sys.argv[1]))
    lock.acquire()
    print("held", flush=True)
    time.sleep(3600)
    """
)


@pytest.fixture
def other_serve(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Another process holding the lock of `tmp_path`, as a running serve would."""
    serve = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    )
    assert serve.stdout is not None
    assert serve.stdout.readline() == b"held\n"
    yield serve
    serve.kill()
    serve.wait()
    serve.stdout.close()


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_second_serve_in_another_process_fails_naming_the_holder(
    tmp_path: Path, other_serve: subprocess.Popen[bytes]
) -> None:
    with pytest.raises(LockHeld) as caught:
        InstanceLock(tmp_path).acquire()
    assert str(caught.value) == f"another serve (pid {other_serve.pid}) holds {tmp_path}/serve.lock"
    assert caught.value.exit_code == ExitCode.LOCKED
    assert int(caught.value.exit_code) == 73


def test_read_holder_names_a_running_serve(
    tmp_path: Path, other_serve: subprocess.Popen[bytes]
) -> None:
    assert read_holder(tmp_path) == Holder(other_serve.pid, process_start_ticks(other_serve.pid))


def test_lock_is_free_again_once_the_holder_is_killed(
    tmp_path: Path, other_serve: subprocess.Popen[bytes]
) -> None:
    other_serve.kill()
    other_serve.wait()
    assert read_holder(tmp_path) is None
    with InstanceLock(tmp_path) as lock:
        assert lock.previous is not None
        assert lock.previous.pid == other_serve.pid
        assert read_holder(tmp_path) == Holder(os.getpid(), process_start_ticks(os.getpid()))


def test_second_instance_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with InstanceLock(tmp_path), pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
        InstanceLock(tmp_path).acquire()


def test_stale_pid_file_of_a_dead_process_does_not_block(tmp_path: Path) -> None:
    stale = {"pid": dead_pid(), "start_ticks": 12345}
    (tmp_path / "serve.pid").write_text(json.dumps(stale))
    assert read_holder(tmp_path) is None
    with InstanceLock(tmp_path) as lock:
        assert lock.previous == Holder(stale["pid"], 12345)
        recorded = json.loads((tmp_path / "serve.pid").read_text())
        assert recorded == {"pid": os.getpid(), "start_ticks": process_start_ticks(os.getpid())}


def test_release_removes_the_pid_file_and_frees_the_lock(tmp_path: Path) -> None:
    lock = InstanceLock(tmp_path)
    lock.acquire()
    lock.release()
    assert not (tmp_path / "serve.pid").exists()
    assert read_holder(tmp_path) is None
    with InstanceLock(tmp_path) as again:
        assert again.previous is None


def test_read_holder_rejects_a_recycled_pid(tmp_path: Path) -> None:
    ticks = process_start_ticks(os.getpid())
    assert ticks is not None
    with InstanceLock(tmp_path):
        (tmp_path / "serve.pid").write_text(
            json.dumps({"pid": os.getpid(), "start_ticks": ticks - 1})
        )
        assert read_holder(tmp_path) is None


def test_read_holder_requires_the_lock_to_be_held(tmp_path: Path) -> None:
    record = {"pid": os.getpid(), "start_ticks": process_start_ticks(os.getpid())}
    (tmp_path / "serve.pid").write_text(json.dumps(record))
    assert read_holder(tmp_path) is None
    (tmp_path / "serve.lock").touch()
    assert read_holder(tmp_path) is None


@pytest.mark.parametrize("content", ["", "not json", "[1]", '{"pid": "1"}', '{"pid": -4}'])
def test_malformed_pid_file_is_ignored(tmp_path: Path, content: str) -> None:
    (tmp_path / "serve.pid").write_text(content)
    assert read_holder(tmp_path) is None
    with InstanceLock(tmp_path) as lock:
        assert lock.previous is None


def test_symlinked_lock_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "serve.lock").symlink_to(target)
    with pytest.raises(LockFileError, match=r"serve\.lock"):
        InstanceLock(tmp_path).acquire()


def test_missing_log_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LockFileError, match="No such file"):
        InstanceLock(tmp_path / "missing").acquire()


def test_symlink_planted_at_serve_pid_is_replaced_not_written_through(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me")
    (tmp_path / "serve.pid").symlink_to(target)
    with InstanceLock(tmp_path):
        assert not (tmp_path / "serve.pid").is_symlink()
    assert target.read_text() == "keep me"


def test_the_lock_is_not_inherited_by_spawned_programs(tmp_path: Path) -> None:
    with InstanceLock(tmp_path):
        child = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        with InstanceLock(tmp_path):
            pass
    finally:
        child.kill()
        child.wait()
