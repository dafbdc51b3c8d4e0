"""Plain-text fallback: the limit, error and log-in messages CLIs print without JSON.

Only the last lines are read, and only lines shaped like a CLI's own message count (anchored
at the line start), so an agent that merely wrote about rate limits does not trigger a back-off.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from agent_runner.parsers.findings import Findings, Transient, pick_transient
from agent_runner.parsers.resets import parse_clock, parse_duration
from agent_runner.parsers.signals import (
    AUTH_STATUSES,
    MAX_MESSAGE_CHARS,
    classify_status,
    looks_like_auth_failure,
    looks_like_setup_error,
    short_redacted,
)

WINDOW_LINES = 40

_EPOCH = re.compile(r"(?i)limit reached\|(\d{9,11})\b|\"?resets_?at\"?\s*[:=]\s*\"?(\d{9,11})\b")
_SECONDS = re.compile(
    r"(?i)\"?resets_in_seconds\"?\s*[:=]\s*(\d+)|\"?retryDelay\"?\s*[:=]\s*\"(\d+(?:\.\d+)?)s\""
)
_IN = re.compile(
    r"(?i)\b(?:try again in|please retry in|retry in|retry after|reset after|resets? in"
    r"|available in)\s+"
)
_AT = re.compile(
    r"(?i)\b(?:resets?(?:\s+at)?|will reset(?:\s+at)?|try again(?:\s+at)?|available again(?:\s+at)?"
    r"|cycle ends on)\s+"
)

# What may precede a CLI's message on its line: a TUI glyph, a "[timestamp]", an opening "[".
_LEAD = r"^\s*(?:[⎿●■✗✘\u00d7⚠❌]\ufe0f?\s*)?(?:\[[^\]\n]{1,40}\]\s*)?\[?"
_STATUS_TEXT = (
    r"too many requests|internal server error|bad gateway|service unavailable|gateway time-?out"
    r"|request time-?out|unauthorized|forbidden"
)
_LIMIT_END = r"\s*(?:[|·∙•.,:;!]|$)"
# The shapes of the CLIs' own error, limit and log-in lines; prose that mentions the same
# words mid-sentence or in a bullet list is not one of them.
_CLI_SHAPES = (
    r"(?:api |fatal |stream |unexpected )?error\b(?:\s*[:(\[]| when\b| \d{3}\b)",
    r"(?:litellm|openai|anthropic|google|httpx)\.[\w.]*\s*:",
    r"(?:terminal|retryable)quotaerror\s*:|fatal\w*error\s*:",
    rf"(?:claude(?: ai)? )?usage limit reached{_LIMIT_END}",
    r"(?:5-hour|five-hour|weekly|daily|monthly|session|opus|sonnet|haiku)(?: weekly)?"
    rf" limit reached{_LIMIT_END}",
    r"you(?:'|\u2019)ve (?:hit|reached) your\b",
    r"exceeded retry limit\b|attempt \d+ failed\b|quota exceeded\b",
    r"stream (?:error|disconnected)\b",
    rf"(?:http(?:/[\d.]+)? )?\d{{3}} (?:{_STATUS_TEXT})\s*[.!]?\s*(?:$|[{{(:-])",
    r"request timed out\.?\s*$",
    r"invalid api key\b|not logged in\b|please run /login\b",
    r"oauth token (?:has )?(?:expired|been revoked)\b",
)
_CLI_MESSAGE = re.compile(_LEAD + "(?:" + "|".join(_CLI_SHAPES) + ")", re.IGNORECASE)

_WARNING = re.compile(r"(?i)approaching|will be reached|\d+\s*%\s*(?:of|used)|allowed_warning")
_ACCOUNT_LIMIT = re.compile(
    r"(?i)hit your (?:[\w-]+ )?limit|(?:usage|session|weekly|daily|monthly|5-hour|five[- ]hour"
    r"|7-day|seven[- ]day) limit|(?<!rate )limit reached|out of (?:extra )?usage"
    r"|usage_limit_reached|quota (?:exceeded|exhausted|will reset)|exceeded your (?:current )?quota"
    r"|exhausted your (?:[\w-]+ )?(?:quota|capacity)|insufficient_quota|credit balance is too low"
)
_MODEL_SCOPE = re.compile(
    r"(?i)\b(?:opus|sonnet|haiku)\b[^\n]{0,12}\blimit|on this model|per ?model"
)
_RATE_LIMIT = re.compile(
    r"(?i)(?:status|code|error)[^\d\n]{0,12}\b429\b"
    r"|\b429\b[^\n]{0,40}(?:too many|rate|quota|exhaust)"
    r"|too many requests|rate[ _-]?limit(?:ed|_error|error|\s+exceeded|\s+reached|_exceeded)"
    r"|ratelimiterror|ratelimitexceeded|resource[ _]exhausted"
)
_SERVER = re.compile(
    r"(?i)(?:status|code|error)[^\d\n]{0,12}\b(?:500|502|503|504|529)\b"
    r"|\b(?:500|502|503|504|529)\b[^\n]{0,40}(?:error|internal|gateway|unavailable|overloaded)"
    r"|internal server error|bad gateway|service unavailable|gateway time-?out"
    r"|overloaded(?:_error)?|experiencing high demand|(?:model|api) is at capacity"
    r"|internalservererror|serviceunavailableerror|apiconnectionerror|stream disconnected"
    r"|connection (?:failed|refused|error)|econnrefused|error sending request|fetch failed"
    r"|(?:could not|cannot|unable to) connect\b|the server had an error while processing"
)
_TIMEOUT = re.compile(
    r"(?i)\b408\b|request timed? ?out|provider timed out|litellm\.timeout|apitimeouterror"
    r"|deadline[_ ]exceeded"
)


_TRANSIENT_HINTS = (
    "limit", "quota", "429", "too many", "exhaust", "500", "502", "503", "504", "529",
    "internal server", "bad gateway", "unavailable", "time", "overloaded", "apiconnection",
    "disconnected", "408", "deadline", "servererror", "demand", "capacity", "credit",
    "connect", "econnrefused", "sending request", "fetch failed", "server had an error",
)  # fmt: skip


def find_reset(line: str, now: float) -> float | None:
    """The reset time a line states, in any of the known forms, or None."""
    moment = _stated_reset(line[:MAX_MESSAGE_CHARS], now)
    return moment if moment is not None and math.isfinite(moment) else None


def _stated_reset(line: str, now: float) -> float | None:
    match = _EPOCH.search(line)
    if match:
        return float(match.group(1) or match.group(2))
    match = _SECONDS.search(line)
    if match:
        return now + float(match.group(1) or match.group(2))
    for anchor in _IN.finditer(line):
        seconds = parse_duration(line[anchor.end() :])
        if seconds is not None:
            return now + seconds
    for anchor in _AT.finditer(line):
        moment = parse_clock(line[anchor.end() :], now)
        if moment is not None:
            return moment
    return None


def classify_line(line: str) -> str | None:
    """The transient class a message line announces, or None."""
    line = line[:MAX_MESSAGE_CHARS]
    lowered = line.lower()
    # The substring test is a cheap gate in front of the slow alternations.
    if not any(hint in lowered for hint in _TRANSIENT_HINTS) or _WARNING.search(line):
        return None
    if _ACCOUNT_LIMIT.search(line) or _MODEL_SCOPE.search(line):
        return "rate_limit_model" if _MODEL_SCOPE.search(line) else "rate_limit_account"
    if _RATE_LIMIT.search(line):
        return "rate_limit_model"
    # Before the 5xx check: "timed out … may be overloaded" is a timeout.
    if _TIMEOUT.search(line):
        return "api_timeout"
    if _SERVER.search(line):
        return "api_transient_5xx"
    return None


def classify_error(message: str, status: int | None, detail: str, *, now: float) -> Findings:
    """One API error a CLI reported, by its words and HTTP status: setup, auth, or a transient.

    `detail` (already redacted) is what the finding carries; the reset is the message's own.
    """
    if looks_like_setup_error(message):
        return Findings(setup_error=detail)
    if status in AUTH_STATUSES or looks_like_auth_failure(message):
        return Findings(auth_error=detail)
    classification = classify_line(message) or classify_status(status)
    if classification is None:
        return Findings()
    return Findings(transient=Transient(classification, find_reset(message, now), detail))


def is_cli_message(line: str) -> bool:
    """True when a transcript line is shaped like a CLI's own error, limit or log-in message."""
    return _CLI_MESSAGE.match(line[:MAX_MESSAGE_CHARS]) is not None


def scan_messages(messages: Sequence[str], *, now: float) -> Findings:
    """Transient and auth findings in error messages a CLI reported, oldest first."""
    return _scan(messages, now, lambda _line: True)


def scan_lines(lines: Sequence[str], *, now: float) -> Findings:
    """Transient and auth findings in raw transcript lines: only CLI-shaped messages count."""
    return _scan(lines, now, is_cli_message)


def _scan(lines: Sequence[str], now: float, counts: Callable[[str], bool]) -> Findings:
    transients: list[Transient | None] = []
    auth: str | None = None
    setup: str | None = None
    for i, line in enumerate(lines):
        if not counts(line):
            continue
        if looks_like_setup_error(line):
            setup = short_redacted(line)
            continue
        classification = classify_line(line)
        if classification is not None:
            reset = find_reset(line, now)
            if reset is None and i + 1 < len(lines):
                # Codex wraps "… or try again at 3:28 PM." onto the next line.
                reset = find_reset(lines[i + 1], now)
            transients.append(Transient(classification, reset, short_redacted(line)))
        if looks_like_auth_failure(line):
            auth = short_redacted(line)
    # Usage is never guessed from text.
    return Findings(transient=pick_transient(transients), auth_error=auth, setup_error=setup)


def last_lines(text: str, count: int = WINDOW_LINES) -> list[str]:
    """The last `count` non-blank lines of `text`."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-count:]


def parse(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    """Findings in the last lines of a plain-text transcript; none when `prose` is off."""
    if not prose:
        return Findings()
    return scan_lines(last_lines(tail.decode("utf-8", "replace")), now=now)
