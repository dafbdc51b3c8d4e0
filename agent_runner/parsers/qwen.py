"""Qwen Code `--output-format stream-json` (or `json`): the final result, its retry notices, usage.

The events follow Claude Code's SDK shapes (`system` init, `assistant`, `result`), but an API
failure is text: `"error":{"message":"[API Error: 429 …]"}` in the result. A successful result
means the round went through. Without a result (the round was killed while qwen retried on its
own), the last `Retrying in 60s (attempt 1/10): [API Error: …]` line on stderr decides; the
delay in it is qwen's own pacing, never a reset.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Usage
from agent_runner.parsers.jsonscan import as_dict, as_int, as_str, split_lines
from agent_runner.parsers.signals import MAX_MESSAGE_CHARS, short_redacted

_API_ERROR = re.compile(r"\bAPI Error: (\d{3})\b")
_RETRYING = re.compile(r"^Retrying in \d+s \(attempt \d+/\d+\): (.*)$")


def parse(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    """Findings in the tail of a qwen headless transcript.

    `prose` off: only the JSON events count, never its stderr lines or the plain-text fallback.
    """
    lines = split_lines(tail.decode("utf-8", "replace"))
    events = [obj for _, objects in lines for obj in objects]
    model = None
    result: dict[str, Any] | None = None
    for event in events:
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            model = as_str(event.get("model")) or model
        elif kind == "result":
            result = event
    usage = _usage(result, model) if result is not None else None
    if result is not None and not _failed(result):
        return Findings(usage=usage)
    if result is not None:
        message = as_str(as_dict(result.get("error")).get("message")) or as_str(
            result.get("result")
        )
        return replace(_classify(message, now), usage=usage)
    if not prose:
        return Findings(usage=usage)
    plain = [line for line, objects in lines if not objects and line.strip()]
    retrying = [m[1] for line in plain if (m := _RETRYING.match(line[:MAX_MESSAGE_CHARS]))]
    if retrying:
        return _classify(retrying[-1], now)
    return text.scan_lines(plain[-text.WINDOW_LINES :], now=now)


def _failed(result: dict[str, Any]) -> bool:
    return result.get("is_error") is True or as_str(result.get("subtype")).startswith("error")


def _classify(message: str, now: float) -> Findings:
    """An error message, "[API Error: 401 Incorrect API key …]" or qwen's own wording."""
    message = " ".join(message[:MAX_MESSAGE_CHARS].split())
    api = _API_ERROR.search(message)
    status = int(api[1]) if api else None
    return text.classify_error(message, status, short_redacted(message or "result error"), now=now)


def _usage(result: dict[str, Any], model: str | None) -> Usage:
    usage = as_dict(result.get("usage"))
    return Usage(
        model=model,
        input_tokens=as_int(usage.get("input_tokens")),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=as_int(usage.get("cache_read_input_tokens")),
        cache_creation_tokens=None,
        cost_usd=None,
    )
