"""HelperCommand (what runs `[notify] command`) with real processes: it is fed, capped, bounded
and leaves nothing running, whatever the command does with its pipes."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest

from agent_runner.supervisor.agent.process import HelperCommand, SpawnError
from tests.integration.conftest import pid_alive


def run(code: str, stdin: bytes = b"", timeout_s: float = 5, max_output: int = 4096):
    helper = HelperCommand.start(
        [sys.executable, "-c", code], stdin_data=stdin, cwd=Path.cwd(), env=dict(os.environ)
    )
    started = time.monotonic()
    result = helper.finish(timeout_s, max_output)
    return helper, result, time.monotonic() - started


def test_stdin_larger_than_a_pipe_is_delivered_whole() -> None:
    data = os.urandom(3 * 1024 * 1024)
    code = "import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
    _, result, _ = run(code, data)
    assert result.exit_code == 0
    assert result.output.decode().strip() == hashlib.sha256(data).hexdigest()


def test_a_command_that_never_reads_its_stdin_exits_cleanly() -> None:
    _, result, _ = run("print('did not read')", os.urandom(2 * 1024 * 1024))
    assert (result.exit_code, result.timed_out) == (0, False)
    assert result.output == b"did not read\n"


def test_output_is_capped_and_drained_so_the_command_finishes() -> None:
    code = "import sys; sys.stdout.write('y' * 20_000_000); sys.exit(4)"
    _, result, _ = run(code, max_output=100)
    assert (result.exit_code, result.timed_out) == (4, False)
    assert result.output == b"y" * 100


def test_a_hang_is_killed_with_its_group_at_the_deadline() -> None:
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        "print(child.pid, flush=True); time.sleep(600)"
    )
    helper, result, took = run(code, timeout_s=1)
    assert result.timed_out
    assert result.signal == "SIGKILL"
    assert 1 <= took < 60  # the deadline, not the 600 s the command asked for
    child = int(result.output.split()[0])
    deadline = time.monotonic() + 5
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child)
    assert not pid_alive(helper.pid)


def test_what_it_leaves_in_its_group_is_killed_when_it_exits() -> None:
    code = (
        "import subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " stdout=subprocess.DEVNULL); print(child.pid)"
    )
    _, result, took = run(code)
    assert (result.exit_code, result.timed_out) == (0, False)
    assert took < 60  # not the 600 s the child it left would keep the pipe
    child = int(result.output.split()[0])
    deadline = time.monotonic() + 5
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child)


def test_a_process_that_left_the_group_holding_the_pipe_does_not_hold_finish() -> None:
    code = (
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid(); time.sleep(600)\n"  # keeps stdout open, out of the group's reach
        "    os._exit(0)\n"
        "print('parent done', pid, flush=True)\n"
    )
    _, result, took = run(code)
    left = int(result.output.split()[-1])
    os.kill(left, 9)
    assert (result.exit_code, result.timed_out) == (0, False)
    assert took < 60  # not the 600 s the process that left keeps the pipe open
    assert result.output == f"parent done {left}\n".encode()


def test_a_missing_program_is_a_spawn_error() -> None:
    with pytest.raises(SpawnError, match="not found"):
        HelperCommand.start(["no-such-program-here"], stdin_data=b"", cwd=Path.cwd(), env={})
