"""Claude Code `--output-format stream-json`: rate_limit_event, the final result, usage.

A successful final `result` means the round went through, whatever came before it. Without a
result (the round was killed while the CLI retried on its own), its `api_retry` lines count.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Transient, Usage, pick_transient
from agent_runner.parsers.jsonscan import as_dict, as_float, as_int, as_str, split_lines
from agent_runner.parsers.signals import (
    AUTH_STATUSES,
    classify_status,
    looks_like_auth_failure,
    looks_like_setup_error,
    short_redacted,
)

# Assistant messages carry an `error` tag when the API call behind them failed.
_ASSISTANT_ERRORS = {
    "rate_limit": "rate_limit_model",
    "server_error": "api_transient_5xx",
    "overloaded": "api_transient_5xx",
    "timeout": "api_timeout",
    # "Credit balance is too low": nothing runs until someone pays, so wait like for a quota.
    "billing_error": "rate_limit_account",
}
_MODEL_LIMITS = ("opus", "sonnet", "haiku")


def parse(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    """Findings in the tail of a stream-json transcript (plain text if it holds no JSON).

    `prose` off: only the JSON events count, never the plain-text fallback.
    """
    decoded = tail.decode("utf-8", "replace")
    lines = split_lines(decoded)
    events = [obj for _, objects in lines for obj in objects]
    if not events:
        return text.parse(tail, now=now, prose=prose)
    model: str | None = None
    rejected: dict[str, Transient] = {}
    others: list[Transient | None] = []
    auth: str | None = None
    result: dict[str, Any] | None = None
    retrying: tuple[Transient | None, str | None] = (None, None)
    for event in events:
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            model = as_str(event.get("model")) or model
        elif kind == "system" and event.get("subtype") == "api_retry":
            retrying = _api_retry(event)
        elif kind == "rate_limit_event":
            _track_rate_limit(as_dict(event.get("rate_limit_info")), rejected)
        elif kind == "assistant":
            transient, reason = _assistant_error(event, now)
            others.append(transient)
            auth = reason or auth
        elif kind == "result":
            result = event
    usage = _usage(result, model) if result is not None else None
    if result is not None and not _failed(result):
        return Findings(usage=usage)
    if result is not None and looks_like_setup_error(as_str(result.get("result"))):
        # "There's an issue with the selected model": no retry fixes the config.
        setup = short_redacted(f"result error: {as_str(result.get('result'))}")
        return Findings(setup_error=setup, usage=usage)
    if result is not None:
        transient, reason = _result_error(result, now)
        others.append(transient)
        auth = reason or auth
    elif retrying != (None, None):
        # Still retrying when the round ended: the error it was retrying is the outcome.
        others.append(retrying[0])
        auth = retrying[1] or auth
    # The structured reset from rate_limit_event beats any reset read from prose; without
    # any reset, the rejected window names the limit better than a bare status code.
    exact = [t for t in rejected.values() if t.reset_at is not None]
    transient = pick_transient(exact) or pick_transient([*others, *rejected.values()])
    if prose and transient is None and auth is None:
        # Only CLI-shaped lines count ("API Error: 429 {…}" has its body glued on); a line
        # starting with "{" is an event, or the agent's text torn by a kill.
        plain = [line for line, _ in lines if not _json_line(line)]
        fallback = text.scan_lines(plain[-text.WINDOW_LINES :], now=now)
        return replace(fallback, usage=usage)
    return Findings(transient=transient, auth_error=auth, usage=usage)


def _json_line(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("{")


def _track_rate_limit(info: dict[str, Any], rejected: dict[str, Transient]) -> None:
    limit_type = as_str(info.get("rateLimitType")) or "unknown"
    status = as_str(info.get("status"))
    if status == "rejected":
        scoped = any(name in limit_type for name in _MODEL_LIMITS)
        rejected[limit_type] = Transient(
            "rate_limit_model" if scoped else "rate_limit_account",
            as_float(info.get("resetsAt")),
            short_redacted(f"rate_limit_event {limit_type} rejected"),
        )
    elif status.startswith("allowed"):
        # A later "allowed" for the same window means that limit has lifted.
        rejected.pop(limit_type, None)


def _api_retry(event: dict[str, Any]) -> tuple[Transient | None, str | None]:
    """`{"type":"system","subtype":"api_retry","error_status":529,"error":"overloaded",…}`."""
    status = as_int(event.get("error_status"))
    tag = as_str(event.get("error"))
    detail = short_redacted(
        f"api_retry {as_int(event.get('attempt'))}/{as_int(event.get('max_retries'))}:"
        f" {tag or 'error'} {status if status is not None else '(no status)'}"
    )
    if status in AUTH_STATUSES or tag == "authentication_failed":
        return None, detail
    classification = classify_status(status) or _ASSISTANT_ERRORS.get(tag)
    if classification is None and (status is None or status >= 500):
        # No status: the request never got an answer (refused, reset, no headers in time).
        classification = "api_transient_5xx"
    if classification is None:
        return None, None
    return Transient(classification, None, detail), None


def _assistant_error(event: dict[str, Any], now: float) -> tuple[Transient | None, str | None]:
    tag = as_str(event.get("error"))
    if not tag:
        return None, None
    message = " ".join(
        as_str(block.get("text"))
        for block in as_dict(event.get("message")).get("content") or []
        if isinstance(block, dict)
    )
    detail = short_redacted(
        f"assistant error {tag}: {message}" if message else f"assistant error {tag}"
    )
    if tag == "authentication_failed":
        return None, detail
    classification = text.classify_line(message) or _ASSISTANT_ERRORS.get(tag)
    if classification is None:
        return None, None
    return Transient(classification, text.find_reset(message, now), detail), None


def _failed(result: dict[str, Any]) -> bool:
    return result.get("is_error") is True or as_str(result.get("subtype")).startswith("error")


def _result_error(result: dict[str, Any], now: float) -> tuple[Transient | None, str | None]:
    status = as_int(result.get("api_error_status"))
    parts = [as_str(result.get("result"))]
    errors = result.get("errors")
    if isinstance(errors, list):
        parts += [e if isinstance(e, str) else as_str(as_dict(e).get("message")) for e in errors]
    message = " ".join(part for part in parts if part)
    label = f"result api_error_status {status}" if status is not None else "result error"
    detail = short_redacted(f"{label}: {message}" if message else label)
    if status in AUTH_STATUSES or looks_like_auth_failure(message):
        return None, detail
    # Prose such as "You've hit your limit · resets 2pm" names the limit better than a bare 429.
    classification = text.classify_line(message) or classify_status(status)
    if classification is None:
        return None, None
    return Transient(classification, text.find_reset(message, now), detail), None


def _usage(result: dict[str, Any], model: str | None) -> Usage:
    usage = as_dict(result.get("usage"))
    per_model = as_dict(result.get("modelUsage"))
    if model is None and per_model:
        # Without the init line in the tail, name the model that cost the most.
        model = max(
            per_model, key=lambda name: as_float(as_dict(per_model[name]).get("costUSD")) or 0
        )
    return Usage(
        model=model,
        input_tokens=as_int(usage.get("input_tokens")),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=as_int(usage.get("cache_read_input_tokens")),
        cache_creation_tokens=as_int(usage.get("cache_creation_input_tokens")),
        cost_usd=as_float(result.get("total_cost_usd")),
    )
