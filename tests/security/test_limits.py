"""Hogs, hangs, floods and crashes end as the right failure, on time, and leave nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agent_runner.plugins.child.confine import TASKS_WITHOUT_SECCOMP
from agent_runner.plugins.parent.sandbox import MAX_SCRATCH_BYTES, MAX_SCRATCH_ENTRIES
from tests.security.conftest import NOOP, run_hook
from tests.security.harness import AsUser, InProcess

# Threads on small stacks (RLIMIT_AS alone would allow thousands), until 200 or a refusal.
THREADS = """
import _thread
def hook(view):
    _thread.stack_size(64 * 1024)
    started = 0
    try:
        while started < 200:
            _thread.start_new_thread(time.sleep, (60,))
            started += 1
    except RuntimeError:
        pass
    return SpawnDecision.skip(str(started))
"""


def _process_gone(pid: int, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            time.sleep(0.05)
            continue
        time.sleep(0.05)
    return False


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def test_an_8_gib_allocation_is_oom_not_a_sandbox_kill(confined: InProcess) -> None:
    body = """
    def hook(view):
        hog = bytearray(8 << 30)
        return SpawnDecision.skip(str(len(hog)))
    """
    result = run_hook(confined, body)
    assert result.status == "oom", result


def test_gradual_memory_growth_is_oom(confined: InProcess) -> None:
    body = """
    def hook(view):
        chunks = []
        while True:
            chunks.append(bytearray(16 << 20))
    """
    result = run_hook(confined, body)
    assert result.status == "oom", result


@pytest.mark.timeout(20)
def test_infinite_loop_times_out_at_the_deadline(confined: InProcess) -> None:
    body = """
    def hook(view):
        while True:
            pass
    """
    started = time.monotonic()
    result = run_hook(confined, body, timeout_s=1.0)
    elapsed = time.monotonic() - started
    assert result.status == "timeout", result
    assert 1.0 <= elapsed < 15  # the deadline, not the pytest timeout


@pytest.mark.timeout(20)
def test_sleeping_hook_times_out_and_its_process_is_gone(confined: InProcess) -> None:
    body = """
    def hook(view):
        print(os.getpid(), file=__import__("sys").stderr, flush=True)
        time.sleep(60)
    """
    result = run_hook(confined, body, timeout_s=3.0)
    assert result.status == "timeout", result
    pid = int(result.stderr_tail.split()[0])
    assert _process_gone(pid)


def test_hook_ignoring_sigterm_still_dies_at_the_deadline(confined: InProcess) -> None:
    body = """
    def hook(view):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
    """
    assert run_hook(confined, body, timeout_s=0.5).status == "timeout"


@pytest.mark.timeout(120)
def test_daemon_holding_the_result_pipe_is_killed_and_the_call_ends(unconfined: InProcess) -> None:
    body = """
    def hook(view):
        pid = os.fork()
        if pid == 0:
            os.setsid()
            daemon = os.fork()
            if daemon == 0:
                time.sleep(600)
            print(daemon, file=__import__("sys").stderr, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        return SpawnDecision.skip("daemonized")
    """
    started = time.monotonic()
    result = run_hook(unconfined, body, timeout_s=3.0)
    assert time.monotonic() - started < 60  # not the daemon's 600 s
    assert result.status == "ok", result
    assert _process_gone(int(result.stderr_tail.split()[0]))


@pytest.mark.timeout(30)
def test_hanging_child_with_a_grandchild_is_killed_as_a_group(unconfined: InProcess) -> None:
    body = """
    def hook(view):
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        print(child, file=__import__("sys").stderr, flush=True)
        time.sleep(60)
    """
    result = run_hook(unconfined, body, timeout_s=3.0)
    assert result.status == "timeout", result
    assert _process_gone(int(result.stderr_tail.split()[0]))


@pytest.mark.timeout(30)
def test_fork_bomb_without_seccomp_is_bounded_and_cleaned_up(unconfined: InProcess) -> None:
    body = """
    def hook(view):
        print(os.getpid(), file=__import__("sys").stderr, flush=True)
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
    """
    result = run_hook(unconfined, body, timeout_s=1.5)
    assert result.status == "timeout", result
    group = int(result.stderr_tail.split()[0])
    deadline = time.monotonic() + 15.0
    while _group_members(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_members(group)


@pytest.mark.timeout(60)
def test_a_host_without_user_namespaces_is_named_in_the_calls_output() -> None:
    # Documented fallback: an unprivileged supervisor at sandbox = "off" then has no task
    # bound of its own; the child says so where the operator sees the call's output.
    sandbox = AsUser("off", user_namespaces=False)
    try:
        sandbox.start()
        result = run_hook(sandbox, THREADS, timeout_s=10.0)
    finally:
        sandbox.close()
    assert result.status == "ok", result
    assert "agent-runner: no per-call task count: unshare(CLONE_NEWUSER)" in result.stderr_tail
    assert int(result.value["reason"]) == 200


def test_stdout_and_stderr_floods_keep_only_a_bounded_tail(confined: InProcess) -> None:
    body = """
    import sys
    def hook(view):
        for _ in range(2000):
            sys.stdout.write("o" * 10000)
            sys.stderr.write("e" * 10000)
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert 0 < len(result.stderr_tail.encode()) <= 8 * 1024


@pytest.mark.timeout(20)
def test_endless_flood_times_out(confined: InProcess) -> None:
    body = """
    def hook(view):
        while True:
            os.write(1, b"x" * 65536)
    """
    result = run_hook(confined, body, timeout_s=1.0)
    assert result.status == "timeout", result
    assert len(result.stderr_tail) <= 8 * 1024


def test_garbage_written_to_fd_1_and_2_does_not_disturb_the_result(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.write(1, b"\\xff\\xfe\\x00{garbage")
        os.write(2, bytes(range(256)))
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value == {"action": "proceed", "defer_s": 0.0, "reason": ""}


def test_segfault_is_a_crash_not_a_sandbox_kill(confined: InProcess) -> None:
    body = """
    def hook(view):
        ctypes.string_at(0)
    """
    result = run_hook(confined, body)
    assert result.status == "crash", result
    assert result.signal == "SIGSEGV"


def test_abort_is_a_crash(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.abort()
    """
    result = run_hook(confined, body)
    assert result.status == "crash", result
    # raise(SIGABRT) is refused like every signal; glibc's abort() then faults on purpose.
    assert result.signal == "SIGSEGV"


def test_exit_without_a_result_is_a_crash(confined: InProcess) -> None:
    body = """
    def hook(view):
        os._exit(3)
    """
    result = run_hook(confined, body)
    assert result.status == "crash", result
    assert "status 3" in result.detail


def test_file_size_limit_fails_the_write_not_the_call(confined: InProcess) -> None:
    body = """
    def hook(view):
        with open(os.path.join(os.environ["TMPDIR"], "big"), "wb") as f:
            try:
                f.write(b"x" * (64 << 20))
                f.flush()
            except OSError as exc:
                return SpawnDecision.skip(str(exc.errno))
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value["reason"] == "27"  # EFBIG


def test_killed_fork_server_is_restarted_with_an_event(fresh: InProcess) -> None:
    sandbox = fresh
    sandbox.kill_server()
    assert run_hook(sandbox, NOOP).status == "ok"
    restarted = sandbox.events().of("sandbox_server_restarted")
    assert len(restarted) == 1
    assert restarted[0]["restarts"] == 1
    assert "exited" in restarted[0]["reason"]


@pytest.mark.timeout(30)
def test_fork_server_dying_mid_call_fails_only_that_call(fresh: InProcess) -> None:
    sandbox = fresh
    server_pid = sandbox.server_pid
    body = """
    def hook(view):
        time.sleep(0.3)
        return SpawnDecision.proceed()
    """

    killer = threading.Timer(0.1, os.kill, (server_pid, signal.SIGKILL))
    killer.start()
    result = run_hook(sandbox, body, timeout_s=5.0)
    killer.join()
    assert result.status == "crash", result
    assert "fork server died" in result.detail
    assert sandbox.events().kinds().count("sandbox_server_restarted") == 1
    assert run_hook(sandbox, NOOP).status == "ok"


@pytest.mark.timeout(30)
def test_without_seccomp_a_call_has_a_task_bound_of_its_own(unconfined: InProcess) -> None:
    # 150 other processes of the uid the call runs as: a per-uid count would leave it none,
    # and a call holding its whole bound must not stop them from starting more.
    uid = unconfined.child_uid
    others = [
        subprocess.Popen(["sleep", "60"], user=uid, group=uid, extra_groups=[]) for _ in range(150)
    ]
    try:
        result = run_hook(unconfined, THREADS.replace("200", "5000"), timeout_s=10.0)
        one_more = subprocess.run(["true"], user=uid, group=uid, extra_groups=[], check=False)
    finally:
        for other in others:
            other.kill()
            other.wait()
    assert result.status == "ok", result
    assert int(result.value["reason"]) == TASKS_WITHOUT_SECCOMP - 1, result.stderr_tail
    assert one_more.returncode == 0


@pytest.mark.timeout(60)
def test_a_2000_level_directory_tree_is_removed_after_the_call(
    fresh: InProcess,
) -> None:
    sandbox = fresh
    root = sandbox.scratch_root
    assert root is not None
    body = """
    def hook(view):
        for _ in range(2000):
            os.mkdir("d")
            os.chdir("d")
        return SpawnDecision.proceed()
    """
    result = run_hook(sandbox, body, timeout_s=20.0)
    assert result.status == "ok", result
    assert sandbox.left_in_scratch_root() == []
    sandbox.close()
    assert not root.exists()


def test_close_removes_a_deep_tree_left_in_the_scratch_root(
    fresh: InProcess,
) -> None:
    sandbox = fresh
    root = sandbox.scratch_root
    assert root is not None
    owner = sandbox.supervisor_uid
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(2000):
        os.mkdir("d", dir_fd=fd)
        deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.fchown(deeper, owner, owner)
        os.close(fd)
        fd = deeper
    os.close(fd)
    sandbox.close()
    assert not root.exists()


def test_scratch_over_its_entry_budget_fails_the_call_and_is_removed(
    fresh: InProcess,
) -> None:
    sandbox = fresh
    root = sandbox.scratch_root
    assert root is not None
    body = f"""
    def hook(view):
        for n in range({MAX_SCRATCH_ENTRIES + 50}):
            os.close(os.open(f"f{{n}}", os.O_CREAT | os.O_WRONLY, 0o600))
        return SpawnDecision.proceed()
    """
    result = run_hook(sandbox, body, timeout_s=20.0)
    assert result.status == "crash", result
    assert "scratch" in result.detail
    sandbox.close()
    assert not root.exists()


def test_scratch_over_its_byte_budget_fails_the_call(confined: InProcess) -> None:
    body = f"""
    def hook(view):
        block = b"x" * (1 << 20)
        for n in range({MAX_SCRATCH_BYTES // (8 << 20) + 1}):
            with open(f"blob{{n}}", "wb") as f:
                for _ in range(8):
                    f.write(block)
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body, timeout_s=20.0)
    assert result.status == "crash", result
    assert "scratch" in result.detail


def test_scratch_cleanup_never_follows_a_symlink(confined: InProcess, shared_dir: Path) -> None:
    kept = shared_dir / "kept"
    kept.mkdir()
    (kept / "file").write_text("still here")
    for path in (kept, kept / "file"):
        os.chown(path, confined.supervisor_uid, confined.supervisor_uid)
    body = f"""
    def hook(view):
        os.symlink({str(kept)!r}, "link")
        os.mkdir("sub")
        os.symlink({str(kept / "file")!r}, "sub/file-link")
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert (kept / "file").read_text() == "still here"
