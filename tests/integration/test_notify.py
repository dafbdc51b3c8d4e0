"""[notify] through a real serve: a real script receives the event as JSON, a hang is killed
at the timeout without holding the loop, failures are evented, kinds are rate-limited."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_runner.events import iter_events
from tests.contracts import checks_by_name
from tests.integration.conftest import Project, agent, pid_alive

RECORDER = agent("records_notification.py")


def received(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def notify(record: Path, mode: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"command": [*RECORDER, str(record), mode], **extra}


def test_a_give_up_reaches_the_command_as_json_before_serve_exits(
    project: Project, tmp_path: Path
) -> None:
    record = tmp_path / "received.jsonl"
    project.write_config(
        agent("exits_with.py", "1"), breakers={"crash_loop_rounds": 2}, notify=notify(record)
    )
    done = project.cli(
        "serve", env={"SECRET_FOR_NOTIFY": "the supervisor's own", "NOTIFY_SOCKET": "@nope"}
    )
    assert done.returncode == 69, done.stderr
    [got] = received(record)
    [event] = project.events("crash_loop")
    assert json.loads(got["stdin"]) == event  # the very event, as written to the log
    assert got["stdin"].endswith("}\n")
    env = got["env"]
    assert env["AGENT_RUNNER_EVENT"] == "crash_loop"
    assert env["AGENT_RUNNER_WORK_DIR"] == str(project.work_dir)
    assert env["AGENT_RUNNER_LOG_DIR"] == str(project.log_dir)
    assert env["SECRET_FOR_NOTIFY"] == "the supervisor's own"  # unconfined: serve's environment
    assert "NOTIFY_SOCKET" not in env  # systemd's channel stays serve's own
    assert got["cwd"] == str(project.config_path.parent)
    assert project.events("notify_failed") == []


def test_a_hanging_command_is_killed_at_the_timeout_and_never_holds_the_loop(
    project: Project, tmp_path: Path
) -> None:
    record = tmp_path / "received.jsonl"
    project.write_config(
        agent("exits_with.py", "0"),
        runtime={"max_rounds": 3},
        notify=notify(record, "hang", on=["round_end"]),
    )
    done = project.cli("serve", timeout=60)
    assert done.returncode == 0, done.stderr
    kinds = [e["event"] for e in iter_events(project.log_dir)]
    # Rounds 2 and 3 ran while the notification of round 1 still hung.
    assert kinds.index("notify_failed") > [i for i, k in enumerate(kinds) if k == "round_end"][2]
    [failed] = project.events("notify_failed")
    assert failed["about"] == "round_end"
    assert failed["reason"].startswith("no exit within 5s; its process group was killed")
    [got] = received(record)  # one a minute per kind: rounds 2 and 3 were not notified
    assert not pid_alive(got["pid"])
    assert not pid_alive(got["child"])
    state = json.loads((project.log_dir / "state.json").read_text())
    assert state["notify"]["rate_limited"] == 2
    assert state["notify"]["failed"] == 1


def test_a_failing_command_is_evented_with_what_it_said(project: Project, tmp_path: Path) -> None:
    record = tmp_path / "received.jsonl"
    project.write_config(
        agent("exits_with.py", "0"),
        runtime={"max_rounds": 1},
        notify=notify(record, "fail", on=["serve_start", "serve_stop"]),
    )
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    failed = project.events("notify_failed")
    assert sorted(f["about"] for f in failed) == ["serve_start", "serve_stop"]
    assert {f["reason"] for f in failed} == {"exit 3: connecting to mail.example: refused"}
    snap = json.loads(project.cli("peek", "--json").stdout)
    assert snap["notify"]["failed"] == 2
    assert snap["notify"]["last"]["reason"] == "exit 3: connecting to mail.example: refused"


def test_output_past_the_cap_is_dropped_and_never_blocks_the_command(
    project: Project, tmp_path: Path
) -> None:
    record = tmp_path / "received.jsonl"
    project.write_config(
        agent("exits_with.py", "0"),
        runtime={"max_rounds": 1},
        notify=notify(record, "flood", on=["serve_stop"]),
    )
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    [failed] = project.events("notify_failed")
    assert failed["reason"].startswith("exit 1: xxxx")  # its first 4 KiB; 10 MiB were drained
    assert len(failed["reason"]) <= 200


def test_budget_waits_and_stops_can_be_notified_too(project: Project, tmp_path: Path) -> None:
    record = tmp_path / "received.jsonl"
    project.write_config(
        agent("reports_usage.py", "0.5", "10", "10"),
        budget={"max_cost_usd_per_day": 0.5},
        notify=notify(record, on=["budget_wait", "serve_stop"]),
    )
    serve = project.start()
    project.wait_for("budget_wait")
    serve.terminate()
    assert serve.wait(timeout=15) == 0
    # Two runs at once, each on its own thread: they may finish in either order.
    kinds = sorted(json.loads(got["stdin"])["event"] for got in received(record))
    assert kinds == ["budget_wait", "serve_stop"]


def test_a_command_that_cannot_start_is_a_config_error_at_boot_and_an_event_while_running(
    project: Project, tmp_path: Path
) -> None:
    project.write_config(agent("exits_with.py", "0"), notify={"command": ["no-such-notifier"]})
    done = project.cli("serve")
    assert done.returncode == 78
    assert "notify.command: 'no-such-notifier' is not an executable on PATH" in done.stderr
    checks = checks_by_name(project.cli("doctor", "--json").stdout)
    assert checks["notify"]["status"] == "fail"

    script = tmp_path / "notify.sh"
    script.write_text('#!/bin/sh\nrm -- "$0"\n')
    script.chmod(0o755)
    project.write_config(
        agent("exits_with.py", "0"),
        runtime={"max_rounds": 1},
        notify={"command": [str(script)], "on": ["round_start", "round_end"]},
    )
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    [failed] = project.events("notify_failed")  # round_end: the script removed itself
    assert failed["about"] == "round_end"
    assert "not found" in failed["reason"]


def test_unknown_kinds_and_notify_failed_are_refused(project: Project, tmp_path: Path) -> None:
    record = tmp_path / "received.jsonl"
    project.write_config(agent("exits_with.py", "0"), notify=notify(record, on=["crash_lop"]))
    done = project.cli("serve")
    assert done.returncode == 78
    assert "notify.on[0]: 'crash_lop' is not an event kind (did you mean 'crash_loop'?)" in (
        done.stderr
    )
    project.write_config(agent("exits_with.py", "0"), notify=notify(record, on=["notify_failed"]))
    done = project.cli("serve")
    assert done.returncode == 78
    assert "notify_failed cannot be notified" in done.stderr
