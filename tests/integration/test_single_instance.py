"""One serve per work tree through the real CLI, whatever happens to log_dir while it runs."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.conftest import Project, agent, pid_alive

TICK_WAIT_S = 15.0  # serve looks at its lock every few seconds during a round


def start_logged(project: Project, log: Path) -> subprocess.Popen[bytes]:
    """serve with its console (where events still go when log_dir is gone) in `log`."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent_runner", "serve", "--config", str(project.config_path)],
            cwd=project.root,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    project.children.append(proc)
    return proc


def test_a_removed_log_dir_keeps_others_out_and_stops_serve_with_a_reason(
    project: Project, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    project.write_config(agent("records_pid.py", str(pids), "600"))
    console = tmp_path / "console.log"
    serve = start_logged(project, console)
    project.wait_for("agent_spawn")
    deadline = time.monotonic() + 10
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    shutil.rmtree(project.log_dir)

    second = project.cli("serve")
    assert second.returncode == 73, second.stderr
    assert f"pid {serve.pid}" in second.stderr

    assert serve.wait(timeout=TICK_WAIT_S) == 1
    # The refused serve made log_dir anew: to the first one it is another directory now.
    lines = console.read_text().splitlines()
    assert any("log_dir_lost" in line and "was replaced" in line for line in lines)
    assert any("serve_stop" in line and "log_dir lost" in line for line in lines)
    assert not pid_alive(int(pids.read_text().split()[0])), "its agent went with it"
    assert not (project.log_dir / "state.json").exists(), "nothing written into the new one"


def test_a_deleted_lock_file_is_put_back_and_status_still_finds_serve(project: Project) -> None:
    project.write_config(agent("sleeper.py", "600"))
    serve = project.start()
    project.wait_for("agent_spawn")
    (project.log_dir / "serve.lock").unlink()
    (project.log_dir / "serve.pid").unlink()

    second = project.cli("serve")
    assert second.returncode == 73, second.stderr
    assert f"pid {serve.pid}" in second.stderr

    restored = project.wait_for("instance_lock_restored", count=2, timeout=TICK_WAIT_S)
    assert restored["path"] == str(project.log_dir / "serve.pid")
    status = json.loads(project.cli("status", "--json").stdout)
    assert (status["supervisor"]["state"], status["supervisor"]["pid"]) == ("running", serve.pid)
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=10) == 0


# The real CLI, with its imports done before a common barrier: interpreter start-up would
# otherwise spread forty starts over seconds and the race would never be run.
RACER = """
import sys, time
from pathlib import Path
import agent_runner.cli
from agent_runner.__main__ import main
print("ready", flush=True)
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.001)
sys.argv = ["agent-runner", "serve", "--config", sys.argv[2]]
main()
"""


def test_forty_simultaneous_starts_run_exactly_one_serve(project: Project) -> None:
    project.write_config(agent("sleeper.py", "600"))
    go = project.root / "go"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(go), str(project.config_path)],
            cwd=project.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(40)
    ]
    project.children.extend(racers)
    for racer in racers:
        assert racer.stdout is not None
        assert racer.stdout.readline() == b"ready\n"
        racer.stdout.close()
    go.touch()
    deadline = time.monotonic() + 120
    while sum(r.poll() is not None for r in racers) < 39 and time.monotonic() < deadline:
        time.sleep(0.1)
    finished = [r.returncode for r in racers if r.poll() is not None]
    assert finished == [73] * 39
    (winner,) = [r for r in racers if r.poll() is None]
    project.wait_for("agent_spawn")
    assert len(project.events("serve_start")) == 1
    assert len(project.events("agent_spawn")) == 1
    winner.send_signal(signal.SIGTERM)
    assert winner.wait(timeout=10) == 0
