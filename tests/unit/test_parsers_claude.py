"""Claude Code stream-json transcripts: limits, API errors, auth, usage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_runner.parsers import Findings, Transient, Usage, parse_transcript
from agent_runner.parsers.claude import parse

pytestmark = pytest.mark.usefixtures("utc_local_time")

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts" / "claude"
USAGE = Usage(
    model="claude-sonnet-4-5-20250929",
    input_tokens=1523,
    output_tokens=2890,
    cache_read_tokens=184220,
    cache_creation_tokens=20150,
    cost_usd=0.1368961,
)


def fixture(name: str) -> Findings:
    return parse_transcript("claude", FIXTURES / name, now=NOW)


def result_line(**fields: object) -> bytes:
    line = {"type": "result", "subtype": "success", "is_error": False, "result": "", **fields}
    return json.dumps(line).encode() + b"\n"


def test_successful_round_reports_usage_exactly_as_written() -> None:
    assert fixture("success.jsonl") == Findings(usage=USAGE)


def test_rejected_five_hour_limit_is_account_wide_with_the_exact_reset() -> None:
    found = fixture("rate_limit_five_hour.jsonl")
    assert found.transient == Transient(
        "rate_limit_account", NOW + 18000, "rate_limit_event five_hour rejected"
    )
    assert found.auth_error is None
    assert found.usage is not None
    assert found.usage.cost_usd == 0.0123


def test_rejected_opus_weekly_limit_is_model_scoped() -> None:
    found = fixture("rate_limit_seven_day_opus.jsonl")
    assert found.transient == Transient(
        "rate_limit_model", NOW + 4 * 86400, "rate_limit_event seven_day_opus rejected"
    )


def test_two_rejected_windows_wait_for_the_later_reset() -> None:
    found = fixture("rate_limit_two_windows.jsonl")
    assert found.transient is not None
    assert found.transient.reset_at == NOW + 2 * 86400
    assert found.transient.classification == "rate_limit_account"


def test_limit_lifted_and_round_succeeded_is_not_an_error() -> None:
    assert fixture("rate_limit_lifted_then_success.jsonl") == Findings(usage=USAGE)


def test_allowed_warning_alone_is_not_an_error() -> None:
    event = {
        "type": "rate_limit_event",
        "rate_limit_info": {
            "status": "allowed_warning",
            "resetsAt": NOW + 60,
            "rateLimitType": "five_hour",
        },
    }
    tail = json.dumps(event).encode() + b"\n"
    assert parse(tail, now=NOW) == Findings()


def test_rejection_without_a_result_line_still_counts() -> None:
    event = {
        "type": "rate_limit_event",
        "rate_limit_info": {
            "status": "rejected",
            "resetsAt": NOW + 900,
            "rateLimitType": "seven_day",
        },
    }
    found = parse(json.dumps(event).encode() + b"\n", now=NOW)
    assert found.transient == Transient(
        "rate_limit_account", NOW + 900, "rate_limit_event seven_day rejected"
    )


def test_rejection_without_reset_names_the_account_limit_over_a_bare_429() -> None:
    event = {
        "type": "rate_limit_event",
        "rate_limit_info": {"status": "rejected", "rateLimitType": "five_hour"},
    }
    tail = json.dumps(event).encode() + b"\n" + result_line(is_error=True, api_error_status=429)
    found = parse(tail, now=NOW)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        None,
    )


def test_429_without_a_reset_is_a_model_rate_limit() -> None:
    found = fixture("api_429_no_reset.jsonl")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == ("rate_limit_model", None)
    assert found.transient.detail.startswith("result api_error_status 429: API Error: 429")


@pytest.mark.parametrize(
    ("name", "classification"),
    [
        ("api_529_overloaded.jsonl", "api_transient_5xx"),
        ("api_500.jsonl", "api_transient_5xx"),
        ("api_timeout.jsonl", "api_timeout"),
    ],
)
def test_api_errors_are_classified(name: str, classification: str) -> None:
    found = fixture(name)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (classification, None)


@pytest.mark.parametrize(
    ("status", "classification"),
    [
        (429, "rate_limit_model"),
        (500, "api_transient_5xx"),
        (502, "api_transient_5xx"),
        (503, "api_transient_5xx"),
        (504, "api_transient_5xx"),
        (529, "api_transient_5xx"),
        (408, "api_timeout"),
    ],
)
def test_api_error_status_alone_decides_the_class(status: int, classification: str) -> None:
    found = parse(result_line(is_error=True, api_error_status=status), now=NOW)
    assert found.transient == Transient(classification, None, f"result api_error_status {status}")


@pytest.mark.parametrize("status", [401, 403])
def test_auth_statuses_are_auth_failures_not_transients(status: int) -> None:
    found = parse(result_line(is_error=True, api_error_status=status), now=NOW)
    assert found.transient is None
    assert found.auth_error == f"result api_error_status {status}"


def test_invalid_api_key_is_an_auth_failure() -> None:
    found = fixture("auth_401.jsonl")
    assert found.transient is None
    assert found.auth_error == "result api_error_status 401: Invalid API key · Please run /login"


def test_secrets_in_an_error_are_redacted() -> None:
    reason = fixture("auth_secret_in_error.jsonl").auth_error
    assert reason is not None
    assert "AbCdEfGhIjKlMnOpQrStUv" not in reason
    assert "secretpart" not in reason
    assert "sk-[REDACTED]" in reason
    assert "Bearer [REDACTED]" in reason


def test_legacy_limit_message_with_epoch_gives_the_exact_reset() -> None:
    found = fixture("legacy_limit_epoch.jsonl")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        NOW + 7200,
    )


def test_glued_truncated_and_garbage_lines_are_survived() -> None:
    found = fixture("glued_and_truncated.jsonl")
    # The rate_limit_event glued after a torn line is found, and its reset wins
    # over the "resets 9:30am" prose of the result.
    assert found.transient == Transient(
        "rate_limit_account", NOW + 5400, "rate_limit_event five_hour rejected"
    )
    assert found.usage is not None
    assert (found.usage.model, found.usage.cost_usd) == ("claude-sonnet-4-5-20250929", 0.0042)


def test_round_killed_mid_stream_reports_nothing() -> None:
    assert fixture("killed_mid_run.jsonl") == Findings()


def test_plain_text_output_falls_back_to_the_limit_message() -> None:
    found = fixture("plain_text_limit.log")
    # 3pm in New York on 2027-01-15 is 20:00 UTC; to the minute, so the end of 20:00.
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        NOW + 12 * 3600 + 60,
    )


def test_demo_parser_reads_the_same_stream_json() -> None:
    for name in ("success.jsonl", "rate_limit_five_hour.jsonl"):
        path = FIXTURES / name
        assert parse_transcript("demo", path, now=NOW) == parse_transcript("claude", path, now=NOW)


def test_model_comes_from_model_usage_when_the_init_line_is_gone() -> None:
    tail = result_line(
        usage={"input_tokens": 5, "output_tokens": 7},
        total_cost_usd=0.5,
        modelUsage={"claude-haiku-4-5": {"costUSD": 0.01}, "claude-opus-4-1": {"costUSD": 0.49}},
    )
    assert parse(tail, now=NOW).usage == Usage("claude-opus-4-1", 5, 7, None, None, 0.5)


def test_agent_text_in_a_line_torn_by_a_timeout_kill_is_not_a_rate_limit() -> None:
    init = (FIXTURES / "success.jsonl").read_bytes().splitlines(keepends=True)[0]
    torn = (
        b'{"type":"assistant","message":{"id":"msg_09","type":"message","role":"assistant",'
        b'"content":[{"type":"text","text":"Done. 429 Too Many Requests now waits for the '
        b"reset, and Error: 401 Unauthorized asks the user to log in; usage limit reached"
    )
    assert parse(init + torn, now=NOW) == Findings()
    assert parse(torn, now=NOW) == Findings()


def test_a_plain_text_limit_is_dropped_after_a_clean_exit_but_a_rejected_event_is_not() -> None:
    plain = FIXTURES / "plain_text_limit.log"
    assert parse_transcript("claude", plain, now=NOW, exit_cause="clean") == Findings()
    assert parse_transcript("claude", plain, now=NOW).transient is not None
    limit = FIXTURES / "rate_limit_five_hour.jsonl"
    found = parse_transcript("claude", limit, now=NOW, exit_cause="clean")
    assert found == parse_transcript("claude", limit, now=NOW)
    assert found.transient is not None
    result = parse_transcript("claude", FIXTURES / "auth_401.jsonl", now=NOW, exit_cause="clean")
    assert result.auth_error is not None


def test_text_mode_api_error_with_its_json_body_glued_on_is_classified() -> None:
    tail = (
        b"Looking at the failing test...\n"
        b'API Error: 429 {"type":"error","error":{"type":"rate_limit_error",'
        b'"message":"This request would exceed your rate limit."}}\n'
    )
    found = parse(tail, now=NOW)
    assert found.transient is not None
    assert found.transient.classification == "rate_limit_model"
