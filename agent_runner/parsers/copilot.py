"""GitHub Copilot CLI `--output-format json`: session.error, failed model calls, the result.

A final `result` with exit code 0 and no `session.error` means the round went through. A
`session.error` names its kind (`authentication`, `rate_limit`, …) and the HTTP status; while
copilot still retries on its own, the last `model.call_failure` (status and the provider's
error body) decides. Before any JSON, copilot prints plain text: "Error: No authentication
information found." is an auth failure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Transient, Usage
from agent_runner.parsers.jsonscan import as_dict, as_int, as_str, split_lines
from agent_runner.parsers.signals import looks_like_setup_error, short_redacted

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
        return replace(_session_error(error, now), usage=usage)
    if failure is not None:
        return replace(_call_failure(failure, now), usage=usage)
    if not prose:
        return Findings(usage=usage)
    plain = [line for line, objects in lines if not objects and line.strip()]
    return text.scan_lines(plain[-text.WINDOW_LINES :], now=now)


def _session_error(error: dict[str, Any], now: float) -> Findings:
    """`{"errorType":"rate_limit","message":"Failed to get response …","statusCode":429}`."""
    kind = as_str(error.get("errorType")) or "error"
    message = as_str(error.get("message"))
    status = as_int(error.get("statusCode"))
    detail = _detail(f"session.error {kind}", status, message)
    if kind in _AUTH_KINDS and not looks_like_setup_error(message):
        return Findings(auth_error=detail)
    found = text.classify_error(message, status, detail, now=now)
    if found == Findings() and kind in _KINDS:
        return Findings(transient=Transient(_KINDS[kind], None, detail))
    return found


def _call_failure(failure: dict[str, Any], now: float) -> Findings:
    """A request copilot is about to retry: the status and the provider's error body."""
    status = as_int(failure.get("statusCode"))
    code = as_str(failure.get("errorCode"))
    body = as_str(failure.get("errorMessage"))
    message = f"{code}: {body}" if code else body
    detail = _detail("model.call_failure", status, message)
    found = text.classify_error(message, status, detail, now=now)
    if found == Findings() and status is None:
        # No answer at all: refused, reset or timed out before any status.
        return Findings(transient=Transient("api_transient_5xx", None, detail))
    return found


def _detail(label: str, status: int | None, message: str) -> str:
    shown = f"{label} {status}" if status is not None else label
    return short_redacted(f"{shown}: {message}")
