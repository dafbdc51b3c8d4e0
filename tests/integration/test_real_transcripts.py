"""Every recorded transcript of the real CLIs, replayed through a real `serve`.

The agent prints the recording at once and exits with the recorded code, or hangs until the
round budget kills it when the CLI was still retrying at its budget. The breakers are set so
one round decides: an unclassified failure gives up as a crash loop (what a CLI that retried
without printing a line leaves serve with), an unclassified clean exit restarts at the
ordinary delay, and only the right finding produces the expected events.
"""

from __future__ import annotations

import signal
import time
from datetime import datetime
from typing import Any

import pytest

from agent_runner.parsers import Findings, Transient
from tests.integration.conftest import Project, agent
from tests.real_transcripts import EXPECTED, Recording, check_findings, recordings

RECORDINGS = recordings()
WAIT_S = 30.0


def ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")).timestamp()


def replay(project: Project, recording: Recording) -> tuple[int, list[dict[str, Any]]]:
    """Run serve on the recording until it exits or starts a back-off (then stop it)."""
    hang = ["hang"] if recording.meta["killed_at_budget"] else []
    project.write_config(
        agent("prints_transcript.py", str(recording.log), str(recording.meta["exit_code"]), *hang),
        agent={"parser": recording.cli},
        runtime={"max_rounds": 2, "round_budget_s": 1},
        breakers={"crash_loop_rounds": 1, "auth_failed_rounds": 1},
        vcs={"dirty_action": "ignore"},
    )
    serve = project.start()
    deadline = time.monotonic() + WAIT_S
    while serve.poll() is None and time.monotonic() < deadline:
        if project.events("backoff_wait"):
            serve.send_signal(signal.SIGTERM)
            break
        time.sleep(0.02)
    return serve.wait(timeout=WAIT_S), project.events()


@pytest.mark.parametrize("recording", RECORDINGS, ids=[r.id for r in RECORDINGS])
def test_serve_acts_on_the_recorded_transcript(project: Project, recording: Recording) -> None:
    expect = EXPECTED[(recording.cli, recording.case)]
    code, events = replay(project, recording)
    kinds = [e["event"] for e in events]

    def of(kind: str) -> list[dict[str, Any]]:
        return [e for e in events if e["event"] == kind]

    recorded = recording.meta["exit_cause"]
    assert of("agent_exit")[0]["exit_cause"] == recorded
    if expect.kind == "silent":
        # Nothing to read: an unexplained failure, which these breakers give up on at once.
        assert code == 69
        assert of("crash_loop")[0]["count"] == 1
        findings = ("transient_error_detected", "agent_auth_error_detected")
        assert not {*findings, "agent_setup_error_detected"} & set(kinds)
        return
    assert "crash_loop" not in kinds
    if expect.kind == "success":
        assert code == 0
        assert {"transient_error_detected", "agent_auth_error_detected"}.isdisjoint(kinds)
        assert {"agent_setup_error_detected", "backoff_wait"}.isdisjoint(kinds)
        assert of("agent_usage_recorded")[0]["round"] == 1
        return
    if expect.kind in ("auth", "setup"):
        detected, breaker = (
            ("agent_auth_error_detected", "auth_failed")
            if expect.kind == "auth"
            else ("agent_setup_error_detected", "setup_failed")
        )
        assert code == 69
        assert [e["round"] for e in of(detected)] == [1]
        assert of(breaker)[0]["count"] == 1
        assert "transient_error_detected" not in kinds
        return
    # A limit or an outage: a back-off (stopped during it), never a give-up or a quick restart.
    assert code == 0
    assert kinds.count("round_start") == 1
    detected = of("transient_error_detected")[0]
    wait = of("backoff_wait")[0]
    assert wait["classification"] == detected["classification"]
    reset_at = detected["reset_at"]
    found = Findings(transient=Transient(detected["classification"], reset_at, detected["detail"]))
    check_findings(found, expect, recording, ts(detected))
    ahead = reset_at is not None and reset_at > ts(wait)
    assert wait["source"] == ("server" if ahead else "estimated")
