"""Each parser end to end: the real CLI runs an agent that prints a recorded transcript.

A rate limit with a reset a few seconds ahead makes serve wait for it; an auth failure in
two rounds makes serve give up with 69.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.conftest import Project, agent

FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"
# The transcript is written before serve starts: the reset must still lie ahead when serve
# parses it, even on a busy host where boot and the first round take seconds.
RESET_IN_S = 8


def claude_limit(reset_at: int, _in_s: int) -> str:
    info = {"status": "rejected", "rateLimitType": "five_hour", "resetsAt": reset_at}
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "api_error_status": 429,
        "result": "You've hit your limit · resets 1pm (UTC)",
        "usage": {"input_tokens": 10, "output_tokens": 2},
        "total_cost_usd": 0.001,
    }
    lines = [
        {"type": "system", "subtype": "init", "model": "claude-sonnet-4-5-20250929"},
        {"type": "rate_limit_event", "rate_limit_info": info},
        result,
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def codex_limit(reset_at: int, _in_s: int) -> str:
    body = {
        "type": "error",
        "error": {"type": "usage_limit_reached", "resets_at": reset_at},
        "status_code": 429,
    }
    message = f"unexpected status 429 Too Many Requests: {json.dumps(body)}"
    lines = [
        {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
        {"type": "turn.started"},
        {"type": "error", "message": message},
        {"type": "turn.failed", "error": {"message": message}},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def gemini_limit(_reset_at: int, in_s: int) -> str:
    # Gemini states its reset relative to now only.
    message = (
        f"You have exhausted your capacity on this model. Your quota will reset after {in_s}s."
    )
    outcome = {"error": {"type": "TerminalQuotaError", "message": message, "code": 429}}
    return "Loaded cached credentials.\n" + json.dumps(outcome, indent=2) + "\n"


def aider_limit(_reset_at: int, in_s: int) -> str:
    return (
        "Aider v0.86.1\n"
        "Main model: gpt-4o with diff edit format\n"
        "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for gpt-4o"
        " on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000."
        f" Please try again in {in_s}s.\n"
        "The API provider has rate limited you. Try again later or check your quotas.\n"
    )


def generic_limit(_reset_at: int, in_s: int) -> str:
    return f"[acme] reading src/\n[acme] error: rate limited (429), retry after {in_s}s\n"


# The generic parser reads only what [agent.patterns] names (docs/agents.md, "generic").
GENERIC_PATTERNS = {
    "rate_limit": r"^\[acme\] error: rate limited \(429\), retry after (?P<reset>\d+s)",
    "auth": r"^\[acme\] error: invalid API key",
}


def agent_table(parser: str) -> dict[str, object]:
    return (
        {"parser": parser, "patterns": GENERIC_PATTERNS}
        if parser == "generic"
        else {"parser": parser}
    )


# parser, transcript with a reset at the given epoch (or in so many seconds), exit code, class,
# reset given as an epoch
LIMITS: list[tuple[str, Callable[[int, int], str], int, str, bool]] = [
    ("claude", claude_limit, 1, "rate_limit_account", True),
    ("codex", codex_limit, 1, "rate_limit_account", True),
    ("gemini", gemini_limit, 1, "rate_limit_model", False),
    # aider exits 0 even when it gave up on the API.
    ("aider", aider_limit, 0, "rate_limit_model", False),
    ("generic", generic_limit, 1, "rate_limit_model", False),
]
AUTH_FAILURES = [
    ("claude", "claude/auth_401.jsonl", 1),
    ("codex", "codex/auth_401.jsonl", 1),
    ("gemini", "gemini/api_key_invalid.json", 41),
    ("aider", "aider/auth.log", 0),
    ("generic", "generic/auth.log", 1),
]


def ts(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize(
    ("parser", "transcript", "exit_code", "classification", "exact"),
    LIMITS,
    ids=[case[0] for case in LIMITS],
)
def test_rate_limit_waits_for_the_stated_reset(
    project: Project,
    tmp_path: Path,
    parser: str,
    transcript: Callable[[int, int], str],
    exit_code: int,
    classification: str,
    exact: bool,
) -> None:
    in_s = RESET_IN_S + 1
    reset_at = int(time.time()) + in_s
    path = tmp_path / f"{parser}-limit.log"
    path.write_text(transcript(reset_at, in_s))
    project.write_config(
        agent("prints_transcript.py", str(path), str(exit_code)),
        agent=agent_table(parser),
        runtime={"max_rounds": 2},
    )
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr

    transient = project.events("transient_error_detected")[0]
    assert (transient["round"], transient["classification"]) == (1, classification)
    if exact:
        assert transient["reset_at"] == reset_at
    else:
        # A relative reset ("in 3s") is resolved when the transcript is parsed: after the
        # agent exited, before the finding was written (event times are to the millisecond).
        parsed_after, parsed_before = ts(project.events("agent_exit")[0]), ts(transient)
        assert parsed_after + in_s - 0.001 <= transient["reset_at"] <= parsed_before + in_s + 0.001
    wait = project.events("backoff_wait")[0]
    assert wait["source"] == "server"
    assert wait["until"] >= transient["reset_at"]
    second = project.events("round_start")[1]
    assert ts(second) >= transient["reset_at"] - 0.01
    assert project.events("agent_auth_error_detected") == []


@pytest.mark.parametrize(
    ("parser", "fixture", "exit_code"), AUTH_FAILURES, ids=[case[0] for case in AUTH_FAILURES]
)
def test_auth_failure_in_two_rounds_gives_up_with_69(
    project: Project, parser: str, fixture: str, exit_code: int
) -> None:
    project.write_config(
        agent("prints_transcript.py", str(FIXTURES / fixture), str(exit_code)),
        agent=agent_table(parser),
        breakers={"auth_failed_rounds": 2},
    )
    done = project.cli("serve")
    assert done.returncode == 69, done.stderr
    assert [e["round"] for e in project.events("agent_auth_error_detected")] == [1, 2]
    assert project.events("auth_failed")[0]["count"] == 2
    assert project.events("transient_error_detected") == []


def test_an_aider_commit_message_about_401_does_not_trip_the_auth_breaker(project: Project) -> None:
    project.write_config(
        agent("prints_transcript.py", str(FIXTURES / "aider" / "success.log"), "0"),
        agent={"parser": "aider"},
        runtime={"max_rounds": 2},
        breakers={"auth_failed_rounds": 2},
    )
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    assert project.events("agent_auth_error_detected") == []
    assert project.events("auth_failed") == []
    assert len(project.events("agent_usage_recorded")) == 2
