"""FIFOs, devices, directories and symlinks where serve and the read-only commands expect
files: each a clear one-line error or event, never a hang, never a write through a link."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from tests.integration.conftest import Project, agent

# A command that hangs fails here, long before the suite's own timeout.
QUICK_S = 20


def events_path(project: Project) -> Path:
    return project.log_dir / f"events-{time.strftime('%Y-%m', time.gmtime())}.jsonl"


def test_a_fifo_config_is_a_one_line_config_error_for_every_command(project: Project) -> None:
    project.config_path.unlink(missing_ok=True)
    os.mkfifo(project.config_path)
    for command in (["serve", "--once"], ["peek", "--json"], ["status"], ["events"]):
        done = project.cli(*command, timeout=QUICK_S)
        assert done.returncode == 78, (command, done.stderr)
        assert done.stderr == (
            f"agent-runner: {project.config_path}: cannot read: a FIFO, not a regular file\n"
        )
    doctor = project.cli("doctor", timeout=QUICK_S)
    assert doctor.returncode == 78
    assert "FAIL  config: " in doctor.stdout
    assert "a FIFO, not a regular file" in doctor.stdout


@pytest.mark.parametrize(
    ("prompt", "kind"), [("fifo", "a FIFO"), ("/dev/zero", "a character device")]
)
def test_a_prompt_that_is_no_file_is_a_one_line_config_error(
    project: Project, prompt: str, kind: str
) -> None:
    if prompt == "fifo":
        prompt = str(project.root / "prompt.fifo")
        os.mkfifo(prompt)
    project.write_config(agent("exits_with.py", "0"), prompt={"files": [prompt]})
    done = project.cli("serve", "--once", timeout=QUICK_S)
    assert done.returncode == 78, done.stderr
    [error] = done.stderr.splitlines()  # printed once: config_broken goes to the log only
    assert [e["reason"] for e in project.events("config_broken")] == [
        error.removeprefix("agent-runner: ")
    ]
    assert error.startswith(f"agent-runner: {project.config_path}: ")
    assert error.endswith(f"prompt.files[0]: cannot read {prompt}: {kind}, not a regular file")
    doctor = project.cli("doctor", timeout=QUICK_S)
    assert doctor.returncode == 1
    assert "FAIL  prompt files: " in doctor.stdout


def test_a_fifo_state_file_hangs_nothing(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    project.log_dir.mkdir()
    os.mkfifo(project.log_dir / "state.json")
    for command, code in ((["peek", "--json"], 0), (["status", "--json"], 3), (["doctor"], 0)):
        done = project.cli(*command, timeout=QUICK_S)
        assert done.returncode == code, (command, done.stdout, done.stderr)
    done = project.cli("serve", "--once", timeout=QUICK_S)
    assert done.returncode == 0, done.stderr
    assert len(project.events("round_end")) == 1


def test_a_fifo_events_file_costs_the_events_not_the_loop(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 2})
    project.log_dir.mkdir()
    os.mkfifo(events_path(project))
    done = project.cli("serve", timeout=QUICK_S)
    assert done.returncode == 0, done.stderr
    reported = [line for line in done.stderr.splitlines() if "cannot write events" in line]
    assert reported == [
        f"agent-runner: cannot write events: {events_path(project)}: refusing to write events"
        " into something not a file"
    ]
    assert "round_end round=2" in done.stderr, "the console still shows every event"
    for command in (["peek", "--json"], ["events"], ["events", "--json"]):
        assert project.cli(*command, timeout=QUICK_S).returncode == 0, command


def test_files_planted_at_serves_temporary_names_are_never_opened(project: Project) -> None:
    project.write_config(
        ["sh", "-c", 'sleep 1; echo "$AGENT_RUNNER_ROUND" >> work.txt'],
        runtime={"max_rounds": 3},
    )
    serve = project.start()
    pid = project.wait_for("serve_start")["pid"]
    victim = project.root / "victim"
    victim.write_text("precious\n")
    os.mkfifo(project.log_dir / f".state.json.{pid}.tmp")
    os.mkfifo(project.log_dir / f".dirty-last-stash.json.{pid}.tmp")
    (project.log_dir / f".dirty-last-stash.json.{pid}").symlink_to(victim)
    assert serve.wait(timeout=QUICK_S) == 0
    assert len(project.events("orphan_stashed")) == 3
    assert victim.read_text() == "precious\n"
    assert stat.S_ISFIFO((project.log_dir / f".state.json.{pid}.tmp").lstat().st_mode)
