"""OpenAI Codex `exec --json`: error and turn.failed messages, turn.completed usage.

Errors before the last completed turn were retried away and do not count.
The older `{"msg": {...}}` event shape is read too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Usage
from agent_runner.parsers.jsonscan import as_dict, as_int, as_str, split_lines

_DONE = frozenset({"turn.completed", "task_complete"})
_ERRORS = frozenset({"error", "turn.failed", "stream_error"})


def parse(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    """Findings in the tail of a `codex exec --json` transcript.

    `prose` off: only the JSON events count, never the plain-text fallback.
    """
    lines = split_lines(tail.decode("utf-8", "replace"))
    events = [_normalise(obj) for _, objects in lines for obj in objects]
    if not events:
        return text.parse(tail, now=now, prose=prose)
    model: str | None = None
    usage_fields: dict[str, Any] | None = None
    messages: list[str] = []
    finished = False
    for kind, event in events:
        if kind == "session_configured":
            model = as_str(event.get("model")) or model
        elif kind in _DONE:
            finished, messages = True, []
            usage_fields = as_dict(event.get("usage")) or usage_fields
        elif kind == "token_count":
            info = as_dict(event.get("info"))
            usage_fields = as_dict(info.get("total_token_usage")) or usage_fields
        elif kind in _ERRORS:
            finished = False
            message = as_str(event.get("message")) or as_str(
                as_dict(event.get("error")).get("message")
            )
            messages.append(f"{kind}: {message}")
    usage = _usage(usage_fields, model) if usage_fields is not None else None
    if finished:
        return Findings(usage=usage)
    # A CLI retrying for an hour prints thousands of these: the last ones say enough.
    found = text.scan_messages(messages[-text.WINDOW_LINES :], now=now)
    if prose and found == Findings():
        plain = [line for line, objects in lines if not objects and line.strip()]
        found = text.scan_lines(plain[-text.WINDOW_LINES :], now=now)
    return replace(found, usage=usage)


def _normalise(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    msg = obj.get("msg")
    if isinstance(msg, dict):
        return as_str(msg.get("type")), msg
    return as_str(obj.get("type")), obj


def _usage(fields: dict[str, Any], model: str | None) -> Usage:
    return Usage(
        model=model,
        input_tokens=as_int(fields.get("input_tokens")),
        output_tokens=as_int(fields.get("output_tokens")),
        cache_read_tokens=as_int(fields.get("cached_input_tokens")),
        cache_creation_tokens=None,
        cost_usd=None,
    )
