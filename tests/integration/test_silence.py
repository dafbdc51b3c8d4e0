"""The silence watchdog through a real serve: a silent agent is ended, an agent waiting out a
retry it announced is not."""

from __future__ import annotations

import json
import re
import sys
import time

import pytest

from tests.contracts import checks_by_name
from tests.integration.conftest import Project, agent, git
from tests.integration.test_serve import _seconds


def test_a_silent_agent_is_killed_as_a_failed_round_and_its_work_is_stashed(
    project: Project,
) -> None:
    project.write_config(
        agent("goes_silent.py", "refactor.py"),
        runtime={"idle_timeout_s": 1.5, "max_rounds": 1, "round_budget_s": 600},
    )
    done = project.cli("serve", timeout=30)
    assert done.returncode == 0, done.stderr
    kill = project.events("round_idle_kill")
    assert len(kill) == 1
    assert kill[0]["round"] == 1
    assert 1.5 <= kill[0]["idle_s"] < 30
    assert project.events("agent_exit")[0]["exit_cause"] == "idle"
    spawn, ended = project.events("agent_spawn")[0], project.events("agent_exit")[0]
    assert _seconds(ended["ts"]) - _seconds(spawn["ts"]) < 30  # not the 600 s budget
    stash = project.events("orphan_stashed")[0]["ref"]
    assert "agent-runner round 1 (idle)" in git(project.work_dir, "log", "-1", "--format=%s", stash)
    state = json.loads((project.log_dir / "state.json").read_text())
    assert state["last_round"]["exit_cause"] == "idle"
    assert state["loop"]["failures"] == 1  # counted as a failed round


# (gap between lines s, lines, style, [runtime] idle_timeout_s or None for the default, the
# round's exit cause). "announce" lines are Claude Code's api_retry naming the wait to come.
ROUNDS = {
    # 4 s silences, longer than the 2 s window, but each announced: waited out.
    "announced silences are waited out": ("4", "2", "announce", 2, "clean"),
    # The same kind of silence, announcing nothing: killed.
    "unannounced silences are killed": ("20", "2", "plain", 2, "idle"),
    # The watchdog is off unless configured.
    "off by default": ("1", "2", "plain", None, "clean"),
    # 4 s of work, longer than the 3 s window, with a line every 0.5 s: only output saves it.
    "output keeps a longer round alive": ("0.5", "8", "plain", 3, "clean"),
}


@pytest.mark.parametrize("case", ROUNDS.values(), ids=ROUNDS.keys())
def test_what_silence_ends_a_round_and_what_does_not(
    project: Project, case: tuple[str, str, str, float | None, str]
) -> None:
    gap_s, lines, style, idle_timeout_s, cause = case
    runtime: dict[str, float] = {"max_rounds": 1}
    if idle_timeout_s is not None:
        runtime["idle_timeout_s"] = idle_timeout_s
    project.write_config(agent("retries_quietly.py", gap_s, lines, style), runtime=runtime)
    done = project.cli("serve", timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(project.events("round_idle_kill")) == (1 if cause == "idle" else 0)
    assert project.events("agent_exit")[0]["exit_cause"] == cause


def test_peek_shows_how_long_the_running_round_has_been_silent(project: Project) -> None:
    project.write_config(agent("goes_silent.py"), runtime={"idle_timeout_s": 600})
    project.start()
    project.wait_for("agent_spawn")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        snap = json.loads(project.cli("peek", "--json").stdout)
        if snap["round"] and (snap["round"].get("silent_s") or 0) >= 1.5:
            break
        time.sleep(0.2)
    assert snap["round"]["silent_s"] >= 1.5
    assert snap["project"]["idle_timeout_s"] == 600
    text = project.cli("peek").stdout
    assert re.search(
        r"round\s+1: [\d.]+s of \S+, agent pid \d+, silent [\d.]+s \(ended at 10m\)", text
    )


def test_doctor_reports_the_watchdog_and_warns_where_it_cannot_work(project: Project) -> None:
    project.write_config(
        agent("goes_silent.py"), runtime={"idle_timeout_s": 900, "round_budget_s": 3600}
    )
    checks = checks_by_name(project.cli("doctor", "--json").stdout)
    assert checks["silence watchdog"]["status"] == "ok"
    assert "900s" in checks["silence watchdog"]["detail"]
    project.write_config(
        agent("goes_silent.py"), runtime={"idle_timeout_s": 900, "round_budget_s": 600}
    )
    checks = checks_by_name(project.cli("doctor", "--json").stdout)
    assert checks["silence watchdog"]["status"] == "warn"
    assert "budget always ends a silent round first" in checks["silence watchdog"]["detail"]
    project.write_config(
        [sys.executable, "-c", "", "--output-format", "json"],
        runtime={"idle_timeout_s": 900, "round_budget_s": 3600},
    )
    document = project.config_path.read_text().replace('parser = "claude"', 'parser = "gemini"')
    project.config_path.write_text(document)
    checks = checks_by_name(project.cli("doctor", "--json").stdout)
    assert checks["silence watchdog"]["status"] == "warn"
    assert "stream-json" in checks["silence watchdog"]["fix"]
