"""The wait a CLI announces when it is about to retry a failed request on its own.

Claude Code, gemini and aider print one line naming the delay, then nothing until the next
attempt; the silence watchdog reads that line so that such a wait is not taken for a hang.
Only the transcript's last line counts: an announcement followed by more output is over.
"""

from __future__ import annotations

import json
import re

from agent_runner.parsers.jsonscan import as_dict, as_float

MAX_ANNOUNCED_S = 86_400.0  # no CLI waits a day between two attempts; a longer one is not taken
# gemini: "Attempt 2 failed: … Suggested retry after 90s.. Retrying after 92255ms..."
_GEMINI = re.compile(r"\bRetrying after (\d+(?:\.\d+)?)ms\b")
# aider: "Retrying in 32.0 seconds..."
_AIDER = re.compile(r"^Retrying in (\d+(?:\.\d+)?) seconds\b")


def announced_wait(parser: str, tail: bytes) -> float | None:
    """Seconds the CLI said it waits before its next attempt, when its last line says so."""
    line = _last_line(tail)
    seconds: float | None = None
    if parser in ("claude", "demo"):
        seconds = _claude(line)
    elif parser == "gemini":
        match = _GEMINI.search(line)
        seconds = float(match[1]) / 1000 if match else None
    elif parser == "aider":
        match = _AIDER.match(line)
        seconds = float(match[1]) if match else None
    if seconds is None or not 0 < seconds <= MAX_ANNOUNCED_S:
        return None
    return seconds


def _claude(line: str) -> float | None:
    """`{"type":"system","subtype":"api_retry","retry_delay_ms":5167,…}`."""
    try:
        event = as_dict(json.loads(line))
    except (ValueError, RecursionError):
        return None
    if event.get("type") != "system" or event.get("subtype") != "api_retry":
        return None
    delay_ms = as_float(event.get("retry_delay_ms"))
    return None if delay_ms is None else delay_ms / 1000


def _last_line(tail: bytes) -> str:
    text = tail.rstrip().decode("utf-8", "replace")
    return text.rpartition("\n")[2].strip()
