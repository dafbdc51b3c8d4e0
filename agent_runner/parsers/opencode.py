"""opencode `run --format json`: error events, step_finish usage, and its `stream error` log lines.

A `step_finish` after the last `error` event means the round went through. An `error` event
carries the provider's status, headers and body: the status and message classify it, and a
`retry-after` header (or the message's own wording) gives the reset. While opencode waits out a
retry it prints nothing on stdout; with `--print-logs` its stderr holds one
`level=ERROR … message="stream error" … error.error="AI_APICallError: …"` line per failed
request, and the last of those decides when the round was killed mid-wait.
"""

from __future__ import annotations

from dataclasses import replace
from email.utils import parsedate_to_datetime
from typing import Any

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Usage
from agent_runner.parsers.jsonscan import as_dict, as_float, as_int, as_str, split_lines
from agent_runner.parsers.signals import MAX_MESSAGE_CHARS, short_redacted

# opencode's logfmt lines: `key=value` fields, the error text last. Plain substring tests, so a
# hostile line costs what its length does.
_ERROR_LEVEL = " level=ERROR "
_STREAM_ERROR = ' message="stream error" '
_ERROR_FIELD = ' error.error="'
# The title agent's request (`small=true`) is opencode's own side job, not the round's.
_SMALL = " small=true "
_AUTH_ERRORS = ("ProviderAuthError",)


def parse(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    """Findings in the tail of an `opencode run --format json` transcript.

    `prose` off: only the JSON events count, never the log lines or the plain-text fallback.
    """
    lines = split_lines(tail.decode("utf-8", "replace"))
    events = [obj for _, objects in lines for obj in objects if "type" in obj]
    usage = _usage([e for e in events if e.get("type") == "step_finish"])
    outcome: dict[str, Any] | None = None
    for event in events:
        if event.get("type") in ("step_finish", "error"):
            outcome = event
    if outcome is not None and outcome.get("type") == "step_finish":
        return Findings(usage=usage)
    if outcome is not None:
        return replace(_error(as_dict(outcome.get("error")), now), usage=usage)
    if not prose:
        return Findings(usage=usage)
    logged = [error for line, _ in lines if (error := _stream_error(line[:MAX_MESSAGE_CHARS]))]
    if logged:
        detail = short_redacted(f"stream error: {logged[-1]}")
        return text.classify_error(logged[-1], None, detail, now=now)
    plain = [line for line, objects in lines if not objects and line.strip()]
    return text.scan_lines(plain[-text.WINDOW_LINES :], now=now)


def _stream_error(line: str) -> str | None:
    """The error text of a round's `stream error` log line, or None for any other line."""
    if _ERROR_LEVEL not in line or _STREAM_ERROR not in line or _SMALL in line:
        return None
    start = line.rfind(_ERROR_FIELD)
    value = line[start + len(_ERROR_FIELD) :].rstrip() if start >= 0 else ""
    return value[:-1] if value.endswith('"') else None


def _error(error: dict[str, Any], now: float) -> Findings:
    """`{"name":"APIError","data":{"message","statusCode","responseHeaders",…}}` and the others."""
    name = as_str(error.get("name")) or "error"
    data = as_dict(error.get("data"))
    message = as_str(data.get("message"))
    status = as_int(data.get("statusCode"))
    label = f"{name} {status}" if status is not None else name
    detail = short_redacted(f"{label}: {message}")
    if name in _AUTH_ERRORS:
        return Findings(auth_error=detail)
    found = text.classify_error(message, status, detail, now=now)
    transient = found.transient
    if transient is not None and transient.reset_at is None:
        reset = _header_reset(as_dict(data.get("responseHeaders")), now)
        if reset is not None:
            return replace(found, transient=replace(transient, reset_at=reset))
    return found


def _header_reset(headers: dict[str, Any], now: float) -> float | None:
    """The reset in `retry-after` (seconds or an HTTP date), as the provider sent it."""
    value = as_str(headers.get("retry-after")).strip()
    if not value:
        return None
    if value.replace(".", "", 1).isdigit():
        return now + float(value)
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _usage(finished: list[dict[str, Any]]) -> Usage | None:
    """Every step's tokens and cost, summed: one step is one model call of the round."""
    if not finished:
        return None
    totals: dict[str, int | None] = dict.fromkeys(("input", "output", "read", "write"))
    cost: float | None = None
    for event in finished:
        part = as_dict(event.get("part"))
        tokens = as_dict(part.get("tokens"))
        cache = as_dict(tokens.get("cache"))
        for key, value in (
            ("input", tokens.get("input")),
            ("output", tokens.get("output")),
            ("read", cache.get("read")),
            ("write", cache.get("write")),
        ):
            number = as_int(value)
            if number is not None:
                totals[key] = (totals[key] or 0) + number
        spent = as_float(part.get("cost"))
        if spent is not None:
            cost = (cost or 0.0) + spent
    return Usage(
        model=None,
        input_tokens=totals["input"],
        output_tokens=totals["output"],
        cache_read_tokens=totals["read"],
        cache_creation_tokens=totals["write"],
        cost_usd=cost,
    )
