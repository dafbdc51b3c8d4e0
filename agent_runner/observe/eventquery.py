"""`agent-runner events`: filter the event log by kind, round and age; optionally follow it."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_runner.errors import UsageError
from agent_runner.events import event_files, format_event, iter_events, open_event_file, parse_line
from agent_runner.observe.contracts import SCHEMA_VERSION

__all__ = ["EventFilter", "format_event", "json_line", "query"]

FOLLOW_INTERVAL_S = 0.5
_CHUNK = 1024 * 1024
_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class EventFilter:
    kinds: frozenset[str]
    round_no: int | None
    since_ts: str | None  # ISO UTC, compared as text: "YYYY-MM-DDTHH:MM:SS.sssZ" sorts by time

    @classmethod
    def build(
        cls,
        *,
        kinds: Sequence[str],
        round_no: int | None,
        since: str | None,
        now: float | None = None,
    ) -> EventFilter:
        return cls(frozenset(kinds), round_no, None if since is None else _since_ts(since, now))

    def matches(self, event: dict[str, Any]) -> bool:
        if self.kinds and event.get("event") not in self.kinds:
            return False
        if self.round_no is not None and event.get("round") != self.round_no:
            return False
        return self.since_ts is None or str(event.get("ts", "")) >= self.since_ts


def json_line(event: dict[str, Any]) -> str:
    """One line of `events --json`: the event with `schema_version` first (docs/json.md)."""
    line = {"schema_version": SCHEMA_VERSION}
    line.update((key, value) for key, value in event.items() if key != "schema_version")
    return json.dumps(line, ensure_ascii=False)


def _since_ts(text: str, now: float | None) -> str:
    now = time.time() if now is None else now
    match = _AGE.match(text.strip())
    if match:
        moment = now - float(match[1]) * _UNIT_S[match[2]]
        return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r}: use 10m, 2h, 1d or an ISO time") from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def query(log_dir: Path, wanted: EventFilter, *, follow: bool = False) -> Iterator[dict[str, Any]]:
    """Matching events, oldest first; with `follow`, keep yielding new ones as they land."""
    if not follow:
        yield from (event for event in iter_events(log_dir) if wanted.matches(event))
        return
    files = event_files(log_dir)
    for path in files[:-1]:
        yield from _read_from(path, 0, wanted)[0]
    # The newest file is read and then followed from one offset, so no event falls between.
    yield from _follow(log_dir, wanted, files[-1] if files else None)


def _follow(log_dir: Path, wanted: EventFilter, current: Path | None) -> Iterator[dict[str, Any]]:
    offset = 0
    while True:
        files = event_files(log_dir)
        if files and files[-1] != current:
            if current is not None:
                yield from _read_from(current, offset, wanted)[0]  # the old month's last lines
            current, offset = files[-1], 0
        if current is not None:
            found, offset = _read_from(current, offset, wanted)
            yield from found
        time.sleep(FOLLOW_INTERVAL_S)


def _read_from(path: Path, offset: int, wanted: EventFilter) -> tuple[list[dict[str, Any]], int]:
    """Matching events in complete lines from `offset` on, and the offset after the last one."""
    found: list[dict[str, Any]] = []
    fd = open_event_file(path)
    if fd is None:
        return found, offset
    try:
        with os.fdopen(fd, "rb") as handle:
            handle.seek(offset)
            pending = b""
            while chunk := handle.read(_CHUNK):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    event = parse_line(line)
                    if event is not None and wanted.matches(event):
                        found.append(event)
            # A line still being written is read again, whole, on the next pass.
            return found, handle.tell() - len(pending)
    except OSError:
        return found, offset
