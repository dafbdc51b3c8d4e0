"""aider plain-text transcripts: litellm errors after the last reply, the Tokens/Cost lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runner.parsers import Findings, Usage, parse_transcript
from agent_runner.parsers.aider import parse

NOW = 1_800_000_000.0
FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts" / "aider"
MODEL = "anthropic/claude-sonnet-4-20250514"


def fixture(name: str) -> Findings:
    return parse_transcript("aider", FIXTURES / name, now=NOW)


def test_success_reports_usage_and_a_commit_message_about_401_is_not_an_auth_failure() -> None:
    assert fixture("success.log") == Findings(
        usage=Usage(
            model=MODEL,
            input_tokens=12_000,
            output_tokens=1_200,
            cache_read_tokens=8_100,
            cache_creation_tokens=2_400,
            cost_usd=0.05,
        )
    )


def test_a_commit_message_about_429_after_the_tokens_line_is_not_a_rate_limit() -> None:
    found = fixture("success_commit_mentions_429.log")
    assert (found.transient, found.auth_error) == (None, None)
    assert found.usage == Usage(MODEL, 9_800, 512, None, None, 0.04)


def test_each_reply_of_a_lint_fix_reflection_is_summed_with_the_session_cost() -> None:
    tail = (
        b"Tokens: 12k sent, 2.4k cache write, 8.1k cache hit, 1.2k received."
        b" Cost: $0.05 message, $0.05 session.\n"
        b"Applied edit to auth.py\n"
        b"Commit 9f8e7d6 fix: return 401 Unauthorized when the API key is invalid\n"
        b"# Fix any errors below, if possible.\n"
        b"auth.py:3:1: F401 'os' imported but unused\n"
        b"Tokens: 14k sent, 345 received. Cost: $0.03 message, $0.08 session.\n"
        b"Applied edit to auth.py\n"
        b"Commit 0a1b2c3 style: drop the unused import after 503 Service Unavailable fix\n"
    )
    assert parse(tail, now=NOW) == Findings(
        usage=Usage(None, 12_000 + 14_000, 1_200 + 345, 8_100, 2_400, 0.08)
    )


@pytest.mark.parametrize(
    "line",
    [
        "I added a retry for litellm.RateLimitError and 429 Too Many Requests.",
        "Error: 401 Unauthorized is now mapped to a log-in prompt.",
        "Applied edit to litellm_errors.py",
    ],
)
def test_lines_that_are_not_aiders_error_shapes_do_not_count(line: str) -> None:
    assert parse(f"Aider v0.86.1\n{line}\n".encode(), now=NOW) == Findings()


def test_aiders_own_error_lines_count_after_a_clean_exit() -> None:
    # aider exits 0 after giving up on the API, so a clean exit proves nothing here.
    found = parse_transcript("aider", FIXTURES / "rate_limit.log", now=NOW, exit_cause="clean")
    assert found.transient is not None
    assert found.transient.classification == "rate_limit_model"
    found = parse_transcript("aider", FIXTURES / "auth.log", now=NOW, exit_cause="clean")
    assert found.auth_error is not None


def test_an_unshaped_error_before_retrying_counts_only_after_a_failed_exit() -> None:
    tail = b"OpenrouterException - upstream 503 Service Unavailable\nRetrying in 0.2 seconds...\n"
    found = parse(tail, now=NOW)
    assert found.transient is not None
    assert found.transient.classification == "api_transient_5xx"
    assert parse(tail, now=NOW, prose=False) == Findings()


def test_rate_limit_with_only_aiders_own_retry_pacing_has_no_reset() -> None:
    found = fixture("rate_limit.log")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == ("rate_limit_model", None)
    assert found.usage is None


def test_provider_stated_retry_delay_is_the_reset() -> None:
    found = fixture("openai_rate_limit_reset.log")
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_model",
        NOW + 2.5,
    )


@pytest.mark.parametrize(
    ("name", "classification"),
    [("overloaded.log", "api_transient_5xx"), ("timeout.log", "api_timeout")],
)
def test_server_errors_and_timeouts_are_classified(name: str, classification: str) -> None:
    found = fixture(name)
    assert found.transient is not None
    assert found.transient.classification == classification


def test_authentication_error_is_an_auth_failure() -> None:
    found = fixture("auth.log")
    assert found.transient is None
    # The exception itself is the reason: it says what the provider refused.
    assert found.auth_error is not None
    assert found.auth_error.startswith("litellm.AuthenticationError: AnthropicException")


def test_rate_limit_retried_into_a_reply_does_not_count() -> None:
    assert fixture("rate_limit_then_recovered.log") == Findings(
        usage=Usage(MODEL, 9_800, 512, None, None, 0.04)
    )


def test_error_after_a_reply_counts_and_keeps_the_usage() -> None:
    found = fixture("error_after_reply.log")
    assert found.transient is not None
    assert found.transient.classification == "api_transient_5xx"
    assert found.usage == Usage(MODEL, 9_800, 512, None, None, 0.04)


def test_code_in_the_reply_that_mentions_429_is_not_an_error() -> None:
    tail = (
        b"if status == 429:  # rate limit exceeded, too many requests\n"
        b"Tokens: 1.5k sent, 20 received. Cost: $0.01 message, $0.01 session.\n"
    )
    assert parse(tail, now=NOW) == Findings(usage=Usage(None, 1_500, 20, None, None, 0.01))


def test_tokens_line_without_cost_is_usage_without_cost() -> None:
    tail = b"Model: ollama/qwen2.5-coder with whole edit format\nTokens: 812 sent, 1.1k received.\n"
    assert parse(tail, now=NOW) == Findings(
        usage=Usage("ollama/qwen2.5-coder", 812, 1_100, None, None, None)
    )
