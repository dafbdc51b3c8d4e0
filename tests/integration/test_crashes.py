"""serve's own failures: undecodable text never kills it, and a bug that keeps killing it
ends in exit 69 instead of a restart loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import Project

FAULTY_CLI = Path(__file__).with_name("faulty_cli.py")


def test_a_non_utf8_filter_name_reaches_the_events_as_escapes_and_serve_keeps_going(
    project: Project,
) -> None:
    script = "printf '*.dat filter=\\377\\376\\n' > .gitattributes; echo x > a.dat; exit 1"
    project.write_config(["sh", "-c", script], breakers={"crash_loop_rounds": 3})
    done = project.cli("serve")
    assert done.returncode == 69, done.stderr
    assert "internal error" not in done.stderr
    failed = project.events("dirty_action_failed")
    assert len(failed) == 3
    assert all("(filter \\xff\\xfe)" in e["reason"] for e in failed), failed
    assert project.events("crash_loop")[0]["count"] == 3
    assert (project.work_dir / "a.dat").read_text() == "x\n", "the work stays on disk"


def start_faulty(project: Project, target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(FAULTY_CLI), target, "serve", "--config", str(project.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )


def test_an_internal_error_every_round_trips_a_breaker_across_restarts(project: Project) -> None:
    project.write_config(
        ["sh", "-c", "exit 1"],
        breakers={"crash_loop_rounds": 10, "internal_error_restarts": 3},
    )
    runs = [
        start_faulty(project, "agent_runner.supervisor.loop.round:secure_tree") for _ in range(3)
    ]
    assert [r.returncode for r in runs] == [1, 1, 69], [r.stderr for r in runs]
    assert "internal error: RuntimeError: injected bug" in runs[0].stderr
    assert [e["reason"] for e in project.events("serve_stop")] == [
        "internal error: RuntimeError: injected bug",
        "internal error: RuntimeError: injected bug",
        "gave up: internal_error_loop",
    ]
    tripped = project.events("internal_error_loop")
    assert [(e["count"], e["reason"]) for e in tripped] == [
        (3, "internal error: RuntimeError: injected bug")
    ]
    assert len(project.events("round_start")) == 3, "one round per start, then give up"
    state = json.loads((project.log_dir / "state.json").read_text())
    assert state["supervisor"]["phase"] == "stopped"


def test_a_crash_is_recorded_as_crashed_and_the_next_start_keeps_the_counters(
    project: Project,
) -> None:
    project.write_config(
        ["sh", "-c", "exit 1"],
        runtime={"restart_delay_s": 0.1},
        breakers={"crash_loop_rounds": 2},
    )
    # Round 1 fails and is counted; the bug strikes in the restart delay after it.
    crashed = start_faulty(project, "agent_runner.supervisor.loop.serve:Serve._sleep")
    assert crashed.returncode == 1, crashed.stderr
    state = json.loads((project.log_dir / "state.json").read_text())
    assert state["supervisor"]["phase"] == "crashed"
    assert (state["loop"]["crash_streak"], state["loop"]["internal_errors"]) == (1, 1)
    peek = json.loads(project.cli("peek", "--json").stdout)
    assert peek["supervisor"]["state"] == "crashed"

    again = project.cli("serve")
    assert again.returncode == 69, again.stderr
    assert project.events("crash_loop")[0]["count"] == 2
    assert len(project.events("round_start")) == 2, "the crash did not reset the streak"
