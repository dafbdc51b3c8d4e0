"""Plain-text fallback and reset-time wording: every form resolves to an exact epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runner.parsers import Findings, parse_transcript
from agent_runner.parsers.resets import parse_clock, parse_duration
from agent_runner.parsers.text import classify_line, find_reset, scan_lines

pytestmark = pytest.mark.usefixtures("utc_local_time")

NOW = 1_800_000_000.0  # Friday 2027-01-15T08:00:00Z
MINUTE = 60  # a reset stated to the minute is taken as the end of that minute
FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts" / "text"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h49m8s.", 6548.0),
        ("12.5s", 12.5),
        ("500ms", 0.5),
        ("3 days 6 hours 57 minutes.", 3 * 86400 + 6 * 3600 + 57 * 60),
        ("1 day, 2 hours and 5 minutes", 86400 + 7200 + 300),
        ("2h 5m", 7500.0),
        ("45 minutes", 2700.0),
        ("6m0s", 360.0),
        ("later", None),
        ("", None),
    ],
)
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        ("3pm", 7 * 3600 + MINUTE),
        ("3:28 PM.", 7 * 3600 + 28 * 60 + MINUTE),
        ("3:28:30 PM", 7 * 3600 + 28 * 60 + 30),  # seconds given: exact
        ("3:28:75 PM", None),
        ("15:00 UTC", 7 * 3600 + MINUTE),
        ("12am", 16 * 3600 + MINUTE),  # midnight has passed today: the next one
        ("7am", 23 * 3600 + MINUTE),  # an hour ago, beyond the tolerance: tomorrow
        ("7:50am", -10 * 60 + MINUTE),  # ten minutes ago: the reset the message meant
        ("8:30pm (Asia/Tokyo)", 3 * 3600 + 30 * 60 + MINUTE),
        ("1pm (Etc/GMT+5)", 10 * 3600 + MINUTE),
        ("9am (Europe/Berlin)", MINUTE),
        ("Jan 17th, 2027 9:05 AM", 2 * 86400 + 3600 + 5 * 60 + MINUTE),
        ("Jan 19, 10am (Asia/Seoul)", 3 * 86400 + 17 * 3600 + MINUTE),
        ("Jan 16 at 8am", 86400 + MINUTE),
        ("Jan 3", 353 * 86400 - 8 * 3600),  # no year and long past: next January
        ("1/20/2027", 5 * 86400 - 8 * 3600),
        ("2027-01-15T10:30:00Z", 2 * 3600 + 30 * 60),
        ("2027-01-15T10:30:00+02:00", 30 * 60),
        ("2027-01-15 09:00", 3600),
        ("2027-13-45T10:30:00Z", None),
        ("3 attempts", None),
        ("soon", None),
        ("25:00", None),
    ],
)
def test_clock_times_and_dates(text: str, offset: float | None) -> None:
    expected = None if offset is None else NOW + offset
    assert parse_clock(text, NOW) == expected


def test_unknown_zone_falls_back_to_local_time() -> None:
    assert parse_clock("3pm (Mars/Olympus)", NOW) == NOW + 7 * 3600 + MINUTE


@pytest.mark.parametrize(
    ("line", "offset"),
    [
        ("Claude AI usage limit reached|1800007200", 7200),
        ('{"resets_at": 1800013872, "resets_in_seconds": 13872}', 13872),
        ('"retryDelay": "37s"', 37),
        ("Please try again in 2.5s.", 2.5),
        ("Your quota will reset after 1h2m3s.", 3723),
        ("or try again at 3:28 PM.", 7 * 3600 + 28 * 60 + MINUTE),
        ("Usage will reset when your monthly cycle ends on 1/20/2027.", 5 * 86400 - 8 * 3600),
        ("Retrying in 32.0 seconds...", None),
    ],
)
def test_reset_forms_in_a_line(line: str, offset: float | None) -> None:
    assert find_reset(line, NOW) == (None if offset is None else NOW + offset)


@pytest.mark.parametrize(
    ("line", "classification"),
    [
        ("You've hit your usage limit. Try again Aug 18.", "rate_limit_account"),
        ("5-hour limit reached ∙ resets 3pm", "rate_limit_account"),
        ("You've hit your Opus limit · resets 9am", "rate_limit_model"),
        ("Error: 429 Too Many Requests", "rate_limit_model"),
        ("Rate limit reached for gpt-4o on tokens per min (TPM)", "rate_limit_model"),
        ("status: 529 overloaded_error", "api_transient_5xx"),
        ("502 Bad Gateway", "api_transient_5xx"),
        ("504 Gateway Timeout", "api_transient_5xx"),
        ("API Error: Request timed out.", "api_timeout"),
        (
            "Could not connect to local model provider at http://127.0.0.1:1/v1.",
            "api_transient_5xx",
        ),
        ("Cannot connect to API: Unable to connect.", "api_transient_5xx"),
        ("The server had an error while processing your request. Sorry!", "api_transient_5xx"),
        ("Reconnect the cable and try the build again.", None),
        ("Approaching usage limit · resets at 12pm", None),
        ("You've used 90% of your weekly limit · resets Jan 19", None),
        ("Fixed the loop on line 429.", None),
        ("Wrote docs: on HTTP 429 the client waits until the reset.", None),
    ],
)
def test_line_classification(line: str, classification: str | None) -> None:
    assert classify_line(line) == classification


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("claude_session_limit.log", 3 * 3600 + 30 * 60 + MINUTE),
        ("claude_weekly_limit.log", 3 * 86400 + 17 * 3600 + MINUTE),
    ],
)
def test_text_parser_finds_claude_limit_messages(name: str, offset: float) -> None:
    found = parse_transcript("text", FIXTURES / name, now=NOW)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        NOW + offset,
    )


@pytest.mark.parametrize("name", ["approaching_warning_only.log", "agent_wrote_about_limits.log"])
def test_warnings_and_prose_about_limits_are_not_errors(name: str) -> None:
    assert parse_transcript("text", FIXTURES / name, now=NOW) == Findings()


def test_a_line_with_a_reset_beats_a_later_line_without_one() -> None:
    found = scan_lines(
        ["You've hit your session limit · resets 3pm", "Error: 429 Too Many Requests"], now=NOW
    )
    assert found.transient is not None
    assert found.transient.reset_at == NOW + 7 * 3600 + MINUTE


def test_log_in_prompts_are_auth_failures() -> None:
    for line in (
        "Not logged in · Please run /login",
        "OAuth token has expired",
        "Error: 401",
        "Error: No authentication information found.",
    ):
        assert scan_lines([line], now=NOW).auth_error == line


def test_an_agents_summary_about_limits_is_neither_a_transient_nor_an_auth_failure() -> None:
    found = parse_transcript("text", FIXTURES / "agent_wrote_about_limits.log", now=NOW)
    assert (found.transient, found.auth_error) == (None, None)


@pytest.mark.parametrize(
    "line",
    [
        "- The client now retries on 503 Service Unavailable with exponential backoff.",
        "RateLimitError from the SDK is caught and logged.",
        'When the provider answers "usage limit reached", the CLI prints the reset time.',
        "Requests that timed out (408) are retried once.",
        "503 Service Unavailable responses are retried with a jittered delay.",
        "Usage limit reached messages now include the reset time.",
        "Commit 9f8e7d6 fix: return 401 Unauthorized when the API key is invalid",
        "* 429 Too Many Requests now waits for the reset",
    ],
)
def test_prose_mentioning_errors_is_not_a_cli_message(line: str) -> None:
    assert scan_lines([line], now=NOW) == Findings()


@pytest.mark.parametrize(
    ("line", "classification"),
    [
        ("429 Too Many Requests", "rate_limit_model"),
        ("HTTP/1.1 503 Service Unavailable", "api_transient_5xx"),
        ('API Error: 529 {"type":"error"}', "api_transient_5xx"),
        ("[2027-01-15T07:58:09] ERROR: exceeded retry limit, last status: 429", "rate_limit_model"),
        ("  ⎿  API Error: Request timed out.", "api_timeout"),
        ("Claude AI usage limit reached|1800007200", "rate_limit_account"),
        ("5-hour limit reached ∙ resets 3pm", "rate_limit_account"),
        ("openai.RateLimitError: Error code: 429", "rate_limit_model"),
        ("Request timed out.", "api_timeout"),
    ],
)
def test_cli_message_shapes_still_count(line: str, classification: str) -> None:
    found = scan_lines([line], now=NOW)
    assert found.transient is not None
    assert found.transient.classification == classification


def test_after_a_clean_exit_the_text_fallback_reports_nothing() -> None:
    name = FIXTURES / "claude_session_limit.log"
    assert parse_transcript("text", name, now=NOW, exit_cause="clean") == Findings()
    assert parse_transcript("text", name, now=NOW, exit_cause="error").transient is not None


@pytest.mark.parametrize(
    "line",
    [
        "ERROR: The model `gpt-9` does not exist or you do not have access to it.",
        "Error: Model 'gpt-9' not found on provider at http://127.0.0.1:1/v1 (HTTP 404).",
        "Error: No auth type is selected. Please configure an auth type.",
    ],
)
def test_a_cli_that_cannot_run_in_this_setup_is_a_setup_error(line: str) -> None:
    found = scan_lines([line], now=NOW)
    assert (found.transient, found.auth_error, found.setup_error) == (None, None, line)


@pytest.mark.parametrize(
    "line",
    [
        "- the model class does not exist yet, so the migration creates it",
        "Error: not_found_error: file not found",
        "Error: the folder is not trusted by the linter",
    ],
)
def test_prose_about_models_or_trust_is_not_a_setup_error(line: str) -> None:
    assert scan_lines([line], now=NOW).setup_error is None
