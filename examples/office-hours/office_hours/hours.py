"""Office hours as arithmetic on a wall-clock time: no I/O, easy to test."""

from __future__ import annotations

import datetime
import zoneinfo

HOUR_S = 3600


def local_now(zone: str | None) -> datetime.datetime:
    """The time now in `zone` (an IANA name or "UTC"), or in the host's local time."""
    if zone is None:
        return datetime.datetime.now().astimezone()
    tz = datetime.UTC if zone == "UTC" else zoneinfo.ZoneInfo(zone)
    return datetime.datetime.now(tz)


def seconds_until_open(now: datetime.datetime, start_hour: int, end_hour: int) -> int:
    """0 inside [start_hour, end_hour); otherwise the whole seconds until start_hour comes.

    A window may wrap past midnight (22 to 6); start_hour == end_hour means always open.
    """
    hour = now.hour
    if start_hour == end_hour:
        return 0
    inside = (
        start_hour <= hour < end_hour
        if start_hour < end_hour
        else not end_hour <= hour < start_hour
    )
    if inside:
        return 0
    opening = now.replace(hour=start_hour % 24, minute=0, second=0, microsecond=0)
    if opening <= now:
        opening += datetime.timedelta(days=1)
    return max(1, int((opening - now).total_seconds()))
