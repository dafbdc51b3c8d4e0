"""OpenAI Responses (`POST /v1/responses`, codex) and Chat Completions (aider through litellm).

Error bodies follow api.openai.com: `{"error":{"message":…,"type":…,"param":…,"code":…}}` with
`retry-after` and `x-ratelimit-reset-*` headers; codex's ChatGPT-plan limit is
`usage_limit_reached` with `resets_at`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from recording.fakeapi import NOT_FOUND, Reply, Request, json_reply, sse_reply

MODEL = "gpt-5-codex"
RATE_LIMIT_RESET_S = 90
USAGE_LIMIT_RESET_S = 2 * 3600 + 17 * 60


def _error(
    status: int, message: str, kind: str, code: str | None, *headers: tuple[str, str]
) -> Reply:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return json_reply(status, body, ("x-request-id", "req_fake01"), *headers)


def faults(now: float) -> dict[str, Reply]:
    """The error reply for each failing case, with resets counted from `now`."""
    usage_reset = int(now + USAGE_LIMIT_RESET_S)
    return {
        "rate_limit": _error(
            429,
            "Rate limit reached for gpt-5-codex in organization org-fake on tokens per min (TPM):"
            " Limit 30000, Used 29500, Requested 1200. Please try again in 1m30s. Visit"
            " https://platform.openai.com/account/rate-limits to learn more.",
            "tokens",
            "rate_limit_exceeded",
            ("retry-after", str(RATE_LIMIT_RESET_S)),
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "1m30s"),
        ),
        "auth": _error(
            401,
            "Incorrect API key provided: sk-fake*******************cord. You can find your API key"
            " at https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            "invalid_api_key",
        ),
        "unknown_model": _error(
            404,
            "The model `gpt-5-codex` does not exist or you do not have access to it.",
            "invalid_request_error",
            "model_not_found",
        ),
        "server_error": _error(
            500,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
        ),
        "overloaded": _error(
            503, "The server is overloaded or not ready yet.", "server_error", None
        ),
        "quota": _error(
            429,
            "You exceeded your current quota, please check your plan and billing details. For more"
            " information on this error, read the docs:"
            " https://platform.openai.com/docs/guides/error-codes/api-errors.",
            "insufficient_quota",
            "insufficient_quota",
        ),
        # A ChatGPT plan out of its usage window (what codex sees when signed in with ChatGPT).
        "usage_limit": json_reply(
            429,
            {
                "error": {
                    "type": "usage_limit_reached",
                    "message": "The usage limit has been reached",
                    "plan_type": "plus",
                    "resets_at": usage_reset,
                    "resets_in_seconds": USAGE_LIMIT_RESET_S,
                }
            },
        ),
    }


def reply(case: str, request: Request) -> Reply:
    """The reply to one request in `case`."""
    path = request.path.split("?")[0]
    upgrade = request.headers.get("upgrade", "").lower() == "websocket"
    if upgrade and path.endswith("/responses"):
        # The handshake fails with the same error a plain request would get.
        fault = faults(time.time()).get(case)
        return fault or replace(_response_stream(MODEL), status=101, websocket=True)
    if path.endswith("/models") and request.method == "GET":
        return json_reply(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
    if request.method != "POST" or not path.endswith(("/responses", "/chat/completions")):
        return NOT_FOUND
    fault = faults(time.time()).get(case)
    if fault is not None:
        return fault
    body = request.body if isinstance(request.body, dict) else {}
    if path.endswith("/responses"):
        return _response_stream(str(body.get("model") or MODEL))
    return _chat(body)


def _response_stream(model: str) -> Reply:
    item = {
        "type": "message",
        "id": "msg_fake01",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "done", "annotations": []}],
    }
    usage = {
        "input_tokens": 25,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 27,
    }
    response: dict[str, Any] = {"id": "resp_fake01", "object": "response", "model": model}
    return sse_reply(
        [
            (
                "response.created",
                {"type": "response.created", "response": {**response, "status": "in_progress"}},
            ),
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {**item, "status": "in_progress", "content": []},
                },
            ),
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "output_index": 0,
                    "content_index": 0,
                    "item_id": "msg_fake01",
                    "delta": "done",
                },
            ),
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": 0, "item": item},
            ),
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {
                        **response,
                        "status": "completed",
                        "output": [item],
                        "usage": usage,
                    },
                },
            ),
        ]
    )


def _chat(body: dict[str, Any]) -> Reply:
    model = str(body.get("model") or "gpt-4o")
    usage = {"prompt_tokens": 25, "completion_tokens": 2, "total_tokens": 27}
    base = {"id": "chatcmpl-fake01", "created": int(time.time()), "model": model}
    if not body.get("stream"):
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "done"},
            "finish_reason": "stop",
        }
        return json_reply(
            200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        )
    chunk = {**base, "object": "chat.completion.chunk"}
    return sse_reply(
        [
            (
                None,
                {
                    **chunk,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": "done"},
                            "finish_reason": None,
                        }
                    ],
                },
            ),
            (
                None,
                {
                    **chunk,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": usage,
                },
            ),
            (None, "[DONE]"),
        ]
    )
