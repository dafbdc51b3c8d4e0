"""Codex `exec --json` transcripts: usage-limit resets in every form, retries, auth, usage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_runner.parsers import Findings, Usage, parse_transcript
from agent_runner.parsers.codex import parse

pytestmark = pytest.mark.usefixtures("utc_local_time")

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts" / "codex"
USAGE = Usage(None, 24763, 122, 24448, None, None)


def fixture(name: str) -> Findings:
    return parse_transcript("codex", FIXTURES / name, now=NOW)


def test_completed_turn_reports_usage_and_no_error() -> None:
    assert fixture("success.jsonl") == Findings(usage=USAGE)


@pytest.mark.parametrize(
    ("name", "reset_at"),
    [
        # "try again in 1 day 2 hours 5 minutes"
        ("usage_limit_relative.jsonl", NOW + 86400 + 2 * 3600 + 5 * 60),
        # "try again at 3:28 PM" in local time (UTC here), later the same day, to the minute:
        # the end of that minute
        ("usage_limit_clock.jsonl", NOW + 7 * 3600 + 29 * 60),
        # "try again at Jan 17th, 2027 9:05 AM"
        ("usage_limit_date.jsonl", NOW + 2 * 86400 + 3600 + 6 * 60),
        # the server's JSON body: "resets_at": NOW + 13872
        ("usage_limit_resets_at.jsonl", NOW + 13872),
    ],
)
def test_usage_limit_is_account_wide_with_its_stated_reset(name: str, reset_at: float) -> None:
    found = fixture(name)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        reset_at,
    )
    assert found.auth_error is None


def test_exhausted_retries_on_429_are_a_model_rate_limit() -> None:
    found = fixture("retry_limit_429.jsonl")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == ("rate_limit_model", None)
    assert found.transient.detail.startswith("turn.failed: exceeded retry limit, last status: 429")


def test_server_503_is_transient() -> None:
    found = fixture("server_503.jsonl")
    assert found.transient is not None
    assert found.transient.classification == "api_transient_5xx"


def test_401_is_an_auth_failure() -> None:
    found = fixture("auth_401.jsonl")
    assert found.transient is None
    assert found.auth_error is not None
    assert found.auth_error.startswith("turn.failed: unexpected status 401 Unauthorized")


def test_errors_retried_away_before_a_completed_turn_do_not_count() -> None:
    assert fixture("reconnected_then_completed.jsonl") == Findings(usage=USAGE)


def test_error_after_a_completed_turn_counts() -> None:
    lines = [
        {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 2}},
        {"type": "error", "message": "stream error: unexpected status 502 Bad Gateway"},
    ]
    tail = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    found = parse(tail, now=NOW)
    assert found.transient is not None
    assert found.transient.classification == "api_transient_5xx"
    assert found.usage == Usage(None, 1, 2, None, None, None)


def test_older_msg_event_shape_is_read() -> None:
    found = fixture("legacy_msg_events.jsonl")
    assert found.usage == Usage("gpt-5-codex", 8120, 911, 6016, None, None)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        NOW + 93900,
    )


def test_plain_text_run_reads_a_reset_wrapped_onto_the_next_line() -> None:
    found = fixture("plain_text_limit.log")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        NOW + 7 * 3600 + 29 * 60,
    )


def test_json_errors_count_after_a_clean_exit_and_plain_text_does_not() -> None:
    found = parse_transcript(
        "codex", FIXTURES / "retry_limit_429.jsonl", now=NOW, exit_cause="clean"
    )
    assert found.transient is not None
    plain = FIXTURES / "plain_text_limit.log"
    assert parse_transcript("codex", plain, now=NOW, exit_cause="clean") == Findings()
    assert parse_transcript("codex", plain, now=NOW).transient is not None


def test_quota_exceeded_message_is_an_account_limit() -> None:
    # codex 0.171 printed this for insufficient_quota in one recording run and only
    # "exceeded retry limit, last status: 429" in another (real/codex-0.171.0/quota.log).
    message = "Quota exceeded. Check your plan and billing details."
    lines = [
        {"type": "turn.started"},
        {"type": "error", "message": message},
        {"type": "turn.failed", "error": {"message": message}},
    ]
    found = parse("".join(json.dumps(line) + "\n" for line in lines).encode(), now=NOW)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        None,
    )
