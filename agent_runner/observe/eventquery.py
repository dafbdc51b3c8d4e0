"""`agent-runner events`: filter the event log by kind, round and age; optionally follow it."""

from __future__ import annotations

import difflib
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
from agent_runner.events import (
    REGISTRY,
    event_files,
    format_event,
    iter_events,
    open_event_file,
    parse_line,
)
from agent_runner.observe.contracts import SCHEMA_VERSION
from agent_runner.observe.watch import DirectoryWatch
from agent_runner.supervisor.loop.state import read_state

__all__ = ["EventFilter", "check_kinds", "format_event", "json_line", "query"]

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


def check_kinds(kinds: Sequence[str], log_dir: Path) -> None:
    """UsageError (exit 2) for a kind no registry knows: a typo would match nothing, silently."""
    known = set(REGISTRY) | plugin_kinds(log_dir)
    for kind in kinds:
        if kind not in known:
            close = difflib.get_close_matches(kind, sorted(known), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise UsageError(
                f"--kind {kind!r}: no such event kind{hint} (docs/events.md lists them; a "
                "plugin's are <plugin>.<kind> once serve admitted it)"
            )


def plugin_kinds(log_dir: Path) -> set[str]:
    """`<plugin>.<kind>` for every kind the plugins the last serve admitted declared."""
    verdicts = read_state(log_dir).get("plugins")
    found: set[str] = set()
    for verdict in verdicts if isinstance(verdicts, list) else []:
        kinds = verdict.get("event_kinds") if isinstance(verdict, dict) else None
        name = verdict.get("name") if isinstance(verdict, dict) else None
        if isinstance(name, str) and isinstance(kinds, list):
            found.update(f"{name}.{kind}" for kind in kinds if isinstance(kind, str))
    return found


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
    watch = DirectoryWatch(log_dir)  # first: nothing written from here on can be missed
    try:
        files = event_files(log_dir)
        for path in files[:-1]:
            yield from _read_from(path, _Position(), wanted)
        # The newest file is read and then followed from one position, so no event falls between.
        yield from _follow(log_dir, wanted, files[-1] if files else None, watch)
    finally:
        watch.close()


@dataclass
class _Position:
    """Where reading a file stopped: its identity and the offset after the last whole line."""

    identity: tuple[int, int] | None = None
    offset: int = 0


def _follow(
    log_dir: Path, wanted: EventFilter, current: Path | None, watch: DirectoryWatch
) -> Iterator[dict[str, Any]]:
    position = _Position()
    while True:
        files = event_files(log_dir)
        if files and files[-1] != current:
            if current is not None:
                yield from _read_from(current, position, wanted)  # the old month's last lines
            current, position = files[-1], _Position()
        if current is not None:
            yield from _read_from(current, position, wanted)
        watch.wait()


def _read_from(path: Path, position: _Position, wanted: EventFilter) -> list[dict[str, Any]]:
    """Matching events in the complete lines after `position`, which moves past them.

    A file replaced (another inode) or truncated (shorter than the position) is read again
    from its start: it is a new file as far as its readers are concerned.
    """
    found: list[dict[str, Any]] = []
    fd = open_event_file(path)
    if fd is None:
        return found
    try:
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            identity = (info.st_dev, info.st_ino)
            if identity != position.identity or info.st_size < position.offset:
                position.identity, position.offset = identity, 0
            handle.seek(position.offset)
            pending = b""
            while chunk := handle.read(_CHUNK):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    event = parse_line(line)
                    if event is not None and wanted.matches(event):
                        found.append(event)
            # A line still being written is read again, whole, on the next pass.
            position.offset = handle.tell() - len(pending)
    except OSError:
        pass
    return found
