"""Every --json document against its schema, in each state a project can be in, through the
real CLI; and each exit code the observation commands promise (docs/json.md, SPEC §10)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from agent_runner.supervisor.agent.strays import process_start_ticks
from tests.contracts import conforming, conforming_lines
from tests.integration.conftest import Project, agent

LIVE_STATES = {"running", "waiting", "backoff", "deferred", "stopping"}


def documents(project: Project) -> dict[str, Any]:
    """peek, status, doctor, plugins list and events as the CLI prints them, each conforming,
    each command's exit code the one its own document calls for."""
    found = {}
    for command in ("peek --json", "status --json", "doctor --json", "plugins list --json"):
        done = project.cli(*command.split())
        doc = found[command] = conforming(command, done.stdout)
        if command == "status --json":
            expected = 0 if doc["supervisor"]["state"] in LIVE_STATES else 3
        elif command == "doctor --json":
            expected = 0 if doc["ok"] else 1
        else:
            expected = 0
        assert done.returncode == expected, (command, done.returncode, done.stderr)
    events = project.cli("events", "--json")
    assert events.returncode == 0, events.stderr
    found["events --json"] = conforming_lines(events.stdout)
    return found


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def peek(project: Project) -> dict[str, Any]:
    done = project.cli("peek", "--json")
    assert done.returncode == 0, done.stderr
    return conforming("peek --json", done.stdout)


def test_every_document_conforms_on_a_fresh_project(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    docs = documents(project)
    snap = docs["peek --json"]
    assert snap["supervisor"]["state"] == "stopped"
    assert (snap["round"], snap["last_rounds"], snap["backoff"]) == (None, [], None)
    assert snap["plugins"]["sandbox"] is None
    assert "no serve has run here yet" in snap["plugins"]["sandbox_reason"]
    assert set(snap["breakers"]) == {
        "crash_loop",
        "stalled_no_progress",
        "auth_failed",
        "setup_failed",
        "internal_error_loop",
    }
    assert docs["status --json"]["supervisor"] == snap["supervisor"]
    assert docs["doctor --json"]["ok"] is True
    assert docs["events --json"] == []
    assert [p["name"] for p in docs["plugins list --json"]["plugins"]] == ["builtin"]


def test_mid_round_peek_and_status_show_the_running_round(project: Project) -> None:
    project.write_config(agent("sleeper.py", "3600"), runtime={"round_budget_s": 900})
    serve = project.start()
    spawned = project.wait_for("agent_spawn")
    docs = documents(project)
    snap, status = docs["peek --json"], docs["status --json"]
    assert snap["supervisor"]["state"] == "running"
    assert snap["supervisor"]["pid"] == serve.pid
    assert snap["supervisor"]["uptime_s"] >= 0
    current = snap["round"]
    assert (current["n"], current["agent_pid"], current["budget_s"]) == (1, spawned["pid"], 900)
    assert 0 <= current["elapsed_s"] < 900
    assert status["round"]["n"] == 1
    assert project.cli("status").returncode == 0
    text = project.cli("peek").stdout
    assert f"of 15m, agent pid {spawned['pid']}" in text
    # --after-round: serve agrees at once, and waits for a round that sleeps an hour.
    later = project.cli("stop", "--after-round", "--json")
    assert later.returncode == 0, later.stderr
    assert conforming("stop --json", later.stdout)["outcome"] == "pending"
    stopping = documents(project)["peek --json"]["supervisor"]
    assert stopping["state"] == "stopping"
    assert stopping["pending_stop"] == {"mode": "finish_round", "source": "stop --after-round"}
    assert project.cli("status").returncode == 0
    assert "stop pending (finish_round, from stop --after-round)" in project.cli("peek").stdout
    stop = project.cli("stop", "--json")  # a second stop means now
    assert stop.returncode == 0, stop.stderr
    stopped = conforming("stop --json", stop.stdout)
    assert (stopped["outcome"], stopped["pid"]) == ("stopped", serve.pid)
    assert serve.wait(timeout=10) == 0
    assert project.cli("status").returncode == 3


def test_during_a_backoff_peek_shows_until_when_and_why(project: Project) -> None:
    project.write_config(agent("rate_limited.py", "3600"))
    project.start()
    wait_until(lambda: peek(project)["supervisor"]["state"] == "backoff")
    snap = documents(project)["peek --json"]
    backoff = snap["backoff"]
    assert backoff["classification"] == "rate_limit_account"
    assert backoff["source"] == "server"
    assert 3000 < backoff["remaining_s"] <= 3605
    assert "five_hour" in backoff["reason"]
    [last] = snap["last_rounds"]
    assert (last["round"], last["transient"]) == (1, "rate_limit_account")
    assert project.cli("status").returncode == 0
    text = project.cli("peek").stdout
    shown = re.search(r"back-off    rate_limit_account, ([\dhms ]+) left \(server\)", text)
    assert shown is not None, text
    # Two units at most: "59m 57s" just under the hour, "1h" while the slack lasts.
    units = {"h": 3600, "m": 60, "s": 1}
    left = sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", shown.group(1)))
    assert 3000 < left <= 3605, shown.group(0)


def test_after_a_crash_loop_the_breaker_and_the_reason_show(project: Project) -> None:
    project.write_config(agent("exits_with.py", "3"), breakers={"crash_loop_rounds": 3})
    assert project.cli("serve").returncode == 69
    snap = documents(project)["peek --json"]
    assert snap["supervisor"]["state"] == "stopped"
    assert snap["supervisor"]["reason"] == "gave up: crash_loop"
    assert snap["breakers"]["crash_loop"] == {"count": 3, "limit": 3}
    assert [r["round"] for r in snap["last_rounds"]] == [3, 2, 1]
    assert all(r["exit_cause"] == "error" and r["exit_code"] == 3 for r in snap["last_rounds"])
    assert shown_rounds(project) == ["3: error (exit 3)", "2: error (exit 3)", "1: error (exit 3)"]
    assert project.cli("status").returncode == 3


def shown_rounds(project: Project) -> list[str]:
    """The rounds human peek shows, one line each, without their durations."""
    lines = project.cli("peek").stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("last rounds "))
    shown = [lines[start]]
    shown += [line for line in lines[start + 1 :] if line.startswith(" " * 12)]
    return [line[12:].split(" in ")[0] for line in shown]


def test_last_rounds_keeps_the_ten_newest_across_restarts(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 7})
    assert project.cli("serve").returncode == 0
    assert project.cli("serve").returncode == 0
    rounds = [r["round"] for r in peek(project)["last_rounds"]]
    assert rounds == list(range(14, 4, -1))
    assert shown_rounds(project) == [
        "14: clean (exit 0)",
        "13: clean (exit 0)",
        "12: clean (exit 0)",
    ]


def test_a_stale_pid_file_and_state_is_reported_stale_not_running(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    state_path = project.log_dir / "state.json"
    state = json.loads(state_path.read_text())
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    assert process_start_ticks(os.getpid()) != 1
    # As a serve SIGKILLed mid-round leaves them: state says running, serve.pid names it.
    for pid, ticks, why in (
        (dead_pid, 12345, f"pid {dead_pid} is gone"),
        (os.getpid(), 1, f"pid {os.getpid()} is another process now"),
    ):
        state["supervisor"] |= {"phase": "running", "pid": pid, "start_ticks": ticks}
        state["round"] = {"number": 2, "pid": dead_pid, "pgid": dead_pid, "started_at": 1.0}
        state_path.write_text(json.dumps(state))
        (project.log_dir / "serve.pid").write_text(json.dumps({"pid": pid, "start_ticks": ticks}))
        docs = documents(project)
        sup = docs["peek --json"]["supervisor"]
        assert (sup["state"], sup["pid"], sup["uptime_s"]) == ("stale", pid, None)
        assert why in sup["reason"]
        assert docs["peek --json"]["round"] is None
        assert docs["status --json"]["supervisor"]["state"] == "stale"
        status = project.cli("status")
        assert status.returncode == 3
        assert status.stdout.startswith("not running (stale)")


@pytest.mark.parametrize(
    "damage",
    [b"{not json", b"[1, 2]", b'{"supervisor": 5}', b'{"loop": {"crash_streak": -1}}', b"\xff\xfe"],
)
def test_a_damaged_state_file_still_gives_conforming_documents(
    project: Project, damage: bytes
) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    (project.log_dir / "state.json").write_bytes(damage)
    snap = documents(project)["peek --json"]
    assert snap["supervisor"]["state"] == "stopped"
    assert "state.json is damaged" in snap["supervisor"]["reason"]
    assert snap["last_rounds"] == []
    assert snap["breakers"]["crash_loop"]["count"] == 0


def test_odd_values_in_an_intact_state_file_never_leak_past_the_schema(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    path = project.log_dir / "state.json"
    state = json.loads(path.read_text())
    state["supervisor"] |= {"started_at": "yesterday", "version": 7}
    state["last_rounds"] = [{"round": "one"}, 5, state["last_rounds"][0]]
    state["plugins"] = [{"name": 1}, *state["plugins"]]
    state["sandbox"] = {"tier": "magic", "landlock_abi": 7}
    state["backoff_reason"] = None
    path.write_text(json.dumps(state))
    snap = peek(project)
    assert [r["round"] for r in snap["last_rounds"]] == [1]
    assert [p["name"] for p in snap["plugins"]["entries"]] == ["builtin"]
    assert snap["plugins"]["sandbox"] is None
    assert snap["supervisor"]["started_at"] is None


# --- exit codes through the real CLI ---------------------------------------------------------


def test_status_exits_0_running_3_not_running_78_bad_config(project: Project) -> None:
    project.write_config(agent("sleeper.py", "3600"))
    assert project.cli("status", "--json").returncode == 3
    project.start()
    project.wait_for("agent_spawn")
    assert project.cli("status", "--json").returncode == 0
    project.config_path.write_text("schema_version = 1\n[agent]\ncommand = 5\n")
    bad = project.cli("status", "--json")
    assert bad.returncode == 78
    assert bad.stdout == ""
    assert bad.stderr.count("\n") == 1
    assert "agent.command" in bad.stderr


def test_doctor_exits_0_ok_1_failed_78_unloadable(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    assert project.cli("doctor").returncode == 0
    (project.work_dir / "prompts" / "main.md").write_text("")
    failed = project.cli("doctor", "--json")
    assert failed.returncode == 1
    assert conforming("doctor --json", failed.stdout)["ok"] is False
    project.config_path.write_text("schema_version = 2\n")
    broken = project.cli("doctor", "--json")
    assert broken.returncode == 78
    doc = conforming("doctor --json", broken.stdout)
    assert [(c["name"], c["status"]) for c in doc["checks"]] == [("config", "fail")]
    assert (doc["ok"], doc["sandbox"], doc["plugins"]) == (False, None, [])
    assert project.cli("doctor").returncode == 78


def test_stop_exits_0_when_none_runs_and_1_at_its_timeout(project: Project) -> None:
    pids = project.root / "pids"
    project.write_config(agent("ignores_sigterm.py", str(pids)), agent={"sigterm_grace_s": 5})
    none = project.cli("stop", "--json")
    assert none.returncode == 0, none.stderr
    assert conforming("stop --json", none.stdout)["outcome"] == "not_running"
    serve = project.start()
    project.wait_for("agent_spawn")
    wait_until(pids.exists)
    # serve needs sigterm_grace_s (5 s) to take down an agent that ignores SIGTERM.
    late = project.cli("stop", "--json", "--timeout", "0.2")
    assert late.returncode == 1
    doc = conforming("stop --json", late.stdout)
    assert (doc["outcome"], doc["pid"]) == ("timeout", serve.pid)
    assert serve.wait(timeout=20) == 0


def test_usage_errors_exit_2_naming_what_is_wrong(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    select = project.cli("peek", "--select", "last_rounds.0.nope")
    assert select.returncode == 2
    assert "last_rounds.0 has no key 'nope'" in select.stderr
    deep = project.cli("peek", "--select", "round.n")
    assert deep.returncode == 2
    assert "round is null, which has no key 'n'" in deep.stderr
    assert project.cli("peek", "--select", "supervisor.state").stdout == "stopped\n"
    assert project.cli("peek", "--json", "--select", "supervisor.rounds_run").stdout == "1\n"
    typo = project.cli("events", "--kind", "round_strat")
    assert typo.returncode == 2
    assert "did you mean round_start" in typo.stderr
    assert typo.stdout == ""
    assert project.cli("events", "--kind", "round_start").stdout.count("round_start") == 1
    preset = project.cli("init", "--preset", "nope", "--force")
    assert preset.returncode == 2
    known = "'aider', 'claude', 'codex', 'copilot', 'demo', 'gemini', 'generic', 'opencode', 'qwen'"
    assert f"'nope' is not one of {known}" in preset.stderr


def test_peek_events_option_explains_itself() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent_runner", "peek", "--help"], capture_output=True, text=True
    )
    assert "--events INTEGER RANGE" in done.stdout
    assert "How many of the latest events to include" in done.stdout
