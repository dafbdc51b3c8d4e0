"""The `generic` parser: the operator's `[agent.patterns]`, matched against the last lines.

Each of the last WINDOW_LINES non-blank lines is cut to MATCHED_CHARS and searched with every
pattern. A `rate_limit`, `quota` or `outage` match is a transient (its `reset` group, when
captured, is the reset); `auth` and `setup` matches are those failures; the last `usage` match
gives the usage. After a clean exit only `usage` counts: the CLI said it succeeded.
"""

from __future__ import annotations

import math
import re

from agent_runner.parsers.findings import Findings, Transient, Usage, pick_transient
from agent_runner.parsers.resets import parse_clock, parse_duration
from agent_runner.parsers.signals import short_redacted
from agent_runner.parsers.text import last_lines
from agent_runner.patterns import KINDS, MATCHED_CHARS, RESET_GROUP, Patterns

# Digits alone: epoch seconds from 10 digits on (2001 and later), else seconds to wait.
_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?)\s*$")
_EPOCH_FROM = 1_000_000_000
_THOUSANDS = re.compile(r"(?<=\d)[,_](?=\d{3}\b)")


def parse(tail: bytes, *, now: float, prose: bool = True, patterns: Patterns) -> Findings:
    """Findings in the tail of any CLI's transcript, as `patterns` read it."""
    transients: list[Transient | None] = []
    auth: str | None = None
    setup: str | None = None
    usage: Usage | None = None
    for whole in last_lines(tail.decode("utf-8", "replace")):
        line = whole[:MATCHED_CHARS]
        for kind, pattern in patterns.compiled.items():
            match = pattern.search(line)
            if match is None:
                continue
            if kind == "usage":
                usage = _usage(match) or usage
            elif not prose:
                continue
            elif kind == "auth":
                auth = short_redacted(line)
            elif kind == "setup":
                setup = short_redacted(line)
            else:
                reset = _reset(match.groupdict().get(RESET_GROUP), now)
                transients.append(Transient(str(KINDS[kind]), reset, short_redacted(line)))
    return Findings(
        transient=pick_transient(transients), auth_error=auth, setup_error=setup, usage=usage
    )


def _reset(text: str | None, now: float) -> float | None:
    """Epoch seconds of a captured reset: an epoch, seconds, a duration or a clock time."""
    if not text:
        return None
    number = _NUMBER.match(text)
    moment: float | None
    if number is not None:
        value = float(number[1])
        moment = value if value >= _EPOCH_FROM else now + value
    else:
        seconds = parse_duration(text)
        moment = now + seconds if seconds is not None else parse_clock(text, now)
    return moment if moment is not None and math.isfinite(moment) else None


def _usage(match: re.Match[str]) -> Usage | None:
    found = {name: value for name, value in match.groupdict().items() if value}
    if not found:
        return None
    return Usage(
        model=found.get("model"),
        input_tokens=_count(found.get("input_tokens")),
        output_tokens=_count(found.get("output_tokens")),
        cache_read_tokens=_count(found.get("cache_read_tokens")),
        cache_creation_tokens=_count(found.get("cache_creation_tokens")),
        cost_usd=_cost(found.get("cost_usd")),
    )


def _count(text: str | None) -> int | None:
    if text is None:
        return None
    digits = _THOUSANDS.sub("", text.strip())
    return int(digits) if digits.isdigit() and len(digits) <= 18 else None


def _cost(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip().lstrip("$"))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
