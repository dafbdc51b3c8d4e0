"""opencode, qwen and copilot: the rules the recorded corpus does not reach on its own.

The recordings (tests/unit/test_parsers_real.py) cover each CLI's real cases; these hand-written
tails pin the choices between two findings and the shapes no fake provider produced.
"""

from __future__ import annotations

import json
from typing import Any

from agent_runner.parsers import Usage, copilot, opencode, qwen

NOW = 1_800_000_000.0


def lines(*events: Any) -> bytes:
    return "".join(e if isinstance(e, str) else json.dumps(e) + "\n" for e in events).encode()


def step_finish(tokens_in: int, tokens_out: int, cost: float) -> dict[str, Any]:
    tokens = {"input": tokens_in, "output": tokens_out, "cache": {"read": 1, "write": 0}}
    return {"type": "step_finish", "part": {"type": "step-finish", "tokens": tokens, "cost": cost}}


def opencode_error(status: int, message: str, **headers: str) -> dict[str, Any]:
    data = {"message": message, "statusCode": status, "responseHeaders": headers}
    return {"type": "error", "error": {"name": "APIError", "data": data}}


def stream_error(message: str, *, small: bool = False) -> str:
    return (
        'timestamp=2026-12-01T22:00:00.000Z level=ERROR run=ab message="stream error"'
        f" providerID=fake small={'true' if small else 'false'} agent=build"
        f' error.error="AI_APICallError: {message}"\n'
    )


def test_opencode_sums_every_step_and_a_step_after_an_error_is_a_success() -> None:
    tail = lines(
        step_finish(10, 2, 0.01),
        opencode_error(500, "The server had an error while processing your request."),
        step_finish(5, 1, 0.02),
    )
    found = opencode.parse(tail, now=NOW)
    assert (found.transient, found.auth_error, found.setup_error) == (None, None, None)
    assert found.usage is not None
    assert (found.usage.input_tokens, found.usage.output_tokens) == (15, 3)
    assert found.usage.cache_read_tokens == 2
    assert found.usage.cost_usd is not None and abs(found.usage.cost_usd - 0.03) < 1e-9


def test_opencode_takes_the_reset_from_retry_after_seconds_or_an_http_date() -> None:
    seconds = opencode.parse(
        lines(opencode_error(429, "Too Many Requests", **{"retry-after": "30"})), now=NOW
    )
    assert seconds.transient is not None
    assert (seconds.transient.classification, seconds.transient.reset_at) == (
        "rate_limit_model",
        NOW + 30,
    )
    date = "Fri, 15 Jan 2027 09:00:00 GMT"  # NOW is 08:00 UTC that day
    dated = opencode.parse(
        lines(opencode_error(429, "Too Many Requests", **{"retry-after": date})), now=NOW
    )
    assert dated.transient is not None and dated.transient.reset_at == NOW + 3600
    # The message's own reset beats the header.
    worded = opencode_error(429, "Rate limited. Please try again in 20s.", **{"retry-after": "30"})
    found = opencode.parse(lines(worded), now=NOW)
    assert found.transient is not None and found.transient.reset_at == NOW + 20


def test_opencode_reads_stream_errors_only_of_the_round_and_only_after_a_failed_exit() -> None:
    title_only = lines(stream_error("Rate limit reached. Please try again in 1m30s.", small=True))
    assert opencode.parse(title_only, now=NOW).transient is None
    tail = lines(
        stream_error("The server had an error while processing your request."),
        stream_error("Rate limit reached. Please try again in 1m30s."),
    )
    found = opencode.parse(tail, now=NOW)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_model",
        NOW + 90,
    )
    assert opencode.parse(tail, now=NOW, prose=False).transient is None


def test_qwen_json_mode_prints_one_array_and_reads_the_same() -> None:
    events = [
        {"type": "system", "subtype": "init", "model": "qwen3-coder-plus"},
        {"type": "result", "subtype": "success", "is_error": False, "usage": {"input_tokens": 9}},
    ]
    found = qwen.parse((json.dumps(events) + "\n").encode(), now=NOW)
    assert found.usage == Usage("qwen3-coder-plus", 9, None, None, None, None)
    assert found.transient is None


def test_qwen_never_takes_its_own_retry_delay_for_a_reset() -> None:
    own = lines("Retrying in 60s (attempt 1/10): [API Error: 429 Too Many Requests]\n")
    found = qwen.parse(own, now=NOW)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == ("rate_limit_model", None)
    worded = lines("Retrying in 60s (attempt 2/10): [API Error: 429 Please try again in 5s.]\n")
    found = qwen.parse(worded, now=NOW)
    assert found.transient is not None and found.transient.reset_at == NOW + 5


def test_qwen_without_an_auth_type_is_a_setup_error() -> None:
    message = "No auth type is selected. Please configure an auth type before running."
    result = {"type": "result", "subtype": "error_during_execution", "is_error": True}
    found = qwen.parse(lines({**result, "error": {"message": message}}), now=NOW)
    assert found.setup_error == message
    assert (found.transient, found.auth_error) == (None, None)


def test_copilot_session_error_beats_the_failures_it_retried_and_a_clean_result_beats_both() -> (
    None
):
    failure = {"type": "model.call_failure", "data": {"statusCode": 500, "errorMessage": "{}"}}
    error = {
        "type": "session.error",
        "data": {"errorType": "authentication", "message": "Bad key", "statusCode": 401},
    }
    failed = copilot.parse(lines(failure, error, {"type": "result", "exitCode": 1}), now=NOW)
    assert failed.auth_error is not None and failed.transient is None
    start = {"type": "model.call_start", "data": {"model": "gpt-5"}}
    recovered = copilot.parse(lines(start, failure, {"type": "result", "exitCode": 0}), now=NOW)
    assert (recovered.transient, recovered.auth_error) == (None, None)
    assert recovered.usage == Usage("gpt-5", None, None, None, None, None)
