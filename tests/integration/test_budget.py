"""Spend caps through a real serve: an agent reporting usage the way Claude Code does reaches
a cap, serve waits (across restarts and a lost state.json) instead of giving up, and a stop
or a raised cap ends the wait."""

from __future__ import annotations

import json
import math
import signal
import time

from agent_runner.events import parse_ts
from agent_runner.supervisor.loop.budget import DAY_S
from tests.contracts import checks_by_name, conforming
from tests.integration.conftest import Project, agent


def started_rounds(project: Project) -> int:
    return len(project.events("round_start"))


def test_a_reached_cost_cap_waits_across_restarts_and_a_lost_state_file(
    project: Project,
) -> None:
    project.write_config(
        agent("reports_usage.py", "0.03", "1000", "200"),
        budget={"max_cost_usd_per_day": 0.05},
    )
    serve = project.start()
    wait = project.wait_for("budget_wait")
    assert started_rounds(project) == 2  # $0.03, then $0.06: the third never starts
    assert (wait["cap"], wait["used"], wait["limit"]) == ("max_cost_usd_per_day", 0.06, 0.05)
    first_usage = parse_ts(project.events("agent_usage_recorded")[0]["ts"])
    assert first_usage is not None
    assert 0 <= wait["until"] - (first_usage + DAY_S) < 2  # when round 1's spend leaves the day
    snap = conforming("peek --json", project.cli("peek", "--json").stdout)
    assert snap["supervisor"]["state"] == "waiting"
    assert snap["supervisor"]["reason"] == "waiting for a spend cap (see budget.waiting)"
    assert snap["budget"]["waiting"]["cap"] == "max_cost_usd_per_day"
    assert snap["budget"]["last_24h"] == {"rounds": 2, "tokens": 2400, "cost_usd": 0.06}
    assert "waiting: max_cost_usd_per_day 0.06/0.05" in project.cli("peek").stdout
    checks = checks_by_name(project.cli("doctor", "--json").stdout)
    assert checks["spend caps"]["status"] == "warn"
    assert "max_cost_usd_per_day reached (0.06 of 0.05)" in checks["spend caps"]["detail"]
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=30) == 0  # at once, not after the day the window needs

    again = project.start()
    # state.json keeps whole seconds, rounded up: never earlier.
    assert 0 <= project.wait_for("budget_wait", count=2)["until"] - wait["until"] < 1
    time.sleep(0.5)
    assert started_rounds(project) == 2, "a restarted serve must not spawn past the cap"
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=5) == 0

    (project.log_dir / "state.json").unlink()
    rebuilt = project.start()
    # From the events' millisecond stamps, taken as the usage was reported.
    assert abs(project.wait_for("budget_wait", count=3)["until"] - wait["until"]) < 1
    time.sleep(0.5)
    assert started_rounds(project) == 2, "the ledger is rebuilt from the event log"
    rebuilt.send_signal(signal.SIGTERM)
    assert rebuilt.wait(timeout=5) == 0


def test_rounds_that_report_no_usage_count_toward_rounds_per_hour_only(
    project: Project,
) -> None:
    project.write_config(
        agent("exits_with.py", "0"),
        budget={"max_rounds_per_hour": 3, "max_tokens_per_day": 1, "max_cost_usd_per_day": 0.01},
    )
    serve = project.start()
    wait = project.wait_for("budget_wait")
    assert started_rounds(project) == 3
    assert (wait["cap"], wait["used"], wait["limit"]) == ("max_rounds_per_hour", 3, 3)
    first_start = parse_ts(project.events("round_start")[0]["ts"])
    assert first_start is not None
    assert 0 <= wait["until"] - (first_start + 3600) < 2
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=5) == 0


def test_a_tokens_cap_counts_input_and_output_tokens(project: Project) -> None:
    project.write_config(
        agent("reports_usage.py", "0", "700", "300"), budget={"max_tokens_per_day": 2500}
    )
    checks = checks_by_name(project.cli("doctor", "--json").stdout)
    assert checks["spend caps"]["status"] == "ok"
    assert checks["spend caps"]["detail"].startswith("max_tokens_per_day = 2500; last 24 h: 0")
    serve = project.start()
    wait = project.wait_for("budget_wait")
    assert started_rounds(project) == 3  # 1000, 2000, 3000 tokens (cache reads not counted)
    assert (wait["cap"], wait["used"], wait["limit"]) == ("max_tokens_per_day", 3000, 2500)
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=5) == 0


def test_the_wait_ends_when_the_window_has_room_again(project: Project) -> None:
    # Yesterday's spend, recorded 15 s short of a day ago: the cap frees up 15 s from now,
    # time enough for serve to boot and find it reached even on a crowded host.
    spent_at = math.ceil(time.time() - DAY_S + 15)
    day = {"at": [spent_at], "rounds": [1], "tokens": [0], "cost_micro_usd": [1_000_000]}
    hour = {"at": [], "rounds": [], "tokens": [], "cost_micro_usd": []}
    project.log_dir.mkdir()
    (project.log_dir / "state.json").write_text(json.dumps({"budget": {"hour": hour, "day": day}}))
    project.write_config(
        agent("reports_usage.py", "0.01", "10", "10"),
        budget={"max_cost_usd_per_day": 0.5},
        runtime={"max_rounds": 1},
    )
    done = project.cli("serve", timeout=60)
    assert done.returncode == 0, done.stderr
    wait = project.events("budget_wait")[0]
    assert wait["until"] == spent_at + DAY_S
    round_start = parse_ts(project.events("round_start")[0]["ts"])
    assert round_start is not None
    assert round_start >= wait["until"]


def test_a_cap_raised_while_serve_waits_applies_at_once(project: Project) -> None:
    project.write_config(
        agent("reports_usage.py", "1", "10", "10"),
        budget={"max_cost_usd_per_day": 1},
        runtime={"max_rounds": 2},
    )
    serve = project.start()
    project.wait_for("budget_wait")
    project.write_config(
        agent("reports_usage.py", "1", "10", "10"),
        budget={"max_cost_usd_per_day": 5},
        runtime={"max_rounds": 2},
    )
    assert serve.wait(timeout=15) == 0
    assert started_rounds(project) == 2
    assert project.events("config_reloaded")[0]["changed"] == ["budget.max_cost_usd_per_day"]
