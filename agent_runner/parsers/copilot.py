"""GitHub Copilot CLI `--output-format json`: session.error, failed model calls, the result.

A final `result` with exit code 0 and no `session.error` means the round went through. A
`session.error` names its kind (`authentication`, `rate_limit`, …) and the HTTP status; while
copilot still retries on its own, the last `model.call_failure` (status and the provider's
error body) decides. Before any JSON, copilot prints plain text: "Error: No authentication
information found." is an auth failure.
"""

from __future__ import annotations

from typing import Any

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Transient, Usage
from agent_runner.parsers.jsonscan import as_dict, as_int, as_str, split_lines
from agent_runner.parsers.signals import (
    AUTH_STATUSES,
    classify_status,
    looks_like_auth_failure,
    looks_like_setup_error,
    short_redacted,
)

_AUTH_KINDS = frozenset({"authentication", "authorization"})
_KINDS = {
    "rate_limit": "rate_limit_model",
    "quota": "rate_limit_account",
    "server_error": "api_transient_5xx",
    "network": "api_transient_5xx",
    "timeout": "api_timeout",
}


def parse(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    """Findings in the tail of a `copilot --output-format json` transcript.

    `prose` off: only the JSON events count, never the plain-text fallback.
    """
    lines = split_lines(tail.decode("utf-8", "replace"))
    events = [obj for _, objects in lines for obj in objects if "type" in obj]
    model: str | None = None
    failure: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    for event in events:
        kind = as_str(event.get("type"))
        data = as_dict(event.get("data"))
        if kind in ("model.call_start", "assistant.message", "session.tools_updated"):
            model = as_str(data.get("model")) or model
        elif kind == "model.call_failure":
            failure = data
        elif kind == "session.error":
            error = data
        elif kind == "result":
            result = event
    usage = Usage(model, None, None, None, None, None) if model else None
    if result is not None and error is None and as_int(result.get("exitCode")) == 0:
        return Findings(usage=usage)
    if error is not None:
        found = _session_error(error, now)
    elif failure is not None:
        found = _call_failure(failure, now)
    elif prose:
        plain = [line for line, objects in lines if not objects and line.strip()]
        return text.scan_lines(plain[-text.WINDOW_LINES :], now=now)
    else:
        return Findings(usage=usage)
    transient, auth, setup = found
    return Findings(transient=transient, auth_error=auth, setup_error=setup, usage=usage)


def _session_error(
    error: dict[str, Any], now: float
) -> tuple[Transient | None, str | None, str | None]:
    """`{"errorType":"rate_limit","message":"Failed to get response …","statusCode":429}`."""
    kind = as_str(error.get("errorType"))
    message = as_str(error.get("message"))
    status = as_int(error.get("statusCode"))
    label = f"session.error {kind or 'error'}" + (f" {status}" if status is not None else "")
    detail = short_redacted(f"{label}: {message}")
    if looks_like_setup_error(message):
        return None, None, detail
    if kind in _AUTH_KINDS or status in AUTH_STATUSES or looks_like_auth_failure(message):
        return None, detail, None
    classification = text.classify_line(message) or _KINDS.get(kind) or classify_status(status)
    if classification is None:
        return None, None, None
    return Transient(classification, text.find_reset(message, now), detail), None, None


def _call_failure(
    failure: dict[str, Any], now: float
) -> tuple[Transient | None, str | None, str | None]:
    """A request copilot is about to retry: the status and the provider's error body."""
    status = as_int(failure.get("statusCode"))
    body = as_str(failure.get("errorMessage"))
    code = as_str(failure.get("errorCode"))
    message = f"{code}: {body}" if code else body
    label = "model.call_failure" + (f" {status}" if status is not None else "")
    detail = short_redacted(f"{label}: {message}")
    if looks_like_setup_error(message):
        return None, None, detail
    if status in AUTH_STATUSES or looks_like_auth_failure(message):
        return None, detail, None
    classification = text.classify_line(message) or classify_status(status)
    if classification is None and status is None:
        classification = "api_transient_5xx"  # no answer at all: refused, reset, timed out
    if classification is None:
        return None, None, None
    return Transient(classification, text.find_reset(message, now), detail), None, None
