"""Gemini CLI `--output-format json` (one pretty-printed object) and `stream-json` events.

The last outcome (a `result` event, a fatal `error` event, or the json-mode object) decides,
never tool output; without an error the round went through. Quota errors state their reset
as "reset after 1h2m3s" or a retry delay, in the error or in the report gemini printed before it.
Exit 41 with "Invalid auth method selected" and exit 55 (untrusted folder) are setup errors.
"""

from __future__ import annotations

import re
from typing import Any

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Transient, Usage
from agent_runner.parsers.jsonscan import (
    as_dict,
    as_int,
    as_str,
    pretty_printed_objects,
    split_lines,
)
from agent_runner.parsers.signals import (
    AUTH_STATUSES,
    classify_status,
    looks_like_auth_failure,
    looks_like_setup_error,
    short_redacted,
)

_OUTCOME_KEYS = ("response", "stats", "error")
# Gemini CLI exit codes that its JSON error object reports in `code`.
_AUTH_EXIT_CODE = 41
# Printed as plain text before exit 55, whatever the output format.
_UNTRUSTED = re.compile(r"^Gemini CLI is not running in a trusted directory\b")


def parse(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    """Findings in the tail of a Gemini CLI headless transcript.

    `prose` off: only the CLI's JSON objects count, never the plain-text fallback.
    """
    decoded = tail.decode("utf-8", "replace")
    lines = split_lines(decoded)
    objects = [obj for _, found in lines for obj in found] + pretty_printed_objects(decoded)
    model = next((as_str(o.get("model")) for o in objects if o.get("type") == "init"), None)
    outcomes = [o for o in objects if _is_outcome(o)]
    outcome = outcomes[-1] if outcomes else None
    usage = _usage(as_dict(outcome.get("stats")), model) if outcome is not None else None
    error = _outcome_error(outcome) if outcome is not None else {}
    if outcome is not None and not error and outcome.get("status") != "error":
        return Findings(usage=usage)
    transient, auth, setup = _error(error, now) if error else (None, None, None)
    plain = [line for line, found in lines if not found and line.strip()][-text.WINDOW_LINES :]
    if outcome is None:
        setup = next((short_redacted(line) for line in plain if _UNTRUSTED.match(line)), None)
    if prose and transient is None and auth is None and setup is None:
        fallback = text.scan_lines(plain, now=now)
        transient, auth, setup = fallback.transient, fallback.auth_error, fallback.setup_error
    if (
        transient is not None
        and transient.reset_at is None
        and "rate_limit" in transient.classification
    ):
        transient = _with_reported_reset(transient, plain, now)
    return Findings(transient=transient, auth_error=auth, setup_error=setup, usage=usage)


def _with_reported_reset(transient: Transient, plain: list[str], now: float) -> Transient:
    """The quota error's reset from gemini's own report of it ("Please retry in 8220.5s.")."""
    for line in reversed(plain):
        reset = text.find_reset(line, now)
        if reset is not None:
            return Transient(transient.classification, reset, transient.detail)
    return transient


def _is_outcome(obj: dict[str, Any]) -> bool:
    """The CLI's own verdict: a `result` event, a fatal `error` event, or the json-mode object.

    Other stream events (`tool_result` above all) carry tool output, which may hold any error.
    """
    kind = obj.get("type")
    if kind is None:
        return any(key in obj for key in _OUTCOME_KEYS)
    return kind == "result" or (kind == "error" and obj.get("severity") == "error")


def _outcome_error(outcome: dict[str, Any]) -> dict[str, Any]:
    if outcome.get("type") == "error":
        # A fatal stream error event: its status, when present, is the HTTP code.
        return {"type": "Error", "message": outcome.get("message"), "code": outcome.get("status")}
    return as_dict(outcome.get("error"))


def _error(error: dict[str, Any], now: float) -> tuple[Transient | None, str | None, str | None]:
    code = as_int(error.get("code"))
    kind = as_str(error.get("type"))
    message = " ".join(as_str(error.get("message")).split())
    label = f"{kind or 'error'} {code}" if code is not None else kind or "error"
    detail = short_redacted(f"{label}: {message}")
    if looks_like_setup_error(message):
        return None, None, detail
    if (
        code in AUTH_STATUSES
        or code == _AUTH_EXIT_CODE
        or "Auth" in kind
        or looks_like_auth_failure(message)
    ):
        return None, detail, None
    classification = text.classify_line(f"{kind}: {message}") or classify_status(code)
    if classification is None:
        return None, None, None
    return Transient(classification, text.find_reset(message, now), detail), None, None


def _usage(stats: dict[str, Any], model: str | None) -> Usage | None:
    models = {
        name: as_dict(as_dict(v).get("tokens")) for name, v in as_dict(stats.get("models")).items()
    }
    if models:

        def total(name: str) -> int:
            return as_int(models[name].get("total")) or 0

        return Usage(
            # Several models (a router, a flash fallback): name the busiest, sum the counts.
            model=model or max(models, key=total),
            input_tokens=_sum(t.get("prompt") for t in models.values()),
            output_tokens=_sum(t.get("candidates") for t in models.values()),
            cache_read_tokens=_sum(t.get("cached") for t in models.values()),
            cache_creation_tokens=None,
            cost_usd=None,
        )
    flat_in = as_int(stats.get("input_tokens", stats.get("inputTokens")))
    flat_out = as_int(stats.get("output_tokens", stats.get("outputTokens")))
    if flat_in is None and flat_out is None:
        return Usage(model, None, None, None, None, None) if model else None
    return Usage(model, flat_in, flat_out, as_int(stats.get("cached")), None, None)


def _sum(values: Any) -> int | None:
    numbers = [n for n in (as_int(v) for v in values) if n is not None]
    return sum(numbers) if numbers else None
