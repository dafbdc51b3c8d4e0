"""Anthropic Messages API (`POST /v1/messages`, streamed): what Claude Code talks to.

Error bodies and headers follow the shapes api.anthropic.com sends: `{"type":"error",
"error":{"type":…,"message":…}}`, `retry-after` and the `anthropic-ratelimit-*` reset headers.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from recording.fakeapi import NOT_FOUND, Reply, Request, json_reply, sse_reply

MODEL = "claude-sonnet-4-5-20250929"
RATE_LIMIT_RESET_S = 90
SHORT_RESET_S = 5
USAGE_LIMIT_RESET_S = 2 * 3600 + 17 * 60


def _error(status: int, kind: str, message: str, *headers: tuple[str, str]) -> Reply:
    body = {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_fake01",
    }
    return json_reply(status, body, ("request-id", "req_fake01"), *headers)


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def faults(now: float) -> dict[str, Reply]:
    """The error reply for each failing case, with resets counted from `now`."""
    reset = now + RATE_LIMIT_RESET_S
    usage_reset = int(now + USAGE_LIMIT_RESET_S)
    return {
        "rate_limit": _error(
            429,
            "rate_limit_error",
            "This request would exceed the rate limit for your organization of 50 requests per"
            " minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can"
            " see the response headers for current usage. Please reduce the prompt length or the"
            " maximum tokens requested, or try again later.",
            ("retry-after", str(RATE_LIMIT_RESET_S)),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", _rfc3339(reset)),
        ),
        "rate_limit_short": _error(
            429,
            "rate_limit_error",
            "This request would exceed the rate limit for your organization of 50 requests per"
            " minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.",
            ("retry-after", str(SHORT_RESET_S)),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", _rfc3339(now + SHORT_RESET_S)),
        ),
        "unknown_model": _error(404, "not_found_error", f"model: {MODEL}-nonexistent"),
        "auth": _error(401, "authentication_error", "invalid x-api-key"),
        "server_error": _error(500, "api_error", "Internal server error"),
        "overloaded": _error(529, "overloaded_error", "Overloaded"),
        "quota": _error(
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans &"
            " Billing to upgrade or purchase credits.",
        ),
        # A subscription (OAuth) account out of its five-hour window.
        "usage_limit": _error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-reset", str(usage_reset)),
            ("anthropic-ratelimit-unified-5h-status", "rejected"),
            ("anthropic-ratelimit-unified-5h-reset", str(usage_reset)),
            ("anthropic-ratelimit-unified-5h-utilization", "1.0"),
            ("anthropic-ratelimit-unified-representative-claim", "five_hour"),
            ("anthropic-ratelimit-unified-fallback-percentage", "0.5"),
        ),
    }


def reply(case: str, request: Request) -> Reply:
    """The reply to one request in `case`."""
    path = request.path.split("?")[0]
    if request.method != "POST" or not path.endswith("/v1/messages"):
        if path.endswith("/v1/messages/count_tokens"):
            return json_reply(200, {"input_tokens": 12})
        return NOT_FOUND
    fault = faults(time.time()).get(case)
    if fault is not None:
        return fault
    return _success(request)


def _success(request: Request) -> Reply:
    body = request.body if isinstance(request.body, dict) else {}
    model = str(body.get("model") or MODEL)
    usage = {
        "input_tokens": 25,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }
    message = {
        "id": "msg_fake01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    if not body.get("stream"):
        done = {**message, "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}
        return json_reply(200, {**done, "usage": {**usage, "output_tokens": 2}})
    return sse_reply(
        [
            ("message_start", {"type": "message_start", "message": message}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "done"},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 2},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )
