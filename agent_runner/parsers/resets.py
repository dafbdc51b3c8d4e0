"""Turn a provider's reset wording into epoch seconds: epochs, durations, clock times, dates.

Relative forms resolve against the `now` the caller passes, never the system clock.
A clock time without a zone is the machine's local time, as the CLIs print it. A clock time
given to the minute ("7:43 AM") is taken as the end of that minute: the real reset lies
somewhere inside it, and waking up early only buys another refusal.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo

_UNIT_S = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
}  # fmt: skip
_UNIT = "|".join(sorted(_UNIT_S, key=len, reverse=True))
_PART = re.compile(rf"(\d+(?:\.\d+)?)\s*({_UNIT})(?![a-z])", re.IGNORECASE)
_DURATION = re.compile(
    rf"(?:\d+(?:\.\d+)?\s*(?:{_UNIT})(?![a-z])(?:\s*,\s*|\s+and\s+|\s*)?)+", re.IGNORECASE
)

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_CLOCK = re.compile(
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?(?::(?P<second>\d{2}))?\s*(?P<ampm>[ap]\.?\s?m\b\.?)?",
    re.IGNORECASE,
)
_DATE = re.compile(
    r"(?:(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(?P<day>\d{1,2})"
    r"(?:st|nd|rd|th)?(?:,?\s+(?P<year>\d{4}))?"
    r"|(?P<num_mon>\d{1,2})/(?P<num_day>\d{1,2})/(?P<num_year>\d{4}))"
    r"(?:,?\s+(?:at\s+)?(?=\d))?",
    re.IGNORECASE,
)
_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
_ZONE = re.compile(r"\s*\((?P<paren>[A-Za-z][A-Za-z0-9_+\-/]*)\)|\s+(?P<bare>UTC|GMT)\b")
# A clock time a little in the past is the reset the message meant, not tomorrow's.
PAST_TOLERANCE_S = 15 * 60


def parse_duration(text: str) -> float | None:
    """Seconds in a leading duration such as "1h49m8s", "12.5s" or "3 days 6 hours 57 minutes"."""
    match = _DURATION.match(text.lstrip())
    if match is None:
        return None
    return sum(float(n) * _UNIT_S[u.lower()] for n, u in _PART.findall(match.group(0)))


def _zone(name: str | None) -> tzinfo | None:
    if name is None:
        return None
    if name.upper() in {"UTC", "GMT", "Z"}:
        name = "UTC"
    # Few transcripts name a zone: serve need not carry zoneinfo in every round.
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def parse_clock(text: str, now: float) -> float | None:
    """Epoch of a leading "3pm", "3:28 PM (UTC)", "Aug 8th, 2026 12:30 PM", "9/23/2026", ISO 8601…

    A bare time is the next such time after `now` (less a small tolerance); a date
    without a year is the next such date. Returns None when no time or date leads.
    """
    text = text.lstrip()
    iso = _ISO.match(text)
    return _parse_iso(iso.group(0)) if iso else _parse_wording(text, now)


def _parse_iso(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _parse_wording(text: str, now: float) -> float | None:
    date = _DATE.match(text)
    rest = text[date.end() :] if date and date.group(0) else text
    clock = _CLOCK.match(rest)
    # "3" alone is not a time; "3pm", "15:00" and "3:28 PM" are.
    if clock and not (clock.group("ampm") or clock.group("minute")):
        clock = None
    has_date = bool(date and date.group(0))
    if not has_date and clock is None:
        return None
    hour = minute = 0
    # Seconds past the stated minute: as given, or the whole minute (none for a bare date).
    seconds = 0.0
    if clock is not None:
        hour, minute = int(clock.group("hour")), int(clock.group("minute") or 0)
        second = clock.group("second")
        if second is not None and int(second) > 59:
            return None
        seconds = float(second) if second is not None else 60.0
        ampm = (clock.group("ampm") or "").lower()
        if ampm.startswith("p") and hour < 12:
            hour += 12
        elif ampm.startswith("a") and hour == 12:
            hour = 0
        rest = rest[clock.end() :]
    if hour > 23 or minute > 59:
        return None
    zone_match = _ZONE.match(rest)
    zone = _zone(zone_match and (zone_match.group("paren") or zone_match.group("bare")))
    reference = datetime.fromtimestamp(now, zone) if zone else datetime.fromtimestamp(now)
    try:
        if has_date:
            assert date is not None
            return _resolve_date(date, reference, hour, minute, now) + seconds
        candidate = reference.replace(hour=hour, minute=minute, second=0, microsecond=0)
    except ValueError:
        return None
    if _epoch(candidate) < now - PAST_TOLERANCE_S:
        candidate += timedelta(days=1)
    return _epoch(candidate) + seconds


def _resolve_date(
    date: re.Match[str], reference: datetime, hour: int, minute: int, now: float
) -> float:
    if date.group("mon"):
        month = _MONTHS.index(date.group("mon").lower()) + 1
        day, year_text = int(date.group("day")), date.group("year")
    else:
        month, day = int(date.group("num_mon")), int(date.group("num_day"))
        year_text = date.group("num_year")
    year = int(year_text) if year_text else reference.year
    candidate = reference.replace(
        year=year, month=month, day=day, hour=hour, minute=minute, second=0, microsecond=0
    )
    if not year_text and _epoch(candidate) < now - 86400:
        candidate = candidate.replace(year=year + 1)
    return _epoch(candidate)


def _epoch(moment: datetime) -> float:
    # A naive datetime is local time; timestamp() resolves it through the C library.
    return moment.timestamp()
