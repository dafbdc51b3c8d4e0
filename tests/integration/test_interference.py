"""What the world does to a running serve: someone else's partial line in the event log, a
log_dir edit that waits for a restart, a wall clock that is far off and then corrected."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.conftest import Project, agent

SKEWED_CLI = Path(__file__).with_name("skewed_clock_cli.py")


def events_path(project: Project) -> Path:
    return project.log_dir / f"events-{time.strftime('%Y-%m', time.gmtime())}.jsonl"


def test_an_event_after_someone_elses_partial_line_starts_a_line_of_its_own(
    project: Project,
) -> None:
    project.write_config(agent("exits_with.py", "0", "0.5"), runtime={"max_rounds": 3})
    serve = project.start()
    project.wait_for("round_start")
    with events_path(project).open("ab") as log:
        log.write(b'{"written by": "someone else, cut short')
    assert serve.wait(timeout=30) == 0
    assert [e["round"] for e in project.events("round_end")] == [1, 2, 3]
    assert b'{"written by": "someone else, cut short\n' in events_path(project).read_bytes()


def test_a_deferred_log_dir_edit_leaves_the_stop_file_in_the_running_log_dir(
    project: Project, tmp_path: Path
) -> None:
    project.write_config(agent("exits_with.py", "0", "0.3"), breakers={"stalled_rounds": 1000})
    serve = project.start()
    project.wait_for("round_end")
    project.write_config(
        agent("exits_with.py", "0", "0.3"),
        runtime={"log_dir": str(tmp_path / "elsewhere")},
        breakers={"stalled_rounds": 1000},
    )
    assert project.wait_for("config_reload_deferred")["changed"] == ["runtime.log_dir"]
    (project.log_dir / "STOP").touch()
    assert serve.wait(timeout=20) == 0
    assert project.events("stop_file_detected")[0]["path"] == str(project.log_dir / "STOP")
    assert not (tmp_path / "elsewhere").exists()


def test_a_wall_clock_corrected_during_a_back_off_ends_the_wait(
    project: Project, tmp_path: Path
) -> None:
    fixed = tmp_path / "clock-fixed"
    project.write_config(agent("rate_limited.py", "2", "1"), runtime={"max_rounds": 2})
    serve = subprocess.Popen(
        [sys.executable, str(SKEWED_CLI), "serve", "--config", str(project.config_path)],
        cwd=Path(__file__).parents[2],
        env={**os.environ, "CLOCK_FIXED_WHEN": str(fixed)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    project.children.append(serve)
    wait = project.wait_for("backoff_wait")
    # 30 days behind, the 2 s reset looked 30 days away: the wait is the 8-day cap.
    assert wait["wait_s"] > 7 * 86_400
    fixed.touch()
    corrected = time.monotonic()
    project.wait_for("round_start", count=2, timeout=20)
    assert time.monotonic() - corrected < 15
    assert serve.wait(timeout=20) == 0
