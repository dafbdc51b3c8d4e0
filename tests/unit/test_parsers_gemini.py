"""Gemini CLI headless transcripts: the pretty-printed JSON result and stream-json events."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runner.parsers import Findings, Transient, Usage, parse_transcript
from agent_runner.parsers.gemini import parse

NOW = 1_800_000_000.0
FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts" / "gemini"


def fixture(name: str) -> Findings:
    return parse_transcript("gemini", FIXTURES / name, now=NOW)


def test_success_sums_tokens_over_models_and_names_the_busiest() -> None:
    assert fixture("success.json") == Findings(
        usage=Usage("gemini-2.5-pro", 24939 + 1200, 420 + 31, 21263, None, None)
    )


def test_model_capacity_quota_resets_after_the_stated_duration() -> None:
    found = fixture("quota_model_capacity.json")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_model",
        NOW + 2 * 3600 + 3 * 60 + 4,
    )
    assert found.transient.detail.startswith("TerminalQuotaError 429: You have exhausted")


def test_exceeded_quota_uses_the_retry_delay() -> None:
    found = fixture("quota_exceeded_retry_delay.json")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_account",
        NOW + 3600,
    )


@pytest.mark.parametrize(
    ("name", "classification"),
    [("server_503.json", "api_transient_5xx"), ("timeout.json", "api_timeout")],
)
def test_server_errors_and_timeouts_are_classified(name: str, classification: str) -> None:
    found = fixture(name)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (classification, None)


def test_missing_auth_method_is_a_setup_error_not_a_refused_key() -> None:
    found = fixture("auth_method_missing.json")
    assert (found.transient, found.auth_error) == (None, None)
    assert found.setup_error is not None
    assert found.setup_error.startswith("FatalAuthenticationError 41: Please set an Auth method")


def test_invalid_api_key_is_an_auth_failure_with_the_key_masked() -> None:
    found = fixture("api_key_invalid.json")
    assert found.auth_error == (
        "Error 400: API key not valid. Please pass a valid API key. (key AIza[REDACTED])"
    )


def test_stream_json_success_reads_flat_stats() -> None:
    assert fixture("stream_success.jsonl") == Findings(
        usage=Usage("gemini-2.5-pro", 5012, 309, 4096, None, None)
    )


def test_stream_json_error_result_is_classified_and_warnings_are_not() -> None:
    found = fixture("stream_quota_error.jsonl")
    assert found.transient == Transient(
        "rate_limit_model",
        NOW + 45 * 60 + 10,
        "TerminalQuotaError: You have exhausted your capacity on this model. "
        "Your quota will reset after 45m10s.",
    )


def test_plain_text_quota_error_falls_back_to_text() -> None:
    found = fixture("plain_text_quota.log")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_model",
        NOW + 3600 + 49 * 60 + 8,
    )


def test_error_object_with_an_http_code_only() -> None:
    tail = b'{"error": {"type": "Error", "message": "", "code": 504}}\n'
    assert parse(tail, now=NOW).transient == Transient("api_transient_5xx", None, "Error 504:")


def test_a_tool_error_in_a_run_killed_before_its_result_is_not_the_outcome() -> None:
    lines = (FIXTURES / "stream_success.jsonl").read_bytes().splitlines(keepends=True)[:3]
    tool = (
        b'{"type":"tool_result","timestamp":"2027-01-15T07:59:09.000Z","tool_id":"t1",'
        b'"status":"error","output":"","error":{"type":"shell_error","message":'
        b'"curl: (22) The requested URL returned error: 429 Too Many Requests"}}\n'
    )
    assert parse(b"".join(lines) + tool, now=NOW) == Findings()


def test_a_fatal_stream_error_event_is_the_outcome() -> None:
    init = (FIXTURES / "stream_success.jsonl").read_bytes().splitlines(keepends=True)[0]
    fatal = (
        b'{"type":"error","timestamp":"2027-01-15T07:59:40.000Z","severity":"error",'
        b'"message":"You have exhausted your capacity on this model. '
        b'Your quota will reset after 45m10s.","status":429}\n'
    )
    found = parse(init + fatal, now=NOW)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_model",
        NOW + 45 * 60 + 10,
    )


def test_structured_errors_count_after_a_clean_exit_and_plain_text_does_not() -> None:
    quota = parse_transcript(
        "gemini", FIXTURES / "stream_quota_error.jsonl", now=NOW, exit_cause="clean"
    )
    assert quota.transient is not None
    plain = parse_transcript(
        "gemini", FIXTURES / "plain_text_quota.log", now=NOW, exit_cause="clean"
    )
    assert plain == Findings()
