"""What the observer reads in Claude Code's stream-json transcript (one JSON object a line)."""

from __future__ import annotations

import json
from dataclasses import dataclass

# How Claude Code reports an overloaded API, in its final result and its text lines.
OVERLOAD_MARKERS = ("overloaded_error", "API Error: 529")


@dataclass(frozen=True)
class Seen:
    tool_calls: int
    overloaded: bool


def read_claude(tail: str) -> Seen:
    """Count tool_use blocks of assistant messages; look for the CLI's overload line."""
    tool_calls = 0
    overloaded = False
    for line in tail.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            # Not JSON (a CLI's plain-text error, or a line cut by the 64 KiB tail).
            overloaded = overloaded or any(marker in line for marker in OVERLOAD_MARKERS)
            continue
        if not isinstance(message, dict):
            continue
        if message.get("type") == "assistant":
            content = (message.get("message") or {}).get("content") or []
            tool_calls += sum(
                1
                for block in content
                if isinstance(block, dict) and block.get("type") == "tool_use"
            )
        elif message.get("type") == "result" and message.get("is_error"):
            text = str(message.get("result", ""))
            overloaded = (
                overloaded
                or message.get("api_error_status") == 529
                or any(marker in text for marker in OVERLOAD_MARKERS)
            )
    return Seen(tool_calls, overloaded)
