"""Gemini API (`POST /v1beta/models/<model>:streamGenerateContent?alt=sse`): what gemini-cli calls.

Errors are Google's `{"error":{"code","message","status","details":[…]}}`; quota errors carry
a `QuotaFailure` (its `quotaId` says per-minute or per-day) and a `RetryInfo.retryDelay`.
"""

from __future__ import annotations

import json
from typing import Any

from recording.fakeapi import NOT_FOUND, Reply, Request, json_reply, sse_reply

RATE_LIMIT_RESET_S = 90
QUOTA_RESET_S = 8220
_QUOTA_HELP = {
    "@type": "type.googleapis.com/google.rpc.Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}


def _error(code: int, status: str, message: str, *details: dict[str, Any]) -> Reply:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return json_reply(code, {"error": error})


def _quota(quota_id: str, metric: str, limit: int, model: str, delay_s: float) -> Reply:
    message = (
        "You exceeded your current quota, please check your plan and billing details. For more"
        " information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
        " To monitor your current usage, head to: https://ai.dev/usage?tab=rate-limit. \n"
        f"* Quota exceeded for metric: generativelanguage.googleapis.com/{metric}, limit: {limit},"
        f" model: {model}\nPlease retry in {delay_s}s."
    )
    failure = {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
            {
                "quotaMetric": f"generativelanguage.googleapis.com/{metric}",
                "quotaId": quota_id,
                "quotaDimensions": {"location": "global", "model": model},
                "quotaValue": str(limit),
            }
        ],
    }
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{int(delay_s)}s"}
    return _error(429, "RESOURCE_EXHAUSTED", message, failure, _QUOTA_HELP, retry)


def faults(model: str) -> dict[str, Reply]:
    """The error reply for each failing case."""
    return {
        "rate_limit": _quota(
            "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            "generate_content_free_tier_requests",
            2,
            model,
            RATE_LIMIT_RESET_S + 0.5,
        ),
        "quota": _quota(
            "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
            "generate_content_free_tier_requests",
            50,
            model,
            QUOTA_RESET_S + 0.5,
        ),
        "auth": _error(
            400,
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            },
        ),
        "server_error": _error(
            500,
            "INTERNAL",
            "An internal error has occurred. Please retry or report in"
            " https://developers.generativeai.google/guide/troubleshooting",
        ),
        "unknown_model": _error(
            404,
            "NOT_FOUND",
            f"models/{model} is not found for API version v1beta, or is not supported for"
            " generateContent. Call ListModels to see the list of available models and their"
            " supported methods.",
        ),
        "overloaded": _error(
            503, "UNAVAILABLE", "The model is overloaded. Please try again later."
        ),
    }


def reply(case: str, request: Request) -> Reply:
    """The reply to one request in `case`."""
    path = request.path.split("?")[0]
    if request.method != "POST" or ":" not in path:
        return NOT_FOUND
    resource, method = path.rsplit(":", 1)
    model = resource.rsplit("/", 1)[-1]
    if method == "countTokens":
        return json_reply(200, {"totalTokens": 12})
    if method not in {"generateContent", "streamGenerateContent"}:
        return NOT_FOUND
    fault = faults(model).get(case)
    if fault is not None:
        return fault
    body = request.body if isinstance(request.body, dict) else {}
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    # gemini-cli's model router asks a small model for JSON matching a schema first.
    text = json.dumps(_instance(schema)) if isinstance(schema, dict) else "done"
    chunk = {
        "candidates": [
            {
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 25, "candidatesTokenCount": 1, "totalTokenCount": 26},
        "modelVersion": model,
        "responseId": "fake01",
    }
    if method == "generateContent":
        return json_reply(200, chunk)
    return sse_reply([(None, chunk)])


def _instance(schema: dict[str, Any]) -> Any:
    """The smallest value that satisfies a (Gemini-flavoured) JSON schema."""
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        properties = schema.get("properties") or {}
        return {
            name: _instance(properties.get(name) or {})
            for name in schema.get("required") or properties
        }
    if kind in {"integer", "number"}:
        return max(schema.get("minimum", 1), min(10, schema.get("maximum", 10)))
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    return "ok"
